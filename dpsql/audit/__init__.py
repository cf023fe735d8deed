"""An empirical privacy audit of dpsql, run as an attacker would run it.

For each case (dpsql.audit.cases), write the two neighbouring datasets D and D' and a policy
for each into a private temporary directory, open a dpsql session on each, run the same
query many times on both (answer cache off) and keep only what dpsql releases. A threshold
test on the released values then gives a lower bound on the epsilon the query really spends
(dpsql.audit.stats); it must not exceed the epsilon dpsql charged. For a correct mechanism
the bound stays below the charge, mostly well below (one event is tested, and a few thousand
runs never see the far tails): the audit is there to catch a broken one (sensitivity
under-estimated, a contribution limit not enforced, noise reused). N runs per
dataset can show at most ln((N / 2) / ln(2 / alpha)), alpha being one case's share of the
audit's: about 4.4 for 1000 runs, 6 for 5000.

`alpha` is the chance that the audit flags a correct dpsql at all: it is split equally over
the cases (Bonferroni), so that the exit status of a run of all cases has that false-alarm rate.

    python -m dpsql.audit [--quick] [--runs N] [--out FILE]
"""

from __future__ import annotations

import math
import shutil
import tempfile
import textwrap
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterable, Mapping

import duckdb

from ..answer_record import Amount
from ..config import Policy, load_policy
from ..duck_rows import insert_rows
from ..engines import open_engine
from ..errors import BudgetExceeded
from ..ledger import open_ledger
from ..session import Result, Session
from ..synopses.publish import publish
from .cases import CASES, Case, World
from .stats import Audit, audit

__all__ = ["CASES", "Case", "CaseResult", "run_audit", "run_case", "markdown"]

USER = "auditor"
Progress = Callable[[str], None]

# A budget that never refuses on epsilon; delta must stay below 1, so a case that spends a
# large delta per query moves to a fresh ledger when it runs out (_Analyst).
POLICY = """\
[engine]
database = "{database}"
threads = 1

[privacy]
filter = "basic"
epsilon = 1e9
delta = 0.99
query_epsilon = 1
mechanism = "laplace"

[users.{user}]

[ledger]
path = "{ledger}"
"""


@dataclass(frozen=True)
class CaseResult:
    case: Case
    runs: int  # executions per dataset
    epsilon: float  # charged per query
    delta: float
    bound: Audit
    seconds: float
    alpha: float  # this case's share of the audit's alpha

    @property
    def ok(self) -> bool:
        return not self.bound.epsilon > self.epsilon


def write_dataset(world: World, directory: Path, name: str, with_target: bool) -> Path:
    """One of the two neighbours as a DuckDB file plus its policy; returns the policy's path."""
    database = directory / f"{world.name}-{name}.duckdb"
    con = duckdb.connect(str(database))
    try:
        for table, spec in world.tables.items():
            con.execute(f"CREATE TABLE {table} ({spec.columns})")
            rows = list(spec.background) + (list(spec.target) if with_target else [])
            if rows:
                insert_rows(con, table, rows, len(rows[0]))
    finally:
        con.close()
    policy = directory / f"{world.name}-{name}.toml"
    tables = "".join(f"\n[tables.{t}]\n{spec.policy}" for t, spec in world.tables.items())
    policy.write_text(
        POLICY.format(database=database.name, user=USER, ledger=f"{world.name}-{name}.ledger.sqlite")
        + tables
        + world.synopses,
        encoding="utf-8",
    )
    return policy


class _Analyst:
    """The attacker's session on one dataset, with the case's settings. When a charge is
    refused (only delta can run out), it continues on a fresh ledger: the attacker's budget is
    not what is audited, the mechanism is."""

    def __init__(
        self, policy_path: Path, settings: Mapping[str, str], publish: str | None = None, before: tuple[str, ...] = ()
    ):
        self.publish = publish
        self.before = before
        self.policy: Policy = load_policy(policy_path)
        self.settings = {"dpsql.cache": "on" if before else "off", **settings}
        self.engine = open_engine(self.policy)
        self.ledgers = 0
        try:
            self.session = self._open()
        except BaseException:
            self.engine.close()
            raise

    def _ledger_path(self) -> Path:
        base = self.policy.ledger_path
        return base if self.ledgers == 0 else base.with_name(f"{base.stem}-{self.ledgers}{base.suffix}")

    def _open(self) -> Session:
        session = Session(self.policy, USER, engine=self.engine, ledger=open_ledger(self._ledger_path(), None))
        for name, value in self.settings.items():
            session.execute(f"SET {name} = {value}")
        return session

    def _drop_ledger(self) -> None:
        self.session.ledger.close()
        path = self._ledger_path()
        for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            p.unlink(missing_ok=True)

    def run(self, sql: str) -> Result:
        if self.before:
            return self._run_after(sql)
        try:
            result = self._run(sql)
        except BudgetExceeded:
            self._fresh_ledger()
            result = self._run(sql)
        if result.dp is None or result.dp.cached:
            raise RuntimeError(f"{sql!r} was not a fresh DP release; the audit needs independent runs")
        return result

    def _fresh_ledger(self) -> None:
        self._drop_ledger()
        self.ledgers += 1
        self.session = self._open()

    def _run_after(self, sql: str) -> Result:
        """`before`, then `sql`, from a new ledger (no cached answers) and no kept profiles, so
        that each run stands alone; the result's charge is every query's in the run."""
        self._fresh_ledger()
        self.session._plans.forget_profiles()
        spent = Amount(0.0, 0.0)
        for statement in (*self.before, sql):
            result = self.session.execute(statement)
            if result.dp is not None:
                if result.dp.cached:
                    raise RuntimeError(f"{statement!r} was not a fresh DP release; the audit needs independent runs")
                spent = Amount(spent.epsilon + result.dp.cost.epsilon, spent.delta + result.dp.cost.delta)
        if result.dp is None:
            raise RuntimeError(f"{sql!r} was not a DP release")
        result.dp = replace(result.dp, cost=spent)
        return result

    def _run(self, sql: str) -> Result:
        """The query's answer; with a synopsis, published afresh (its charge is the run's) and the
        query answered from it."""
        if self.publish is None:
            return self.session.execute(sql)
        done = publish(self.session, self.publish)
        result = self.session.execute(sql)
        if result.dp is None or result.dp.synopsis != self.publish:
            raise RuntimeError(f"{sql!r} was not answered from synopsis {self.publish}")
        result.dp = replace(result.dp, cost=Amount(done.epsilon, done.delta))
        return result

    def close(self) -> None:
        """The session, and the ledger and engine it was given (a session closes only its own)."""
        self.session.close()
        self.session.ledger.close()
        self.engine.close()


def run_case(
    case: Case, runs: int, directory: Path, alpha: float = 0.05, progress: Progress | None = None
) -> CaseResult:
    """Run `case` `runs` times on each neighbour (alternating) and bound its epsilon."""
    start = time.perf_counter()
    d = _Analyst(write_dataset(case.world, directory, f"{case.name}-d", True), case.settings, case.publish, case.before)
    try:
        d_prime = _Analyst(
            write_dataset(case.world, directory, f"{case.name}-d-prime", False),
            case.settings,
            case.publish,
            case.before,
        )
        try:
            values: tuple[list[float], list[float]] = ([], [])
            charged: set[tuple[float, float]] = set()
            step = max(1, runs // 10)
            for i in range(runs):
                for analyst, out in ((d, values[0]), (d_prime, values[1])):
                    result = analyst.run(case.sql)
                    out.append(case.observe(result.rows))
                    charged.add((result.dp.cost.epsilon, result.dp.cost.delta))  # run(): DP releases only
                if progress and (i + 1) % step == 0 and i + 1 < runs:
                    progress(f"  {case.name}: {i + 1}/{runs} runs per dataset ({time.perf_counter() - start:.0f} s)")
        finally:
            d_prime.close()
    finally:
        d.close()
    # One charge for every run; were it to vary, compare with the smallest epsilon charged and
    # subtract the largest delta (both in the auditor's disfavour).
    epsilon = min(e for e, _ in charged)
    delta = max(dl for _, dl in charged)
    bound = audit(values[0], values[1], delta=delta, alpha=alpha)
    return CaseResult(case, runs, epsilon, delta, bound, time.perf_counter() - start, alpha)


QUICK_RUNS = 500  # a case named for a quick audit that has no quick_runs of its own


def run_audit(
    cases: Iterable[Case] | None = None,
    *,
    quick: bool = False,
    runs: int | None = None,
    alpha: float = 0.05,
    progress: Progress | None = None,
) -> list[CaseResult]:
    """Audit `cases` (default: all, or those with quick_runs when quick), each in datasets of
    its own, all in one private temporary directory removed at the end, even on error. Each
    case gets alpha / len(cases), so all the bounds hold together with confidence 1 - alpha."""
    selected = list(cases) if cases is not None else [c for c in CASES if not quick or c.quick_runs is not None]
    case_alpha = alpha / max(1, len(selected))
    directory = Path(tempfile.mkdtemp(prefix="dpsql-audit-"))
    try:
        results = []
        for i, case in enumerate(selected, 1):
            n = runs or ((case.quick_runs or QUICK_RUNS) if quick else case.runs)
            if progress:
                progress(f"[{i}/{len(selected)}] {case.name}: {case.sql} ({n} runs per dataset)")
            r = run_case(case, n, directory, case_alpha, progress)
            results.append(r)
            if progress:
                progress(
                    f"  {case.name}: charged epsilon {r.epsilon:g}, lower bound {_bound(r.bound.epsilon)} "
                    f"({r.bound.event}) in {r.seconds:.0f} s{'' if r.ok else '  EXCEEDS THE CHARGE'}"
                )
        return results
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _bound(x: float) -> str:
    return "-inf" if x == -math.inf else f"{x:.3f}"


def markdown(results: Iterable[CaseResult]) -> str:
    """The report: one row per case, then the test each bound came from."""
    results = list(results)
    alpha = sum(r.alpha for r in results)
    case_alpha = max((r.alpha for r in results), default=alpha)
    lines = [
        "| case | query | charged epsilon | charged delta | runs | epsilon lower bound | ok |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.case.name} | `{r.case.sql}` | {r.epsilon:g} | {r.delta:g} | {r.runs} | "
            f"{_bound(r.bound.epsilon)} | {'yes' if r.ok else 'NO'} |"
        )
    lines.append("")
    lines.append(
        textwrap.fill(
            f"Runs are per dataset (D with the target person, D' without). Each lower bound holds with "
            f"confidence {1 - case_alpha:.6g} (one-sided Clopper-Pearson bounds at {1 - case_alpha / 2:.6g} on "
            f"each side), all {len(results)} together with {1 - alpha:.6g}; a bound of 0 or less is no "
            "evidence at all. Each test was chosen on the first half of the runs and counted on the second "
            "half (k/n on the numerator dataset vs k'/n' on the other):",
            100,
        )
    )
    lines.append("")
    for r in results:
        b = r.bound
        lines.append(f"- {r.case.name}: {b.event}; {b.k}/{b.n} vs {b.k_prime}/{b.n_prime}; {r.seconds:.0f} s")
    return "\n".join(lines) + "\n"

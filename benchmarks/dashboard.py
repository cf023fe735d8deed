"""Dashboards answered per query, from synopses, and from a plain noisy cube, at the same total
epsilon (issue 34).

    python -m benchmarks.dashboard [--runs 3] [--out benchmarks/RESULTS.md]

Two workloads over the sample hospital:
- bob's session: six charts over patients (counts by region, by sex, by smoker, by region and
  sex, by ten-year age band, and total income), loaded unfiltered and once per region filter:
  66 queries; the synopsis is the sample policy's patients_dashboard (epsilon 0.5, charged to bob);
- a larger one: 532 queries over patients and visits (every 0-2-way breakdown of the patients
  dimensions under no filter and each single-value filter, counts and income sums; visits by
  diagnosis and year, under no filter, each diagnosis and each year, with counts, sums and
  averages of the stay), from patients_dashboard and visits_dashboard, total epsilon 3 split
  between them in proportion to the session's queries over each table (2 and 1, rounded to a
  tenth), each declaring the filters its charts use (`filters`, the strategy's class of charts).
Ways of answering, each at the workload's total epsilon:
- per query: every query its share of the total (and, for bob, the policy's own 0.1 a query
  until his budget of 5 runs out);
- synopses: published once (the charge), every query answered from them, free;
- plain noisy cube: the full cube noised once with the whole epsilon (Laplace per cell, no
  least squares, no non-negativity), queries answered by summing noisy cells.
A query's relative error is sum |answer - truth| / sum |truth| over its groups (the truth
computed on the raw rows, so the policy's clamping counts as error too); an unanswered query
counts as not answered.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from dpsql.config import load_policy
from dpsql.errors import BudgetExceeded, Error
from dpsql.guarantee.mechanisms import Noise, add_noise, laplace_scale
from dpsql.session import Session
from dpsql.synopses import publish as pub
from dpsql.synopses import route, store
from dpsql.synopses.strategy import eigenvalues
from sample_data.generate import DIAGNOSES, REGIONS, SEXES

from . import sample

BAND = "FLOOR(age / 10) * 10"
YEAR = "DATE_TRUNC('year', visit_date)"

VISITS_SYNOPSIS = """
[synopses.visits_dashboard]
table = "visits"
dimensions = ["diagnosis", { column = "visit_date", unit = "year" }]
measures = ["count", "sum(length_of_stay)"]
epsilon = {epsilon}
charged_to = "alice"
filters = ["diagnosis", "visit_date"]
"""
TOTAL = 3.0  # the larger session's total epsilon
# the larger session's charts are filtered on one value of another dimension: declared, so the
# strategy is tuned to that class of charts (the charts themselves are the default, 0-2 ways)
PATIENTS_FILTERS = 'filters = ["region", "sex", "smoker"]\n'


def bob_session() -> list[str]:
    """The issue's 66 queries: six charts, unfiltered and once per region."""
    out = []
    for where in [""] + [f" WHERE region = '{r}'" for r in REGIONS]:
        out += [
            f"SELECT region, COUNT(*) FROM patients{where} GROUP BY region",
            f"SELECT sex, COUNT(*) FROM patients{where} GROUP BY sex",
            f"SELECT smoker, COUNT(*) FROM patients{where} GROUP BY smoker",
            f"SELECT region, sex, COUNT(*) FROM patients{where} GROUP BY region, sex",
            f"SELECT {BAND} AS band, COUNT(*) FROM patients{where} GROUP BY 1",
            f"SELECT SUM(income) FROM patients{where}",
        ]
    return out


def larger_session() -> list[str]:
    """500+ queries over patients and visits."""
    dims = {"region": "region", "sex": "sex", "smoker": "smoker", "band": BAND}
    groupings = [()] + [(d,) for d in dims] + [(a, b) for i, a in enumerate(dims) for b in list(dims)[i + 1 :]]
    filters = (
        [""]
        + [f" WHERE region = '{r}'" for r in REGIONS]
        + [f" WHERE sex = '{s}'" for s in SEXES]
        + [" WHERE smoker = true", " WHERE smoker = false"]
    )
    out = []
    for g in groupings:
        keys = ", ".join(f"{dims[d]} AS {d}" for d in g)
        group = f" GROUP BY {', '.join(str(i + 1) for i in range(len(g)))}" if g else ""
        for where in filters:
            for agg in ("COUNT(*)", "SUM(income)"):
                out.append(f"SELECT {keys + ', ' if keys else ''}{agg} FROM patients{where}{group}")
    vgroups = [(), ("diagnosis",), ("year",), ("diagnosis", "year")]
    vdims = {"diagnosis": "diagnosis", "year": YEAR}
    vfilters = (
        [""]
        + [f" WHERE diagnosis = '{d}'" for d in DIAGNOSES]
        + [
            " WHERE visit_date >= DATE '2023-01-01' AND visit_date < DATE '2024-01-01'",
            " WHERE visit_date >= DATE '2024-01-01' AND visit_date < DATE '2025-01-01'",
        ]
    )
    for g in vgroups:
        keys = ", ".join(f"{vdims[d]} AS {d}" for d in g)
        group = f" GROUP BY {', '.join(str(i + 1) for i in range(len(g)))}" if g else ""
        for where in vfilters:
            for agg in ("COUNT(*)", "SUM(length_of_stay)", "AVG(length_of_stay)"):
                out.append(f"SELECT {keys + ', ' if keys else ''}{agg} FROM visits{where}{group}")
    return out


def split_epsilon(queries: list[str]) -> tuple[float, float]:
    """TOTAL split between the patients and the visits synopses in proportion to the queries over
    each table (to a tenth): what a dashboard's owner would do, knowing only how many charts read
    each table."""
    share = sum(" FROM patients" in q for q in queries) / len(queries)
    patients = round(TOTAL * share, 1)
    return patients, round(TOTAL - patients, 1)


def relative_error(rows: list[tuple], truth: list[tuple]) -> float:
    """sum |answer - truth| / sum |truth| over the query's groups (an absent group: 0)."""
    want = {tuple(r[:-1]): float(r[-1] or 0) for r in truth}
    got = {tuple(r[:-1]): float(r[-1] or 0) for r in rows}
    total = sum(abs(v) for v in want.values()) or 1.0
    return sum(abs(got.get(k, 0.0) - v) for k, v in want.items()) / total


def _session(directory: Path, larger: bool, user: str, kind: str) -> Session:
    """A session on a fresh ledger: bob's on the sample policy as it is (his budget of 5); for
    the larger workload alice's on the sample with both synopses charged to her."""
    ledger = directory / f"{kind}-{time.monotonic_ns()}.sqlite"
    if not larger:
        return Session(load_policy(sample.SAMPLE / "dpsql.toml", ledger_path=ledger), user)
    path = sample.write_policy(directory)
    patients, visits = split_epsilon(larger_session())
    text = (
        path.read_text()
        .replace('charged_to = "bob"', 'charged_to = "alice"\n' + PATIENTS_FILTERS)
        .replace("epsilon = 0.5\ncharged_to", f"epsilon = {patients}\ncharged_to")
    )
    path.write_text(text + VISITS_SYNOPSIS.replace("{epsilon}", repr(visits)))
    return Session(load_policy(path, ledger_path=ledger), user)


def per_query(
    directory: Path, queries: list[str], user: str, epsilon: float | None, larger: bool, truths: list[list[tuple]]
) -> dict[str, Any]:
    """Each query answered on its own (epsilon None: the policy's own per-query epsilon)."""
    session = _session(directory, larger, user, "per-query")
    session.execute("SET dpsql.cache = off")
    if epsilon is not None:
        session.execute(f"SET dpsql.epsilon = {epsilon!r}")
    errors = []
    for q, truth in zip(queries, truths):
        try:
            r = session.execute(q)
        except BudgetExceeded:
            continue
        errors.append(relative_error(r.rows, truth))
    spent = float(session.budget()["epsilon"]["spent"])
    session.close()
    return {"answered": len(errors), "errors": errors, "spent": spent}


def synopses(
    directory: Path, queries: list[str], user: str, names: list[str], larger: bool, truths: list[list[tuple]]
) -> dict[str, Any]:
    """Synopses published (charged), then every query answered from them."""
    session = _session(directory, larger, user, "synopses")
    started = time.perf_counter()
    for n in names:
        pub.publish(session, n)
    published = time.perf_counter() - started
    errors, free, mismatch = [], 0, 0
    answers = {}
    started = time.perf_counter()
    for q, truth in zip(queries, truths):
        try:
            r = session.execute(q)
        except (BudgetExceeded, Error):
            continue
        free += r.dp is not None and r.dp.synopsis is not None
        errors.append(relative_error(r.rows, truth))
        answers[q] = r.rows
    answering = time.perf_counter() - started
    mismatch = _inconsistencies(answers)
    spent = float(session.budget()["epsilon"]["spent"])
    session.close()
    return {
        "answered": len(errors),
        "errors": errors,
        "spent": spent,
        "free": free,
        "inconsistent": mismatch,
        "publish_s": published,
        "answer_ms": answering * 1000 / max(1, len(errors)),
    }


def _inconsistencies(answers: dict[str, list[tuple]]) -> int:
    """Pairs (a filtered total, the same total from its breakdown) that differ at all: a chart
    grouped by region against the per-region totals of another chart."""
    bad = 0
    for q, rows in answers.items():
        if not q.startswith("SELECT region, COUNT(*) FROM patients GROUP BY region"):
            continue
        by_region = {r[0]: r[1] for r in rows}
        for r in REGIONS:
            other = answers.get(f"SELECT sex, COUNT(*) FROM patients WHERE region = '{r}' GROUP BY sex")
            if other is not None and sum(x[-1] for x in other) != by_region.get(r):
                bad += 1
        total = answers.get("SELECT sex, COUNT(*) FROM patients GROUP BY sex")
        if total is not None and sum(x[-1] for x in total) != sum(by_region.values()):
            bad += 1
    return bad


def plain_cube(
    directory: Path, queries: list[str], user: str, names: list[str], larger: bool, truths: list[list[tuple]]
) -> dict[str, Any]:
    """The full cube noised once per measure at the synopsis's epsilon, answered by sums."""
    session = _session(directory, larger, user, "cube")
    policy = session.policy
    stored = {}
    for n in names:
        spec = policy.synopses[n]
        plan = pub.cube_plan(spec, policy, session.engine.schema())
        values = pub.domain_values(session.engine, plan)
        sizes = tuple(len(v) for v in values)
        exact = pub.exact_cubes(plan, session.bounded_result(plan), values, sizes, len(spec.measures))
        measures = []
        full = (1 << len(sizes)) - 1
        split = pub.measure_split(spec, policy, plan, int(np.prod(sizes)), pub.budget_of(spec, policy))
        for j, m in enumerate(spec.measures):
            pm = plan.measures[pub.measure_index(plan, j)]
            eps = spec.epsilon * split[j]  # the synopsis's own split, so only the strategy differs
            noise = Noise("laplace", laplace_scale(plan.bounding.l1(pm, int(np.prod(sizes))), eps))
            noisy = np.array(add_noise([int(v) for v in np.ravel(exact[j])], noise), dtype=float) * pm.unit_scale
            lam = eigenvalues({full: 1.0 / (2 * (noise.scale * pm.unit_scale) ** 2)}, sizes)
            measures.append(
                {"name": m.name, "kind": m.kind, "column": m.column, "cube": list(noisy), "eigen": list(lam)}
            )
        body = {
            "name": n,
            "table": spec.table,
            "readers": [user],
            "sizes": list(sizes),
            "measures": measures,
            "dimensions": [
                {"column": d.column, "width": d.width, "unit": d.unit, "values": [pub.encode(v) for v in values[i]]}
                for i, d in enumerate(spec.dimensions)
            ],
        }
        stored[n] = store.Stored(n, session.engine.data_version(), time.time(), 0, body)
    errors = []
    for q, truth in zip(queries, truths):
        stmt = session._classify(q)
        plan = route._plan(session, stmt, stmt.tree)
        answered = None
        for s in stored.values():
            r = route.match(policy, session.engine.schema(), plan, s) if plan is not None else None
            if r is not None:
                answered = route.result_from(session, plan, s, r)
                break
        if answered is not None:
            errors.append(relative_error(answered.rows, truth))
    session.close()
    return {"answered": len(errors), "errors": errors, "spent": float(sum(policy.synopses[n].epsilon for n in names))}


def truths(queries: list[str]) -> list[list[tuple]]:
    con = sample.truth_connection()
    return [con.execute(q).fetchall() for q in queries]


def summary(label: str, runs: list[dict[str, Any]], total: int, budget: float) -> dict[str, Any]:
    errors = [e for r in runs for e in r["errors"]]
    return {
        "way": label,
        "answered": f"{round(statistics.mean(r['answered'] for r in runs))}/{total}",
        "median": statistics.median(errors) if errors else None,
        "worst": max(errors) if errors else None,
        "spent": statistics.mean(r["spent"] for r in runs),
        "left": 1 - statistics.mean(r["spent"] for r in runs) / budget,
        **{k: runs[0][k] for k in ("inconsistent", "free", "publish_s", "answer_ms") if k in runs[0]},
    }


def measure(runs: int, workloads: tuple[str, ...] = ("bob", "larger")) -> dict[str, list[dict[str, Any]]]:
    out = {}
    with tempfile.TemporaryDirectory() as d:
        directory = Path(d)
        if "bob" in workloads:
            out["bob"] = _bob(directory, runs)
        if "larger" in workloads:
            out["larger"] = _larger(directory, runs)
    return out


def _bob(directory: Path, runs: int) -> list[dict[str, Any]]:
    bob = bob_session()
    truth = truths(bob)
    n = len(bob)
    return [
        summary(
            "per query, the policy's 0.1 each (bob's budget 5)",
            [per_query(directory, bob, "bob", None, False, truth) for _ in range(runs)],
            n,
            5.0,
        ),
        summary(
            "per query, 0.5 / 66 each",
            [per_query(directory, bob, "bob", 0.5 / n, False, truth) for _ in range(runs)],
            n,
            5.0,
        ),
        summary(
            "synopsis patients_dashboard (0.5)",
            [synopses(directory, bob, "bob", ["patients_dashboard"], False, truth) for _ in range(runs)],
            n,
            5.0,
        ),
        summary(
            "plain noisy cube (0.5)",
            [plain_cube(directory, bob, "bob", ["patients_dashboard"], False, truth) for _ in range(runs)],
            n,
            5.0,
        ),
    ]


def _larger(directory: Path, runs: int) -> list[dict[str, Any]]:
    big = larger_session()
    truth = truths(big)
    m = len(big)
    names = ["patients_dashboard", "visits_dashboard"]
    return [
        summary(
            f"per query, {TOTAL} / {m} each",
            [per_query(directory, big, "alice", TOTAL / m, True, truth) for _ in range(runs)],
            m,
            TOTAL,
        ),
        summary(
            "synopses ({} + {})".format(*split_epsilon(big)),
            [synopses(directory, big, "alice", names, True, truth) for _ in range(runs)],
            m,
            TOTAL,
        ),
        summary(
            "plain noisy cubes ({} + {})".format(*split_epsilon(big)),
            [plain_cube(directory, big, "alice", names, True, truth) for _ in range(runs)],
            m,
            TOTAL,
        ),
    ]


def table(results: dict[str, list[dict[str, Any]]], runs: int) -> str:
    lines = [
        f"## Dashboards: per query against synopses at the same total epsilon ({runs} runs each)",
        "",
        "`python -m benchmarks.dashboard`. A query's relative error is sum |answer - truth| / sum |truth| over "
        "its groups, against the raw rows.",
        "",
    ]
    for key, title in (
        ("bob", "bob's 66-query session (six charts, unfiltered and per region), his budget 5"),
        ("larger", f"a larger session over patients and visits, total epsilon 3 ({len(larger_session())} queries)"),
    ):
        if key not in results:
            continue
        lines += [
            f"{title}:",
            "",
            "| way | answered | median relative error | worst | epsilon spent | budget left | totals ≠ breakdowns |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in results[key]:
            med = "-" if r["median"] is None else f"{r['median']:.2%}"
            worst = "-" if r["worst"] is None else f"{r['worst']:.2%}"
            lines.append(
                f"| {r['way']} | {r['answered']} | {med} | {worst} | {r['spent']:.3g} | {r['left']:.0%} | "
                f"{r.get('inconsistent', '')} |"
            )
        lines.append("")
        lines += [
            f"{r['way']}: published in {r['publish_s']:.1f} s, {r['answer_ms']:.1f} ms a query answered "
            "from it (first run)."
            for r in results[key]
            if "publish_s" in r
        ] + [""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workload", choices=["bob", "larger", "both"], default="both")
    args = parser.parse_args()
    started = time.perf_counter()
    results = measure(args.runs, ("bob", "larger") if args.workload == "both" else (args.workload,))
    print(table(results, args.runs))
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()

"""dpsql side by side with plain DuckDB, SmartNoise SQL and Qrlew, in one run.

    python -m benchmarks            # full: 100k, 1M and 10M rows (under 30 minutes on 2 cores)
    python -m benchmarks --quick    # 100k rows, fewer runs (under 3 minutes; a smoke test runs it)
    python -m benchmarks --huge     # 100M rows, dpsql and plain DuckDB only (benchmarks/copy_build.py):
                                    # weighted-copy build, peak RSS, grouped queries; its own section

Same data, same bounds and contribution limits, same queries for every system. Latency is the
median of repeated runs, as a ratio to the same plain query on DuckDB measured in the same run;
accuracy is the median relative error against the exact answer on the raw data, at the same
budget actually charged per query; budget is how many epsilon = 0.01 queries a (1, 1e-6) budget
buys under each system's accounting. Peers run in their own virtual environment
(benchmarks/requirements-peers.txt), created on first use. Results go to benchmarks/RESULTS.md,
with a plot of latency against rows beside it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import duckdb
import psycopg

import dpsql
from dpsql.accounting.filters import FILTERS, make_filter, simulate
from dpsql.sql.classify import classify

from .copy_build import SECTION as ONE_MACHINE_SECTION
from .copy_build import measure as one_machine
from .copy_build import section as one_machine_section
from .data import (
    KEYS,
    MAX_GROUPS,
    MAX_ROWS,
    REGIONS,
    VALUE_BOUNDS,
    generate,
    policy_text,
)
from .keys import SECTION as KEYS_SECTION
from .serving import serve, throughput
from .shared import (
    absolute,
    log,
    peer_versions,
    peers_python,
    relative_errors,
    replace_section,
    run_job,
    truth,
    write_keeping,
)
from .timing import interleaved_ms, median_ms
from .utility import HELDOUT_SECTION
from .utility import SECTION as UTILITY_SECTION
from .workload import QUERIES, SCALE, THROUGHPUT

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
EPSILON, DELTA = 1.0, 1e-6  # charged per query in the latency and accuracy runs
BUDGET = (1.0, 1e-6)  # the analyst's budget in the budget figure
BUDGET_QUERY_EPSILON, BUDGET_QUERY_DELTA = 0.01, 1e-8
# written by other benchmarks, or by --huge alone
KEPT_SECTIONS = (UTILITY_SECTION, HELDOUT_SECTION, ONE_MACHINE_SECTION, KEYS_SECTION)
HUGE = 100_000_000


# Peers ----------------------------------------------------------------------------------------
def peer_tables(rows: int) -> dict:
    """The benchmark data as the peers see it (benchmarks/peers/worker.py): the policy's bounds,
    keys and limits; the public groups table row-private for both (as it has always been run here)."""
    lo, hi = VALUE_BOUNDS
    events = {
        "uid": {"type": "int"},
        "grp": {"type": "string", "keys": KEYS},
        "value": {"type": "float", "lower": lo, "upper": hi},
        "day": {"type": "datetime"},
    }
    groups = {"grp": {"type": "string", "keys": KEYS}, "region": {"type": "string", "keys": REGIONS}}
    return {
        "events": {"rows": rows, "unit": "uid", "max_ids": MAX_GROUPS * MAX_ROWS, "columns": events},
        "groups": {"rows": len(KEYS), "unit": "row", "columns": groups},
    }


def run_peer(
    python: Path, system: str, db: Path, rows: int, queries, latency_runs: int, accuracy_runs: int, budget: bool
) -> dict:
    job = {
        "system": system,
        "db": str(db),
        "tables": peer_tables(rows),
        "epsilon": EPSILON,
        "delta": DELTA,
        "latency_runs": latency_runs,
        "accuracy_runs": accuracy_runs,
        "max_ids": MAX_GROUPS * MAX_ROWS,
        "max_groups": MAX_GROUPS,
        "budget_epsilon": BUDGET_QUERY_EPSILON if budget else None,
        "budget_delta": BUDGET_QUERY_DELTA,
        "queries": [
            {"name": q.name, "sql": q.smartnoise if system == "smartnoise" else q.qrlew}
            for q in queries
            if (q.smartnoise if system == "smartnoise" else q.qrlew)
        ],
    }
    return run_job(python, job)


def event_epsilon(event: dict, delta: float, count: int = 1) -> float:
    """epsilon at delta of a peer's reported dp-accounting event (composed `count` times), by PLD."""
    from dp_accounting import dp_event
    from dp_accounting.pld import pld_privacy_accountant

    def build(d: dict):
        kind = d["class_name"]
        if kind == "GaussianDpEvent":
            return dp_event.GaussianDpEvent(d["noise_multiplier"])
        if kind == "LaplaceDpEvent":
            return dp_event.LaplaceDpEvent(d["noise_multiplier"])
        if kind == "ComposedDpEvent":
            return dp_event.ComposedDpEvent([build(e) for e in d["events"]])
        if kind == "EpsilonDeltaDpEvent":
            return dp_event.EpsilonDeltaDpEvent(d["epsilon"], d["delta"])
        if kind == "NoOpDpEvent":
            return dp_event.NoOpDpEvent()
        raise ValueError(f"unknown event {kind}")

    accountant = pld_privacy_accountant.PLDAccountant()
    accountant.compose(build(event), count)
    return accountant.get_epsilon(delta)


# dpsql and the floor ---------------------------------------------------------------------------
def dpsql_cursor(policy: Path, ledger: Path):
    cur = dpsql.connect(policy, user="alice", ledger=ledger).cursor()
    cur.execute("SET dpsql.cache = off")
    cur.execute("SET dpsql.reuse = off")  # engine work every time, as plain DuckDB does
    cur.execute(f"SET dpsql.epsilon = {EPSILON}")
    cur.execute(f"SET dpsql.delta = {DELTA}")
    return cur


# The run ----------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="dpsql vs plain DuckDB, SmartNoise SQL and Qrlew")
    ap.add_argument("--quick", action="store_true", help="100k rows and fewer runs (a smoke test)")
    ap.add_argument("--sizes", type=int, nargs="*", help="rows per dataset (default 100k 1M 10M; quick: 100k)")
    ap.add_argument("--out", type=Path, default=HERE / "RESULTS.md")
    ap.add_argument("--work", type=absolute, default=ROOT / ".bench", help="data and the peers' environment")
    ap.add_argument("--no-peers", action="store_true", help="skip SmartNoise and Qrlew")
    ap.add_argument(
        "--huge",
        type=int,
        nargs="?",
        const=HUGE,
        metavar="ROWS",
        help=f"only the one-machine run at ROWS rows (default {HUGE:,}): generated, then weighted-copy build, "
        "peak RSS and grouped queries against plain DuckDB, into its own section of --out",
    )
    args = ap.parse_args(argv)
    if args.huge:
        huge(args.huge, args.work / "data", args.out)
        return
    sizes = args.sizes or ([100_000] if args.quick else [100_000, 1_000_000, 10_000_000])
    main_size = 1_000_000 if 1_000_000 in sizes else sizes[0]
    latency_runs = 5 if args.quick else 7  # the peers'
    side_by_side_runs = 5 if args.quick else 15  # plain DuckDB and dpsql, in turn
    accuracy_runs = 5 if args.quick else 50
    seconds = 2.0 if args.quick else 10.0
    clients = [1, 8, 32]
    started = time.time()
    python = None if args.no_peers else peers_python(args.work / "peers-venv")
    peers = [] if args.no_peers else ["smartnoise", "qrlew"]
    results: dict = {
        "latency": {},
        "scale": {},
        "accuracy": {},
        "errors": {},
        "charged": {},
        "budget": {},
        "throughput": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for rows in sizes:
            log(f"{rows:,} rows: generating data")
            db = generate(args.work / "data", rows)
            policy = tmp / f"bench_{rows}.toml"
            policy.write_text(policy_text(db))
            queries = QUERIES if rows == main_size else [q for q in QUERIES if q.name in SCALE]
            con = duckdb.connect(str(db), read_only=True)
            cur = dpsql_cursor(policy, tmp / f"ledger_{rows}.sqlite")
            log(f"{rows:,} rows: plain DuckDB and dpsql (DB-API)")
            for q in queries:
                try:
                    cur.execute(q.sql)
                    floor, ms = interleaved_ms(
                        [lambda: con.execute(q.sql).fetchall(), lambda: cur.execute(q.sql)], side_by_side_runs
                    )
                    results["scale"].setdefault(q.name, {}).setdefault("duckdb", {})[rows] = floor
                    results["scale"][q.name].setdefault("dpsql", {})[rows] = ms
                    results["charged"].setdefault(q.name, {})["dpsql"] = cur.dp["cost"]["epsilon"]
                except dpsql.Error as e:
                    results["scale"].setdefault(q.name, {}).setdefault("duckdb", {})[rows] = median_ms(
                        lambda: con.execute(q.sql).fetchall(), side_by_side_runs
                    )
                    results["errors"].setdefault(q.name, {})["dpsql"] = str(e).splitlines()[0]
            if rows == main_size:
                log(f"{rows:,} rows: dpsql accuracy ({accuracy_runs} runs per query)")
                dpsql_accuracy(cur, con, queries, accuracy_runs, results, "dpsql")
                log(f"{rows:,} rows: dpsql serve + psycopg, and throughput with {clients} clients")
                with serve(policy, tmp / f"served_{rows}.sqlite") as dsn:
                    setup = (
                        "SET dpsql.cache = off",
                        "SET dpsql.reuse = off",
                        f"SET dpsql.epsilon = {EPSILON}",
                        f"SET dpsql.delta = {DELTA}",
                    )
                    with psycopg.connect(dsn, autocommit=True) as conn:
                        for s in setup:
                            conn.execute(s)
                        for q in queries:
                            if "dpsql" in results["errors"].get(q.name, {}):
                                continue
                            conn.execute(q.sql).fetchall()
                            results["latency"].setdefault(q.name, {})["dpsql serve"] = median_ms(
                                lambda: conn.execute(q.sql).fetchall(), latency_runs
                            )
                    for n in clients:
                        results["throughput"][n] = throughput(dsn, THROUGHPUT, n, seconds, setup)
                results["budget"]["dpsql"] = dpsql_budget(cur)
            for system in peers:
                log(f"{rows:,} rows: {system}")
                out = run_peer(
                    python,
                    system,
                    db,
                    rows,
                    queries,
                    latency_runs,
                    accuracy_runs if rows == main_size else 0,
                    budget=rows == main_size,
                )
                for q in queries:
                    entry = out.get(q.name)
                    if entry is None or entry["error"]:
                        results["errors"].setdefault(q.name, {})[system] = (
                            entry["error"] if entry else "no way to write this query"
                        )
                        continue
                    results["scale"].setdefault(q.name, {}).setdefault(system, {})[rows] = statistics.median(
                        entry["ms"]
                    )
                    if rows != main_size:
                        continue
                    results["accuracy"].setdefault(q.name, {})[system] = statistics.median(
                        relative_errors(entry["answers"], truth(con, q.sql))
                    )
                    spend = entry["spend"]
                    results["charged"].setdefault(q.name, {})[system] = (
                        spend["charged"][0] if "charged" in spend else event_epsilon(spend["event"], DELTA)
                    )
                    results["budget"].setdefault(system, {})[q.name] = peer_budget(system, entry["budget_cost"])
            if rows == main_size:
                # Gaussian noise at the budget Qrlew (Gaussian too) charged for the same query, by
                # the PLD of its own event (epsilon = 1 where Qrlew could not answer).
                log(f"{rows:,} rows: dpsql accuracy with Gaussian noise at Qrlew's charge")
                cur.execute("SET dpsql.mechanism = 'gaussian'")
                dpsql_accuracy(
                    cur,
                    con,
                    queries,
                    accuracy_runs,
                    results,
                    "dpsql gaussian",
                    {q: c["qrlew"] for q, c in results["charged"].items() if "qrlew" in c},
                )
                cur.execute("SET dpsql.mechanism = 'laplace'")
                cur.execute(f"SET dpsql.epsilon = {EPSILON}")
            con.close()
    results["meta"] = {
        "sizes": sizes,
        "main_size": main_size,
        "latency_runs": latency_runs,
        "side_by_side_runs": side_by_side_runs,
        "accuracy_runs": accuracy_runs,
        "seconds": round(time.time() - started),
        "command": "python -m benchmarks" + (" --quick" if args.quick else ""),
        "peers": peer_versions(python) if python else {},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_keeping(args.out, report(results), KEPT_SECTIONS)  # the utility benchmark's own section stays
    (args.out.with_suffix(".json")).write_text(json.dumps(results, indent=1, default=str))
    if python:
        plot = args.out.with_name("latency_vs_rows.png")
        subprocess.run(
            [str(python), str(HERE / "peers" / "plot.py"), str(args.out.with_suffix(".json")), str(plot)], check=True
        )
    log(f"done in {time.time() - started:.0f} s: {args.out}")


def dpsql_accuracy(cur, con, queries, runs: int, results: dict, system: str, epsilons: dict | None = None) -> None:
    """Median relative error of dpsql's answers over `runs` runs per query, each at its own
    epsilon where `epsilons` names one, and what dpsql charged."""
    for q in queries:
        if "dpsql" in results["errors"].get(q.name, {}):
            continue
        cur.execute(f"SET dpsql.epsilon = {(epsilons or {}).get(q.name, EPSILON)!r}")
        answers = []
        for _ in range(runs):
            cur.execute(q.sql)
            answers.append([list(r) for r in cur.fetchall()])
        results["accuracy"].setdefault(q.name, {})[system] = statistics.median(
            relative_errors(answers, truth(con, q.sql))
        )
        results["charged"].setdefault(q.name, {})[system] = cur.dp["cost"]["epsilon"]


def dpsql_budget(cur) -> dict:
    """Queries of epsilon 0.01 (a grouped COUNT, Laplace and Gaussian, query delta 1e-8) each
    filter admits from (1, 1e-6)."""
    session = cur.connection.session
    out = {}
    for mechanism in ("laplace", "gaussian"):
        session.execute(f"SET dpsql.mechanism = '{mechanism}'")
        session.execute(f"SET dpsql.epsilon = {BUDGET_QUERY_EPSILON}")
        session.execute(f"SET dpsql.delta = {BUDGET_QUERY_DELTA}")
        _, cal = session._prepare(classify(THROUGHPUT).tree)
        for kind in FILTERS:
            # Filters other than basic composition keep part of delta for the releases' own
            # delta (partition selection, Gaussian noise): half of it here, as delta_reserve.
            delta = Fraction(repr(BUDGET[1]))
            f = make_filter(
                kind, Fraction(repr(BUDGET[0])), delta, reserve=delta / 2 if kind != "basic" else Fraction(0)
            )
            out[f"{kind} ({mechanism})"] = simulate(f, cal.cost)
    session.execute("SET dpsql.mechanism = 'laplace'")
    session.execute(f"SET dpsql.epsilon = {EPSILON}")
    session.execute(f"SET dpsql.delta = {DELTA}")
    return out


def peer_budget(system: str, cost) -> int:
    """How many such queries the peer's own accounting admits within (1, 1e-6)."""
    if system == "smartnoise":  # its odometer composes (epsilon, delta) basically
        eps, delta = cost
        return math.floor(min(BUDGET[0] / eps, BUDGET[1] / delta if delta else math.inf))
    lo, hi = 0, 1
    while event_epsilon(cost, BUDGET[1], hi) <= BUDGET[0]:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if event_epsilon(cost, BUDGET[1], mid) <= BUDGET[0] else (lo, mid)
    return lo


# The report -------------------------------------------------------------------------------------
def report(r: dict) -> str:
    m = r["meta"]
    main_size = m["main_size"]
    systems = ["dpsql", "smartnoise", "qrlew"]
    lines = [
        "# Benchmarks: dpsql vs plain DuckDB, SmartNoise SQL and Qrlew",
        "",
        f"Produced by `{m['command']}` in {m['seconds']} s on {platform.node() or 'a machine'}: "
        f"{platform.processor() or platform.machine()}, {_cores()} cores, Python {platform.python_version()}, "
        f"DuckDB {duckdb.__version__}, dpsql {dpsql.__version__}; peers: "
        + ", ".join(f"{k} {v}" for k, v in sorted(m["peers"].items()))
        + ".",
        "",
        f"Data: `benchmarks/data.py` (seeded), one private table of events, about 5 per person, a 10-key group "
        f"column, a lognormal value clamped to {VALUE_BOUNDS}, at most {MAX_GROUPS} groups x {MAX_ROWS} rows per "
        f"person ({MAX_GROUPS * MAX_ROWS} rows in all for the peers), and a public table of groups. "
        f"Every query is charged epsilon = {EPSILON:g} (delta {DELTA:g} where needed).",
        "",
        f"## Latency at {main_size:,} rows (ms; x = ratio to plain DuckDB)",
        "",
        f"Median of {m['side_by_side_runs']} rounds that run plain DuckDB and dpsql (DB-API) in "
        f"turn; median of {m['latency_runs']} runs for dpsql serve and for each peer. dpsql runs with "
        f"SET dpsql.reuse = off: its engine computes every query, as plain DuckDB does (an unfiltered, "
        f"ungrouped query reads the totals stored with the weighted copy, as plain DuckDB answers COUNT(*) "
        f"from its table statistics).",
        "",
        "| query | DuckDB | dpsql DB-API | dpsql serve + psycopg | SmartNoise | Qrlew |",
        "|---|---|---|---|---|---|",
    ]
    for q in QUERIES:
        scale = r["scale"].get(q.name, {})
        floor = scale.get("duckdb", {}).get(main_size)
        if floor is None:
            continue
        cells = [f"{floor:.1f}"]
        for key in ("dpsql", "dpsql serve", "smartnoise", "qrlew"):
            ms = r["latency"].get(q.name, {}).get(key) if key == "dpsql serve" else scale.get(key, {}).get(main_size)
            cells.append(f"{ms:.1f} ({ms / floor:.1f}x)" if ms is not None else _refused(r, q.name, key))
        lines.append(f"| {q.label} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"## Accuracy at {main_size:,} rows: median relative error over {m['accuracy_runs']} runs "
        "(and the epsilon each system charged)",
        "",
        "dpsql with Laplace noise (as SmartNoise) at epsilon = 1, and with Gaussian noise (as Qrlew) at the "
        "epsilon Qrlew charged for the same query (PLD of its event at delta "
        f"{DELTA:g}; dpsql charges a Gaussian through zCDP, so the same epsilon buys it ~7% more noise).",
        "",
        "| query | dpsql, Laplace | dpsql, Gaussian | SmartNoise | Qrlew |",
        "|---|---|---|---|---|",
    ]
    for q in QUERIES:
        cells = []
        for s in ["dpsql", "dpsql gaussian", "smartnoise", "qrlew"]:
            err = r["accuracy"].get(q.name, {}).get(s)
            charged = r["charged"].get(q.name, {}).get(s)
            cells.append(f"{err:.3%} (eps {charged:.3g})" if err is not None else _refused(r, q.name, s))
        lines.append(f"| {q.label} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"## Budget: epsilon = {BUDGET_QUERY_EPSILON} queries (grouped COUNT) from a "
        f"({BUDGET[0]:g}, {BUDGET[1]:g}) budget",
        "",
        "| system and accounting | queries |",
        "|---|---|",
    ]
    for name, n in r["budget"].get("dpsql", {}).items():
        lines.append(f"| dpsql, {name} filter | {n:,} |")
    for s in ("smartnoise", "qrlew"):
        n = r["budget"].get(s, {}).get("count_by_grp")
        if n is not None:
            how = (
                "basic composition of its reported cost"
                if s == "smartnoise"
                else "PLD composition of its reported events"
            )
            lines.append(f"| {s}, {how} (query delta {BUDGET_QUERY_DELTA:g}) | {n:,} |")
    lines += [
        "",
        "## Scale: grouped queries, median ms (x = ratio to plain DuckDB at that size)",
        "",
        "| query | rows | DuckDB | dpsql | SmartNoise | Qrlew |",
        "|---|---|---|---|---|---|",
    ]
    for name in SCALE:
        scale = r["scale"].get(name, {})
        for rows in m["sizes"]:
            floor = scale.get("duckdb", {}).get(rows)
            if floor is None:
                continue
            cells = []
            for s in systems:
                ms = scale.get(s, {}).get(rows)
                cells.append(f"{ms:.1f} ({ms / floor:.1f}x)" if ms is not None else _refused(r, name, s))
            label = next(q.label for q in QUERIES if q.name == name)
            lines.append(f"| {label} | {rows:,} | {floor:.1f} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "![latency vs rows](latency_vs_rows.png)",
        "",
        f"## Throughput of dpsql serve at {main_size:,} rows (grouped COUNT, cache and reuse off: "
        "the engine runs every query; psycopg clients)",
        "",
        "| clients | queries per second |",
        "|---|---|",
    ]
    for n, qps in r["throughput"].items():
        lines.append(f"| {n} | {qps:.1f} |")
    refusals = [(q, s, e) for q, errs in r["errors"].items() for s, e in errs.items()]
    if refusals:
        lines += ["", "## What each system could not answer", "", "| query | system | its error |", "|---|---|---|"]
        for q, s, e in refusals:
            lines.append(f"| {q} | {s} | {e.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def _refused(r: dict, query: str, system: str) -> str:
    return "refused" if system in r["errors"].get(query, {}) else "-"


def huge(rows: int, work: Path, out: Path) -> None:
    """The one-machine run (benchmarks/copy_build.py) at `rows`, written as its own section of `out`."""
    started = time.time()
    log(f"{rows:,} rows: generating data (kept in {work}), then the build and the queries in a child process")
    section = one_machine_section(one_machine(rows, work, parquet=False), _cores())
    print(section)
    out.write_text(replace_section(out.read_text() if out.exists() else "", section))
    log(f"done in {time.time() - started:.0f} s: {out}")


def _cores() -> int:
    return os.cpu_count() or 1

"""The first query over a large table: dpsql builds the table's weighted copy (per-unit row
counts and ready-weighted sums, once per data version), then answers; later queries read it.

    python -m benchmarks.copy_build [--rows 10000000 50000000] [--repeat 3]

Each size runs in a fresh child process, so its peak RSS (ru_maxrss) is the build's own: plain
DuckDB's grouped COUNT and SUM first (the floor, same process), then dpsql's first query
(build + answer, its wall and CPU time: on a shared host the CPU time is the build's own work),
then the same query again, with the engine's default memory_limit (engines/duckdb.py);
then the grouped COUNT, SUM and AVG on plain DuckDB and on dpsql (over the copy, reuse off) side
by side, `repeat` rounds each. `python -m benchmarks --huge` runs it at 100M rows and writes its
section of RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb

import dpsql
from dpsql.engines.duckdb import default_memory_limit

from . import data
from .shared import absolute
from .timing import interleaved_ms
from .workload import QUERIES, SCALE

ROOT = Path(__file__).resolve().parent.parent
QUERY = "SELECT grp, COUNT(*) AS n, SUM(value) AS s FROM events GROUP BY grp"
GROUPED = [q for q in QUERIES if q.name in SCALE]  # grouped COUNT, SUM and AVG
SECTION = "## One machine: the largest table (DuckDB, generated data)"


def child(db: Path, repeat: int = 3) -> dict:
    """Time plain DuckDB, dpsql's first query and its second, then the grouped queries side by
    side, in this process."""
    with tempfile.TemporaryDirectory() as d:
        plain = duckdb.connect(str(db), read_only=True)
        t = time.perf_counter()
        plain.execute(QUERY).fetchall()
        plain_s = time.perf_counter() - t
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        policy = Path(d) / "policy.toml"
        policy.write_text(data.policy_text(db))
        cur = dpsql.connect(policy, user="alice", ledger=Path(d) / "ledger.sqlite").cursor()
        cur.execute("SET dpsql.cache = off")
        cur.execute("SET dpsql.reuse = off")  # the second query reads the copy, as plain DuckDB reads the table
        t, cpu = time.perf_counter(), time.process_time()
        cur.execute(QUERY)
        cur.fetchall()
        first_s, first_cpu_s = time.perf_counter() - t, time.process_time() - cpu
        build_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t = time.perf_counter()
        cur.execute(QUERY)
        cur.fetchall()
        second_s = time.perf_counter() - t
        queries = {}
        for q in GROUPED:
            cur.execute(q.sql)  # planned once, as a dashboard's query is
            plain_ms, dpsql_ms = interleaved_ms(
                [lambda: plain.execute(q.sql).fetchall(), lambda: cur.execute(q.sql) or cur.fetchall()], repeat
            )
            queries[q.label] = {"plain_ms": plain_ms, "dpsql_ms": dpsql_ms}
        plain.close()
        cur.connection.close()
    return {
        "plain_s": plain_s,
        "first_s": first_s,
        "first_cpu_s": first_cpu_s,
        "memory_limit": default_memory_limit(),
        "second_s": second_s,
        "rss_before_mb": rss_before / 1024,
        "build_rss_mb": build_rss / 1024,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "queries": queries,
    }


def measure(rows: int, work: Path, repeat: int = 3, parquet: bool = True) -> dict:
    """Generate (or reuse) the data at `rows` and run `child` on it in a fresh process; with the
    generation's time and the load average before and after."""
    t = time.perf_counter()
    kept = (work / f"bench_{rows}.duckdb").exists()
    db = data.generate(work, rows, parquet=parquet)
    generated_s = None if kept else time.perf_counter() - t
    load_before = os.getloadavg()[0]
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.copy_build", "--child", str(db), "--repeat", str(repeat)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    )
    r = json.loads(out.stdout.strip().splitlines()[-1])
    r.update(rows=rows, generated_s=generated_s, load=(load_before, os.getloadavg()[0]), repeat=repeat)
    r["db_gb"] = db.stat().st_size / 1e9
    return r


def section(r: dict, cores: int) -> str:
    """RESULTS.md's section for one `measure` result."""
    made = "kept from an earlier run" if r["generated_s"] is None else f"generated in {r['generated_s']:.0f} s"
    lines = [
        SECTION,
        "",
        f"`python -m benchmarks --huge {r['rows']}` on {cores} cores: {r['rows']:,} rows from "
        f"benchmarks/data.py (not shipped; {made}, {r['db_gb']:.1f} GB DuckDB file), one child "
        f"process, the engine's default memory_limit ({r['memory_limit']}); load average "
        f"{r['load'][0]:.2f} before, {r['load'][1]:.2f} after. Goal: build <= 60 s, RSS <= 3 GB, "
        "queries <= 1.2x plain. The RSS is the process's, plain DuckDB's cache of the file included "
        f"({r['rss_before_mb']:,.0f} MB before dpsql's first query).",
        "",
        "| weighted-copy build (dpsql's first query) | its CPU time | peak RSS after the build | peak RSS in all |",
        "|---|---|---|---|",
        f"| {r['first_s']:.1f} s | {r['first_cpu_s']:.1f} s "
        f"| {r['build_rss_mb']:,.0f} MB | {r['peak_rss_mb']:,.0f} MB |",
        "",
        f"| query (median of {r['repeat']} rounds, side by side) | DuckDB | dpsql (DB-API, reuse off) | ratio |",
        "|---|---|---|---|",
    ]
    for label, q in r["queries"].items():
        ratio = q["dpsql_ms"] / q["plain_ms"]
        lines.append(f"| {label} | {q['plain_ms']:.0f} ms | {q['dpsql_ms']:.0f} ms | {ratio:.2f}x |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="*", default=[10_000_000])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--work", type=absolute, default=ROOT / ".bench" / "data")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.repeat)))
        return
    for rows in args.rows:
        print(f"generating {rows:,} rows ...", file=sys.stderr, flush=True)
        print(section(measure(rows, args.work, args.repeat), os.cpu_count() or 1), flush=True)


if __name__ == "__main__":
    main()

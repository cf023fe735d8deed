"""The first query over a large table: dpsql builds the table's weighted copy (per-unit row
counts and ready-weighted sums, once per data version), then answers; later queries read it.

    python -m benchmarks.copy_build [--rows 10000000 50000000]

Each size runs in a fresh child process, so its peak RSS (ru_maxrss) is the build's own: plain
DuckDB's grouped COUNT and SUM first (the floor, same process), then dpsql's first query
(build + answer), then the same query again, with the engine's default memory_limit (1 GB).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb

import dpsql

from . import data

ROOT = Path(__file__).resolve().parent.parent
QUERY = "SELECT grp, COUNT(*) AS n, SUM(value) AS s FROM events GROUP BY grp"


def child(db: Path) -> dict:
    """Time plain DuckDB, dpsql's first query and its second, in this process."""
    with tempfile.TemporaryDirectory() as d:
        plain = duckdb.connect(str(db), read_only=True)
        t = time.perf_counter()
        plain.execute(QUERY).fetchall()
        plain_s = time.perf_counter() - t
        plain.close()
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        policy = Path(d) / "policy.toml"
        policy.write_text(data.policy_text(db))
        cur = dpsql.connect(policy, user="alice", ledger=Path(d) / "ledger.sqlite").cursor()
        cur.execute("SET dpsql.cache = off")
        cur.execute("SET dpsql.reuse = off")  # the second query reads the copy, as plain DuckDB reads the table
        t = time.perf_counter()
        cur.execute(QUERY)
        cur.fetchall()
        first_s = time.perf_counter() - t
        t = time.perf_counter()
        cur.execute(QUERY)
        cur.fetchall()
        second_s = time.perf_counter() - t
        cur.connection.close()
    return {
        "plain_s": plain_s,
        "first_s": first_s,
        "second_s": second_s,
        "rss_before_mb": rss_before / 1024,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="*", default=[10_000_000])
    ap.add_argument("--work", type=Path, default=ROOT / ".bench" / "data")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child)))
        return
    print("| rows | plain DuckDB | dpsql first query (builds the copy) | dpsql second query | peak RSS |")
    print("|---|---|---|---|---|")
    for rows in args.rows:
        print(f"generating {rows:,} rows ...", file=sys.stderr, flush=True)
        db = data.generate(args.work, rows)
        out = subprocess.run(
            [sys.executable, "-m", "benchmarks.copy_build", "--child", str(db)],
            cwd=ROOT,
            check=True,
            capture_output=True,
            text=True,
        )
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(
            f"| {rows:,} | {r['plain_s'] * 1000:.0f} ms | {r['first_s']:.1f} s | {r['second_s'] * 1000:.0f} ms "
            f"({r['second_s'] / r['plain_s']:.1f}x) | {r['peak_rss_mb']:,.0f} MB |",
            flush=True,
        )


if __name__ == "__main__":
    main()

"""Undeclared group keys (partition selection): dpsql vs plain DuckDB on the same GROUP BY, side
by side in one run.

    python -m benchmarks.keys [--rows 1000000] [--keys 12800 100000] [--repeat 5] [--out benchmarks/RESULTS.md]

One row per person, so a key's unit count is its row count; at epsilon 1 (half of it for the
selection) and the query's delta of 1e-7, a key is released with even odds from 30 people and
always from 60 (12,800 keys: 78 people each, all released; 100,000 keys: 10 each, about
2 in 100,000 released). Prints each size's medians, their ratio, and how
many keys dpsql released (plain DuckDB returns them all); with --out, also as that file's
section "## Undeclared keys (partition selection)" (replaced in place, kept by the full run).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import duckdb

import dpsql

from .shared import replace_section
from .timing import interleaved_ms

SECTION = "## Undeclared keys (partition selection)"


def run(rows: int, keys: list[int], repeat: int) -> list[dict]:
    out = []
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        for k in keys:
            db = work / f"k{k}.duckdb"
            con = duckdb.connect(str(db))
            con.execute(
                f"CREATE TABLE t AS SELECT range AS pid, 'k' || CAST(range % {k} AS VARCHAR) AS key FROM range({rows})"
            )
            con.close()
            policy = work / f"k{k}.toml"
            policy.write_text(
                f'[engine]\ndatabase = "{db.name}"\n[privacy]\nepsilon = 1000000\ndelta = 1e-5\nbounds = "policy"\n'
                '[tables.t]\nprivacy_unit = "pid"\n[users.a]\n'
            )
            conn = dpsql.connect(policy, user="a", ledger=work / f"k{k}.sqlite")
            cur = conn.cursor()
            cur.execute("SET dpsql.cache = off")
            cur.execute("SET dpsql.reuse = off")
            cur.execute("SET dpsql.epsilon = 1")
            plain = duckdb.connect(str(db), read_only=True)
            sql = "SELECT key, COUNT(*) FROM t GROUP BY key"
            released = []

            def ask():
                cur.execute(sql)
                released.append(len(cur.fetchall()))

            plain_ms, dpsql_ms = interleaved_ms([lambda: plain.execute(sql).fetchall(), ask], repeat)
            out.append({"keys": k, "plain_ms": plain_ms, "dpsql_ms": dpsql_ms, "released": min(released)})
            plain.close()
            conn.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, nargs="*", default=[12_800, 100_000])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", type=Path, help="also write the table as its section of this file (RESULTS.md)")
    args = ap.parse_args()
    load = os.getloadavg()[0]
    results = run(args.rows, args.keys, args.repeat)
    lines = [
        f"`python -m benchmarks.keys --keys {' '.join(map(str, args.keys))} --repeat {args.repeat}`: "
        f"{args.rows:,} rows, one person each; epsilon 1, delta 1e-5; medians of {args.repeat} rounds side by side; "
        f"load average {load:.2f} before, {os.getloadavg()[0]:.2f} after",
        "",
        "| keys | plain DuckDB | dpsql | ratio | keys released |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['keys']:,} | {r['plain_ms']:.0f} ms | {r['dpsql_ms']:.0f} ms | "
            f"{r['dpsql_ms'] / r['plain_ms']:.1f}x | {r['released']:,} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        old = args.out.read_text() if args.out.exists() else ""
        args.out.write_text(replace_section(old, f"{SECTION}\n\n{text}"))


if __name__ == "__main__":
    main()

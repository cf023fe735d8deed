"""Undeclared group keys (partition selection): dpsql vs plain DuckDB on the same GROUP BY, side
by side in one run.

    python -m benchmarks.keys [--rows 1000000] [--keys 12800 100000] [--repeat 5]

One row per person, so a key's unit count is its row count; at epsilon 1 and delta 1e-5 a key
needs about two dozen people to be released. Prints each size's medians, their ratio, and how
many keys dpsql released (plain DuckDB returns them all).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import duckdb

import dpsql

from .timing import interleaved_ms


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
    args = ap.parse_args()
    print(f"{args.rows:,} rows, one person each; epsilon 1, delta 1e-5; medians of {args.repeat}")
    print("| keys | plain DuckDB | dpsql | ratio | keys released |")
    print("|---|---|---|---|---|")
    for r in run(args.rows, args.keys, args.repeat):
        print(
            f"| {r['keys']:,} | {r['plain_ms']:.0f} ms | {r['dpsql_ms']:.0f} ms | {r['dpsql_ms'] / r['plain_ms']:.1f}x "
            f"| {r['released']:,} |"
        )


if __name__ == "__main__":
    main()

"""Contribution-bounding overhead: dpsql vs plain DuckDB on the same grouped query, one run.

    python -m benchmarks.rewrite_overhead [--rows 1000000] [--repeat 15]

Builds a seeded table (rows spread over units with several rows each, a 10-key group column,
a skewed numeric column), then times, side by side and interleaved:
  plain     the analyst's query run directly by DuckDB (no privacy),
  bounded   dpsql's rewritten query alone (pre-noise: per-unit bounding included),
  dpsql     the whole pipeline through the DB-API (parse, plan, charge, run, noise, post-process).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import duckdb

import dpsql
from dpsql.sql.classify import classify

from .timing import median_ms

QUERIES = {
    "grouped COUNT": "SELECT g, COUNT(*) FROM t GROUP BY g",
    "grouped SUM": "SELECT g, SUM(v) FROM t GROUP BY g",
    "grouped COUNT+SUM+AVG": "SELECT g, COUNT(*), SUM(v), AVG(v) FROM t GROUP BY g",
    "ungrouped COUNT+SUM": "SELECT COUNT(*), SUM(v) FROM t",
}


def build(directory: Path, rows: int) -> Path:
    db = directory / "bench.duckdb"
    con = duckdb.connect(str(db))
    con.execute(f"""
        CREATE TABLE t AS
        SELECT i AS id, (hash(i, 1) % {max(rows // 8, 1)})::BIGINT AS uid,
               'g' || (hash(i, 2) % 10)::VARCHAR AS g,
               round(exp((hash(i, 3) % 1000) / 1000.0 * 7), 2) AS v
        FROM range({rows}) r(i)""")
    con.close()
    policy = directory / "policy.toml"
    keys = ", ".join(f'"g{i}"' for i in range(10))
    policy.write_text(f"""
[engine]
database = "bench.duckdb"
[privacy]
epsilon = 1e9
query_epsilon = 1.0
bounds = "policy"
[tables.t]
privacy_unit = "uid"
max_groups = 3
max_rows = 5
columns.v = {{ lower = 0, upper = 1000 }}
columns.g = {{ keys = [{keys}] }}
[users.bench]
""")
    return policy


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        directory = Path(d)
        print(f"building {args.rows:,} rows ...", flush=True)
        policy = build(directory, args.rows)
        plain = duckdb.connect(str(directory / "bench.duckdb"), read_only=True)
        conn = dpsql.connect(policy, user="bench", ledger=directory / "ledger.sqlite")
        cur = conn.cursor()
        cur.execute("SET dpsql.cache = off")
        cur.execute("SET dpsql.reuse = off")
        session = conn.session
        print(f"duckdb {duckdb.__version__}, {args.rows:,} rows, median of {args.repeat} runs, ms")
        print(f"{'query':<24} {'plain':>8} {'bounded':>8} {'dpsql':>8} {'bounded/plain':>14} {'dpsql/plain':>12}")
        for name, sql in QUERIES.items():
            plan, _ = session._prepare(classify(sql).tree)
            bounded_sql = session.bounded_sql(plan)
            for _ in range(2):  # warm up all three
                plain.execute(sql).fetchall()
                session.engine.execute(bounded_sql)
                cur.execute(sql)
            p = median_ms(lambda: plain.execute(sql).fetchall(), args.repeat)
            b = median_ms(lambda: session.engine.execute(bounded_sql), args.repeat)
            full = median_ms(lambda: cur.execute(sql), args.repeat)
            print(f"{name:<24} {p:8.2f} {b:8.2f} {full:8.2f} {b / p:14.2f} {full / p:12.2f}", flush=True)
        conn.close()
        plain.close()


if __name__ == "__main__":
    main()

"""`dpsql serve` latency and throughput, beside the embedded DB-API, in one run.

    python -m benchmarks.server [--n 200] [--clients 50] [--seconds 10]

Serves the sample hospital (a copy of its policy with a large budget, fresh ledger), then:
median round-trip of SHOW dpsql.budget and of a small DP query over psycopg 3 (cache off, so each
query is planned, charged and noised), the same DP query through dpsql.connect, and queries per
second with N concurrent psycopg clients.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import psycopg

import dpsql

from .serving import sample_policy, serve, throughput
from .timing import median_ms

QUERY = "SELECT sex, COUNT(*), AVG(age) FROM patients WHERE age > 30 GROUP BY sex"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=10)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        policy = sample_policy(Path(d))
        with serve(policy, Path(d) / "ledger.sqlite") as dsn:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("SET dpsql.cache = off")
                for _ in range(5):
                    conn.execute(QUERY).fetchall()
                show = median_ms(lambda: conn.execute("SHOW dpsql.budget").fetchall(), args.n)
                wire = median_ms(lambda: conn.execute(QUERY).fetchall(), args.n)
            local = dpsql.connect(policy, user="alice", ledger=Path(d) / "local.sqlite")
            cur = local.cursor()
            cur.execute("SET dpsql.cache = off")
            for _ in range(5):
                cur.execute(QUERY)
            embedded = median_ms(lambda: cur.execute(QUERY), args.n)
            print(f"median round-trip over psycopg: SHOW dpsql.budget {show:.2f} ms, DP query {wire:.2f} ms; "
                  f"same DP query through the embedded DB-API {embedded:.2f} ms (wire/embedded {wire / embedded:.2f}x)")
            for clients in sorted({1, 8, args.clients}):
                qps = throughput(dsn, QUERY, clients, args.seconds, setup=("SET dpsql.cache = off",))
                print(f"{clients:>3} concurrent clients: {qps:.1f} DP queries/s")


if __name__ == "__main__":
    main()

"""`dpsql serve` latency and throughput, beside the embedded DB-API and beside PostgreSQL 15
running the plain query on the same rows, in one run.

    python -m benchmarks.server [--n 200] [--clients 32] [--seconds 10] [--rounds 3] [--workers 2] [--no-postgres]
                                [--out benchmarks/SERVER.md]

Serves the sample hospital (a copy of its policy with a large budget, fresh ledger), then:
median round-trip of SHOW dpsql.budget and of a small DP query over psycopg 3 (cache off, so each
query is planned, charged and noised), the same DP query through dpsql.connect, and queries per
second with N concurrent psycopg clients; then the grouped COUNT at 1, 8 and N clients on
dpsql serve (DP, cache off, charged: each execution a new release) and on a throwaway
PostgreSQL 15 holding the same 20,000 patients (plain), with throughput ratios and median/p99
latencies, in rounds that run every variant once each (medians over rounds, and each round's
ratio: the host's speed drifts between runs more than between variants). dpsql runs twice: as it
serves by default (a repeated query's exact values computed once per data version, the noise
drawn afresh) and with SET dpsql.reuse = off (the engine runs every execution, as PostgreSQL
does), in one process and as `dpsql serve --workers N` (N processes sharing the port and the
ledger; by default one per core). Every variant is warmed for a second first (a fresh server
builds its weighted copy and plans the query on its first executions).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

import psycopg

import dpsql

from .serving import load, sample_policy, serve, throughput
from .shared import write_keeping
from .timing import median_ms

QUERY = "SELECT sex, COUNT(*), AVG(age) FROM patients WHERE age > 30 GROUP BY sex"
GROUPED = "SELECT sex, COUNT(*) FROM patients GROUP BY sex"
SAMPLE = Path(__file__).resolve().parent.parent / "sample_data"
BREAKDOWN_SECTION = "## Where a query's time goes"  # measured apart (per-thread CPU), kept by --out


def postgres_with_patients(server) -> str:
    """A database on the throwaway server holding the sample's patients table."""
    import duckdb

    url = server.create_database("bench_server")
    rel = duckdb.sql(f"SELECT * FROM read_parquet('{SAMPLE / 'patients.parquet'}')")
    types = {
        "VARCHAR": "text",
        "BIGINT": "bigint",
        "INTEGER": "integer",
        "DOUBLE": "double precision",
        "BOOLEAN": "boolean",
        "DATE": "date",
    }
    columns = ", ".join(f'"{n}" {types.get(str(t), "text")}' for n, t in zip(rel.columns, rel.types))
    with psycopg.connect(url, autocommit=True) as c:
        c.execute(f"CREATE TABLE patients ({columns})")
        with c.cursor().copy(f"COPY patients ({', '.join(rel.columns)}) FROM STDIN") as copy:
            for row in rel.fetchall():
                copy.write_row(row)
        c.execute("ANALYZE patients")
    return url


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument(
        "--no-postgres", dest="postgres", action="store_false", help="skip the side-by-side run against PostgreSQL 15"
    )
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="against PostgreSQL: rounds of every variant side by side (the host's speed drifts)",
    )
    ap.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 2,
        help="processes of the second dpsql serve compared with PostgreSQL (default: one per core)",
    )
    ap.add_argument("--out", type=Path, help="also write the output to this Markdown file (benchmarks/SERVER.md)")
    args = ap.parse_args()
    try:
        run(args)
    finally:
        if args.out is not None:
            write_keeping(
                args.out,
                "# `python -m benchmarks.server "
                + " ".join(sys.argv[1:])
                + "`\n\n"
                + "\n\n".join(_SAID).replace("|\n\n|", "|\n|")
                + "\n",
                (BREAKDOWN_SECTION,),
            )


_SAID: list[str] = []


def say(text: str) -> None:
    """Print, and keep the line for --out."""
    print(text, flush=True)
    _SAID.append(text)


def run(args) -> None:
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
            say(
                f"median round-trip over psycopg: SHOW dpsql.budget {show:.2f} ms, DP query {wire:.2f} ms; "
                f"same DP query through the embedded DB-API {embedded:.2f} ms (wire/embedded {wire / embedded:.2f}x)"
            )
            for clients in sorted({1, 8, args.clients}):
                qps = throughput(dsn, QUERY, clients, args.seconds, setup=("SET dpsql.cache = off",))
                say(f"{clients} concurrent clients: {qps:.1f} DP queries/s (one process, {QUERY})")
            if args.postgres:
                with serve(policy, Path(d) / "ledger.sqlite", "alice", "--workers", str(args.workers)) as many:
                    against_postgres({"dpsql": dsn, f"dpsql --workers {args.workers}": many}, args)


def against_postgres(servers: dict[str, str], args) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.pgserver import PgServer

    server = PgServer().start()
    try:
        pg = postgres_with_patients(server)
        say(
            f"\n{GROUPED}: dpsql serve (DP, cache off) vs PostgreSQL 15 (plain), same harness and rows; "
            f"{args.rounds} rounds of {args.seconds:g} s each, every variant once per round: medians over rounds, "
            f"and the median (min-max) of each round's ratio; load average {os.getloadavg()[0]:.2f} at the start"
        )
        variants = [(name, reuse) for name in servers for reuse in ("on", "off")]
        # Warm every variant first: a fresh server builds the weighted copy and plans the query
        # on its first executions (each worker of --workers its own), which is no steady state.
        for name, reuse in variants:
            load(servers[name], GROUPED, 8, 1.0, setup=("SET dpsql.cache = off", f"SET dpsql.reuse = {reuse}"))
        load(pg, GROUPED, 8, 1.0)
        header = (
            ["clients"]
            + [f"{name}, reuse {reuse}: q/s, p50 / p99 ms" for name, reuse in variants]
            + ["PostgreSQL: q/s, p50 / p99 ms"]
            + [f"{name}, reuse {reuse} / PostgreSQL" for name, reuse in variants]
        )
        say("\n| " + " | ".join(header) + " |\n|" + "---|" * len(header))
        for clients in sorted({1, 8, args.clients}):
            rounds = []
            for r in range(args.rounds):  # side by side: every variant once per round, in a rotating order
                order = list(range(len(variants) + 1))
                order = order[r % len(order) :] + order[: r % len(order)]
                got: dict[int, tuple[float, float, float]] = {}
                for i in order:
                    if i == len(variants):
                        got[i] = load(pg, GROUPED, clients, args.seconds)
                    else:
                        name, reuse = variants[i]
                        got[i] = load(
                            servers[name],
                            GROUPED,
                            clients,
                            args.seconds,
                            setup=("SET dpsql.cache = off", f"SET dpsql.reuse = {reuse}"),
                        )
                rounds.append([got[i] for i in range(len(variants) + 1)])
            runs = [
                tuple(statistics.median(rd[i][k] for rd in rounds) for k in range(3)) for i in range(len(variants) + 1)
            ]
            ratios = [[rd[i][0] / rd[-1][0] for rd in rounds] for i in range(len(variants))]
            say(
                "| "
                + " | ".join(
                    [f"{clients:>7}"]
                    + [f"{r[0]:7.1f}, {r[1]:6.2f} / {r[2]:7.2f}" for r in runs]
                    + [f"{statistics.median(x):.2f} ({min(x):.2f}-{max(x):.2f})" for x in ratios]
                )
                + " |"
            )
    finally:
        server.stop()


if __name__ == "__main__":
    main()

"""Check-and-charge latency of the ledger: SQLite (WAL, synchronous=FULL) vs PostgreSQL.

    python -m benchmarks.ledger [--n 300] [--pg-url postgresql://...]

Without --pg-url a throwaway PostgreSQL server is started (needs its server binaries).
Also prints how many epsilon = 0.01 queries each filter admits from a (1, 1e-6) budget.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from fractions import Fraction
from pathlib import Path

from dpsql.accounting.cost import Cost, Part
from dpsql.accounting.filters import FILTERS, make_filter, simulate
from dpsql.config import BudgetPolicy
from dpsql.guarantee.mechanisms import rho_for
from dpsql.ledger import Ledger, PostgresLedger


def time_charges(ledger: Ledger, n: int) -> float:
    budget = BudgetPolicy("zcdp", Fraction(10**6), Fraction(1, 10**6))
    cost = Cost.pure(Fraction(1, 100))
    times = []
    for i in range(n):
        t = time.perf_counter()
        ledger.charge("bench", budget, cost, "SELECT COUNT(*) FROM t", {"i": i})
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--pg-url", default=None)
    args = ap.parse_args()
    print("queries of epsilon = 0.01 admitted from (1, 1e-6):")
    gauss_rho = rho_for(Fraction(1, 100), Fraction(1, 10**8))
    gauss = Cost.of([Part("gaussian", Fraction(1, 100), Fraction(1, 10**8), rho=gauss_rho)])
    for kind in FILTERS:
        f = make_filter(kind, Fraction(1), Fraction(1, 10**6))
        lap = simulate(f, Cost.pure(Fraction(1, 100)))
        print(f"  {kind:<11} laplace {lap:>6}   gaussian (query delta 1e-8) {simulate(f, gauss):>6}")
    with tempfile.TemporaryDirectory() as d:
        sqlite_ms = time_charges(Ledger(Path(d) / "bench.sqlite"), args.n)
    server = None
    url = args.pg_url
    if url is None:
        from tests.pgserver import PgServer

        server = PgServer().start()
        url = server.create_database("bench")
    try:
        pg_ms = time_charges(PostgresLedger(url), args.n)
    finally:
        if server is not None:
            server.stop()
    print(f"check-and-charge, median of {args.n}: SQLite {sqlite_ms:.2f} ms, PostgreSQL {pg_ms:.2f} ms")


if __name__ == "__main__":
    main()

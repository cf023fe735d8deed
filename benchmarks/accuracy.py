"""Accuracy on the sample hospital: median relative error of each aggregate, grouped by region
(10 declared keys), at epsilon = 1 per query, over many runs, against the exact answer on the
raw data (so clamping to the policy's bounds counts as error too).

    python -m benchmarks.accuracy [--runs 50] [--epsilon 1]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from . import sample

QUERIES = [
    ("COUNT(*)", "COUNT(*)"),
    ("SUM(income)", "SUM(income)"),
    ("AVG(income)", "AVG(income)"),
    ("AVG(age)", "AVG(age)"),
    ("STDDEV_SAMP(age)", "STDDEV_SAMP(age)"),
    ("STDDEV_SAMP(income)", "STDDEV_SAMP(income)"),
    ("MEDIAN(age)", "MEDIAN(age)"),
    ("MEDIAN(income)", "MEDIAN(income)"),
]


def measure(runs: int, epsilon: float) -> list[dict]:
    truth_db = sample.truth_connection()
    results = []
    with tempfile.TemporaryDirectory() as d:
        cur = sample.cursor(Path(d))
        cur.execute(f"SET dpsql.epsilon = {epsilon}")
        for label, agg in QUERIES:
            truth = dict(truth_db.execute(f"SELECT region, {agg} FROM patients GROUP BY region").fetchall())
            errors = []
            started = time.perf_counter()
            for _ in range(runs):
                cur.execute(f"SELECT region, {agg} FROM patients GROUP BY region")
                for region, value in cur.fetchall():
                    errors.append(abs((value if value is not None else 0) - truth[region]) / abs(truth[region]))
            results.append(
                {
                    "aggregate": label,
                    "median_rel_error": statistics.median(errors),
                    "p90_rel_error": statistics.quantiles(errors, n=10)[-1],
                    "ms_per_query": (time.perf_counter() - started) * 1000 / runs,
                }
            )
    return results


def table(results: list[dict], runs: int, epsilon: float) -> str:
    lines = [
        f"Sample hospital, GROUP BY region (10 keys), epsilon = {epsilon:g} per query, {runs} runs, "
        "relative error vs the raw data",
        "",
        "| aggregate | median relative error | 90th percentile | ms per query |",
        "|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['aggregate']} | {r['median_rel_error']:.2%} | {r['p90_rel_error']:.2%} | {r['ms_per_query']:.1f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--epsilon", type=float, default=1.0)
    args = parser.parse_args()
    print(table(measure(args.runs, args.epsilon), args.runs, args.epsilon))


if __name__ == "__main__":
    main()

"""What a new query text costs in Python: parsing, planning, calibration, building the bounded
query and post-processing, apart from the engine's and the ledger's own time and the noise.

    python -m benchmarks.new_query [--rows 100000] [--texts 40]

Every execution sends a text dpsql has not seen (a literal changes), so nothing is served from
the plan cache or the answer cache. Time inside the engine (DuckDB parsing, binding, running and
fetching, the post-processor's scratch DuckDB) and inside the ledger (its SQLite writes and
fsyncs, or the waits for its writer thread to admit a charge and make it durable) and drawing
the noise (OpenDP's exact samplers, about 10 us a value: the same for a new text as for a
repeated one) is measured by wrapping those calls; Python is the rest of the wall time. The same
query text sent again (a plan-cache hit) is shown for comparison. Each shape's texts differ in a
WHERE value, as a dashboard's filter changes them: from the third on, a text is answered from
its shape's template (sql/slots.py); `--shapes` makes every text a new shape as well.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import duckdb

import dpsql
from dpsql import postprocess
from dpsql.engines.duckdb import DuckDBEngine
from dpsql.guarantee import mechanisms, selection
from dpsql.ledger import Ledger, PendingCharge
from dpsql.postprocess import PostProcessor

from . import rewrite_overhead

SHAPES = {
    "grouped COUNT, WHERE": "SELECT g, COUNT(*) FROM t WHERE v > {i} GROUP BY g",
    "COUNT+SUM+AVG, WHERE": "SELECT g, COUNT(*), SUM(v), AVG(v) FROM t WHERE v < {big} GROUP BY g",
    "ungrouped COUNT, WHERE": "SELECT COUNT(*) FROM t WHERE v > {i}",
    "HAVING, ORDER BY, LIMIT": (
        "SELECT g, SUM(v) AS s FROM t WHERE v <> {i} GROUP BY g HAVING SUM(v) > 0 ORDER BY s DESC LIMIT 5"
    ),
    "public JOIN": ("SELECT r.region, COUNT(*) FROM t JOIN regions r ON t.g = r.g WHERE t.v > {i} GROUP BY r.region"),
    "undeclared keys": "SELECT h, COUNT(*) FROM t WHERE v > {i} GROUP BY h",
}


def build(directory: Path, rows: int) -> Path:
    """rewrite_overhead's table and policy, plus an undeclared key h (200 values), a public
    table of regions, and a delta for partition selection."""
    policy = rewrite_overhead.build(directory, rows)
    con = duckdb.connect(str(directory / "bench.duckdb"))
    con.execute("ALTER TABLE t ADD COLUMN h INTEGER")
    con.execute("UPDATE t SET h = hash(id, 4) % 200")
    con.execute("CREATE TABLE regions AS SELECT 'g' || i AS g, 'r' || (i % 3) AS region FROM range(10) r(i)")
    con.close()
    text = policy.read_text().replace(
        "query_epsilon = 1.0\n", "query_epsilon = 1.0\ndelta = 1e-2\nquery_delta = 1e-9\n"
    )
    policy.write_text(text + "[tables.regions]\npublic = true\n")
    return policy


class Clock:
    """Seconds spent inside wrapped calls, by kind (nested calls count once, in the outer)."""

    def __init__(self) -> None:
        self.spent: Counter[str] = Counter()
        self._depth = 0

    def wrap(self, kind: str, fn: Callable) -> Callable:
        def timed(*args: Any, **kwargs: Any) -> Any:
            if self._depth:
                return fn(*args, **kwargs)
            self._depth += 1
            t, cpu = time.perf_counter(), time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.spent[kind] += time.perf_counter() - t
                self.spent[kind + " cpu"] += time.thread_time() - cpu
                self._depth -= 1

        return timed


class _TimedConnection:
    """The post-processor's scratch DuckDB, its calls timed as engine time."""

    def __init__(self, con: duckdb.DuckDBPyConnection, clock: Clock) -> None:
        self._con, self._clock = con, clock

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._con, name)
        if name in ("execute", "executemany"):

            def call(*args: Any) -> Any:
                self._clock.wrap("engine", attr)(*args)
                return self

            return call
        if name.startswith("fetch"):
            return self._clock.wrap("engine", attr)
        return attr


@contextmanager
def instrumented(clock: Clock) -> Iterator[None]:
    patches: list[tuple[Any, str, str]] = [
        (DuckDBEngine, "execute", "engine"),
        (DuckDBEngine, "describe", "engine"),
        (DuckDBEngine, "weighted_copy", "engine"),
        (Ledger, "charge", "ledger"),
        (Ledger, "charging", "ledger"),
        (PendingCharge, "admitted", "ledger"),
        (PendingCharge, "durable", "ledger"),
        (Ledger, "record_release", "ledger"),
    ]
    patches.append((postprocess, "insert_rows", "engine"))
    patches.append((mechanisms, "sample", "noise"))  # the noisy table's rows into the scratch DuckDB
    patches.append((selection, "_bits", "noise"))  # partition selection's bits
    saved = [(cls, name, getattr(cls, name)) for cls, name, _ in patches]
    scratch = PostProcessor._scratch
    for cls, name, kind in patches:
        setattr(cls, name, clock.wrap(kind, getattr(cls, name)))
    PostProcessor._scratch = lambda self: _TimedConnection(scratch(self), clock)
    try:
        yield
    finally:
        for cls, name, fn in saved:
            setattr(cls, name, fn)
        PostProcessor._scratch = scratch


def measure(cur: Any, clock: Clock, texts: list[str], into: dict[str, list[float]]) -> None:
    """Total, engine, ledger and Python milliseconds of each text, appended to `into`."""
    for text in texts:
        clock.spent.clear()
        t, cpu = time.perf_counter(), time.thread_time()
        cur.execute(text)
        cur.fetchall()
        total, total_cpu = time.perf_counter() - t, time.thread_time() - cpu
        engine, ledger, noise = clock.spent["engine"], clock.spent["ledger"], clock.spent["noise"]
        python_cpu = total_cpu - clock.spent["engine cpu"] - clock.spent["ledger cpu"] - clock.spent["noise cpu"]
        for k, v in (
            ("total", total),
            ("engine", engine),
            ("ledger", ledger),
            ("noise", noise),
            ("python", total - engine - ledger - noise),
            ("python cpu", python_cpu),
        ):
            into.setdefault(k, []).append(v * 1000)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--texts", type=int, default=60, help="new query texts per shape")
    ap.add_argument("--rounds", type=int, default=6, help="rounds over the shapes, interleaved")
    ap.add_argument(
        "--shapes",
        action="store_true",
        help="every new text a new shape too (a term with its own constant), so none has a template",
    )
    ap.add_argument(
        "--out",
        type=Path,
        help="also write the table here, as Markdown, with the machine's load (appended as a "
        "section of its own if the file exists)",
    )
    args = ap.parse_args()
    lines: list[str] = []
    load = os.getloadavg()

    def say(line: str = "") -> None:
        print(line)
        lines.append(line)

    def text(shape: str, k: int) -> str:
        sql = shape.format(i=k, big=100_000 + k)
        return sql.replace("WHERE ", f"WHERE abs(v) + {k} >= {k} AND ") if args.shapes else sql

    with tempfile.TemporaryDirectory() as d:
        directory = Path(d)
        policy = build(directory, args.rows)
        conn = dpsql.connect(policy, user="bench", ledger=directory / "ledger.sqlite")
        cur = conn.cursor()
        cur.execute("SET dpsql.cache = off")
        clock = Clock()
        say(
            f"{args.rows:,} rows, median of {args.texts} new texts per shape, ms "
            f"(python = total - engine - ledger - noise, wall;\n"
            f"cpu = the same in this thread's CPU time, which a busy host's stolen time does not inflate)"
        )
        say(f"{'':<26} {'new text':^48}   {'same text':^15}")
        say(
            f"{'shape':<26} {'total':>7} {'engine':>7} {'ledger':>7} {'noise':>7} {'python':>7} {'cpu':>7}"
            f"   {'total':>7} {'python':>7}"
        )
        new: dict[str, dict[str, list[float]]] = {name: {} for name in SHAPES}
        same: dict[str, dict[str, list[float]]] = {name: {} for name in SHAPES}
        with instrumented(clock):
            for name, shape in SHAPES.items():
                for k in range(3):  # weighted copies and the engine's caches warm, not measured
                    cur.execute(shape.format(i=100_000 + k, big=200_000 + k))
                    cur.fetchall()
            per_round = max(args.texts // args.rounds, 1)
            for r in range(args.rounds):  # shapes interleaved, so that each sees the same load
                for name, shape in SHAPES.items():
                    measure(cur, clock, [text(shape, k) for k in range(r * per_round, (r + 1) * per_round)], new[name])
                    measure(cur, clock, [shape.format(i=0, big=100_000)] * per_round, same[name])
        worst = 0.0
        for name in SHAPES:
            n = {k: statistics.median(v) for k, v in new[name].items()}
            s = {k: statistics.median(v) for k, v in same[name].items()}
            worst = max(worst, n["python"])
            say(
                f"{name:<26} {n['total']:7.2f} {n['engine']:7.2f} {n['ledger']:7.2f} {n['noise']:7.2f}"
                f" {n['python']:7.2f}"
                f" {n['python cpu']:7.2f}"
                f"   {s['total']:7.2f} {s['python']:7.2f}"
            )
        conn.close()
        say(f"worst python per new text: {worst:.2f} ms")
    if args.out is not None:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        title = "" if args.out.exists() else "# What a new query text costs in Python\n\n"
        with args.out.open("a") as out:  # a second run (--shapes) adds its own section
            out.write(
                f"{title}## `python -m benchmarks.new_query --texts {args.texts}"
                f"{' --shapes' if args.shapes else ''}`\n\nAt {commit or 'an unknown commit'}, "
                f"{os.cpu_count()} cores, load average {load[0]:.2f} before and "
                f"{os.getloadavg()[0]:.2f} after.\n\n```\n" + "\n".join(lines) + "\n```\n\n"
            )


if __name__ == "__main__":
    main()

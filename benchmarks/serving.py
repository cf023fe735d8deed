"""A throwaway `dpsql serve` for benchmarks, and concurrent-client throughput against it."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import psycopg

PASSWORD = "bench-password"


def sample_policy(directory: Path) -> Path:
    """A copy of the sample hospital's policy with budgets no benchmark exhausts."""
    sample = Path(__file__).resolve().parent.parent / "sample_data"
    policy = Path(directory) / "hospital.toml"
    text = (sample / "dpsql.toml").read_text().replace('source = "', f'source = "{sample}/')
    policy.write_text(text.replace("epsilon = 10.0", "epsilon = 1e12").replace("epsilon = 5.0", "epsilon = 1e12"))
    return policy


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve(policy: Path, ledger: Path, user: str = "alice", *extra: str) -> Iterator[str]:
    """Start `dpsql serve` (with `extra` options) on a free port with one analyst; yield a psycopg DSN."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "dpsql.cli",
            "users",
            "add",
            "-p",
            str(policy),
            "--ledger",
            str(ledger),
            user,
            "--password-stdin",
        ],
        input=PASSWORD + "\n",
        text=True,
        check=True,
        capture_output=True,
    )
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dpsql.cli",
            "serve",
            "-p",
            str(policy),
            "--ledger",
            str(ledger),
            "--port",
            str(port),
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    dsn = f"host=127.0.0.1 port={port} dbname=dpsql user={user} password={PASSWORD} sslmode=disable"
    try:
        for _ in range(200):
            try:
                psycopg.connect(dsn).close()
                break
            except psycopg.OperationalError:
                time.sleep(0.05)
        yield dsn
    finally:
        server.terminate()
        server.wait(30)


def throughput(dsn: str, query: str, clients: int, seconds: float, setup: tuple[str, ...] = ()) -> float:
    """Queries per second completed by `clients` concurrent psycopg connections."""
    return load(dsn, query, clients, seconds, setup)[0]


def load(dsn: str, query: str, clients: int, seconds: float, setup: tuple[str, ...] = ()) -> tuple[float, float, float]:
    """(queries per second, median ms, 99th percentile ms) of `clients` concurrent psycopg
    connections each sending `query` back to back for `seconds` (then they stop)."""
    latencies: list[list[float]] = [[] for _ in range(clients)]
    ready = threading.Barrier(clients + 1)
    stop = [float("inf")]

    def worker(i: int) -> None:
        with psycopg.connect(dsn, autocommit=True) as c:
            for statement in setup:
                c.execute(statement)
            ready.wait()
            while time.monotonic() < stop[0]:
                t0 = time.perf_counter()
                c.execute(query).fetchall()
                latencies[i].append((time.perf_counter() - t0) * 1000)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    ready.wait()
    start = time.monotonic()
    stop[0] = start + seconds
    for t in threads:
        t.join()
    elapsed = time.monotonic() - start
    every = sorted(x for xs in latencies for x in xs)
    if not every:
        return 0.0, float("nan"), float("nan")
    return len(every) / elapsed, every[len(every) // 2], every[min(len(every) - 1, int(len(every) * 0.99))]

"""A throwaway `dpsql serve` (a subprocess on a free loopback port) for benchmarks and the
end-to-end tests (tests/server_fixture.py), and concurrent-client throughput against it."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import psycopg

from dpsql.config import load_policy
from dpsql.ledger import open_ledger
from dpsql.server.wire.scram import make_verifier

ROOT = Path(__file__).resolve().parent.parent
PASSWORD = "s3cret-Pass"  # every login's added here


def sample_policy(directory: Path) -> Path:
    """A copy of the sample hospital's policy with budgets no benchmark exhausts."""
    sample = ROOT / "sample_data"
    policy = Path(directory) / "hospital.toml"
    text = (sample / "dpsql.toml").read_text().replace('source = "', f'source = "{sample}/')
    policy.write_text(text.replace("epsilon = 10.0", "epsilon = 1e12").replace("epsilon = 5.0", "epsilon = 1e12"))
    return policy


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def add_logins(policy: Path, ledger: Path, *users: str) -> None:
    """What `dpsql users add --password-stdin` does for each of `users` (password PASSWORD), in
    this process: a CLI subprocess per login cost a Python start-up each, twice for every server
    the tests start. test_console's live server still adds its login through the CLI."""
    pol = load_policy(policy, ledger_path=ledger)
    book = open_ledger(pol.ledger_path, pol.ledger_url, identity=pol.ledger_identity)
    try:
        for user in users:
            pol.user(user)
            book.set_user(user, make_verifier(PASSWORD), "analyst")
    finally:
        book.close()


def launch(policy: Path, ledger: Path, port: int, *extra: str, output: int = subprocess.DEVNULL) -> subprocess.Popen:
    """`dpsql serve` (with `extra` options) on 127.0.0.1:`port`; returns at once (see
    wait_listening, wait_until_up). Its output, stdout and stderr together, goes to `output`
    (discarded; subprocess.PIPE: the Popen's stdout, as text)."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dpsql.cli",
            "serve",
            "--policy",
            str(policy),
            "--ledger",
            str(ledger),
            "--port",
            str(port),
            *extra,
        ],
        stdout=output,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )


def dsn_of(port: int, user: str, **extra: str) -> str:
    """The psycopg DSN of `user` (password PASSWORD) on the dpsql serve at 127.0.0.1:`port`."""
    params = {
        "host": "127.0.0.1",
        "port": str(port),
        "dbname": "dpsql",
        "user": user,
        "password": PASSWORD,
        "sslmode": "disable",
        **extra,
    }
    return " ".join(f"{k}={v}" for k, v in params.items())


def wait_until(ready: Callable[[], bool], alive: Callable[[], bool], seconds: float, pause: float) -> bool:
    """Until `ready()`: True, or False once `alive()` says the process meant to get ready has
    exited, or the time is up."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if ready():
            return True
        if not alive():
            return False
        time.sleep(pause)
    return False


def wait_listening(port: int, alive: Callable[[], bool], seconds: float = 30) -> bool:
    """Until something accepts connections on the loopback port (see wait_until)."""

    def accepting() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            return False

    return wait_until(accepting, alive, seconds, 0.05)


def wait_until_up(dsn: str, seconds: float = 30.0, pause: float = 0.05) -> None:
    """Returns once a connection to `dsn` opens (a login answered: a supervisor's workers are
    ready); RuntimeError if none has within `seconds`."""

    def answering() -> bool:
        try:
            psycopg.connect(dsn, connect_timeout=2).close()
            return True
        except psycopg.OperationalError:
            return False

    if not wait_until(answering, lambda: True, seconds, pause):
        raise RuntimeError("dpsql serve did not start")


class Serve:
    """`dpsql serve` (with `extra` options) on a free port, with the logins `users` (password
    PASSWORD), listening when built. With `capture`, its output is read as it comes (output,
    wait_for); else discarded."""

    def __init__(
        self, policy: Path, ledger: Path, *extra: str, users: tuple[str, ...] = ("alice", "bob"), capture: bool = True
    ):
        self.policy, self.ledger = policy, ledger
        self.port = free_port()
        add_logins(policy, ledger, *users)
        self.proc = launch(policy, ledger, self.port, *extra, output=subprocess.PIPE if capture else subprocess.DEVNULL)
        self._lines: list[str] = []
        self._reader = threading.Thread(target=self._drain, daemon=True)
        if capture:
            self._reader.start()
        if not wait_listening(self.port, lambda: self.proc.poll() is None):
            raise RuntimeError(self.output(wait=True) if self.proc.poll() is not None else "dpsql serve did not start")

    def _drain(self) -> None:
        """Read the server's output as it comes: a pipe nobody reads would block the server once full,
        and tests wait for lines such as the announcement."""
        for line in self.proc.stdout:
            self._lines.append(line)

    def output(self, wait: bool = False) -> str:
        """What the server has printed so far (`wait`: all of it, once it has exited); empty
        without `capture`."""
        if wait:
            self.proc.wait()
            if self._reader.is_alive():
                self._reader.join(30)
        return "".join(self._lines)

    def wait_for(self, text: str, seconds: float = 60) -> None:
        """Until the server has printed `text` (for a supervisor: "serving", once every worker is ready)."""
        deadline = time.monotonic() + seconds
        while text not in self.output():
            assert time.monotonic() < deadline and self.proc.poll() is None, self.output()
            time.sleep(0.05)

    def dsn(self, user: str = "alice", **extra: str) -> str:
        return dsn_of(self.port, user, **extra)

    def stop(self) -> str:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        return self.output(wait=True)

    def env(self) -> dict[str, str]:
        return {**os.environ, "PGPASSWORD": PASSWORD}


@contextlib.contextmanager
def serve(policy: Path, ledger: Path, user: str = "alice", *extra: str) -> Iterator[str]:
    """Start `dpsql serve` (with `extra` options) on a free port with one analyst; yield a psycopg
    DSN once it answers logins."""
    server = Serve(policy, ledger, *extra, users=(user,), capture=False)
    try:
        dsn = server.dsn(user)
        wait_until_up(dsn)
        yield dsn
    finally:
        server.stop()


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

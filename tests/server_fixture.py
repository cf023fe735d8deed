"""Start a real `dpsql serve` for end-to-end tests (a subprocess on a free loopback port)."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

from dpsql.config import load_policy
from dpsql.ledger import open_ledger
from dpsql.server.wire.scram import make_verifier

from .conftest import ROOT

PASSWORD = "s3cret-Pass"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port: int, alive, seconds: float = 30) -> bool:
    """Until something accepts connections on the loopback port: True, or False once `alive()`
    says the process meant to listen there has exited, or the time is up."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            if not alive():
                return False
            time.sleep(0.05)
    return False


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


class Serve:
    def __init__(self, policy: Path, ledger: Path, *extra: str):
        self.policy, self.ledger = policy, ledger
        self.port = free_port()
        add_logins(policy, ledger, "alice", "bob")
        self.proc = subprocess.Popen(
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
                str(self.port),
                *extra,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=ROOT,
        )
        self._lines: list[str] = []
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()
        if not wait_listening(self.port, lambda: self.proc.poll() is None):
            raise RuntimeError(self.output(wait=True) if self.proc.poll() is not None else "dpsql serve did not start")

    def _drain(self) -> None:
        """Read the server's output as it comes: a pipe nobody reads would block the server once full,
        and tests wait for lines such as the announcement."""
        for line in self.proc.stdout:
            self._lines.append(line)

    def output(self, wait: bool = False) -> str:
        """What the server has printed so far (`wait`: all of it, once it has exited)."""
        if wait:
            self.proc.wait()
            self._reader.join(30)
        return "".join(self._lines)

    def wait_for(self, text: str, seconds: float = 60) -> None:
        """Until the server has printed `text` (for a supervisor: "serving", once every worker is ready)."""
        deadline = time.monotonic() + seconds
        while text not in self.output():
            assert time.monotonic() < deadline and self.proc.poll() is None, self.output()
            time.sleep(0.05)

    def dsn(self, user: str = "alice", **extra: str) -> str:
        params = {
            "host": "127.0.0.1",
            "port": str(self.port),
            "dbname": "dpsql",
            "user": user,
            "password": PASSWORD,
            "sslmode": "disable",
            **extra,
        }
        return " ".join(f"{k}={v}" for k, v in params.items())

    def stop(self) -> str:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        return self.output(wait=True)

    def env(self) -> dict[str, str]:
        return {**os.environ, "PGPASSWORD": PASSWORD}


def frame(kind: bytes, payload: bytes) -> bytes:
    """One wire message: its type byte, its length, its payload."""
    return kind + struct.pack("!i", len(payload) + 4) + payload


def startup_packet(user: str) -> bytes:
    """A protocol 3.0 startup packet for `user`, as a client sends it first."""
    body = struct.pack("!i", 196608) + f"user\0{user}\0database\0dpsql\0\0".encode()
    return struct.pack("!i", len(body) + 4) + body


def messages(sock: socket.socket, timeout: float = 10.0) -> list[tuple[bytes, bytes]]:
    """The server's messages on a raw socket until it closes (or sends nothing for `timeout`)."""
    sock.settimeout(timeout)
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except (socket.timeout, ConnectionResetError):
            break
        if not chunk:
            break
        data += chunk
    out, pos = [], 0
    while pos + 5 <= len(data):
        kind, length = data[pos : pos + 1], struct.unpack("!i", data[pos + 1 : pos + 5])[0]
        out.append((kind, data[pos + 5 : pos + 1 + length]))
        pos += 1 + length
    return out


def assert_cancelled_midway(
    conn, within: float, sql: str = "SELECT g, SUM(v), AVG(v), COUNT(*) FROM big WHERE v * v > 7 GROUP BY g"
) -> None:
    """A CancelRequest sent 0.3 s into a long query (over tests' `big` table) ends it with
    QueryCanceled within `within` seconds, and the session goes on."""
    import psycopg
    import pytest

    timer = threading.Timer(0.3, conn.cancel)
    timer.start()
    started = time.monotonic()
    with pytest.raises(psycopg.errors.QueryCanceled):
        conn.execute(sql).fetchall()
    assert time.monotonic() - started < within
    assert conn.execute("SHOW dpsql.epsilon").fetchone() == ("0.1",)

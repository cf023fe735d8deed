"""Start a real `dpsql serve` for end-to-end tests (benchmarks/serving.py's Serve: a subprocess on a
free loopback port), and raw wire messages."""

from __future__ import annotations

import socket
import struct
import threading
import time

from benchmarks.serving import PASSWORD, Serve, free_port, wait_listening  # noqa: F401 (the tests import them here)


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

"""Hostile numbers and malformed messages (issue "hardening"): nothing non-finite leaves, an
absurd noise scale is refused before the charge, and a malformed Bind is a protocol violation."""

from __future__ import annotations

import math
import socket
import struct

import psycopg
import pytest

import dpsql


def _finite(rows, ci) -> bool:
    values = [v for r in rows for v in r if isinstance(v, float)]
    values += [x for col in ci.values() if col for iv in col if iv for x in iv]
    return all(math.isfinite(v) for v in values)


def test_absurd_scale_is_refused_before_the_charge(hospital):
    for value in (1e300, 1e12):
        with pytest.raises(dpsql.ProgrammingError) as err:
            hospital.execute("SELECT SUM(income * %s) FROM patients", (value,))
        assert err.value.sqlstate == "22003" and "nothing was charged" in str(err.value)
    assert hospital.connection.session.budget()["queries"] == 0


@pytest.mark.parametrize("sql", [
    "SELECT COUNT(*) / 0.0 AS x FROM visits",
    "SELECT SUM(cost) / (COUNT(*) - COUNT(*)) AS x FROM visits",
    "SELECT diagnosis, SUM(cost) / (COUNT(*) * 0) AS x FROM visits GROUP BY diagnosis",
    "SELECT LN(COUNT(*) * 0) AS x FROM visits",
    "SELECT EXP(COUNT(*)) AS x FROM visits",
])
def test_no_non_finite_value_leaves(hospital, sql):
    """Division by zero (or overflow) on noisy values gives NULL, as in the engine."""
    hospital.execute(sql)
    rows = hospital.fetchall()
    assert _finite(rows, hospital.dp["ci"])
    assert all(r[-1] is None for r in rows)


def _raw(sock: socket.socket, kind: bytes, payload: bytes) -> None:
    sock.sendall(kind + struct.pack("!i", len(payload) + 4) + payload)


def _messages(sock: socket.socket) -> list[tuple[bytes, bytes]]:
    sock.settimeout(10)
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
        kind, length = data[pos:pos + 1], struct.unpack("!i", data[pos + 1:pos + 5])[0]
        out.append((kind, data[pos + 5:pos + 1 + length]))
        pos += 1 + length
    return out


@pytest.mark.parametrize("length", [-5, -2])
def test_bind_with_a_negative_length_is_a_protocol_violation(serve, length):
    conn = psycopg.connect(serve.dsn())
    sock = socket.socket(fileno=conn.pgconn.socket)  # the authenticated connection's own socket
    try:
        _raw(sock, b"P", b"s1\x00SELECT COUNT(*) FROM people WHERE age > $1\x00\x00\x00")
        _raw(sock, b"B", b"\x00s1\x00" + struct.pack("!hh", 0, 1) + struct.pack("!i", length) + b"\x00\x00")
        _raw(sock, b"S", b"")
        messages = _messages(sock)
    finally:
        sock.detach()
        conn.close()
    errors = [body for kind, body in messages if kind == b"E"]
    assert errors and b"C08P01" in errors[0] and b"SFATAL" in errors[0]
    with psycopg.connect(serve.dsn()) as other:  # the server stays up for everyone else
        assert other.execute("SELECT COUNT(*) FROM people").fetchone()[0] >= 0

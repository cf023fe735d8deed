"""Logins under attack: backoff and lockout, failed logins audited, unknown users and wrong
passwords alike, and half-open connections kept apart from analysts' slots."""

from __future__ import annotations

import socket
import statistics
import time

import psycopg
import pytest

from dpsql.server.throttle import LoginThrottle

from .server_fixture import PASSWORD, Serve


def _fail(server, user="alice", password="wrong") -> tuple[float, str]:
    start = time.monotonic()
    with pytest.raises(psycopg.OperationalError) as err:
        psycopg.connect(server.dsn(user, password=password, connect_timeout="30"))
    return time.monotonic() - start, str(err.value)


def test_throttle_backs_off_then_locks_out():
    t = LoginThrottle(base_delay=1.0, max_delay=4.0, lockout_after=4, lockout_seconds=60)
    assert t.admit("u", "a", 0.0) == 0.0
    t.failed("u", "a", 0.0)
    assert t.admit("u", "a", 0.0) == 1.0  # the first failure's backoff
    t.failed("u", "a", 1.0)
    t.failed("u", "a", 1.0)
    assert t.admit("v", "a", 1.0) > 0  # the same address, another name: throttled too
    t.failed("u", "a", 1.0)
    assert t.admit("u", "b", 2.0) is None and t.admit("x", "a", 2.0) is None  # locked: name and address
    assert t.admit("u", "b", 62.0) is not None
    t.succeeded("u", "b")
    assert t.admit("u", "b", 62.0) == 0.0


def test_failed_logins_back_off_lock_out_and_are_audited(small_policy, tmp_path):
    server = Serve(small_policy, tmp_path / "l.sqlite", "--login-delay", "0.2", "--login-lockout-after", "5")
    try:
        times = [_fail(server)[0] for _ in range(4)]
        assert times[3] >= 0.8 and times[3] > times[0] + 0.5  # 0.2, 0.4, 0.8: doubling
        _fail(server)  # the fifth failure locks alice and this address out
        elapsed, message = _fail(server, password=PASSWORD)  # even the right password now
        assert "too many failed logins" in message and elapsed < 5
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(server.dsn("bob"))  # from the same address
    finally:
        server.stop()
    from dpsql.accounting.ledger import Ledger

    events = Ledger(tmp_path / "l.sqlite").events("alice")
    assert [e["kind"] for e in events].count("login failed") == 5 and events[-1]["kind"] == "login locked out"
    assert all(e["address"] == "127.0.0.1" for e in events)


def test_unknown_users_and_wrong_passwords_alike_in_timing(small_policy, tmp_path):
    server = Serve(small_policy, tmp_path / "l.sqlite", "--login-delay", "0", "--login-lockout-after", "1000")
    try:
        wrong, unknown, texts = [], [], set()
        for _ in range(8):
            t, text = _fail(server, "alice")
            wrong.append(t)
            texts.add(text.replace("alice", "U"))
            t, text = _fail(server, "mallory")
            unknown.append(t)
            texts.add(text.replace("mallory", "U"))
        assert len(texts) == 1
        ratio = statistics.median(unknown) / statistics.median(wrong)
        assert 0.5 < ratio < 2.0, (wrong, unknown)
    finally:
        server.stop()


def test_half_open_connections_never_take_analysts_slots(small_policy, tmp_path):
    server = Serve(small_policy, tmp_path / "l.sqlite", "--max-connections", "2", "--max-pending", "40",
                   "--login-timeout", "3")
    socks = []
    try:
        working = psycopg.connect(server.dsn("bob"))
        for _ in range(100):  # half-open: connected, never a startup packet
            socks.append(socket.create_connection(("127.0.0.1", server.port)))
        assert working.execute("SELECT COUNT(*) FROM people").fetchone()[0] >= 0  # an analyst already in
        time.sleep(4)  # the half-open ones time out of the login window
        with psycopg.connect(server.dsn()) as second:  # the second authenticated slot is still free
            assert second.execute("SELECT COUNT(*) FROM people").fetchone()[0] >= 0
        working.close()
    finally:
        for s in socks:
            s.close()
        server.stop()

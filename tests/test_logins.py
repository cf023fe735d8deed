"""Logins under attack, from both sides. The attacker: failures are held longer and longer,
a user name is locked after a few, spraying names from one address spends its budget, unknown
users and wrong passwords fail alike, failures are audited. The bystander behind the same
address: another user's failures, garbage and probes never refuse or hold back a right
password, and half-open connections neither take analysts' slots nor shut the door on logins.

Timing checks are lower bounds on held answers (a sleep never ends early) and generous upper
bounds on a bystander's login, compared with its own baseline, far below any hold."""

from __future__ import annotations

import asyncio
import select
import socket
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import psycopg
import pytest

from dpsql.server.listener import Limits, Server
from dpsql.server.throttle import ADMITTED, LoginThrottle

from .server_fixture import PASSWORD, Serve, frame, messages, startup_packet


def _fail(server, user="alice", password="wrong") -> tuple[float, str]:
    start = time.monotonic()
    with pytest.raises(psycopg.OperationalError) as err:
        psycopg.connect(server.dsn(user, password=password, connect_timeout="30"))
    return time.monotonic() - start, str(err.value)


def _login(server, user="bob") -> float:
    """Seconds a login with the right password takes (it must succeed)."""
    start = time.monotonic()
    psycopg.connect(server.dsn(user, connect_timeout="30")).close()
    return time.monotonic() - start


def _baseline(server, user="bob") -> float:
    return statistics.median(_login(server, user) for _ in range(3))


def _garbage(server, user: str) -> socket.socket:
    """A connection that names `user`, then answers the SCRAM challenge with nonsense."""
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.sendall(startup_packet(user))
    sock.settimeout(10)
    assert sock.recv(4096)[:1] == b"R"  # AuthenticationSASL
    sock.sendall(frame(b"p", b"NO-SUCH-MECHANISM\0\xff\xff\xff\xff"))
    return sock


def _half_open(server, n: int) -> list[socket.socket]:
    """n connections that sent the first bytes of a startup packet, never the rest."""
    socks = []
    for _ in range(n):
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.sendall(startup_packet("alice")[:6])
        socks.append(sock)
    return socks


def _dropped(sock: socket.socket) -> bool:
    """Whether the server dropped this pending connection: a FATAL 53300, then the end."""
    answer = messages(sock, timeout=5)
    return len(answer) == 1 and answer[0][0] == b"E" and b"C53300" in answer[0][1]


def _untouched(sock: socket.socket) -> bool:
    return not select.select([sock], [], [], 0.05)[0]  # neither data nor end of file


# The throttle alone, on a fake clock ------------------------------------------------------------
def _throttle() -> LoginThrottle:
    """Holds of 1 s doubling to 8 s; 3 failures lock a name for 60 s; an address's budget is 6
    failures, refilled at 3 per 60 s."""
    return LoginThrottle(base_delay=1.0, max_delay=8.0, lockout_after=3, lockout_seconds=60.0)


def test_throttle_holds_failures_longer_then_locks_the_name():
    t = _throttle()
    assert [t.outcome("u", "a", False, 0.0).hold for _ in range(2)] == [1.0, 2.0]
    assert t.admit("u", 0.0) == ADMITTED and t.outcome("u", "a", True, 0.0) == ADMITTED  # at once, never held
    for _ in range(3):
        last = t.outcome("u", "b", False, 10.0)
    assert last.sqlstate == "28P01" and last.message == 'password authentication failed for user "u"'
    locked = t.admit("u", 11.0)  # from any address, before the exchange
    assert not locked.ok and locked.sqlstate == "28000" and 'for user "u"' in locked.message
    assert not t.outcome("u", "c", True, 11.0).ok  # even the right password
    assert t.admit("u", 70.1).ok and t.outcome("u", "c", True, 70.1) == ADMITTED


def test_throttle_never_holds_back_a_right_password_for_others_failures():
    t = _throttle()
    for _ in range(5):
        t.outcome("mallory", "nat", False, 0.0)  # three count (then mallory is locked), two are refused
    t.outcome("ghost", "nat", False, 0.0)  # an unknown name, or garbage: a failure alike
    assert t.admit("bob", 0.0) == ADMITTED
    assert t.outcome("bob", "nat", True, 0.0) == ADMITTED  # never logged in from here, not held either


def test_throttle_spraying_spends_the_address_budget_then_failures_are_held_longest():
    t = _throttle()
    sprayed = [t.outcome(f"name{i}", "nat", False, 1.0) for i in range(9)]
    assert [v.sqlstate for v in sprayed] == ["28P01"] * 6 + ["28000"] * 3
    assert [v.hold for v in sprayed] == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0, 8.0, 8.0, 8.0]
    assert "from this address; try again in 20 s" in sprayed[-1].message
    # a right password is never refused or held for the address's failures, known there or not
    assert t.outcome("carol", "nat", True, 1.0) == ADMITTED
    assert t.outcome("bob", "nat", True, 1.0) == ADMITTED
    assert t.outcome("carol", "nat", False, 1.0).hold == 8.0  # a wrong one still held the longest
    assert t.outcome("carol", "nat", False, 21.5).sqlstate == "28P01"  # one failure refilled after 20 s


def test_throttle_bounds_spraying_to_the_refill_rate():
    t = _throttle()
    informative = sum(t.outcome(f"name{i}", "nat", False, i / 10).sqlstate == "28P01" for i in range(36_000))
    assert 6 + 3 * 60 - 1 <= informative <= 6 + 3 * 60  # the budget, then 3 per 60 s over the hour


def test_throttle_attempts_ending_after_a_lockout_are_refused_alike():
    t = _throttle()
    assert all(t.admit("u", 0.0).ok for _ in range(6))  # six exchanges at once
    verdicts = [t.outcome("u", "a", i == 5, 0.0) for i in range(6)]  # the last with the right password
    assert [v.sqlstate for v in verdicts] == ["28P01"] * 3 + ["28000"] * 3
    assert verdicts[4] == verdicts[5]  # refused alike, right password or not


def test_throttle_forgets_names_that_no_longer_matter():
    t = _throttle()
    for i in range(10_000):
        t.outcome(f"name{i}", f"10.0.{i % 100}.1", False, 0.0)
    t.outcome("last", "a", False, 3600.0)
    assert len(t._users) + len(t._addresses) < 10


# The pending pool, without sockets ---------------------------------------------------------------
def test_a_full_pending_pool_drops_its_longest_idle_connection():
    async def scenario() -> None:
        now = asyncio.get_running_loop().time()
        pool = SimpleNamespace(limits=Limits(max_pending=4, max_pending_per_address=3, pending_idle=1.0), pending={})

        def pending(pid: int, address: str, idle: float, greeted: bool = True) -> SimpleNamespace:
            c = SimpleNamespace(pid=pid, address=address, heard=now - idle, dropped=False, greeted=greeted)
            c.drop = lambda _now: (pool.pending.pop(pid), setattr(c, "dropped", True))
            pool.pending[pid] = c
            return c

        a = [pending(1, "a", 5.0), pending(2, "a", 0.5), pending(3, "a", 0.1)]
        assert Server.make_room(pool, SimpleNamespace(address="a")) is None and a[0].dropped  # the longest idle
        pending(4, "a", 0.0)
        assert "from this address" in Server.make_room(pool, SimpleNamespace(address="a"))  # all three active
        b = pending(5, "b", 1.5)
        assert Server.make_room(pool, SimpleNamespace(address="c")) is None and b.dropped  # the pool was full
        pending(6, "b", 0.5)
        refusal = Server.make_room(pool, SimpleNamespace(address="c"))
        assert refusal == "sorry, too many connections are logging in; try again shortly"
        assert sorted(pool.pending) == [2, 3, 4, 6]
        # one that never sent its first message whole goes first, however young; the oldest of them
        pool.pending.clear()
        greeted, young, younger = pending(7, "a", 5.0), pending(8, "a", 0.2, False), pending(9, "a", 0.1, False)
        assert Server.make_room(pool, SimpleNamespace(address="a")) is None and young.dropped
        assert not greeted.dropped and not younger.dropped

    asyncio.run(scenario())


def test_a_newcomer_waits_for_an_active_pending_connection_and_times_out_alone():
    from dpsql.server.app import Connection

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        pool = SimpleNamespace(
            limits=Limits(max_pending=2, max_pending_per_address=2, pending_idle=60.0),
            pending={
                1: SimpleNamespace(address="a", heard=loop.time(), greeted=True),
                2: SimpleNamespace(address="a", heard=loop.time(), greeted=True),
            },
            _closing=False,
        )
        pool.make_room = lambda newcomer: Server.make_room(pool, newcomer)
        burst = SimpleNamespace(server=pool, address="a", deadline=loop.time() + 5.0)
        loop.call_later(0.3, pool.pending.pop, 1)  # one of the burst finishes logging in
        started = loop.time()
        assert await Connection._wait_for_room(burst) is None  # queued, then admitted
        assert 0.25 <= loop.time() - started < 4.0
        late = SimpleNamespace(server=pool, address="a", deadline=loop.time() + 0.4)
        pool.pending[3] = SimpleNamespace(address="a", heard=loop.time(), greeted=True)
        refusal = await Connection._wait_for_room(late)  # nobody leaves: refused by its own deadline
        assert refusal is not None and "from this address" in refusal
        assert loop.time() <= late.deadline + 0.2

    asyncio.run(scenario())


def test_pending_caps_below_one_are_start_up_errors(small_policy):
    from click.testing import CliRunner

    from dpsql.cli import main

    bad = CliRunner().invoke(main, ["serve", "-p", str(small_policy), "--max-pending-per-address", "0"])
    assert bad.exit_code == 1 and "--max-pending-per-address must be at least 1" in bad.output


# A real server, the attacker's side --------------------------------------------------------------
def test_failed_logins_back_off_lock_out_and_are_audited(small_policy, tmp_path):
    server = Serve(small_policy, tmp_path / "l.sqlite", "--login-delay", "0.1", "--login-lockout-after", "5")
    try:
        times = [_fail(server)[0] for _ in range(4)]
        assert all(e >= 0.9 * 0.1 * 2**i for i, e in enumerate(times)), times  # held 0.1, 0.2, 0.4, 0.8 s
        _fail(server)  # the fifth failure locks the name alice, from every address
        elapsed, message = _fail(server, password=PASSWORD)  # even the right password now
        assert 'too many failed logins for user "alice"' in message and elapsed < 2  # refused at once (a hold: 3.2 s)
    finally:
        server.stop()
    from dpsql.ledger import Ledger

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


def test_spraying_names_from_one_address_is_held_but_right_passwords_get_in(small_policy, tmp_path):
    """Spraying: the address's 6 failures are held 0.08 s doubling to 2.56 s, further failures
    are held 2.56 s and refused for the address; alice's right password (she never logged in from
    here) and bob's get in at their usual speed, while alice's wrong one is held the longest."""
    server = Serve(small_policy, tmp_path / "l.sqlite", "--login-delay", "0.08", "--login-lockout-after", "3")
    try:
        baseline = _baseline(server, "bob")
        with ThreadPoolExecutor(8) as pool:
            sprayed = list(pool.map(lambda i: _fail(server, f"name{i}"), range(8)))
        failed = sorted(e for e, text in sprayed if "password authentication failed" in text)
        refused = [e for e, text in sprayed if "too many failed logins from this address" in text]
        assert len(failed) == 6 and len(refused) == 2, sprayed
        assert all(e >= 0.9 * 0.08 * 2**i for i, e in enumerate(failed)), failed  # each one held longer
        assert min(refused) >= 0.9 * 2.56
        with ThreadPoolExecutor(1) as pool:
            wrong = pool.submit(_fail, server, "alice", "guess")
            alice, bob = _login(server, "alice"), _login(server, "bob")
            wrong = wrong.result()
        assert "from this address" in wrong[1] and wrong[0] >= 0.9 * 2.56
        assert alice < baseline + 1.0 and bob < baseline + 1.0, (alice, bob, baseline)  # a hold would be 2.56 s
    finally:
        server.stop()


def test_a_client_hanging_up_before_the_answer_still_spends_the_budget(small_policy, tmp_path):
    """A client knows a guess failed as soon as no prompt success came, so it need not wait for
    the held answer; its failure counts when the exchange ends all the same."""
    server = Serve(small_policy, tmp_path / "l.sqlite", "--login-delay", "0.05", "--login-lockout-after", "2")
    try:
        for i in range(4):  # the whole budget (twice 2)
            _garbage(server, f"name{i}").close()
        time.sleep(0.3)
        elapsed, text = _fail(server, "alice", "guess")
        assert "too many failed logins from this address" in text and elapsed >= 0.9 * 0.05 * 2**4
    finally:
        server.stop()


# A real server, the bystander's side -------------------------------------------------------------
def test_another_users_failures_garbage_and_probes_never_hold_back_a_right_password(small_policy, tmp_path):
    """From 127.0.0.1: alice's wrong passwords lock her name, garbage and a probe of an unknown
    name are held; meanwhile bob, who never logged in before, gets in as fast as alice did
    before the attack, neither refused nor held (a hold would be at least 1.6 s)."""
    server = Serve(small_policy, tmp_path / "l.sqlite", "--login-delay", "0.1", "--login-lockout-after", "3")
    garbage = None
    try:
        baseline = _baseline(server, "alice")
        held = [_fail(server, "alice")[0] for _ in range(3)]
        assert all(e >= 0.9 * 0.1 * 2**i for i, e in enumerate(held)), held
        assert 'too many failed logins for user "alice"' in _fail(server, "alice", PASSWORD)[1]
        sent, garbage = time.monotonic(), _garbage(server, "mallory")
        with ThreadPoolExecutor(1) as pool:
            probe = pool.submit(_fail, server, "nobody")
            time.sleep(0.3)  # the probe's exchange has ended; its answer is held
            elapsed = _login(server, "bob")
            probed = probe.result()
        assert elapsed < baseline + 1.0, (elapsed, baseline)
        answer = messages(garbage)
        assert b"C28P01" in answer[0][1] and time.monotonic() - sent >= 0.9 * 0.8  # held, not refused at once
        assert "password authentication failed" in probed[1] and probed[0] >= 0.9 * 0.8
    finally:
        if garbage is not None:
            garbage.close()
        server.stop()


def test_half_open_sockets_cannot_shut_the_door(small_policy, tmp_path):
    """The pending pool's size in half-open connections from 127.0.0.1: they are ungreeted (no
    whole first message), never pending, so a login gets in and leaves them alone."""
    server = Serve(small_policy, tmp_path / "l.sqlite", "--max-pending", "6", "--login-timeout", "8")
    _login(server, "bob")  # the server is up and has closed Serve's own probe connection
    socks = _half_open(server, 6)
    try:
        time.sleep(2)  # nothing more for over a second (with room for a busy server's late accepts): idle
        _login(server, "bob")
        assert all(_untouched(s) for s in socks)
    finally:
        for s in socks:
            s.close()
        server.stop()


def _greeted(server, n: int) -> list[socket.socket]:
    """n connections that sent a whole startup packet (and got the SCRAM challenge), then stalled."""
    socks = []
    for _ in range(n):
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.sendall(startup_packet("alice"))
        sock.settimeout(10)
        assert sock.recv(4096)[:1] == b"R"  # AuthenticationSASL: the startup packet was read whole
        socks.append(sock)
    return socks


def test_one_address_cannot_take_the_whole_pending_pool(small_policy, tmp_path):
    """Four pending connections from one address are its share: a fifth waits while they are
    active (each sent its startup packet within the last second), and gets in once one of them
    has been idle for a second (that one is dropped)."""
    server = Serve(
        small_policy,
        tmp_path / "l.sqlite",
        "--max-pending",
        "40",
        "--max-pending-per-address",
        "4",
        "--login-timeout",
        "8",
    )
    _login(server, "bob")  # the server is up and has closed Serve's own probe connection
    socks = _greeted(server, 4)
    try:
        started = time.monotonic()
        _login(server, "bob")  # queued behind the four, not refused
        assert time.monotonic() - started >= 0.5  # it waited for the first of them to go idle
        assert _dropped(socks[0]) and all(_untouched(s) for s in socks[1:])
    finally:
        for s in socks:
            s.close()
        server.stop()


def test_half_open_connections_never_take_analysts_slots(small_policy, tmp_path):
    server = Serve(
        small_policy, tmp_path / "l.sqlite", "--max-connections", "2", "--max-pending", "40", "--login-timeout", "3"
    )
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


def test_two_hundred_fresh_half_open_sockets_never_shut_the_door(small_policy, tmp_path):
    """The red team's case at the default caps (64 pending, 16 from one address): 200 sockets
    that sent part of a startup packet, renewed as fast as the client can open them; a right
    password from the same address gets in at once, without waiting for any of them to go
    idle. A connection that has not completed its first message is dropped first, oldest first."""
    server = Serve(small_policy, tmp_path / "l.sqlite", "--login-timeout", "8")
    _login(server, "bob")  # the server is up and has closed Serve's own probe connection
    socks = []
    try:
        for _ in range(3):
            socks += _half_open(server, 200)  # opened within well under a second: none is idle
            start = time.monotonic()
            _login(server, "bob")
            assert time.monotonic() - start < 1.0
        with psycopg.connect(server.dsn()) as conn:  # and a session works behind them
            assert conn.execute("SELECT COUNT(*) FROM people").fetchone()[0] >= 0
    finally:
        for s in socks:
            s.close()
        server.stop()

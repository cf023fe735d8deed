"""`dpsql serve --workers N`: processes sharing one port and one ledger. Connections spread over
the workers, the budget holds across them, a cancel reaches the worker running the query, an
unknown user's mock salt is the same everywhere, a dead worker is replaced, and nothing is left
running or on disk after a stop or after the supervisor is killed."""

from __future__ import annotations

import base64
import fcntl
import os
import signal
import socket
import struct
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest

from dpsql.server.worker_link import WorkerLink, new_pid

from .server_fixture import Serve, assert_cancelled_midway


def _children(pid: int) -> set[int]:
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.add(int(entry))
    return found


def _gone(pids: set[int], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(Path(f"/proc/{p}").exists() and "zombie" not in _state(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


def _state(pid: int) -> str:
    try:
        return next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("State"))
    except (OSError, StopIteration):
        return "zombie"


def _started(s: Serve, scratch: Path, seconds: float = 60) -> set[int]:
    """The two workers' pids once both have said they are ready and opened their engines (the port
    accepts before that: the supervisor binds it first, and connections wait in its queue; a worker
    that dies before it is ready stops the server, as a worker that cannot start does)."""
    s.wait_for("serving", seconds)
    deadline = time.monotonic() + seconds
    while len(_children(s.proc.pid)) < 2 or len(list(scratch.glob("dpsql-engine-*"))) < 2:
        assert time.monotonic() < deadline and s.proc.poll() is None
        time.sleep(0.1)
    return _children(s.proc.pid)


@pytest.fixture
def scratch(tmp_path, monkeypatch) -> Path:
    """The servers' temporary directory, where their engines' private scratch directories live."""
    directory = tmp_path / "tmp"
    directory.mkdir()
    monkeypatch.setenv("TMPDIR", str(directory))
    return directory


def test_pids_name_their_worker():
    for count in (1, 2, 3, 64):
        for index in range(count):
            pids = [new_pid(index, count) for _ in range(200)]
            assert all(0 < p < 2**31 and p % count == index for p in pids)


def test_a_cancel_request_travels_to_the_worker_that_owns_the_pid():
    pipes = [os.pipe() for _ in range(2)]
    try:
        links = [WorkerLink(i, 2, (), pipes[i][0], tuple(w for _, w in pipes), -1, -1) for i in range(2)]
        for r, _ in pipes:
            os.set_blocking(r, False)
        pid = links[1].new_pid()
        assert links[1].owns(pid) and not links[0].owns(pid)
        links[0].forward_cancel(pid, 12345)
        links[0].forward_cancel(pid + 2, -7)
        assert links[0].read_cancels() == []
        assert links[1].read_cancels() == [(pid, 12345), (pid + 2, -7)]
    finally:
        for r, w in pipes:
            os.close(r)
            os.close(w)


def test_connections_spread_and_the_budget_holds_across_workers(small_policy, tmp_path, scratch):
    s = Serve(small_policy, tmp_path / "l.sqlite", "--workers", "2")
    try:
        conns = [psycopg.connect(s.dsn("bob"), autocommit=True) for _ in range(24)]
        owners = {c.info.backend_pid % 2 for c in conns}
        assert owners == {0, 1}  # both serve: all 24 on one worker has probability 2^-23
        for c in conns:
            c.execute("SET dpsql.cache = off")
            c.execute("SET dpsql.epsilon = 0.25")  # bob's budget is 2: exactly 8 answers
        barrier = threading.Barrier(len(conns))

        def ask(c) -> bool:
            barrier.wait(30)
            try:
                c.execute("SELECT COUNT(*) FROM people").fetchall()
                return True
            except psycopg.errors.Error as e:
                assert e.sqlstate == "53000" and "exhausted" in str(e), e  # refused for budget, nothing else
                return False

        with ThreadPoolExecutor(len(conns)) as pool:
            answered = list(pool.map(ask, conns))
        assert sum(answered) == 8
        left = conns[0].execute("SHOW dpsql.budget").fetchone()
        assert float(left[4]) == 0  # epsilon remaining, read from the shared ledger
        for c in conns:
            c.close()
    finally:
        out = s.stop()
    assert "2 workers" in out and "Traceback" not in out


def test_a_cancel_reaches_the_worker_running_the_query(tmp_path, scratch):
    import duckdb

    con = duckdb.connect(str(tmp_path / "db.duckdb"))
    con.execute(
        "CREATE TABLE big AS SELECT range AS uid, range % 7 AS g, (range * 7919) % 1000 AS v FROM range(6000000)"
    )
    con.close()
    policy = tmp_path / "big.toml"
    policy.write_text(
        '[engine]\ndatabase = "db.duckdb"\nthreads = 1\n[privacy]\nepsilon = 100\n[tables.big]\n'
        'privacy_unit = "uid"\ncolumns.v = { lower = 0, upper = 1000 }\n'
        "columns.g = { keys = [0, 1, 2, 3, 4, 5, 6] }\n[users.alice]\n[users.bob]\n"
    )
    s = Serve(policy, tmp_path / "l.sqlite", "--workers", "2")
    try:
        conns = [psycopg.connect(s.dsn(), autocommit=True) for _ in range(6)]
        for c in conns:  # each cancel arrives on a connection of its own, at either worker
            assert_cancelled_midway(c, within=20)
            c.close()
    finally:
        s.stop()


def _mock_salt(port: int, user: str) -> str:
    """The salt the server offers `user` in SCRAM's first round (then the connection is dropped)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        body = struct.pack("!i", 196608) + b"user\0" + user.encode() + b"\0database\0dpsql\0\0"
        sock.sendall(struct.pack("!i", len(body) + 4) + body)
        reader = sock.makefile("rb")

        def message() -> tuple[bytes, bytes]:
            kind, length = reader.read(1), struct.unpack("!i", reader.read(4))[0]
            return kind, reader.read(length - 4)

        kind, payload = message()
        assert kind == b"R" and struct.unpack("!i", payload[:4])[0] == 10  # SASL
        first = b"n,,n=,r=" + base64.b64encode(os.urandom(18))
        sasl = b"SCRAM-SHA-256\0" + struct.pack("!i", len(first)) + first
        sock.sendall(b"p" + struct.pack("!i", len(sasl) + 4) + sasl)
        kind, payload = message()
        assert kind == b"R" and struct.unpack("!i", payload[:4])[0] == 11
        fields = dict(part.split("=", 1) for part in payload[4:].decode().split(","))
        return fields["s"]


def test_an_unknown_user_gets_one_salt_from_every_worker(small_policy, tmp_path, scratch):
    s = Serve(
        small_policy, tmp_path / "l.sqlite", "--workers", "2", "--login-delay", "0", "--login-lockout-after", "1000"
    )
    try:
        salts = {_mock_salt(s.port, "mallory") for _ in range(24)}  # 24 connections: both workers
        assert len(salts) == 1
        assert _mock_salt(s.port, "trudy") not in salts
    finally:
        s.stop()


def test_a_dead_worker_is_replaced_and_a_stop_leaves_nothing(small_policy, tmp_path, scratch):
    s = Serve(small_policy, tmp_path / "l.sqlite", "--workers", "2")
    try:
        with psycopg.connect(s.dsn()) as c:
            c.execute("SELECT COUNT(*) FROM people").fetchall()
        workers = _started(s, scratch)
        assert len(workers) == 2 and len(list(scratch.glob("dpsql-engine-*"))) == 2
        victim = min(workers)
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (victim in _children(s.proc.pid) or len(_children(s.proc.pid)) < 2):
            time.sleep(0.1)
        assert victim not in _children(s.proc.pid) and len(_children(s.proc.pid)) == 2
        seen: set[int] = set()
        while time.monotonic() < deadline and seen != {0, 1}:
            try:
                with psycopg.connect(s.dsn(), connect_timeout=10) as c:
                    seen.add(c.info.backend_pid % 2)
                    assert c.execute("SELECT COUNT(*) FROM people").fetchone()[0] > 0
            except psycopg.OperationalError:
                time.sleep(0.1)  # the new worker is still opening its engine
        assert seen == {0, 1}
        workers = _children(s.proc.pid)
    finally:
        out = s.stop()
    assert s.proc.returncode == 0 and "restarting it" in out
    assert _gone(workers, 30)
    assert list(scratch.glob("dpsql-engine-*")) == []  # the killed worker's too (the new engine's sweep)


def test_workers_stop_when_the_supervisor_is_killed(small_policy, tmp_path, scratch):
    s = Serve(small_policy, tmp_path / "l.sqlite", "--workers", "2")
    workers = _started(s, scratch)
    assert len(workers) == 2
    s.proc.kill()
    s.proc.wait(10)
    assert _gone(workers, 45)
    assert list(scratch.glob("dpsql-engine-*")) == []
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", s.port), timeout=2).close()


def test_a_worker_that_cannot_start_stops_the_server(small_policy, tmp_path, scratch, monkeypatch):
    from benchmarks import serving  # Serve takes its port from here

    free = serving.free_port
    taken = socket.create_server(("127.0.0.1", 0))
    try:
        http = f"127.0.0.1:{taken.getsockname()[1]}"
        for _ in range(3):  # the free port may be taken by another test's server before it is bound
            port = free()
            monkeypatch.setattr(serving, "free_port", lambda: port)
            try:
                s = Serve(small_policy, tmp_path / "l.sqlite", "--workers", "2", "--http", http)
                assert s.proc.wait(60) == 1
                out = s.output(wait=True)
            except RuntimeError as e:  # it stopped before the port could be tried
                out = str(e)
            if f"cannot listen on 127.0.0.1:{port}" not in out:
                break
        assert "cannot serve the console" in out and "worker 0 did not start" in out and "Traceback" not in out
    finally:
        taken.close()
    deadline = time.monotonic() + 30
    while True:  # every worker has let go of the port (no SO_REUSEPORT here: any holder refuses the bind)
        try:
            socket.create_server(("127.0.0.1", port)).close()
            break
        except OSError:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    assert list(scratch.glob("dpsql-engine-*")) == []


def test_writers_wait_their_turn_on_the_ledger_lock_file(tmp_path):
    from dpsql.ledger import Ledger

    ledger = Ledger(tmp_path / "l.sqlite")
    lock = tmp_path / "l.sqlite-writers"
    assert lock.exists() and lock.stat().st_size == 0 and lock.stat().st_mode & 0o777 == 0o600
    fd = os.open(lock, os.O_RDWR)
    done = threading.Event()
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # as another process's writer would
        writer = threading.Thread(target=lambda: (ledger.set_user("alice", "v", "analyst"), done.set()))
        writer.start()
        assert not done.wait(0.5)
        fcntl.flock(fd, fcntl.LOCK_UN)
        assert done.wait(10)
        writer.join()
    finally:
        os.close(fd)
        ledger.close()
    assert Ledger(tmp_path / "l.sqlite").user_credentials("alice") == ("v", "analyst")


def test_failed_logins_before_a_lockout_are_split_among_workers(small_policy, tmp_path, scratch):
    s = Serve(small_policy, tmp_path / "l.sqlite", "--workers", "2", "--login-delay", "0", "--login-lockout-after", "4")
    try:
        messages = []
        for _ in range(40):  # spread over both workers: fewer than 2 on one has probability < 1e-10
            with pytest.raises(psycopg.OperationalError) as err:
                psycopg.connect(s.dsn(password="wrong", connect_timeout="30"))
            messages.append(str(err.value))
        with pytest.raises(psycopg.OperationalError) as err:
            psycopg.connect(s.dsn(connect_timeout="30"))  # the right password, now locked out everywhere
        assert "too many failed logins" in str(err.value)
    finally:
        s.stop()
    assert sum("password authentication failed" in m for m in messages) == 4  # 2 per worker: 4 in all
    from dpsql.ledger import Ledger

    events = Ledger(tmp_path / "l.sqlite").events("alice")
    assert [e["kind"] for e in events].count("login failed") == 4


def test_the_console_is_served_beside_the_workers(small_policy, tmp_path, scratch):
    """Worker 0 serves the console; a query answered by either worker shows in its history."""
    import html
    import http.cookiejar
    import re
    import urllib.request
    from urllib.parse import urlencode

    from .server_fixture import PASSWORD, free_port

    port = free_port()
    s = Serve(small_policy, tmp_path / "l.sqlite", "--workers", "2", "--http", f"127.0.0.1:{port}")
    base = f"http://127.0.0.1:{port}"
    try:
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
        deadline = time.monotonic() + 30
        while True:
            try:
                page = opener.open(base + "/login", timeout=5).read().decode()
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        token = re.search(r'name="csrf" value="([^"]+)"', page).group(1)
        texts = [f"SELECT COUNT(*) AS n{i} FROM people WHERE age >= {i}" for i in range(8)]
        for sql in texts:  # each on a new connection, answered by either worker
            with psycopg.connect(s.dsn("bob"), autocommit=True) as conn:
                conn.execute("SET dpsql.epsilon = 0.1")
                assert conn.execute(sql).fetchone()[0] is not None
        assert opener.open(
            base + "/login", data=urlencode({"user": "bob", "password": PASSWORD, "csrf": token}).encode()
        ).url.endswith("/budget")
        history = opener.open(base + "/history").read().decode()
        assert all(html.escape(sql) in history for sql in texts)
    finally:
        out = s.stop()
    assert f"privacy console: {base}/" in out


def test_each_workers_duckdb_threads_share_the_cores_unless_the_policy_says(small_policy):
    from dpsql.config import load_policy
    from dpsql.engines.duckdb import DuckDBEngine
    from dpsql.server.launch import shared_cores

    pol = load_policy(small_policy)
    assert pol.engine.threads is None
    assert shared_cores(pol, 1, 8) is pol  # one process: DuckDB's own default, a thread per core
    assert shared_cores(pol, 2, 8).engine.threads == 4
    assert shared_cores(pol, 4, 2).engine.threads == 1  # at least one each
    engine = DuckDBEngine(shared_cores(pol, 2, 2))
    try:
        assert engine.execute("SELECT current_setting('threads')").columns == [[1]]
    finally:
        engine.close()
    explicit = shared_cores(pol, 2, 8)
    assert shared_cores(explicit, 3, 8) is explicit  # [engine] threads is kept as written

"""A charge's COMMIT reaches the disk while the engine runs the query (Ledger.charging): the
engine starts only once the charge is admitted, and nothing leaves before the commit is
durable. These tests slow or break the real SQLite ledger's commit and watch a real DuckDB
engine."""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import sqlite3
import threading
import time

import pytest

import dpsql
from dpsql.config import load_policy
from dpsql.errors import BudgetExceeded
from dpsql.session import Session

from .conftest import default_events, default_people, make_db, write_policy


@pytest.fixture
def tight_policy(tmp_path):
    make_db(tmp_path / "db.duckdb", default_people(), default_events(),
            rows=[((i % 21) - 10.0, 1 + i % 3) for i in range(300)])
    return write_policy(tmp_path, epsilon=2.0, query_epsilon=1.0)


def _watched(conn, commit_delay: float = 0.0, fail_commit: bool = False):
    """Record when the engine starts and when each ledger commit is done; slow or fail the
    commit. Must be installed before the connection's first charge (the writer thread binds
    the ledger's `_write` when it starts)."""
    ledger, engine, events = conn.session.ledger, conn.session.engine, []
    write, execute = ledger._write, engine.execute

    @contextlib.contextmanager
    def slow_write(users, durable=True):
        with write(users, durable) as con:
            yield con
            time.sleep(commit_delay)
            if fail_commit:
                raise sqlite3.OperationalError("disk I/O error (injected at COMMIT)")
        events.append(("committed", time.monotonic()))

    def watched_execute(sql):
        events.append(("engine", time.monotonic()))
        return execute(sql)

    ledger._write, engine.execute = slow_write, watched_execute
    return events


def test_the_engine_runs_while_the_charge_commits_and_the_answer_waits_for_it(tight_policy):
    conn = dpsql.connect(tight_policy, user="alice")
    cur = conn.cursor()
    cur.execute("SET dpsql.cache = off")
    cur.execute("SET dpsql.reuse = off")
    events = _watched(conn, commit_delay=0.4)
    cur.execute("SELECT COUNT(*) FROM people")
    answered = time.monotonic()
    assert cur.fetchall() and cur.dp["cost"]["epsilon"] == 1.0
    engine = next(t for kind, t in events if kind == "engine")
    committed = next(t for kind, t in events if kind == "committed")
    assert engine < committed - 0.2  # the engine did not wait for the slow commit
    assert committed <= answered  # the answer did
    conn.close()


def test_a_refused_charge_never_reaches_the_engine(tight_policy):
    conn = dpsql.connect(tight_policy, user="alice")
    cur = conn.cursor()
    cur.execute("SET dpsql.cache = off")
    events = _watched(conn)
    for _ in range(2):
        cur.execute("SELECT COUNT(*) FROM people")
    started = len([e for e in events if e[0] == "engine"])
    with pytest.raises(BudgetExceeded):
        cur.execute("SELECT COUNT(*) FROM people WHERE age > 30")
    assert len([e for e in events if e[0] == "engine"]) == started
    assert conn.session.budget()["queries"] == 2
    conn.close()


def test_a_commit_that_fails_after_admission_releases_nothing_and_charges_nothing(tight_policy):
    conn = dpsql.connect(tight_policy, user="alice")
    cur = conn.cursor()
    cur.execute("SET dpsql.cache = off")
    events = _watched(conn, fail_commit=True)
    with pytest.raises(dpsql.OperationalError, match="could not record the charge") as err:
        cur.execute("SELECT COUNT(*) FROM people")
    assert "nothing was charged and nothing was released" in str(err.value)
    assert [e[0] for e in events] == ["engine"]  # it ran, and its answer was dropped
    conn.session.ledger._write = conn.session.ledger.__class__._write.__get__(conn.session.ledger)
    assert conn.session.budget()["queries"] == 0 and conn.session.ledger.history("alice") == []
    assert conn.session.ledger.verify() == []
    conn.close()


def test_a_session_dropped_after_a_refusal_frees_its_engine_and_writer_at_once(tight_policy):
    """Refusals cross from the ledger's writer thread to the session's: the stored error must not
    tie either thread's frames into a cycle, which would keep a dropped session's engine, and
    the private copy in its scratch directory, until a garbage collection (the audit's
    analysts, whose engines were shared and not closed by their sessions, kept two)."""
    def writers():
        return {t for t in threading.enumerate() if t.name == "dpsql-ledger-writer"}

    before = writers()
    gc.disable()
    try:
        session = Session(load_policy(tight_policy), "alice")
        session.execute("SET dpsql.cache = off")
        session.execute("SELECT kind, COUNT(*) FROM events GROUP BY kind")  # builds a weighted copy
        scratch = session.engine._scratch.path
        for _ in range(3):
            with contextlib.suppress(BudgetExceeded):
                session.execute("SELECT COUNT(*) FROM people WHERE age > 1")
        assert session.budget()["queries"] == 2 and scratch.is_dir()
        mine = writers() - before
        assert len(mine) == 1
        del session
        assert not scratch.exists()
        for t in mine:  # the ledger's writer thread ends with its ledger
            t.join(10)
            assert not t.is_alive()
    finally:
        gc.enable()


def test_a_forked_child_charges_through_a_writer_of_its_own(tight_policy, tmp_path):
    """Threads do not survive fork(): a child that inherits a connection whose ledger had a
    writer thread starts its own instead of waiting forever on the parent's queue."""
    conn = dpsql.connect(tight_policy, user="alice")
    cur = conn.cursor()
    cur.execute("SELECT COUNT(*) FROM people")  # the parent's writer thread now exists
    pid = os.fork()
    if pid == 0:  # the child: answer within the time limit or fail
        code = 1
        try:
            signal.alarm(60)
            cur.execute("SELECT COUNT(*) FROM people WHERE age > 10")
            code = 0 if cur.fetchall() else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert conn.session.budget()["queries"] == 2  # the child's charge is in the shared ledger
    conn.close()

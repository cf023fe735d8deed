"""A charge's COMMIT reaches the disk while the engine runs the query (Ledger.charging), and
nothing leaves before the commit is durable. The engine starts once the charge is admitted, or,
on DuckDB after an admitted charge that left room for this one, while it is being admitted: a
refusal then stops the query (Session._overlapping). These tests slow or break the real SQLite
ledger's transactions and watch a real DuckDB engine."""

from __future__ import annotations

import contextlib
import faulthandler
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
    make_db(
        tmp_path / "db.duckdb",
        default_people(),
        default_events(),
        rows=[((i % 21) - 10.0, 1 + i % 3) for i in range(300)],
    )
    return write_policy(tmp_path, epsilon=2.0, query_epsilon=1.0)


def _watched(conn, commit_delay: float = 0.0, fail_commit: bool = False, admit_delay: float = 0.0):
    """Record when the engine starts (with the `stop` it is given) and when each ledger
    transaction has run its work and committed; slow the admission or the commit, or fail the
    commit. Must be installed before the connection's first charge (the writer thread binds
    the ledger's `_write` when it starts)."""
    ledger, engine, events = conn.session.ledger, conn.session.engine, []
    write, execute = ledger._write, engine.execute

    @contextlib.contextmanager
    def slow_write(users, durable=True):
        with write(users, durable) as con:
            time.sleep(admit_delay)
            yield con
            events.append(("worked", time.monotonic()))
            time.sleep(commit_delay)
            if fail_commit:
                raise sqlite3.OperationalError("disk I/O error (injected at COMMIT)")
        events.append(("committed", time.monotonic()))

    def watched_execute(sql, *stop):
        events.append(("engine", time.monotonic(), *stop))
        return execute(sql, *stop)

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
    engine = next(t for kind, t, *_ in events if kind == "engine")
    committed = next(t for kind, t, *_ in events if kind == "committed")
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


def test_after_an_admitted_charge_with_room_left_the_engine_starts_while_the_next_is_admitted(tight_policy):
    conn = dpsql.connect(tight_policy, user="alice")
    cur = conn.cursor()
    cur.execute("SET dpsql.cache = off")
    events = _watched(conn, admit_delay=0.4)
    for sql in ("SELECT COUNT(*) FROM people", "SELECT COUNT(*) FROM people WHERE age > 30"):
        cur.execute(sql)
        assert cur.fetchall()
    starts = [t for kind, t, *_ in events if kind == "engine"]
    admissions = [t for kind, t, *_ in events if kind == "worked"]
    assert starts[0] > admissions[0]  # the session's first query: nothing known of its budget yet
    assert starts[1] < admissions[1] - 0.2  # the first charge left room for the second
    assert conn.session.budget()["queries"] == 2
    conn.close()


def test_a_charge_refused_while_its_query_runs_stops_it_and_charges_nothing(tight_policy):
    """A refusal the session could not foresee (its analyst's other connection spent the rest
    meanwhile) sets the query's stop and interrupts it; the analyst gets the refusal, nothing
    is charged, and the session's next query waits for its admission again."""
    first = dpsql.connect(tight_policy, user="alice")
    other = dpsql.connect(tight_policy, user="alice")
    cur = first.cursor()
    cur.execute("SET dpsql.cache = off")
    events = _watched(first)
    cur.execute("SELECT COUNT(*) FROM people")  # admitted, one more query's room left
    other.cursor().execute("SELECT COUNT(*) FROM people WHERE age > 20")  # spends it
    with pytest.raises(BudgetExceeded):
        cur.execute("SELECT COUNT(*) FROM people WHERE age > 40")
    started = [e for e in events if e[0] == "engine"]
    assert len(started) == 2 and len(started[1]) == 3 and started[1][2].is_set()  # given a stop, then stopped
    with pytest.raises(BudgetExceeded):
        cur.execute("SELECT COUNT(*) FROM people WHERE age > 50")
    assert len([e for e in events if e[0] == "engine"]) == 2  # refused before any engine work
    assert first.session.budget()["queries"] == 2 and len(first.session.ledger.history("alice")) == 2
    other.close()
    first.close()


def test_an_unforeseen_refusal_comes_when_the_ledger_decides_not_when_the_query_would_end(tight_policy):
    """The refused query's engine run, made to last minutes, is interrupted by the refusal: the
    analyst hears of it within seconds, so its time says nothing of the run."""
    first = dpsql.connect(tight_policy, user="alice")
    other = dpsql.connect(tight_policy, user="alice")
    cur = first.cursor()
    cur.execute("SET dpsql.cache = off")
    cur.execute("SELECT COUNT(*) FROM people")
    other.cursor().execute("SELECT COUNT(*) FROM people WHERE age > 20")
    engine, stops = first.session.engine, []
    execute = engine.execute

    def endless(sql, *stop):
        stops.extend(stop)
        return execute("SELECT SUM(hash(i)) FROM range(100000000000) AS t(i)", *stop)

    engine.execute = endless
    began = time.monotonic()
    with pytest.raises(BudgetExceeded):
        cur.execute("SELECT COUNT(*) FROM people WHERE age > 40")
    assert time.monotonic() - began < 10 and len(stops) == 1 and stops[0].is_set()
    assert first.session.budget()["queries"] == 2
    engine.execute = execute
    other.close()
    first.close()


def test_a_stopped_query_never_starts_and_an_interrupted_one_ends_without_reaching_the_next(tight_policy):
    """The engine's side of a stop (DuckDBEngine.execute(sql, stop)): set before the query is
    registered, the query does not start; set and followed by interrupt() while it runs, it
    ends at once; an interrupt() with nothing running does nothing to a later query."""
    conn = dpsql.connect(tight_policy, user="alice")
    engine = conn.session.engine
    stop = threading.Event()
    stop.set()
    with pytest.raises(dpsql.OperationalError) as err:
        engine.execute("SELECT 1", stop)
    assert err.value.sqlstate == "57014"
    stop, running, outcome = threading.Event(), threading.Event(), []

    def long_query():
        running.ident = threading.get_ident()
        running.set()
        try:
            engine.execute("SELECT SUM(hash(i)) FROM range(100000000000) AS t(i)", stop)
            outcome.append("finished")
        except dpsql.OperationalError as e:
            outcome.append(e.sqlstate)

    worker = threading.Thread(target=long_query)
    worker.start()
    running.wait(10)
    time.sleep(0.3)
    began = time.monotonic()
    stop.set()
    engine.interrupt(running.ident)
    worker.join(30)
    assert outcome == ["57014"] and time.monotonic() - began < 10
    engine.interrupt(threading.get_ident())  # nothing runs on this thread
    assert engine.execute("SELECT 42").columns == [[42]]
    conn.close()


def test_a_commit_that_fails_after_admission_releases_nothing_and_charges_nothing(tight_policy):
    conn = dpsql.connect(tight_policy, user="alice")
    cur = conn.cursor()
    cur.execute("SET dpsql.cache = off")
    events = _watched(conn, fail_commit=True)
    with pytest.raises(dpsql.OperationalError, match="could not record the charge") as err:
        cur.execute("SELECT COUNT(*) FROM people")
    assert "nothing was charged and nothing was released" in str(err.value)
    assert [e[0] for e in events] == ["worked", "engine"]  # admitted, ran, and its answer was dropped
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
            faulthandler.dump_traceback_later(50)  # where it hangs, if it does: every thread's stack
            signal.alarm(60)
            cur.execute("SELECT COUNT(*) FROM people WHERE age > 10")
            code = 0 if cur.fetchall() else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert conn.session.budget()["queries"] == 2  # the child's charge is in the shared ledger
    conn.close()

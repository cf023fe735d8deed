"""Group commit (ledger/group_commit.py): one writer turns many sessions' charges into one
transaction without changing what is charged, refused or durable."""

from __future__ import annotations

import contextlib
import threading
from fractions import Fraction

import pytest

from dpsql.config import load_policy
from dpsql.engines.duckdb import DuckDBEngine
from dpsql.ledger.group_commit import GroupCommit
from dpsql.session import Session

from .test_concurrency import race, race_policy  # noqa: F401 - the SQLite and PostgreSQL ledgers


def test_one_shared_ledger_with_group_commit_never_overspends(race_policy):  # noqa: F811
    """64 sessions on one ledger object (as `dpsql serve` runs them) race for a budget of exactly
    10 queries: 10 answers, every other query refused and recorded nowhere."""
    policy = load_policy(race_policy)
    engine = DuckDBEngine(policy)
    first = Session(policy, "alice", engine=engine)
    ledger = first.ledger
    ledger.group_commit()
    assert race(lambda: Session(policy, "alice", engine=engine, ledger=ledger)) == (10, 64 * 3 - 10)
    budget = first.budget()
    assert budget["queries"] == 10 and budget["epsilon"]["spent"] == 1
    history = ledger.history("alice")
    assert len(history) == 10 and all(h["released"] is not None for h in history)  # each answer's release recorded
    ledger.close()
    engine.close()


class _Connection:
    def __init__(self, log):
        self.log = log

    def execute(self, sql):
        self.log.append(sql)


def _writer(log, fail_commit=False, durability=None):
    @contextlib.contextmanager
    def begin(users, durable):
        log.append(("BEGIN", tuple(users)))
        if durability is not None:
            durability.append(durable)
        try:
            yield _Connection(log)
        except BaseException:
            log.append("ROLLBACK")
            raise
        if fail_commit:
            raise OSError("disk full")
        log.append("COMMIT")

    return GroupCommit(begin, "*global*", lambda: log.append("closed"))


def _halting(name):
    def work(con):
        con.execute(f"INSERT {name}")
        raise ValueError("halt")

    return work


def test_a_refused_job_rolls_back_alone_and_locks_are_ordered():
    log = []
    writer = _writer(log)
    assert writer.submit(["bob", "*global*", "alice"], lambda con: con.execute("INSERT a") or 1) == 1
    with pytest.raises(ValueError) as err:  # a job alone in its batch: its transaction rolls back
        writer.submit(["carol"], _halting("b"))
    # an unexpected error crosses threads with the writer's side of its traceback as a note
    assert any("in the ledger's writer thread" in n for n in err.value.__notes__)
    # jobs queued while the writer is busy share a batch: a failing one is undone by its savepoint
    busy, go = threading.Event(), threading.Event()
    blocker = writer.start([], lambda con: (busy.set(), go.wait()))
    busy.wait()
    ok, failing, after = (
        writer.start(["dave"], lambda con: con.execute("INSERT c") or 3),
        writer.start(["erin"], _halting("d")),
        writer.start(["dave"], lambda con: con.execute("INSERT e") or 5),
    )
    go.set()
    blocker.committed()
    assert ok.committed() == 3 and after.committed() == 5
    with pytest.raises(ValueError):
        failing.committed()
    writer.close()
    assert log[0] == ("BEGIN", ("*global*", "alice", "bob"))  # the global budget first, then sorted
    alone = log.index(("BEGIN", ("carol",)))
    assert log[alone : alone + 3] == [("BEGIN", ("carol",)), "INSERT b", "ROLLBACK"]  # no savepoint needed
    shared = log.index(("BEGIN", ("dave", "erin")))
    assert log[shared:] == [
        ("BEGIN", ("dave", "erin")),
        *("SAVEPOINT dpsql_job", "INSERT c", "RELEASE SAVEPOINT dpsql_job"),
        *("SAVEPOINT dpsql_job", "INSERT d", "ROLLBACK TO SAVEPOINT dpsql_job", "RELEASE SAVEPOINT dpsql_job"),
        *("SAVEPOINT dpsql_job", "INSERT e", "RELEASE SAVEPOINT dpsql_job"),
        "COMMIT",
        "closed",
    ]
    assert log.count("COMMIT") == 3


def test_a_batch_that_does_not_commit_fails_every_job():
    """Nothing of a batch is durable unless its COMMIT returns, so no submitter gets a receipt."""
    log = []
    writer = _writer(log, fail_commit=True)
    results, errors = [], []
    gate = threading.Barrier(8)

    def submit(i):
        gate.wait()
        try:
            results.append(writer.submit([f"u{i}"], lambda con: Fraction(i)))
        except OSError as e:
            errors.append(e)

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    writer.close()
    assert results == [] and len(errors) == 8


def test_a_jobs_failure_callback_runs_before_its_submitter_is_told_and_only_on_failure():
    """`failed` is how a refused charge stops the query its session started meanwhile: it runs
    on the writer thread before `ran` can return, once, for a refusal and for a batch that does
    not commit, never for an admitted job; a failing callback does not stop the writer."""
    log, told = [], []

    def failed(name):
        def callback():
            told.append((name, threading.current_thread().name))
            if name == "broken":
                raise RuntimeError("the callback's own failure")

        return callback

    def halt(con):
        raise ValueError("halt")

    writer = _writer(log)
    assert writer.start(["a"], lambda con: 1, failed=failed("admitted")).ran() == 1
    refused = writer.start(["b"], halt, failed=failed("refused"))
    with pytest.raises(ValueError):
        refused.ran()
    assert told == [("refused", "dpsql-ledger-writer")]  # already, when the submitter learns it
    with pytest.raises(ValueError):
        writer.start(["c"], halt, failed=failed("broken")).committed()
    assert writer.submit(["d"], lambda con: 2) == 2  # the writer goes on
    writer.close()
    failing = _writer([], fail_commit=True)
    with pytest.raises(OSError):
        failing.start(["e"], lambda con: 3, failed=failed("not committed")).committed()
    failing.close()
    assert [name for name, _ in told] == ["refused", "broken", "not committed"]


def test_a_batch_is_fsynced_when_any_of_its_jobs_must_be():
    """Release records and cached answers alone commit without an fsync; a charge batched with
    them makes the whole batch durable."""
    log, durability = [], []
    writer = _writer(log, durability=durability)
    writer.submit([], lambda con: None, durable=False)
    writer.submit(["alice"], lambda con: None)
    held, go = threading.Event(), threading.Event()
    first = threading.Thread(target=writer.submit, args=([], lambda con: (held.set(), go.wait(30))))
    first.start()
    held.wait(30)  # the writer is inside a batch: the next two queue up and commit together
    others = [
        threading.Thread(target=writer.submit, args=([], lambda con: None), kwargs={"durable": d})
        for d in (False, True)
    ]
    for t in others:
        t.start()
    while writer._queue.qsize() < 2:
        threading.Event().wait(0.01)
    go.set()
    for t in [first, *others]:
        t.join(30)
    writer.close()
    assert durability == [False, True, True, True]


def _synchronous(con) -> str:
    """How the ledger's open transaction will commit: SQLite's synchronous, PostgreSQL's synchronous_commit."""
    if hasattr(con, "set_trace_callback"):
        return {1: "off", 2: "on"}[con.execute("PRAGMA synchronous").fetchone()[0]]
    return con.execute("SHOW synchronous_commit").fetchone()[0]


def test_charges_commit_to_disk_and_release_records_do_not_wait_for_it(race_policy):  # noqa: F811
    """On both ledgers: a charge's COMMIT is synchronous (fsync'd before the answer can leave);
    the release record and the cached answer that follow it commit without waiting for the disk,
    and the next charge is synchronous again (its flush covers them)."""
    policy = load_policy(race_policy)
    engine = DuckDBEngine(policy)
    session = Session(policy, "alice", engine=engine)
    ledger, seen = session.ledger, []
    write = ledger._write

    @contextlib.contextmanager
    def observed(users, durable=True):
        with write(users, durable) as con:
            seen.append(_synchronous(con))
            yield con

    ledger._write = observed
    ledger.group_commit()
    session.execute("SELECT COUNT(*) FROM people")
    session.execute("SELECT COUNT(*) FROM people WHERE age > 40")
    assert seen == ["on", "off", "off"] * 2  # charge, release record, cached answer
    assert all(h["released"] is not None for h in ledger.history("alice"))
    session.close()
    ledger.close()
    engine.close()

"""Group commit (accounting/group_commit.py): one writer turns many sessions' charges into one
transaction without changing what is charged, refused or durable."""

from __future__ import annotations

import contextlib
import threading
from fractions import Fraction

import pytest

from dpsql.accounting.group_commit import GroupCommit
from dpsql.config import load_policy
from dpsql.engines.duckdb import DuckDBEngine
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


def _writer(log, fail_commit=False):
    @contextlib.contextmanager
    def begin(users):
        log.append(("BEGIN", tuple(users)))
        yield _Connection(log)
        if fail_commit:
            raise OSError("disk full")
        log.append("COMMIT")

    return GroupCommit(begin, "*global*", lambda: log.append("closed"))


def test_a_refused_job_rolls_back_alone_and_locks_are_ordered():
    log = []
    writer = _writer(log)
    assert writer.submit(["bob", "*global*", "alice"], lambda con: con.execute("INSERT a") or 1) == 1
    with pytest.raises(ValueError):
        writer.submit(["carol"], lambda con: (con.execute("INSERT b"), (_ for _ in ()).throw(ValueError("halt"))))
    writer.close()
    assert log[0] == ("BEGIN", ("*global*", "alice", "bob"))  # the global budget first, then sorted
    assert "ROLLBACK TO SAVEPOINT dpsql_job" in log and log[-1] == "closed"
    assert log.count("COMMIT") == 2


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

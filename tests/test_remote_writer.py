"""One ledger writer for every worker (ledger/remote_writer.py): the supervisor's service
applies the jobs its workers send over socket pairs. These tests run both ends in one process,
each end with its own Ledger object on the same real ledger (SQLite and PostgreSQL), as the
supervisor and the workers open it, and check that nothing changes in what is charged, refused
or durable."""

from __future__ import annotations

import contextlib
import pickle
import socket
import sqlite3
import struct
import threading
import time
from fractions import Fraction

import pytest

from dpsql.accounting.cost import Cost
from dpsql.config import BudgetPolicy, load_policy
from dpsql.engines.duckdb import DuckDBEngine
from dpsql.errors import BudgetExceeded, OperationalError
from dpsql.ledger import Ledger, open_ledger
from dpsql.ledger.remote_writer import RemoteWriter, WriterService
from dpsql.session import Session

from .test_concurrency import race, race_policy  # noqa: F401 - the SQLite and PostgreSQL ledgers
from .test_group_commit import _synchronous


def _open(policy) -> Ledger:
    return open_ledger(policy.ledger_path, policy.ledger_url, identity=policy.ledger_identity)


@contextlib.contextmanager
def _workers(policy, count: int = 2):
    """A supervisor's writer service and `count` worker ledgers that send it their writes."""
    service = WriterService(_open(policy))
    workers = []
    try:
        for _ in range(count):
            mine, theirs = socket.socketpair()
            service.serve(mine)
            ledger = _open(policy)
            ledger.use_writer(RemoteWriter(theirs))
            workers.append(ledger)
        yield service, workers
    finally:
        for ledger in workers:
            ledger.close()
        service.close()
        service.ledger.close()


@contextlib.contextmanager
def _one_worker(tmp_path, wrap=None):
    """A new SQLite ledger, its writer service (whose `_write` `wrap` may wrap) and one worker
    ledger linked to it."""
    ledger_path = tmp_path / "l.sqlite"
    Ledger(ledger_path).close()
    service = WriterService(Ledger(ledger_path))
    if wrap is not None:
        service.ledger._write = wrap(service.ledger._write)
    mine, theirs = socket.socketpair()
    service.serve(mine)
    worker = Ledger(ledger_path)
    worker.use_writer(RemoteWriter(theirs))
    try:
        yield service, worker
    finally:
        worker.close()
        service.close()
        service.ledger.close()


BUDGET = BudgetPolicy("basic", Fraction(1), Fraction(0))


def test_two_workers_racing_through_one_writer_never_overspend(race_policy):  # noqa: F811
    """64 sessions spread over two workers race for a budget of exactly 10 queries: 10 answers,
    every other query refused, each answer's release recorded."""
    policy = load_policy(race_policy)
    engine = DuckDBEngine(policy)
    with _workers(policy) as (_, workers):
        turn = iter(range(10**6))
        assert race(lambda: Session(policy, "alice", engine=engine, ledger=workers[next(turn) % 2])) == (
            10,
            64 * 3 - 10,
        )
        history = workers[0].history("alice")
        assert len(history) == 10 and all(h["released"] is not None for h in history)
        assert Session(policy, "alice", engine=engine, ledger=workers[1]).budget()["epsilon"]["spent"] == 1
    engine.close()


def test_a_charge_is_on_disk_before_it_is_told_and_release_records_do_not_wait_for_it(race_policy):  # noqa: F811
    policy = load_policy(race_policy)
    engine = DuckDBEngine(policy)
    with _workers(policy, 1) as (service, (worker,)):
        write, seen, told = service.ledger._write, [], []

        @contextlib.contextmanager
        def observed(users, durable=True):
            with write(users, durable) as con:
                seen.append(_synchronous(con))
                yield con
            told.append(len(seen))  # committed: only now may the worker be told "done"

        service.ledger._write = observed
        session = Session(policy, "alice", engine=engine, ledger=worker)
        session.execute("SELECT COUNT(*) FROM people")
        session.execute("SELECT COUNT(*) FROM people WHERE age > 40")
        assert seen == ["on", "off", "off"] * 2  # charge, release record, cached answer
        assert told == [1, 2, 3, 4, 5, 6]
        session.close()
    engine.close()


def test_a_refusal_crosses_with_its_message_and_its_failure_callback_runs_first(tmp_path):
    with _one_worker(tmp_path) as (_, worker):
        charge = worker.charging("alice", BUDGET, Cost.pure(Fraction(3, 4)), "q1", {"a": 1}).durable()
        assert charge.id >= 1 and charge.totals.epsilon == Fraction(3, 4)
        order = []
        pending = worker.charging(
            "alice", BUDGET, Cost.pure(Fraction(1, 2)), "q2", {}, failed=lambda: order.append("failed")
        )
        with pytest.raises(BudgetExceeded) as refused:
            pending.admitted()
        order.append("told")
        assert order == ["failed", "told"]
        assert refused.value.sqlstate == "53000" and refused.value.hint and "epsilon" in refused.value.message
        worker.record_release(charge.id, {"rows": [[1]]})
        assert [(h["sql"], h["released"]) for h in worker.history("alice")] == [("q1", {"rows": [[1]]})]


def test_a_batch_that_cannot_commit_charges_nothing_and_says_so(tmp_path):
    def failing(write):
        @contextlib.contextmanager
        def begin(users, durable=True):
            with write(users, durable) as con:
                yield con
                raise sqlite3.OperationalError("disk full (injected at COMMIT)")

        return begin

    with _one_worker(tmp_path, failing) as (_, worker):
        pending = worker.charging("alice", BUDGET, Cost.pure(Fraction(1, 4)), "q", {})
        with pytest.raises(OperationalError) as failed:
            pending.durable()
        assert "disk full" in str(failed.value) and not isinstance(failed.value, BudgetExceeded)
        assert worker.history("alice") == []


def test_admitted_is_told_while_the_batch_commits_and_durable_only_once_it_has(tmp_path):
    """The worker's query may run while the supervisor's COMMIT reaches the disk; nothing may
    leave before it has."""
    committed = []

    def slow(write):
        @contextlib.contextmanager
        def begin(users, durable=True):
            with write(users, durable) as con:
                yield con
                time.sleep(0.5)
            committed.append(time.monotonic())

        return begin

    with _one_worker(tmp_path, slow) as (_, worker):
        pending = worker.charging("alice", BUDGET, Cost.pure(Fraction(1, 4)), "q", {})
        pending.admitted()
        admitted = time.monotonic()
        pending.durable()
        assert admitted < committed[0] <= time.monotonic()


def test_when_the_writer_is_gone_every_charge_fails_and_nothing_is_charged(tmp_path):
    ledger_path = tmp_path / "l.sqlite"
    Ledger(ledger_path).close()
    mine, theirs = socket.socketpair()
    worker = Ledger(ledger_path)
    worker.use_writer(RemoteWriter(theirs))
    try:
        pending = worker.charging("alice", BUDGET, Cost.pure(Fraction(1, 4)), "q", {})
        mine.close()  # the supervisor is gone before it answered
        with pytest.raises(OperationalError, match="ledger writer"):
            pending.admitted()
        with pytest.raises(OperationalError, match="ledger writer"):
            worker.charging("alice", BUDGET, Cost.pure(Fraction(1, 4)), "q", {}).durable()
        assert worker.history("alice") == []
    finally:
        worker.close()


def test_a_link_that_sends_what_is_not_a_job_is_dropped_and_others_go_on(tmp_path):
    with _one_worker(tmp_path) as (service, worker):
        bad, bad_end = socket.socketpair()
        service.serve(bad)
        data = pickle.dumps((1, "DROP TABLE charges"))
        bad_end.sendall(struct.pack("!I", len(data)) + data)
        bad_end.settimeout(10)
        assert bad_end.recv(16) == b""  # closed by the service, unanswered
        bad_end.close()
        assert worker.charge("alice", BUDGET, Cost.pure(Fraction(1, 4)), "q", {}).id >= 1


def test_many_threads_of_one_worker_share_the_link(tmp_path):
    """Replies find their own job whatever order they come back in: 8 threads charge at once."""
    with _one_worker(tmp_path) as (_, worker):
        budget = BudgetPolicy("basic", Fraction(1000), Fraction(0))
        ids: list[int] = []
        barrier = threading.Barrier(8)

        def charge(i: int) -> None:
            barrier.wait(30)
            for j in range(20):
                c = worker.charging("alice", budget, Cost.pure(Fraction(1, 8)), f"q{i}-{j}", {}).durable()
                worker.record_release(c.id, [i, j])
                ids.append(c.id)

        threads = [threading.Thread(target=charge, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        history = worker.history("alice")
        assert sorted(ids) == [h["id"] for h in history] and len(ids) == 160
        assert all(h["released"] == [int(x) for x in h["sql"][1:].split("-")] for h in history)


def test_a_writer_that_stops_says_so_and_its_workers_charge_nothing(tmp_path):
    """The supervisor stops the server when its writer has stopped (Supervisor._watch asks
    `running()`); meanwhile its workers' charges fail, with nothing charged."""
    with _one_worker(tmp_path) as (service, worker):
        assert service.running()

        def broken(*args, **kwargs):
            raise RuntimeError("injected")

        service._selector.select = broken
        extra, _ = socket.socketpair()
        service.serve(extra)  # wakes the loop, which now fails
        service._thread.join(10)
        assert not service.running()
        with pytest.raises(OperationalError, match="ledger writer"):
            worker.charge("alice", BUDGET, Cost.pure(Fraction(1, 4)), "q", {})
        assert worker.history("alice") == []


def test_a_worker_handed_to_a_stopped_writer_sees_its_end_closed(tmp_path):
    """A worker that starts after the writer stopped is not left waiting, and the supervisor
    that hands it over does not fail: its socket is closed, so its charges fail at once."""
    with _one_worker(tmp_path) as (service, worker):

        def broken(*args, **kwargs):
            raise RuntimeError("injected")

        service._selector.select = broken
        first, _ = socket.socketpair()
        service.serve(first)
        service._thread.join(10)
        assert not service.running()
        late, peer = socket.socketpair()
        service.serve(late)  # the wake-up socket is closed: no BrokenPipeError reaches the caller
        peer.settimeout(5)
        assert peer.recv(1) == b""

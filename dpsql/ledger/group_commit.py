"""Group commit: one writer thread per ledger turns many analysts' charges and release records
into one transaction, so one fsync covers the batch instead of one per write.

Each piece of work runs under its own savepoint (a batch of one: its transaction), so a
refused charge (a filter that halts) rolls back only itself. A submitter gets its result only
after the batch's COMMIT has returned: a charge is durable before its answer can leave,
exactly as with a transaction of its own, and if the COMMIT fails every piece of the batch
fails with it (nothing charged, nothing released). Work for a batch is applied in arrival
order, so running totals are the same as if each had its own transaction in that order.

A submitter may go on working while its job's batch commits (`start`): `Pending.ran` returns
once the job's work has run in the open transaction (a charge admitted or refused), and
`Pending.committed` once the batch is on disk. A query's engine runs in between, so the fsync
costs it nothing; nothing derived from the data leaves before `committed`. A job's `failed`
callback runs on the writer thread as soon as its work fails or its batch cannot commit, before
its submitter is told: a query started before its charge was admitted is interrupted by it.

A job may be submitted as not durable (a release record, a cached answer: losing one in a power
failure costs a repeated query its free answer, never a charge). A batch of such jobs alone
commits without an fsync; the next durable batch's fsync covers it, since both databases make
commits durable in order.
"""

from __future__ import annotations

import logging
import queue
import threading
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager

from ..errors import Error

MAX_BATCH = 256
log = logging.getLogger("dpsql")


@dataclass
class _Job:
    users: list[str]
    work: Callable[[Any], Any]
    durable: bool
    failed: Callable[[], None] | None = None
    tell: Callable[["_Job", str], None] | None = (
        None  # told "ran", then "done", by commit_batch (a supervisor's replies)
    )
    ran: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None


class Pending:
    """A submitted job, seen from its submitter's thread."""

    def __init__(self, job: _Job):
        self._job: _Job | None = job

    def ran(self) -> Any:
        """The work's result once it has run in the open transaction (its error, if it failed or
        the batch could not begin); the batch may still fail to commit."""
        self._live().ran.wait()
        return self._outcome()

    def committed(self) -> Any:
        """The work's result once its batch has committed (on disk when durable)."""
        self._live().done.wait()
        return self._outcome()

    def _live(self) -> _Job:
        job = self._job
        if job is None:
            raise RuntimeError("this job's error has been raised already")
        return job

    def _outcome(self) -> Any:
        job = self._live()
        if job.error is None:
            return job.result
        # Raised once and forgotten: its traceback holds the caller's frames, which hold this
        # Pending; kept, that cycle would outlive the caller's session until a collection.
        error, job.error, self._job = job.error, None, None
        try:
            raise error
        finally:
            del error, job


class GroupCommit:
    """The writer thread. `begin(users, durable)` opens a write transaction holding those analysts'
    locks, whose COMMIT returns once it is on disk when `durable` (the ledger's own `_write`);
    `first` names the lock taken before all others (the global budget), the rest are taken in
    sorted order so that no two writers can deadlock."""

    def __init__(self, begin: Callable[[list[str], bool], ContextManager[Any]], first: str, finish: Callable[[], None]):
        """`finish` runs on the writer thread when it stops (closing its connection)."""
        self._begin, self._first, self._finish = begin, first, finish
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="dpsql-ledger-writer", daemon=True)
        self._thread.start()

    def submit(self, users: list[str], work: Callable[[Any], Any], *, durable: bool = True) -> Any:
        """Run `work(con)` in the next batch; return its result once the batch has committed (when
        `durable`, once that commit is on disk)."""
        return self.start(users, work, durable=durable).committed()

    def start(
        self,
        users: list[str],
        work: Callable[[Any], Any],
        *,
        durable: bool = True,
        failed: Callable[[], None] | None = None,
    ) -> Pending:
        """Queue `work(con)` for the next batch and return at once; `failed()` runs on the writer
        thread if the work fails or its batch does not commit, before `ran`/`committed` tell."""
        job = _Job(users, work, durable, failed)
        self._queue.put(job)
        return Pending(job)

    def close(self) -> None:
        self.stop()
        self._thread.join()

    def stop(self) -> None:
        """Finish the queued work, then end the thread; without waiting for it."""
        self._queue.put(None)

    def _run(self) -> None:
        try:
            self._loop()
        finally:
            self._finish()

    def _loop(self) -> None:
        stopping = False
        job: _Job | None
        more: _Job | None
        batch: list[_Job] | None
        while not stopping:
            job = self._queue.get()
            if job is None:
                return
            batch = [job]
            while len(batch) < MAX_BATCH:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stopping = True
                    break
                batch.append(more)
            self._commit(batch)
            job = more = batch = None  # an idle writer holds no submitter's result or error

    def _commit(self, batch: list[_Job]) -> None:
        commit_batch(self._begin, self._first, batch)


class _Undone(Exception):
    """A batch of one whose job failed (its error kept on the job): its transaction rolls back."""


def commit_batch(
    begin: Callable[[list[str], bool], ContextManager[Any]],
    first: str,
    batch: list[_Job],
    ran: Callable[[], object] | None = None,
) -> None:
    """Apply `batch` in one transaction, each job under its own savepoint (a job alone: under
    the transaction itself, which its failure rolls back), and commit it; every job is told
    (events, `failed`, `tell`) before this returns. The writer thread's work, and a
    supervisor's, which commits its workers' jobs on the thread that reads them (`ran()`: once
    every job has run, just before the COMMIT)."""
    users = {u for job in batch for u in job.users}
    locks = ([first] if first in users else []) + sorted(users - {first})
    alone = len(batch) == 1  # its transaction is its savepoint: a failure rolls all of it back
    try:
        with begin(locks, any(job.durable for job in batch)) as con:
            for job in batch:
                if not alone:
                    con.execute("SAVEPOINT dpsql_job")
                try:
                    job.result = job.work(con)
                except BaseException as e:  # this job's refusal or failure: undo it alone
                    job.error, job.result = _detached(e), None
                    if alone:
                        raise _Undone() from None
                    con.execute("ROLLBACK TO SAVEPOINT dpsql_job")
                    _tell_failed(job)
                if not alone:
                    con.execute("RELEASE SAVEPOINT dpsql_job")
                _ran(job)
            if ran is not None:
                ran()
    except _Undone:  # a batch of one whose job failed: rolled back, and told its own error
        _tell_failed(batch[0])
    except BaseException as e:  # the batch did not commit: none of it is durable
        failure = _detached(e)
        for job in batch:
            if job.error is None:
                job.error, job.result = failure, None
                _tell_failed(job)
    finally:
        for job in batch:
            _ran(job)
            job.done.set()
            _tell(job, "done")


def _ran(job: _Job) -> None:
    if not job.ran.is_set():
        job.ran.set()
        _tell(job, "ran")


def _tell(job: _Job, phase: str) -> None:
    """The job's `tell` callback; its own failure (a worker gone) must not stop the writer."""
    if job.tell is not None:
        try:
            job.tell(job, phase)
        except Exception:
            log.exception("a ledger job's reply failed")


def _tell_failed(job: _Job) -> None:
    """The job's failure callback, at most once; its own failure must not stop the writer."""
    failed, job.failed = job.failed, None
    if failed is not None:
        try:
            failed()
        except Exception:
            log.exception("a charge's failure callback failed")


def _detached(error: BaseException) -> BaseException:
    """`error` without its traceback through this thread, which holds the writer's frame and so
    the batch that holds the error: a cycle that would keep every submitter's session (and its
    engine's private scratch directory) alive until a garbage collection. An unexpected error
    keeps the writer's side as a note for the log; a dpsql error (a refusal) needs none."""
    if not isinstance(error, Error):
        error.add_note("in the ledger's writer thread:\n" + "".join(traceback.format_tb(error.__traceback__)))
    return error.with_traceback(None)

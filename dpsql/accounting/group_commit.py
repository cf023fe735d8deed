"""Group commit: one writer thread per ledger turns many analysts' charges and release records
into one transaction, so one fsync covers the batch instead of one per write.

Each piece of work runs under its own savepoint, so a refused charge (a filter that halts)
rolls back only itself. A submitter gets its result only after the batch's COMMIT has
returned: a charge is durable before its answer can leave, exactly as with a transaction of
its own, and if the COMMIT fails every piece of the batch fails with it (nothing charged,
nothing released). Work for a batch is applied in arrival order, so running totals are the
same as if each had its own transaction in that order.

A job may be submitted as not durable (a release record, a cached answer: losing one in a power
failure costs a repeated query its free answer, never a charge). A batch of such jobs alone
commits without an fsync; the next durable batch's fsync covers it, since both databases make
commits durable in order.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager

MAX_BATCH = 256


@dataclass
class _Job:
    users: list[str]
    work: Callable[[Any], Any]
    durable: bool
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None


class GroupCommit:
    """The writer thread. `begin(users, durable)` opens a write transaction holding those analysts'
    locks, whose COMMIT returns once it is on disk when `durable` (the ledger's own `_write`);
    `first` names the lock taken before all others (the global budget), the rest are taken in
    sorted order so that no two writers can deadlock."""

    def __init__(self, begin: Callable[[list[str], bool], ContextManager[Any]], first: str,
                 finish: Callable[[], None]):
        """`finish` runs on the writer thread when it stops (closing its connection)."""
        self._begin, self._first, self._finish = begin, first, finish
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="dpsql-ledger-writer", daemon=True)
        self._thread.start()

    def submit(self, users: list[str], work: Callable[[Any], Any], *, durable: bool = True) -> Any:
        """Run `work(con)` in the next batch; return its result once the batch has committed (when
        `durable`, once that commit is on disk)."""
        job = _Job(users, work, durable)
        self._queue.put(job)
        job.done.wait()
        if job.error is not None:
            raise job.error
        return job.result

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()

    def _run(self) -> None:
        try:
            self._loop()
        finally:
            self._finish()

    def _loop(self) -> None:
        stopping = False
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

    def _locks(self, batch: list[_Job]) -> list[str]:
        users = {u for job in batch for u in job.users}
        return ([self._first] if self._first in users else []) + sorted(users - {self._first})

    def _commit(self, batch: list[_Job]) -> None:
        try:
            with self._begin(self._locks(batch), any(job.durable for job in batch)) as con:
                for job in batch:
                    con.execute("SAVEPOINT dpsql_job")
                    try:
                        job.result = job.work(con)
                    except BaseException as e:  # this job's refusal or failure: undo it alone
                        con.execute("ROLLBACK TO SAVEPOINT dpsql_job")
                        job.error, job.result = e, None
                    con.execute("RELEASE SAVEPOINT dpsql_job")
        except BaseException as e:  # the batch did not commit: none of it is durable
            for job in batch:
                if job.error is None:
                    job.error, job.result = e, None
        finally:
            for job in batch:
                job.done.set()

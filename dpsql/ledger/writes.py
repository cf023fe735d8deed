"""How the ledger writes: statements in its placeholder style, the writer thread (group
commit) or a supervisor's writer, and closing. A mixin of `Ledger`."""

from __future__ import annotations

import os
import weakref
from typing import Any, Callable

from ..errors import OperationalError
from .group_commit import GroupCommit, Pending
from .jobs import GLOBAL, ChargeJob, StatementJob
from .store import Store


def _writer_for(ledger: Writes) -> GroupCommit:
    """A writer thread that holds its ledger weakly: a Ledger nobody closed (a Session dropped
    without close()) is collected as before, and its collection stops the thread."""
    ref = weakref.ref(ledger)

    def begin(users: list[str], durable: bool):
        owner = ref()
        if owner is None:
            raise OperationalError("the ledger was closed", hint="nothing was charged; open a new connection")
        return owner._write(users, durable)

    def finish() -> None:
        owner = ref()
        if owner is not None:
            owner._close_connection()

    writer = GroupCommit(begin, GLOBAL, finish)
    weakref.finalize(ledger, writer.stop)
    return writer


class Writes(Store):
    """Statements, the writer thread, and the hot writes' way to the disk."""

    _writer: GroupCommit | None = None

    _remote: Any = None  # the supervisor's writer (use_writer)

    _remote_pid = 0

    _grouped = False  # group_commit(): every write through the writer thread

    _writer_pid = 0  # the process whose thread `_writer` is

    def _sql(self, sql: str) -> str:
        return sql if self.placeholder == "?" else sql.replace("?", self.placeholder)

    def _exec(self, con, sql: str, params: tuple = ()):
        return con.execute(self._sql(sql), params)

    def group_commit(self) -> None:
        """From now on, writes from every thread share transactions (one fsync per batch): a
        server's sessions all charge through this one ledger object."""
        self._grouped = True
        self._start_writer()

    def _start_writer(self) -> GroupCommit:
        """The writer thread. Charges always go through it (`charging`), so that their fsync
        overlaps the query's run; without group commit, release records and cached answers are
        written on the caller's own connection, which spares them a round trip to the thread."""
        with self._writer_lock:
            writer = self._writer
            if writer is None or self._writer_pid != os.getpid():  # a forked child has no thread
                writer = self._writer = _writer_for(self)
                self._writer_pid = os.getpid()
            return writer

    def _write_lazily(self, sql: str, params: tuple) -> None:
        """One statement committed without waiting for the disk (a release record, a cached
        answer): in the batch under way with group commit, else on its own."""
        if not self._grouped or (self._writer is None and self._remote is None):
            self._write_one(sql, params, durable=False)
        else:
            self._submit(StatementJob(sql, params)).committed()

    def _apply(self, con, job: ChargeJob | StatementJob) -> Any:
        """A job's work in the writer's open transaction (this process's writer, or the one a
        supervisor runs for its workers)."""
        if isinstance(job, ChargeJob):
            return self._charge_in(con, job)
        self._exec(con, job.sql, job.params)
        return None

    def _submit(self, job: ChargeJob | StatementJob, failed: Callable[[], None] | None = None) -> Pending:
        """Queue a job for the writer: the supervisor's (use_writer), else this process's thread."""
        remote = self._remote
        if remote is not None and self._remote_pid == os.getpid():
            return remote.start(job, failed)
        return self._start_writer().start(
            list(job.users), lambda con: self._apply(con, job), durable=job.durable, failed=failed
        )

    def use_writer(self, remote: Any) -> None:
        """From now on the hot writes (charges, release records, cached answers) go to `remote`,
        the writer a `dpsql serve --workers` supervisor runs for all its workers (its `start(job,
        failed)` returns a Pending); the rest is written here, under the same locks."""
        self._remote, self._remote_pid, self._grouped = remote, os.getpid(), True

    def close(self) -> None:
        """This thread's connection closed, and the writer thread stopped (with its own)."""
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
        remote, self._remote = self._remote, None
        if remote is not None:
            remote.close()
        self._close_connection()
        self._turn_fd = None
        closer = getattr(self, "_turn_closer", None)
        if closer is not None:
            closer()

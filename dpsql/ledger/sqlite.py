"""The durable ledger: atomic check-and-charge, audit log, answer cache, grants.

One write transaction reads the analyst's running totals (and the global ones), asks the
filters, records the charge and commits before the engine runs: an answer never leaves
without a durable charge, and concurrent sessions - threads, processes, or several proxies on
one PostgreSQL ledger - serialize on a lock, so together they can never overspend.

SQLite (default): WAL, synchronous=FULL, `BEGIN IMMEDIATE` takes the write lock before the
read. Writers take turns on a lock file beside it first (`<ledger>-writers`, flock: empty, it
holds nothing), so a writer of another thread or process waits in the kernel and starts the
moment the lock is free, rather than in SQLite's busy handler, which sleeps 1, 2, 5, ... 100 ms
between tries. PostgreSQL (`[ledger] url`): transaction-scoped advisory locks per analyst (and one for
the global filter, always taken first, so there is no deadlock).
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import os
import sqlite3
import threading
import weakref
from pathlib import Path
from typing import Any, Iterator

from .. import owner_only
from ..errors import OperationalError
from .audit_log import AuditLog
from .budgets import Budgets
from .cache import AnswerCache
from .current import Current
from .integrity import identity_file, write_identity
from .logins import Logins
from .schema import LedgerError, Schema, _date
from .verify import Verification
from .writes import Writes


class Ledger(Schema, Writes, Budgets, AuditLog, AnswerCache, Logins, Verification):
    """SQLite ledger; `PostgresLedger` (postgres.py) shares everything but connections and locking."""

    placeholder = "?"
    serial = "INTEGER PRIMARY KEY AUTOINCREMENT"
    _turn_pid = 0  # the process that opened `_turn_fd` (an open file shared through fork() shares its flock)
    _errors: tuple[type[BaseException], ...] = (sqlite3.Error,)

    def __init__(self, path: str | Path, identity: Path | None = None, *, create: bool = True):
        """Open the SQLite ledger at `path`, checked against its identity file (default: beside
        it). A new ledger is created only where neither exists (and `create` allows it)."""
        self.path = Path(path)
        self.identity_path = identity or identity_file(self.path)
        self._local = threading.local()
        self._turn_lock = threading.Lock()
        self._writer_lock = threading.Lock()
        self._turn_fd: int | None = None
        ident = self._read_identity()
        if ident is not None and not (self.path.exists() and self.path.stat().st_size > 0):
            state = "missing" if not self.path.exists() else "empty"
            raise LedgerError(
                f"the ledger {self.path} is {state}, but {self.identity_path} says ledger "
                f"{ident.ledger_id} was created there on {_date(ident.created)}",
                hint="restore the ledger from a backup (dpsql ledger backup); starting afresh would "
                "forget every budget spent. To do that deliberately, remove the identity file and "
                "run dpsql ledger init",
            )
        try:
            owner_only.make_dirs(self.path.parent)
            owner_only.touch(self.path)  # owner-only from the start, and so are its -wal, -shm and -journal
            self._open(ident, create)
        except sqlite3.OperationalError as e:  # busy, unwritable: not a damaged file
            self.close()
            raise OperationalError(
                f"cannot open the ledger at {self.path}: {e}",
                hint="check that the directory is writable and that no other program holds the "
                "ledger locked; nothing was charged",
            ) from None
        except sqlite3.DatabaseError as e:
            self.close()
            raise LedgerError(
                f"the ledger {self.path} is damaged or not a dpsql ledger: {e}",
                hint="restore it from a backup (dpsql ledger backup); nothing was charged",
            ) from None
        except (sqlite3.Error, OSError) as e:
            self.close()
            raise OperationalError(
                f"cannot open the ledger at {self.path}: {e}",
                hint="check that the directory is writable, or set [ledger] path in the policy",
            ) from None

    @property
    def where(self) -> str:
        return str(self.path)

    def private_files(self) -> list[Path]:
        """The files holding this ledger's records or key, or guarding its writes (whoever can
        read the writers' lock can flock it): each should be its owner's only (owner_only.loose)."""
        beside = [Path(f"{self.path}{suffix}") for suffix in ("-wal", "-shm", "-journal", "-writers")]
        migrated = sorted(self.path.parent.glob(glob.escape(self.path.name) + ".v*.backup*"))
        return [self.path, *beside, *migrated, self.identity_path]

    def _schema_lock(self, con) -> None:
        """One schema creator or migrator at a time (SQLite: the write lock already is)."""

    def _tables(self, con) -> set[str]:
        return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()}

    def _backup_before_migrating(self, con, version: int) -> None:
        """A copy of the file as it was (the write lock is held, so nothing changes meanwhile)."""
        target = Path(f"{self.path}.v{version}.backup")
        if not target.exists():
            wal, target_wal = Path(f"{self.path}-wal"), Path(f"{target}-wal")
            target_wal.unlink(missing_ok=True)  # left by a copy that stopped before its main file
            if wal.exists():
                owner_only.copy(wal, target_wal)
            owner_only.copy(self.path, target)

    def _con(self):
        con = getattr(self._local, "con", None)
        if con is None or self._local.pid != os.getpid():  # never a connection inherited through fork()
            # In a writers' turn: a connection's first PRAGMA journal_mode=WAL, while another
            # connection creates the file or recovers its log, can fail at once with
            # "database is locked" (no busy wait there), as 64 sessions opening one new ledger did.
            with self._turn():
                con = sqlite3.connect(self.path, isolation_level=None, timeout=60.0, check_same_thread=False)
                con.execute("PRAGMA busy_timeout=60000")
                con.execute("PRAGMA journal_mode=WAL")
                con.execute("PRAGMA synchronous=FULL")
            self._local.con, self._local.durable, self._local.pid = con, True, os.getpid()
            self._local.current = None
        return con

    @contextlib.contextmanager
    def _write(self, users: list[str], durable: bool = True) -> Iterator[Any]:
        """A write transaction holding the locks of `users` (SQLite: the database write lock),
        whose COMMIT returns once it is on disk when `durable`."""
        con = self._con()
        self._sync(con, durable)
        with self._turn():
            con.execute("BEGIN IMMEDIATE")
            try:
                yield con
                con.execute("COMMIT")
            except BaseException:  # the work, or the COMMIT itself, failed: none of it was written
                self._forget()
                if con.in_transaction:
                    con.execute("ROLLBACK")
                raise

    def _current(self, con) -> Current | None:
        """`PRAGMA data_version` changes for a connection whenever another connection (of this
        process or any other) has committed to the ledger, never for its own commits: while it
        stands still, what this connection wrote last is what the ledger holds."""
        current = getattr(self._local, "current", None)
        if current is None:
            current = self._local.current = Current()
        current.seen(con.execute("PRAGMA data_version").fetchone()[0])
        return current

    def _forget(self) -> None:
        current = getattr(self._local, "current", None)
        if current is not None:
            current.clear()

    @contextlib.contextmanager
    def _turn(self) -> Iterator[None]:
        """This writer's turn among the ledger's writers: threads of this Ledger wait on a lock,
        other Ledgers and processes on the lock file (flock, released by the kernel if the holder
        dies)."""
        with self._turn_lock:
            if self._turn_fd is None or self._turn_pid != os.getpid():  # a forked child shares the parent's flock
                self._turn_pid = os.getpid()
                self._turn_fd = owner_only.open_file(self.path.with_name(self.path.name + "-writers"))
                self._turn_closer = weakref.finalize(self, os.close, self._turn_fd)  # a Ledger nobody closed
            fcntl.flock(self._turn_fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(self._turn_fd, fcntl.LOCK_UN)

    def _sync(self, con, durable: bool) -> None:
        """WAL with synchronous=NORMAL commits without an fsync; the next FULL commit's fsync of
        the log makes it durable too, since the log is replayed in order."""
        if getattr(self._local, "durable", True) != durable:
            con.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
            self._local.durable = durable

    def _write_one(self, sql: str, params: tuple = (), *, durable: bool = True) -> Any:
        """One statement on its own, which both databases apply atomically (an autocommit
        connection): no BEGIN and COMMIT round trips for a write that takes no lock."""
        con = self._con()
        self._sync(con, durable)
        with self._turn():
            return self._exec(con, sql, params)

    def backup(self, target: Path) -> None:
        """A consistent copy while serving (SQLite's online backup), with its identity file."""
        target = Path(target)
        owner_only.touch(target)  # a copy of the ledger is as private as the ledger
        dest = sqlite3.connect(target)
        try:
            self._con().backup(dest)
        finally:
            dest.close()
        identity = identity_file(target)
        if not identity.exists():
            write_identity(identity, self.identity)

    def _close_connection(self) -> None:
        con = getattr(self._local, "con", None)
        if con is not None:
            con.close()
            self._local.con = None

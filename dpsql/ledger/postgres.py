"""The ledger on a shared PostgreSQL database (psycopg 3), for several proxies: transaction-
scoped advisory locks per analyst (and one for the global filter, always taken first, so there
is no deadlock), and the database server's clock."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import zlib
from pathlib import Path
from typing import Any, Iterator

from .. import owner_only
from ..errors import OperationalError
from .integrity import Identity, identity_file, write_identity
from .schema import _SCHEMA, UNCHECKED
from .sqlite import Ledger


class PostgresLedger(Ledger):
    """The same ledger on a shared PostgreSQL database (psycopg 3), for several proxies."""

    placeholder = "%s"
    serial = "BIGSERIAL PRIMARY KEY"

    def __init__(self, url: str, identity: Path | None = None, *, create: bool = True):
        """Open the ledger at `url`; with an identity file (open_ledger gives the policy's), it is
        checked as a SQLite ledger is; without one, only its schema is."""
        try:
            import psycopg
        except ImportError:
            raise OperationalError(
                "a PostgreSQL ledger needs psycopg 3", hint='pip install "dpsql[postgres]"'
            ) from None
        self._psycopg = psycopg
        self.url = url
        self.path = Path(url)
        self._errors = (psycopg.Error,)
        self._local = threading.local()
        self._writer_lock = threading.Lock()
        self.identity_path = identity  # type: ignore[assignment]  # None: not checked (_read_identity)
        try:
            ident = self._read_identity()
            self._open(ident, create)
        except psycopg.Error as e:
            raise OperationalError(
                f"cannot open the PostgreSQL ledger: {e}", hint="check [ledger] url; nothing was charged or released"
            ) from None

    def _read_identity(self) -> Identity | None:
        return UNCHECKED if self.identity_path is None else super()._read_identity()

    def now(self, con=None) -> float:
        """The database server's clock, one for every proxy sharing this ledger."""
        row = self._exec(con or self._con(), "SELECT EXTRACT(EPOCH FROM clock_timestamp())").fetchone()
        return float(row[0])

    @property
    def where(self) -> str:
        return "at [ledger] url"

    def private_files(self) -> list[Path]:
        """The identity file: the records are the database server's to protect."""
        return [] if self.identity_path is None else [self.identity_path]

    def _schema_lock(self, con) -> None:
        con.execute("SELECT pg_advisory_xact_lock(0)")  # one schema creator at a time

    def _tables(self, con) -> set[str]:
        return {
            r[0]
            for r in con.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
            ).fetchall()
        }

    def _backup_before_migrating(self, con, version: int) -> None:
        for table in ("totals", "grants", "charges", "users"):
            con.execute(f"CREATE TABLE IF NOT EXISTS {table}_v{version}_backup AS SELECT * FROM {table}")

    def backup(self, target: Path) -> None:
        """A consistent snapshot (one REPEATABLE READ transaction, so serving goes on) copied
        into a SQLite ledger file with the same identity: `dpsql ledger verify --ledger` checks it."""
        target = Path(target)
        owner_only.touch(target)  # a copy of the ledger is as private as the ledger
        dest = sqlite3.connect(target)
        try:
            for stmt in _SCHEMA:
                dest.execute(stmt.format(serial=Ledger.serial))
            con = self._con()
            with con.transaction():
                con.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                for table in ("meta", "totals", "grants", "charges", "users", "cache", "events", "heads"):
                    cur = con.execute(f"SELECT * FROM {table}")
                    names = [d[0] for d in cur.description]
                    rows = cur.fetchall()
                    if rows:
                        dest.executemany(
                            f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' for _ in names)})", rows
                        )
            dest.commit()
        finally:
            dest.close()
        if self.identity is not UNCHECKED and not identity_file(target).exists():
            write_identity(identity_file(target), self.identity)

    def _con(self):
        con = getattr(self._local, "con", None)
        if con is None or con.closed or self._local.pid != os.getpid():  # never a socket shared through fork()
            con = self._psycopg.connect(self.url, autocommit=True)
            self._local.con, self._local.pid = con, os.getpid()
        return con

    @contextlib.contextmanager
    def _write(self, users: list[str], durable: bool = True) -> Iterator[Any]:
        con = self._con()
        with con.transaction():
            if not durable:  # made durable by the next synchronous commit: the WAL is flushed in order
                con.execute("SET LOCAL synchronous_commit = off")
            for u in users:  # GLOBAL always first: a fixed order, so no deadlock
                con.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_key(u),))
            yield con

    def _current(self, con) -> None:
        """Other proxies write this ledger at any time, and PostgreSQL has no cheap way to tell:
        every charge reads what it needs."""
        return None

    def _forget(self) -> None:
        """Nothing is kept (`_current`)."""

    def _write_one(self, sql: str, params: tuple = (), *, durable: bool = True) -> Any:
        if durable:
            return self._exec(self._con(), sql, params)
        with self._write([], durable=False) as con:
            return self._exec(con, sql, params)


def _lock_key(user: str) -> int:
    return zlib.crc32(user.encode()) + 1

"""What every part of the ledger relies on from the others, declared once so each part
(schema, writes, budgets, audit log, cache, logins, verification) reads and type-checks on its
own. The backends (sqlite.py, postgres.py) and writes.py supply it; nothing here runs."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, ContextManager

from .current import Current
from .group_commit import Pending
from .integrity import Identity
from .jobs import ChargeJob, StatementJob


class Store:
    """The ledger's primitives: its place, identity, connections, statements and writer."""

    path: Path
    identity: Identity
    identity_path: Path
    placeholder: str
    serial: str
    _errors: tuple[type[BaseException], ...]
    _local: threading.local
    _turn_fd: int | None
    _writer_lock: threading.Lock

    @property
    def where(self) -> str:
        raise NotImplementedError

    def now(self, con: Any = None) -> float:
        raise NotImplementedError

    def _con(self) -> Any:
        raise NotImplementedError

    def _write(self, users: list[str], durable: bool = True) -> ContextManager[Any]:
        raise NotImplementedError

    def _current(self, con: Any) -> Current | None:
        """Inside a write transaction of `con`: what this connection last read and wrote of the
        budgets, if the backend can tell that no other connection has committed since (else
        None: read everything)."""
        return None

    def _forget(self) -> None:
        """This thread's connection forgets what `_current` kept (its writes rolled back, or
        written around the cache)."""

    def _write_one(self, sql: str, params: tuple = (), *, durable: bool = True) -> Any:
        raise NotImplementedError

    def _write_lazily(self, sql: str, params: tuple) -> None:
        raise NotImplementedError

    def _exec(self, con: Any, sql: str, params: tuple = ()) -> Any:
        raise NotImplementedError

    def _submit(self, job: ChargeJob | StatementJob, failed: Any = None) -> Pending:
        raise NotImplementedError

    def _charge_in(self, con: Any, job: ChargeJob) -> Any:
        raise NotImplementedError

    def _append(self, con: Any, user: str, kind: str, record: list[Any], current: Current | None = None) -> str:
        raise NotImplementedError

    def _tables(self, con: Any) -> set[str]:
        raise NotImplementedError

    def _schema_lock(self, con: Any) -> None:
        raise NotImplementedError

    def _backup_before_migrating(self, con: Any, version: int) -> None:
        raise NotImplementedError

    def _close_connection(self) -> None:
        raise NotImplementedError

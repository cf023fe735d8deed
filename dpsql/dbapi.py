"""PEP 249 (DB-API 2.0) over an embedded Session: dpsql without a server.

conn = dpsql.connect("policy.toml", user="alice")
cur = conn.cursor()
cur.execute("SELECT sex, AVG(age) FROM patients GROUP BY sex")
cur.fetchall(); cur.dp["ci"]
"""

from __future__ import annotations

import datetime
import time
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from .answer_record import AnswerRecord
from .config import NUMERIC_TYPES, Policy, load_policy
from .errors import InterfaceError, NotSupportedError
from .session import Result, Session

apilevel = "2.0"
threadsafety = 1  # threads may share the module, not connections
paramstyle = "pyformat"  # %s and %(name)s; $1 is accepted too


class _TypeSet(frozenset):
    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            return other.upper().split("(")[0] in self
        return frozenset.__eq__(self, other)

    def __hash__(self) -> int:
        return frozenset.__hash__(self)


STRING = _TypeSet({"VARCHAR", "TEXT", "CHAR", "BPCHAR", "STRING", "UUID", "ENUM"})
BINARY = _TypeSet({"BLOB", "BYTEA", "BINARY", "VARBINARY"})
NUMBER = _TypeSet({*NUMERIC_TYPES, "BOOLEAN"})
DATETIME = _TypeSet({"DATE", "TIME", "TIMESTAMP", "TIMESTAMP WITH TIME ZONE", "INTERVAL", "TIMESTAMPTZ"})
ROWID = _TypeSet({"ROWID"})

Date = datetime.date
Time = datetime.time
Timestamp = datetime.datetime


def DateFromTicks(ticks: float) -> datetime.date:
    return Date(*time.localtime(ticks)[:3])


def TimeFromTicks(ticks: float) -> datetime.time:
    return Time(*time.localtime(ticks)[3:6])


def TimestampFromTicks(ticks: float) -> datetime.datetime:
    return Timestamp(*time.localtime(ticks)[:6])


def Binary(value: bytes) -> bytes:
    return bytes(value)


def connect(policy: str | Path | Policy, user: str, *, ledger: str | Path | None = None) -> "Connection":
    """Open an embedded connection for analyst `user` under the policy file `policy`."""
    if not isinstance(policy, Policy):
        policy = load_policy(policy, ledger_path=ledger)
    return Connection(Session(policy, user))


class Connection:
    def __init__(self, session: Session):
        self._session: Session | None = session

    @property
    def session(self) -> Session:
        if self._session is None:
            raise InterfaceError("the connection is closed")
        return self._session

    def randomized_response(
        self,
        table: str,
        columns: list[str],
        epsilon: float,
        method: str = "auto",
        epsilon_size: float | None = None,
        null_category: bool = True,
    ):
        """One randomized row per person of `table` over `columns`, charged at epsilon
        (Session.randomized_response); `.estimates()` gives the debiased counts."""
        return self.session.randomized_response(table, columns, epsilon, method, epsilon_size, null_category)

    def publish_synopsis(self, name: str):
        """Publish the policy's synopsis `name`, charged once to its charged_to
        (Session.publish_synopsis); then queries over it are answered from it, free."""
        return self.session.publish_synopsis(name)

    def cursor(self) -> "Cursor":
        return Cursor(self)

    def commit(self) -> None:
        self.session  # noqa: B018 - raises when closed; there is nothing to commit (read-only)

    def rollback(self) -> None:
        self.session  # noqa: B018

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Cursor:
    arraysize = 1

    def __init__(self, connection: Connection):
        self.connection = connection
        self._result: Result | None = None
        self._pos = 0
        self.dp: AnswerRecord | None = None  # read as a mapping too: cur.dp["cost"]
        self.rowcount = -1
        self._closed = False

    @property
    def description(self):
        if self._result is None or not self._result.names:
            return None
        return [(n, t, None, None, None, None, None) for n, t in zip(self._result.names, self._result.types)]

    def execute(self, operation: str, parameters: Sequence[Any] | Mapping[str, Any] | None = None) -> "Cursor":
        if self._closed:
            raise InterfaceError("the cursor is closed")
        self._result = None
        self.dp = None
        self.rowcount = -1
        self._pending = []
        self._show(self.connection.session.execute(operation, parameters))
        return self

    def execute_batch(
        self,
        operations: Sequence[str],
        epsilon: float | None = None,
        delta: float | None = None,
        weights: Sequence[float] | None = None,
    ) -> list[list[tuple]]:
        """Answer several DP queries calibrated jointly (PLD planning), charged once as one
        (epsilon, delta) release. The cursor holds the first result; nextset() moves on."""
        if self._closed:
            raise InterfaceError("the cursor is closed")
        results = self.connection.session.execute_batch(operations, epsilon, delta, weights)
        self._pending = results[1:]
        self._show(results[0])
        return [r.rows for r in results]

    def nextset(self) -> bool | None:
        """Move to the next result of a batch; None when there is none."""
        if not getattr(self, "_pending", None):
            return None
        self._show(self._pending.pop(0))
        return True

    def _show(self, result: Result) -> None:
        self._result = result
        self._pos = 0
        self.dp = result.dp
        self.rowcount = len(result.rows) if result.names else -1

    def executemany(self, operation: str, seq_of_parameters) -> None:
        for params in seq_of_parameters:
            self.execute(operation, params)

    def _rows(self) -> list[tuple]:
        if self._result is None or not self._result.names:
            raise InterfaceError("no result set: execute a query first")
        return self._result.rows

    def fetchone(self):
        rows = self._rows()
        if self._pos >= len(rows):
            return None
        self._pos += 1
        return rows[self._pos - 1]

    def fetchmany(self, size: int | None = None) -> list[tuple]:
        rows = self._rows()
        size = self.arraysize if size is None else size
        out = rows[self._pos : self._pos + size]
        self._pos += len(out)
        return out

    def fetchall(self) -> list[tuple]:
        rows = self._rows()
        out = rows[self._pos :]
        self._pos = len(rows)
        return out

    def __iter__(self) -> Iterator[tuple]:
        while (row := self.fetchone()) is not None:
            yield row

    def setinputsizes(self, sizes) -> None:
        pass

    def setoutputsize(self, size, column=None) -> None:
        pass

    def callproc(self, *args):
        raise NotSupportedError("stored procedures are not supported")

    def close(self) -> None:
        self._closed = True
        self._result = None

    def __enter__(self) -> "Cursor":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

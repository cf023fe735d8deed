"""The protocol's message loop: simple and extended query (Parse, Bind, Describe, Execute,
Close, Sync, Flush), prepared statements and portals, an error skipping to the next Sync, and
answers written as row descriptions, data rows and command tags. Each statement is answered by
app.Connection's routing. A mixin of app.Connection."""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass, field
from typing import Any

from ..errors import Error
from ..sql.classify import split_statements
from ..sql.route import Kind, word_kind
from . import codec, copyout
from .params import infer_parameter_types


@dataclass
class Answer:
    """One statement's outcome in wire terms."""

    fields: list[codec.Field] | None
    rows: list[tuple]
    tag: str
    notices: list[str] = field(default_factory=list)
    copy: copyout.Copy | None = None  # sent as COPY TO STDOUT data, not as rows
    empty: bool = False  # an empty statement (comments, semicolons): EmptyQueryResponse


# Extended-query messages whose answers wait for the client's Sync or Flush, as PostgreSQL's do.
_BUFFERED = {b"P", b"B", b"D", b"E", b"C"}


def _session_setting(text: str, local_ledger: bool) -> bool:
    """SET, RESET or SHOW of one setting; SHOW dpsql.budget too when the ledger is a local SQLite
    file (a WAL read of a few rows, ~0.1 ms, that never waits for writers), not across a network."""
    return (
        word_kind(text) in (Kind.SET, Kind.SET_LOCAL, Kind.SHOW)
        and ";" not in text
        and len(text) < 1000
        and (local_ledger or "budget" not in text.lower())
    )


@dataclass
class Prepared:
    sql: str
    param_oids: list[int]


@dataclass
class Portal:
    stmt: Prepared
    params: list[Any]
    result_formats: list[int]
    answer: Answer | None = None
    pos: int = 0


class Messages:
    """Reading the client's messages and answering each."""

    async def loop(self) -> None:
        skipping = False
        self._batching = True
        while True:
            kind, body = await self.read_message()
            if kind == b"X":
                return
            if kind == b"S":
                skipping = False
                self.send(codec.ready(self.status))
                await self.flush()
                continue
            if kind == b"H":
                await self.flush()
                continue
            if skipping:
                continue
            try:
                if kind == b"Q":
                    await self.simple_query(codec.Reader(body).cstring())
                    self.send(codec.ready(self.status))
                elif kind == b"P":
                    self.parse(codec.Reader(body))
                elif kind == b"B":
                    self.bind(codec.Reader(body))
                elif kind == b"D":
                    await self.describe(codec.Reader(body))
                elif kind == b"E":
                    await self.execute(codec.Reader(body))
                elif kind == b"C":
                    self.close_object(codec.Reader(body))
                elif kind in (b"d", b"c", b"f"):
                    continue  # CopyData/Done/Fail outside COPY: ignored, as PostgreSQL does (a client sends
                    # them right behind a COPY FROM STDIN that was refused; answering them desynchronised asyncpg)
                else:
                    raise codec.ProtocolError(f"unexpected message type {kind!r}")
            except codec.ProtocolError as e:  # PostgreSQL's answer to a malformed message: FATAL, then close
                self.send(codec.error_response("08P01", f"protocol violation: {e}", severity="FATAL"))
                await self.flush()
                raise
            except (ConnectionError, asyncio.IncompleteReadError):
                raise  # the client is gone: nothing to answer
            except Exception as e:  # an Error, or a failure inside dpsql: answered, and the session goes on
                if isinstance(e, UnicodeDecodeError):
                    e = Error(
                        'invalid byte sequence for encoding "UTF8"',
                        sqlstate="22021",
                        hint="send the statement and its parameters in UTF-8",
                    )
                e = self.internal(e, self._statement_of(kind, body))
                self.send(codec.error_response(e.sqlstate, e.message, e.hint))
                if self.status == "T":
                    self.status = "E"
                if kind == b"Q":
                    self.send(codec.ready(self.status))
                else:
                    skipping = True  # as PostgreSQL: the rest up to the client's Sync is ignored
            if kind not in _BUFFERED:
                await self.flush()

    def _statement_of(self, kind: bytes, body: bytes) -> str:
        """The SQL a message concerns, for the operator's log of an internal error (never sent)."""
        try:
            r = codec.Reader(body)
            if kind in (b"Q", b"P"):
                if kind == b"P":
                    r.cstring()  # the statement's name
                return r.cstring()
            if kind == b"B":
                r.cstring()
                stmt = self.statements.get(r.cstring())
                return stmt.sql if stmt is not None else ""
            if kind in (b"D", b"E"):
                what = chr(r.byte()) if kind == b"D" else "P"
                name = r.cstring()
                stmt = self.statements.get(name) if what == "S" else getattr(self.portals.get(name), "stmt", None)
                return stmt.sql if stmt is not None else ""
        except Exception:  # noqa: BLE001 - a malformed message has no statement to log
            pass
        return ""

    async def simple_query(self, text: str) -> None:
        if _session_setting(text, self.server.local_ledger):  # no engine, no waiting: on the loop, no thread hop
            answers, error = self.run_script(text)
        else:
            answers, error = await self.run_blocking(self.run_script, text)
        if not answers and error is None:  # nothing but comments and semicolons
            self.send(codec.message(b"I"))
        for a in answers:
            self._send_answer(a, [], 0, 0, describe=True)
        if error is not None:
            raise error

    def _send_answer(self, a: Answer, formats: list[int], start: int, limit: int, describe: bool) -> int:
        for n in a.notices:
            self.send(codec.notice(n))
        if a.copy is not None:
            self.send(copyout.response(a.copy, len(a.fields or [])))
            for payload in copyout.encode(a.copy, [f.name for f in a.fields], [f.oid for f in a.fields], a.rows):
                self.send(copyout.data(payload))
            self.send(codec.message(b"c"))
            self.send(codec.command_complete(a.tag))
            return len(a.rows)
        if a.fields is None:
            self.send(codec.command_complete(a.tag))
            return 0
        fields = [codec.Field(f.name, f.oid, _format(formats, i)) for i, f in enumerate(a.fields)]
        if describe:
            self.send(codec.row_description(fields))
        end = len(a.rows) if limit <= 0 else min(len(a.rows), start + limit)
        for row in a.rows[start:end]:
            self.send(codec.data_row([codec.encode(v, f.oid, f.format) for v, f in zip(row, fields)]))
        if end < len(a.rows):
            self.send(codec.message(b"s"))
        else:
            self.send(codec.command_complete(a.tag))
        return end

    def parse(self, r: codec.Reader) -> None:
        name, sql = r.cstring(), r.cstring()
        oids = [r.int32() for _ in range(r.int16())]
        if len(split_statements(sql, self.server.policy.limits)) > 1:
            raise Error("cannot insert multiple commands into a prepared statement", sqlstate="42601")
        inferred = self._param_types.get(sql)
        if inferred is None:
            inferred = infer_parameter_types(sql, self.server.engine.schema())
            if len(self._param_types) >= 512:
                self._param_types.pop(next(iter(self._param_types)))
            self._param_types[sql] = inferred
        n = max(len(oids), len(inferred))
        oids = [
            (oids[i] if i < len(oids) and oids[i] else (inferred[i] if i < len(inferred) else codec.TEXT))
            for i in range(n)
        ]
        self.statements[name] = Prepared(sql, oids)
        self.send(codec.message(b"1"))

    def bind(self, r: codec.Reader) -> None:
        portal, name = r.cstring(), r.cstring()
        stmt = self.statements.get(name)
        if stmt is None:
            raise Error(f'prepared statement "{name}" does not exist', sqlstate="26000")
        fmts = [r.int16() for _ in range(r.int16())]
        count = r.int16()
        if len(fmts) not in (0, 1, count):
            raise codec.ProtocolError(f"bind message has {len(fmts)} parameter formats but {count} parameters")
        values = []
        for i in range(count):
            n = r.int32()
            if n < -1:
                raise codec.ProtocolError(f"invalid length {n} of bind parameter {i + 1}")
            raw = None if n == -1 else r.bytes(n)
            oid = stmt.param_oids[i] if i < len(stmt.param_oids) else codec.TEXT
            try:
                values.append(codec.decode_param(raw, oid, _format(fmts, i)))
            except ValueError as e:
                raise Error(str(e), sqlstate="22P02") from None
            except (struct.error, UnicodeDecodeError):
                raise Error(
                    f"incorrect binary data format in bind parameter {i + 1}",
                    sqlstate="22P03",
                    hint=f"a parameter of type {codec.TYPE_NAMES.get(oid, oid)} was expected",
                ) from None
        result_formats = [r.int16() for _ in range(r.int16())]
        if r.pos != len(r.data):
            raise codec.ProtocolError("bind message has trailing bytes")
        self.portals[portal] = Portal(stmt, values, result_formats)
        self.send(codec.message(b"2"))

    async def describe(self, r: codec.Reader) -> None:
        what, name = chr(r.byte()), r.cstring()
        if what == "S":
            stmt = self.statements.get(name)
            if stmt is None:
                raise Error(f'prepared statement "{name}" does not exist', sqlstate="26000")
            self.send(
                codec.message(
                    b"t", codec.int16(len(stmt.param_oids)) + b"".join(codec.int32(o) for o in stmt.param_oids)
                )
            )
            fields = await self._shape(stmt.sql, None)
            formats: list[int] = []
        elif name not in self.portals and name in self.cursors.open:
            fields, formats = self.cursors.open[name].fields, []  # a DECLAREd cursor is a portal too (psycopg 3)
        else:
            portal = self.portals.get(name)
            if portal is None:
                raise Error(f'portal "{name}" does not exist', sqlstate="34000")
            fields = await self._shape(portal.stmt.sql, portal.params)
            formats = portal.result_formats
        if fields is None:
            self.send(codec.message(b"n"))
        else:
            self.send(
                codec.row_description([codec.Field(f.name, f.oid, _format(formats, i)) for i, f in enumerate(fields)])
            )

    async def execute(self, r: codec.Reader) -> None:
        name, limit = r.cstring(), r.int32()
        portal = self.portals.get(name)
        if portal is None:
            raise Error(f'portal "{name}" does not exist', sqlstate="34000")
        if portal.answer is None:
            if not portal.params and _session_setting(portal.stmt.sql, self.server.local_ledger):
                portal.answer = self.run_statement(portal.stmt.sql)  # as in a simple query: on the loop
            else:
                portal.answer = await self.run_blocking(self.run_statement, portal.stmt.sql, portal.params or None)
            if portal.answer.empty:
                portal.answer = None
                self.send(codec.message(b"I"))
                return
        portal.pos = self._send_answer(portal.answer, portal.result_formats, portal.pos, limit, describe=False)

    async def _shape(self, sql: str, params: list[Any] | None) -> list[codec.Field] | None:
        """A statement's result shape: a known one on the loop (psycopg 3 describes every
        statement it sends, SET and SHOW included), a new one on a worker thread."""
        if sql in self._shapes and word_kind(sql) != Kind.FETCH:
            return self._shapes[sql]
        return await self.run_blocking(self.describe_statement, sql, params)

    def close_object(self, r: codec.Reader) -> None:
        what, name = chr(r.byte()), r.cstring()
        (self.statements if what == "S" else self.portals).pop(name, None)
        self.send(codec.message(b"3"))


def _format(formats: list[int], i: int) -> int:
    if not formats:
        return 0
    return formats[0] if len(formats) == 1 else (formats[i] if i < len(formats) else 0)

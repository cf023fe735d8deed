"""The protocol's message loop: simple and extended query (Parse, Bind, Describe, Execute,
Close, Sync, Flush), prepared statements and portals, and answers written as row descriptions,
data rows and command tags. What follows each message (skipping to the next Sync after an error,
ReadyForQuery, flushing) is decided by wire/sequence.py; this loop does the I/O. Each statement
is answered by app.Connection's routing. A mixin of app.Connection."""

from __future__ import annotations

import asyncio
from typing import Any

from ..errors import Error
from ..sql.classify import split_statements
from ..sql.route import Kind, word_kind
from .params import infer_parameter_types
from .wire import codec, copyout, extended, values
from .wire.codes import Backend, Frontend
from .wire.extended import Answer, Prepared
from .wire.sequence import Status


def _session_setting(text: str, local_ledger: bool, kind: Kind | None = None) -> bool:
    """SET, RESET or SHOW of one setting; SHOW dpsql.budget too when the ledger is a local SQLite
    file (a WAL read of a few rows, ~0.1 ms, that never waits for writers), not across a network.
    `kind`: the text's word_kind when the caller knows it (a prepared statement's)."""
    return (
        (kind if kind is not None else word_kind(text)) in (Kind.SET, Kind.SET_LOCAL, Kind.SHOW)
        and ";" not in text
        and len(text) < 1000
        and (local_ledger or "budget" not in text.lower())
    )


class Messages:
    """Reading the client's messages and answering each."""

    @property
    def status(self) -> Status:
        """The transaction status ReadyForQuery reports, kept and moved by the sequencing."""
        return self.sequence.status

    async def loop(self) -> None:
        sequence = self.sequence
        self._batching = True
        while True:
            kind, body = await self.read_message()
            step = sequence.receive(kind)
            if step.end:
                return
            if step.process:
                try:
                    await self._dispatch(kind, body)
                    step = sequence.done(kind)
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
                    e = self.internal(e, extended.statement_of(kind, body, self.statements, self.portals))
                    self.send(codec.error_response(e.sqlstate, e.message, e.hint))
                    step = sequence.failed(kind)
            if step.ready is not None:
                self.send(codec.ready(step.ready))
            if step.flush:
                await self.flush()

    async def _dispatch(self, kind: bytes, body: bytes) -> None:
        """One message handed to its handler; an unknown type is a protocol violation."""
        if kind == Frontend.QUERY:
            await self.simple_query(codec.Reader(body).cstring())
        elif kind == Frontend.PARSE:
            self.parse(codec.Reader(body))
        elif kind == Frontend.BIND:
            self.bind(codec.Reader(body))
        elif kind == Frontend.DESCRIBE:
            await self.describe(codec.Reader(body))
        elif kind == Frontend.EXECUTE:
            await self.execute(codec.Reader(body))
        elif kind == Frontend.CLOSE:
            self.close_object(codec.Reader(body))
        else:
            raise codec.ProtocolError(f"unexpected message type {kind!r}")

    async def simple_query(self, text: str) -> None:
        if _session_setting(text, self.server.local_ledger):  # no engine, no waiting: on the loop, no thread hop
            answers, error = self.run_script(text)
        else:
            answers, error = await self.run_blocking(self.run_script, text)
        if not answers and error is None:  # nothing but comments and semicolons
            self.send(codec.message(Backend.EMPTY_QUERY_RESPONSE))
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
            self.send(codec.message(Backend.COPY_DONE))
            self.send(codec.command_complete(a.tag))
            return len(a.rows)
        if a.fields is None:
            self.send(codec.command_complete(a.tag))
            return 0
        fields = [codec.Field(f.name, f.oid, extended.result_format(formats, i)) for i, f in enumerate(a.fields)]
        if describe:
            self.send(codec.row_description(fields))
        end = len(a.rows) if limit <= 0 else min(len(a.rows), start + limit)
        for row in a.rows[start:end]:
            self.send(codec.data_row([values.encode(v, f.oid, f.format) for v, f in zip(row, fields)]))
        if end < len(a.rows):
            self.send(codec.message(Backend.PORTAL_SUSPENDED))
        else:
            self.send(codec.command_complete(a.tag))
        return end

    def _admit(self, sql: str) -> None:
        """In a failed block, as PostgreSQL: Parse, Bind, Describe and Execute of anything but
        what ends the block (COMMIT, ROLLBACK, ROLLBACK TO SAVEPOINT) are refused at once (25P02),
        before any work; the statement's first word decides, as in PostgreSQL's check."""
        if self.sequence.status == "E":
            self.sequence.admit(word_kind(sql) in (Kind.ROLLBACK, Kind.COMMIT))

    def parse(self, r: codec.Reader) -> None:
        msg = extended.read_parse(r)
        self._admit(msg.sql)
        if len(split_statements(msg.sql, self.server.policy.limits)) > 1:
            raise Error("cannot insert multiple commands into a prepared statement", sqlstate="42601")
        inferred = self._param_types.get(msg.sql)
        if inferred is None:
            inferred = infer_parameter_types(msg.sql, self.server.engine.schema())
            if len(self._param_types) >= 512:
                self._param_types.pop(next(iter(self._param_types)))
            self._param_types[msg.sql] = inferred
        self.statements[msg.name] = Prepared(msg.sql, extended.param_oids(msg.param_oids, inferred), word_kind(msg.sql))
        self.send(codec.message(Backend.PARSE_COMPLETE))

    def bind(self, r: codec.Reader) -> None:
        name, portal = extended.read_bind(r, self.statements)
        self._admit(portal.stmt.sql)
        self.portals[name] = portal
        self.send(codec.message(Backend.BIND_COMPLETE))

    async def describe(self, r: codec.Reader) -> None:
        what, name = extended.read_target(r)
        if what == "S":
            stmt = self.statements.get(name)
            if stmt is None:
                raise Error(f'prepared statement "{name}" does not exist', sqlstate="26000")
            self._admit(stmt.sql)
            self.send(codec.parameter_description(stmt.param_oids))
            fields = await self._shape(stmt, None)
            formats: list[int] = []
        elif name not in self.portals and name in self.cursors.open:
            fields, formats = self.cursors.open[name].fields, []  # a DECLAREd cursor is a portal too (psycopg 3)
        else:
            portal = self.portals.get(name)
            if portal is None:
                raise Error(f'portal "{name}" does not exist', sqlstate="34000")
            self._admit(portal.stmt.sql)
            fields = await self._shape(portal.stmt, portal.params)
            formats = portal.result_formats
        if fields is None:
            self.send(codec.message(Backend.NO_DATA))
        else:
            self.send(
                codec.row_description(
                    [codec.Field(f.name, f.oid, extended.result_format(formats, i)) for i, f in enumerate(fields)]
                )
            )

    async def execute(self, r: codec.Reader) -> None:
        name, limit = extended.read_execute(r)
        portal = self.portals.get(name)
        if portal is None:
            raise Error(f'portal "{name}" does not exist', sqlstate="34000")
        self._admit(portal.stmt.sql)
        if portal.answer is None:
            if not portal.params and _session_setting(portal.stmt.sql, self.server.local_ledger, portal.stmt.kind):
                portal.answer = self.run_statement(portal.stmt.sql)  # as in a simple query: on the loop
            else:
                portal.answer = await self.run_blocking(self.run_statement, portal.stmt.sql, portal.params or None)
            if portal.answer.empty:
                portal.answer = None
                self.send(codec.message(Backend.EMPTY_QUERY_RESPONSE))
                return
        portal.pos = self._send_answer(portal.answer, portal.result_formats, portal.pos, limit, describe=False)

    async def _shape(self, stmt: Prepared, params: list[Any] | None) -> list[codec.Field] | None:
        """A statement's result shape: a known one on the loop (psycopg 3 describes every
        statement it sends, SET and SHOW included), a new one on a worker thread."""
        if stmt.sql in self._shapes and stmt.kind != Kind.FETCH:
            return self._shapes[stmt.sql]
        return await self.run_blocking(self.describe_statement, stmt.sql, params)

    def close_object(self, r: codec.Reader) -> None:
        what, name = extended.read_target(r)
        (self.statements if what == "S" else self.portals).pop(name, None)
        self.send(codec.message(Backend.CLOSE_COMPLETE))

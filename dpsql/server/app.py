"""`dpsql serve`: one PostgreSQL wire protocol (3.0) connection over asyncio, with its own Session.

Engine work runs on a thread pool, never on the event loop. Describe never executes and never
charges. Errors carry SQLSTATEs; in the extended protocol an error skips to the next Sync, as
PostgreSQL does. A hostile or broken client only ever loses its own connection.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
import ssl
from copy import deepcopy
from typing import TYPE_CHECKING, Any, Callable

from .. import auto_bounds
from ..answer_record import AnswerRecord
from ..errors import Error, InternalError
from ..session import Result, Session
from ..sql.classify import first_word, split_statements, without_leading_comments
from ..sql.route import Entry, Kind, Routed, word_kind
from . import resets
from .catalog import is_catalog_query
from .cursors import Cursors
from .login import Login
from .messages import Messages
from .transport import Transport, _peer
from .wire import codec, copyout, types
from .wire.extended import Answer, Portal, Prepared
from .wire.sequence import Sequence

if TYPE_CHECKING:
    from .listener import Server

log = logging.getLogger("dpsql.server")
statements = logging.getLogger("dpsql.statements")  # every statement and its outcome (serve --log-statements)


# Statements the connection answers itself (transactions, cursors, COPY), never batched nor described.
_WIRE_KINDS = {
    Kind.BEGIN,
    Kind.COMMIT,
    Kind.ROLLBACK,
    Kind.SAVEPOINT,
    Kind.DECLARE,
    Kind.FETCH,
    Kind.MOVE,
    Kind.CLOSE,
    Kind.COPY,
    Kind.DISCARD,
    Kind.DEALLOCATE,
    Kind.NOTIFICATIONS,
}


_CANCEL_BACKEND = re.compile(r"SELECT\s+(?:pg_catalog\.)?pg_cancel_backend\s*\(\s*(\d{1,10})\s*\)\s*;?", re.I)


class Connection(Transport, Login, Messages):
    """One client's connection: its transport, login and message loop (mixins), and the
    answer to each statement (below)."""

    def __init__(self, server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.server = server
        self.reader, self.writer = reader, writer
        self.pid = server.new_pid()
        self.address = _peer(writer)
        self.heard = asyncio.get_running_loop().time()  # the last complete read while logging in
        self.greeted = False  # whether its first message (startup packet, encryption request) came whole
        self.deadline = self.heard + server.limits.login_timeout
        self._handshaking = False  # in a TLS handshake, where no ErrorResponse can be sent
        self._dropped = asyncio.Event()  # given up for a newcomer while logging in
        self.key = secrets.randbelow(2**31 - 1)
        self.session: Session | None = None
        self.user = ""
        self.sequence = Sequence()  # the transaction status (self.status) and its moves, skipping to Sync
        # Settings as PostgreSQL scopes them: a transaction's SETs are undone by its rollback, and
        # SET LOCAL ends with the transaction (the settings before BEGIN, before the first SET LOCAL).
        self._before_transaction: Any = None
        self._before_local: Any = None
        self.statements: dict[str, Prepared] = {}
        self.portals: dict[str, Portal] = {}
        self.busy = False
        self.thread: int | None = None
        self.tls = False
        # Result shapes and parameter types depend on the SQL text only (schema and policy are
        # fixed while serving), so repeated statements skip re-analysis on Parse and Describe.
        self._shapes: dict[str, list[codec.Field] | None] = {}
        self.cursors = Cursors()
        self._param_types: dict[str, list[int]] = {}
        self._out: list[bytes] = []  # messages queued for the next flush
        self._queued = 0
        self._batching = False  # set in the query loop, where Sync and Flush flush

    # Lifecycle ---------------------------------------------------------------------------
    async def run(self) -> None:
        server = self.server
        try:
            # Half-open sockets fill these caps, never the authenticated analysts' one.
            if server._closing:
                self.send(codec.error_response("53300", "sorry, the server is shutting down", severity="FATAL"))
                await self.flush()
                return
            server.admit_ungreeted(self)
            try:
                ok = await asyncio.wait_for(self.startup(), server.limits.login_timeout)
            finally:
                server.ungreeted.pop(self.pid, None)
                server.pending.pop(self.pid, None)
            if not ok:
                return
            await self.loop()
        except (
            asyncio.IncompleteReadError,
            ConnectionError,
            codec.ProtocolError,
            asyncio.TimeoutError,
            ssl.SSLError,
            UnicodeDecodeError,
            OSError,
        ):
            pass
        except Exception:  # noqa: BLE001 - one broken connection never takes the server down
            log.exception("connection %s failed", self.pid)
        finally:
            server.connections.pop(self.pid, None)
            if self.session is not None:
                self.session.close()  # the server's engine and ledger stay open for the others
            self.close()

    # Statement routing ---------------------------------------------------------------------
    def _answer_session(self, result: Result) -> Answer:
        fields = None
        if result.names:
            fields = [codec.Field(n, types.oid_of(t)) for n, t in zip(result.names, result.types)]
        notices = [] if result.dp is None else _notices(result.dp)
        return Answer(fields, result.rows, result.status, notices)

    def run_statement(self, sql: str, params: list[Any] | None = None, routed: Routed | None = None) -> Answer:
        """One statement, logged with its outcome (command tag or SQLSTATE) when the operator
        asked for it. A failure inside dpsql becomes an XX000 error with a reference (`internal`)."""
        try:
            answer = self._run_statement(sql, params, routed)
        except Exception as e:
            error = self.internal(e, sql)
            if self.server.log_statements:
                statements.info("%s [%s] %s: %s", self.user, self.pid, _outcome(error), _one_line(sql))
            if error is e:
                raise
            raise error from e
        if self.server.log_statements and not answer.empty:
            statements.info("%s [%s] %s: %s", self.user, self.pid, answer.tag, _one_line(sql))
        return answer

    def internal(self, e: BaseException, sql: str) -> Error:
        """What the client is told of an exception: a dpsql error as it is; anything else (a bug,
        or a session's InternalError wrapping one) an XX000 error with a short reference, which
        the operator's log carries beside the statement and the traceback. The traceback never
        reaches the client, and the session stays usable."""
        if isinstance(e, Error) and not (isinstance(e, InternalError) and e.__cause__ is not None):
            return e
        if getattr(e, "reference", None):
            return e  # already reported (a statement run inside DECLARE or COPY)
        reference = secrets.token_hex(4)
        log.error(
            "internal error, reference %s, for %s [%s] on the statement: %s",
            reference,
            self.user,
            self.pid,
            _one_line(sql),
            exc_info=e.__cause__ if isinstance(e, InternalError) else e,
        )
        error = InternalError(
            f"internal error in dpsql (reference {reference}); the statement was not answered",
            hint="the connection is still usable; please report the reference to the operator, "
            "whose server log holds the details",
        )
        error.reference = reference
        return error

    def _end_transaction(self, committed: bool) -> None:
        """Back to idle: a rollback undoes the transaction's SETs, a commit only its SET LOCALs."""
        restore = self._before_local if committed else self._before_transaction
        if restore is not None and self.session is not None:
            self.session.settings = restore
        self._before_transaction = self._before_local = None

    def _run_statement(self, sql: str, params: list[Any] | None = None, routed: Routed | None = None) -> Answer:
        """One statement, on a worker thread, answered as its route says (sql/route.py): what the
        connection answers itself here (_WIRE_ANSWERS), everything else by the analyst's Session."""
        routed = routed or self.session.route(sql, WIRE_ROUTES)
        if routed.kind == Kind.EMPTY:
            return Answer(None, [], "", empty=True)
        if self.sequence.status == "E":  # a failed block: the sequencing admits what ends it only
            self.sequence.admit(routed.kind in (Kind.ROLLBACK, Kind.COMMIT))
        answer = _WIRE_ANSWERS.get(routed.kind)
        if answer is not None:
            return answer(self, routed, params)
        return self._answer_session(self.session.execute(routed, params or None))

    def _begin(self, routed: Routed, params: list[Any] | None) -> Answer:
        if self.sequence.begin():
            self._before_transaction, self._before_local = deepcopy(self.session.settings), None
        return Answer(None, [], "BEGIN")

    def _commit(self, routed: Routed, params: list[Any] | None) -> Answer:
        committed = self.sequence.commit()
        self._end_transaction(committed)
        return Answer(None, [], "COMMIT" if committed else "ROLLBACK")

    def _rollback(self, routed: Routed, params: list[Any] | None) -> Answer:
        if "TO" in routed.text.upper().split():
            self.sequence.rollback_to()
            return Answer(None, [], "ROLLBACK")
        self.sequence.rollback()
        self._end_transaction(committed=False)
        return Answer(None, [], "ROLLBACK")

    def _set_local(self, routed: Routed, params: list[Any] | None) -> Answer:
        if self.status == "I":  # as PostgreSQL: outside a transaction block it has no effect
            return Answer(None, [], "SET", ["SET LOCAL has no effect outside a transaction block"])
        if self._before_local is None:
            self._before_local = deepcopy(self.session.settings)
        return self._answer_session(self.session.execute(routed, params or None))

    def _savepoint(self, routed: Routed, params: list[Any] | None) -> Answer:
        tag = first_word(routed.text)
        self.sequence.savepoint(f"{tag} SAVEPOINT" if tag == "RELEASE" else tag)
        return Answer(None, [], tag)

    def _deallocate(self, routed: Routed, params: list[Any] | None) -> Answer:
        name = resets.deallocated(routed.text)
        if name is None:
            self.statements.clear()
            return Answer(None, [], "DEALLOCATE ALL")
        if self.statements.pop(name, None) is None:
            raise Error(f'prepared statement "{name}" does not exist', sqlstate="26000")
        return Answer(None, [], "DEALLOCATE")

    def _advisory(self, routed: Routed, params: list[Any] | None) -> Answer:
        lock = routed.detail  # granted at once: dpsql is read-only, the lock guards nothing in it
        return Answer([codec.Field(lock.column, lock.oid)], [(lock.value,)], "SELECT 1")

    def _declare(self, routed: Routed, params: list[Any] | None) -> Answer:
        name, query = Cursors.declared(routed.text)
        inner = self.run_statement(query, params)
        if inner.fields is None:
            raise Error("DECLARE CURSOR needs a query that returns rows", sqlstate="42601")
        self.cursors.add(name, inner.fields, inner.rows)
        return Answer(None, [], "DECLARE CURSOR", inner.notices)

    def _fetch(self, routed: Routed, params: list[Any] | None) -> Answer:
        fields, rows, tag = self.cursors.fetch(routed.text)
        return Answer(fields if routed.kind == Kind.FETCH else None, rows, tag)

    def _close(self, routed: Routed, params: list[Any] | None) -> Answer:
        self.cursors.close(routed.text)
        return Answer(None, [], "CLOSE CURSOR")

    def _copy(self, routed: Routed, params: list[Any] | None) -> Answer:
        copy = copyout.parse(routed.text)
        inner = self.run_statement(copy.query, params)
        if inner.fields is None:
            raise Error("COPY needs a query that returns rows", sqlstate="42601")
        return Answer(inner.fields, inner.rows, f"COPY {len(inner.rows)}", inner.notices, copy)

    def _signal(self, routed: Routed, params: list[Any] | None) -> Answer:
        # pgAdmin's Query Tool cancels through another connection of the same analyst
        return Answer(
            [codec.Field("pg_cancel_backend", types.BOOL)], [(self._cancel_backend(int(routed.detail[1])),)], "SELECT 1"
        )

    def _catalog(self, routed: Routed, params: list[Any] | None) -> Answer:
        names, oids, rows = self.server.catalog.answer(routed.text, params or [], self.session, self.user, self.pid)
        return Answer([codec.Field(n, o) for n, o in zip(names, oids)], rows, f"SELECT {len(rows)}")

    def _discard(self, what: str) -> str:
        """DISCARD ALL is, as in PostgreSQL, CLOSE ALL, RESET ALL, DEALLOCATE ALL and DISCARD TEMP
        (what a pooler such as pgbouncer sends between clients); DISCARD TEMP drops the session's
        temporary views; PLANS and SEQUENCES have nothing to discard in dpsql."""
        if what == "ALL":
            if self.status != "I":
                raise Error("DISCARD ALL cannot run inside a transaction block", sqlstate="25001")
            self.cursors.open.clear()
            self.statements.clear()
        if what in ("ALL", "TEMP"):
            self.session.discard(settings=what == "ALL", views=True)
        return what

    def _cancel_backend(self, pid: int) -> bool:
        """pg_cancel_backend(pid): the query under way on another connection of this analyst's,
        served by this process, is cancelled; another analyst's connection is theirs alone."""
        conn = self.server.connections.get(pid)
        if conn is None:
            return False
        if conn.user != self.user:
            raise Error(
                "permission denied to cancel query",
                sqlstate="42501",
                hint="only the analyst who runs a query can cancel it",
            )
        if conn is not self:  # this statement is the one under way here: nothing else to cancel
            conn.cancel()
        return True

    def run_script(self, text: str) -> tuple[list[Answer], Error | None]:
        """A simple query's statements: DP queries alone form one batch (planned jointly, refused
        or charged as a whole); otherwise they run one after another, as PostgreSQL runs them,
        and a failing statement ends the script with its error after the answers before it (a
        query that ran was charged: its answer must reach the analyst)."""
        statements = split_statements(text, self.server.policy.limits)
        routes = [self.session.route_one(s, WIRE_ROUTES) for s in statements]
        if len(routes) > 1 and not any(
            r.kind in _WIRE_KINDS or r.kind in (Kind.ADVISORY, Kind.CATALOG) for r in routes
        ):
            refused = next((r.error for r in routes if r.error is not None), None)
            if refused is not None:  # a script with a statement dpsql refuses runs none of them
                raise refused
            if self.session.batchable(routes):
                try:
                    batch = [self._answer_session(r) for r in self.session.execute_batch(statements)]
                except Exception as e:
                    error = self.internal(e, text)
                    self._log_batch(statements, [_outcome(error)] * len(statements))
                    if error is e:
                        raise
                    raise error from e
                self._log_batch(statements, [a.tag for a in batch])
                return batch, None
        answers: list[Answer] = []
        for statement, routed in zip(statements, routes):
            try:
                answers.append(self.run_statement(statement, routed=routed))
            except Error as e:
                return answers, e
        return answers, None

    def _log_batch(self, texts: list[str], outcomes: list[str]) -> None:
        """A batch's statements in the statement log, each with its outcome."""
        if self.server.log_statements:
            for text, outcome in zip(texts, outcomes):
                statements.info("%s [%s] %s: %s", self.user, self.pid, outcome, _one_line(text))

    def describe_statement(self, sql: str, params: list[Any] | None) -> list[codec.Field] | None:
        if word_kind(sql) == Kind.FETCH:  # its shape is the cursor's, which a new DECLARE may change
            return self.cursors.fields_of(sql)
        if sql in self._shapes:
            return self._shapes[sql]
        try:
            fields = self._describe_uncached(sql, params)
        except Exception as e:
            error = self.internal(e, sql)
            if self.server.log_statements:  # a driver that describes first (asyncpg) never executes it
                statements.info("%s [%s] %s, describing: %s", self.user, self.pid, _outcome(error), _one_line(sql))
            if error is e:
                raise
            raise error from e
        if len(self._shapes) >= 512:
            self._shapes.pop(next(iter(self._shapes)))
        self._shapes[sql] = fields
        return fields

    def _describe_uncached(self, sql: str, params: list[Any] | None) -> list[codec.Field] | None:
        routed = self.session.route(sql, WIRE_ROUTES)
        if routed.kind in _WIRE_KINDS or routed.kind in (Kind.SET, Kind.SET_LOCAL, Kind.NO_OP, Kind.EMPTY):
            return None  # FETCH: describe_statement; ";" (SQLAlchemy's asyncpg ping): NoData
        if routed.kind == Kind.ADVISORY:
            return [codec.Field(routed.detail.column, routed.detail.oid)]
        if routed.kind == Kind.CATALOG:
            names, oids, _ = self.server.catalog.answer(sql, params or [], self.session, self.user, self.pid)
            return [codec.Field(n, o) for n, o in zip(names, oids)]
        described = self.session.describe(routed, params)
        if described is None:
            return None
        return [codec.Field(n, types.oid_of(t)) for n, t in zip(*described)]

    # Simple query --------------------------------------------------------------------------
    # Extended query ------------------------------------------------------------------------


def _cancel_pid(text: str) -> re.Match | None:
    return _CANCEL_BACKEND.fullmatch(without_leading_comments(text).strip())


# The wire's own routes among SELECT-shaped statements, tried before the session's, in order.
WIRE_ROUTES = (
    Entry(Kind.ADVISORY, resets.advisory),
    Entry(Kind.CANCEL_BACKEND, _cancel_pid),
    Entry(Kind.CATALOG, is_catalog_query),
)

# What the connection answers itself, by route; every other route is the session's.
_WIRE_ANSWERS: dict[Kind, Callable[[Connection, Routed, list[Any] | None], Answer]] = {
    Kind.BEGIN: Connection._begin,
    Kind.COMMIT: Connection._commit,
    Kind.ROLLBACK: Connection._rollback,
    Kind.SET_LOCAL: Connection._set_local,
    Kind.SAVEPOINT: Connection._savepoint,
    Kind.DISCARD: lambda c, r, p: Answer(None, [], f"DISCARD {c._discard(resets.discard(r.text))}"),
    Kind.DEALLOCATE: Connection._deallocate,
    Kind.NOTIFICATIONS: lambda c, r, p: Answer(None, [], resets.notifications(r.text)),
    Kind.ADVISORY: Connection._advisory,
    Kind.DECLARE: Connection._declare,
    Kind.FETCH: Connection._fetch,
    Kind.MOVE: Connection._fetch,
    Kind.CLOSE: Connection._close,
    Kind.COPY: Connection._copy,
    Kind.CANCEL_BACKEND: Connection._signal,
    Kind.CATALOG: Connection._catalog,
}


def _one_line(sql: str) -> str:
    """A statement as the operator's log shows it: on one line, at most 4000 characters."""
    return " ".join(sql.split())[:4000]


def _outcome(error: Error) -> str:
    """A failed statement's outcome in the statement log: its SQLSTATE, and an internal error's reference."""
    reference = getattr(error, "reference", None)
    return f"{error.sqlstate} (reference {reference})" if reference else error.sqlstate


def _notices(dp: AnswerRecord) -> list[str]:
    """What a client is told beside a DP answer: its cost (or EXPLAIN's) and what is left, the
    limits chosen for it, its notice."""
    notices = []
    cost, left, now = dp.cost, dp.remaining, dp.remaining_now
    if dp.explain and dp.admitted is False and cost is not None and now is not None:
        notices.append(
            f"dpsql: EXPLAIN only, nothing was charged; running the query would be refused: it costs "
            f"epsilon={cost.epsilon:g} delta={cost.delta:g} and epsilon={now.epsilon:g} "
            f"delta={now.delta:g} is left"
        )
    elif dp.explain and cost is not None and left is not None:
        notices.append(
            f"dpsql: EXPLAIN only, nothing was charged; running the query would cost "
            f"epsilon={cost.epsilon:g} delta={cost.delta:g} and leave epsilon={left.epsilon:g} "
            f"delta={left.delta:g}; the budget admits {dp.admits_more} more like it"
        )
    elif left is not None and cost is not None:
        origin = "answered from the cache, free" if dp.cached else f"cost epsilon={cost.epsilon:g} delta={cost.delta:g}"
        if dp.batch:
            origin = f"one charge for this batch of {dp.batch} queries, {origin}"
        notices.append(f"dpsql: {origin}; remaining epsilon={left.epsilon:g} delta={left.delta:g}")
    if dp.bounds is not None:
        notices.append(f"dpsql: {auto_bounds.told(dp.bounds)}")
    if dp.notice:
        notices.append(f"dpsql: {dp.notice}")
    return notices

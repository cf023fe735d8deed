"""`dpsql serve`: the PostgreSQL wire protocol (3.0) over asyncio, one Session per connection.

Engine work runs on a thread pool, never on the event loop. Describe never executes and never
charges. Errors carry SQLSTATEs; in the extended protocol an error skips to the next Sync, as
PostgreSQL does. A hostile or broken client only ever loses its own connection.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import re
import secrets
import signal
import socket
import ssl
import struct
import threading
from copy import deepcopy
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from .. import __version__, auto_bounds
from ..config import Policy
from ..engines import open_engine
from ..errors import Error, InternalError
from ..session import Result, Session
from ..sql.classify import first_word, split_statements, without_leading_comments
from ..sql.route import Entry, Kind, Routed, word_kind
from . import codec, copyout, resets
from .catalog import Catalog, is_catalog_query
from .cursors import Cursors
from .params import infer_parameter_types
from .scram import ScramError, ScramServer, Verifier
from .throttle import LoginThrottle, Verdict
from .worker_link import WorkerLink, new_pid

_DUMPERS = ("pg_dump", "pg_dumpall")
_NO_DUMP = ("pg_dump cannot dump a dpsql server: it reads every row, and rows of private tables never leave; "
            "for the schema use psql's \\d+ (tables, columns and the policy as comments), SQLAlchemy reflection "
            "(MetaData().reflect(engine)) or sqlacodegen (table definitions with the policy's comments)")

log = logging.getLogger("dpsql.server")
statements = logging.getLogger("dpsql.statements")  # every statement and its outcome (serve --log-statements)


@dataclass
class Limits:
    max_connections: int = 200  # authenticated sessions
    max_pending: int = 64  # connections still starting up or authenticating, counted apart
    max_pending_per_address: int = 16  # of those, from one client address
    # A pending connection that has sent no complete message for this long may be dropped for a
    # newcomer: a client logging in answers each message within a round trip, so this one is a
    # half-open socket, a stalled client, or a failed login held by the throttle.
    pending_idle: float = 1.0
    max_message: int = 16 * 1024 * 1024
    login_timeout: float = 10.0  # from connect to authenticated
    drain_timeout: float = 30.0


@dataclass
class Answer:
    """One statement's outcome in wire terms."""

    fields: list[codec.Field] | None
    rows: list[tuple]
    tag: str
    notices: list[str] = field(default_factory=list)
    copy: copyout.Copy | None = None  # sent as COPY TO STDOUT data, not as rows
    empty: bool = False  # an empty statement (comments, semicolons): EmptyQueryResponse


# Statements the connection answers itself (transactions, cursors, COPY), never batched nor described.
_WIRE_KINDS = {Kind.BEGIN, Kind.COMMIT, Kind.ROLLBACK, Kind.SAVEPOINT, Kind.DECLARE, Kind.FETCH, Kind.MOVE, Kind.CLOSE,
               Kind.COPY, Kind.DISCARD, Kind.DEALLOCATE, Kind.NOTIFICATIONS}


# Extended-query messages whose answers wait for the client's Sync or Flush, as PostgreSQL's do.
_BUFFERED = {b"P", b"B", b"D", b"E", b"C"}


def _session_setting(text: str, local_ledger: bool) -> bool:
    """SET, RESET or SHOW of one setting; SHOW dpsql.budget too when the ledger is a local SQLite
    file (a WAL read of a few rows, ~0.1 ms, that never waits for writers), not across a network."""
    return (word_kind(text) in (Kind.SET, Kind.SET_LOCAL, Kind.SHOW) and ";" not in text and len(text) < 1000
            and (local_ledger or "budget" not in text.lower()))


class Service(Protocol):
    """Something served beside the wire protocol on the same event loop (the web console):
    started once the wire listens, stopped first on shutdown."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


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


class Server:
    def __init__(self, policy: Policy, host: str = "127.0.0.1", port: int = 5433,
                 tls: ssl.SSLContext | None = None, require_tls: bool = False, limits: Limits | None = None,
                 workers: int = 16, link: WorkerLink | None = None, secret: bytes | None = None):
        self.policy = policy
        self.link = link  # one of `dpsql serve --workers` processes
        self.host, self.port = host, port
        self.tls, self.require_tls = tls, require_tls
        self.limits = limits or Limits()
        self.engine = open_engine(policy)
        self.catalog = Catalog(policy, self.engine.schema())
        self.executor = concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dpsql")
        self.connections: dict[int, "Connection"] = {}  # authenticated
        self.pending: dict[int, "Connection"] = {}  # not yet authenticated: a cap of their own
        self.ungreeted: dict[int, "Connection"] = {}  # connected, first message not yet whole
        self.throttle = LoginThrottle()
        # Shared by every worker: the mock verifiers of unknown users must not differ between them.
        self.secret = secret or secrets.token_bytes(32)
        self.services: list[Service] = []
        self._server: asyncio.base_events.Server | None = None
        self._more: list[asyncio.base_events.Server] = []  # a worker's further listening sockets
        self._closing = False
        from ..accounting.ledger import open_ledger

        self.ledger = open_ledger(policy.ledger_path, policy.ledger_url, identity=policy.ledger_identity)
        if link is not None and link.ledger >= 0:  # the supervisor's writer: one for every worker
            from ..accounting.remote_writer import RemoteWriter

            self.ledger.use_writer(RemoteWriter(socket.socket(fileno=link.ledger)))
        else:
            self.ledger.group_commit()  # every connection's charges share transactions: one fsync a batch
        self.local_ledger = policy.ledger_url is None
        self.log_statements = False  # operators' view of what tools send: text and outcome, never values

    def new_pid(self) -> int:
        return new_pid() if self.link is None else self.link.new_pid()

    async def start(self) -> None:
        if self.link is None:
            self._server = await asyncio.start_server(self._accept, self.host, self.port, limit=2**16)
        else:  # the supervisor's listening sockets, on which every worker accepts
            socks = [socket.socket(fileno=fd) for fd in self.link.listen_fds]
            self._server = await asyncio.start_server(self._accept, sock=socks[0], limit=2**16)
            self._more = [await asyncio.start_server(self._accept, sock=s, limit=2**16) for s in socks[1:]]
        sock = self._server.sockets[0].getsockname()
        self.port = sock[1]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = Connection(self, reader, writer)
        await conn.run()

    async def serve_forever(self) -> None:
        await self.start()
        for service in self.services:
            await service.start()
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        # A worker stops on SIGTERM from its supervisor; Ctrl-C goes to the supervisor alone.
        for sig in (signal.SIGTERM,) if self.link is not None else (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, stop.set)
            except (NotImplementedError, RuntimeError):
                pass
        if self.link is not None:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            os.set_blocking(self.link.cancel_read, False)
            loop.add_reader(self.link.cancel_read, self._read_cancels)
            loop.add_reader(self.link.lifeline, stop.set)  # end of file: the supervisor is gone
            self.link.say_ready({"console": self.console_url()})
        await stop.wait()
        if self.link is not None:
            loop.remove_reader(self.link.cancel_read)
            loop.remove_reader(self.link.lifeline)
        await self.shutdown()

    def console_url(self) -> str | None:
        """The web console's address, when one is served beside the wire."""
        return next((s.url for s in self.services if hasattr(s, "url")), None)

    def _read_cancels(self) -> None:
        for pid, key in self.link.read_cancels():
            self.cancel(pid, key)

    async def shutdown(self) -> None:
        """Stop accepting, let running statements finish (up to drain_timeout), close."""
        self._closing = True
        for service in self.services:
            await service.stop()
        for listening in ([self._server] if self._server is not None else []) + self._more:
            listening.close()
            await listening.wait_closed()
        deadline = asyncio.get_running_loop().time() + self.limits.drain_timeout
        while any(c.busy for c in self.connections.values()) and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
        for c in list(self.connections.values()):
            c.close()
        self.close()

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.engine.close()  # removes its scratch copies of private tables
        self.ledger.close()

    def make_room(self, newcomer: "Connection") -> str | None:
        """Room among the pending connections for a newcomer, or why there is none. When the
        pool, or the newcomer's address's share of it, is full, the oldest connection in the way
        that has not sent its first message whole is dropped, else the one idle longest
        (`Limits.pending_idle`): half-open sockets cannot shut the door, and one address cannot
        take the whole pool. Refused only when every pending connection in the way is active."""
        mine = [c for c in self.pending.values() if c.address == newcomer.address]
        if len(mine) >= self.limits.max_pending_per_address:
            crowd, where = mine, " from this address"
        elif len(self.pending) >= self.limits.max_pending:
            crowd, where = list(self.pending.values()), ""
        else:
            return None
        now = asyncio.get_running_loop().time()
        # A connection that has not sent its first message whole (a client sends it as soon as
        # it connects) is a half-open socket: given up first, however young, so that fresh ones
        # opened faster than they go idle cannot shut the door either.
        idle = [c for c in crowd if not c.greeted] or [c for c in crowd if now - c.heard >= self.limits.pending_idle]
        if not idle:
            return f"sorry, too many connections are logging in{where}; try again shortly"
        min(idle, key=lambda c: c.heard).drop(now)
        return None

    def admit_ungreeted(self, newcomer: "Connection") -> None:
        """A connection counts as pending only once its first message has come whole. Before
        that it is one of the ungreeted, capped apart (`UNGREETED_SHARE` times the pending caps):
        over a cap the oldest ungreeted one in the way is dropped, however young, so half-open
        sockets opened as fast as a client can open them never shut the door, while a burst of
        real clients, whose startup packets arrive at once, is never dropped for them."""
        mine = [c for c in self.ungreeted.values() if c.address == newcomer.address]
        if len(mine) >= UNGREETED_SHARE * self.limits.max_pending_per_address:
            crowd = mine
        elif len(self.ungreeted) >= UNGREETED_SHARE * self.limits.max_pending:
            crowd = list(self.ungreeted.values())
        else:
            crowd = []
        if crowd:
            min(crowd, key=lambda c: c.heard).drop(asyncio.get_running_loop().time())
        self.ungreeted[newcomer.pid] = newcomer

    def cancel(self, pid: int, key: int) -> None:
        if self.link is not None and not self.link.owns(pid):
            self.link.forward_cancel(pid, key)  # another worker serves that connection
            return
        conn = self.connections.get(pid)
        if conn is not None and secrets.compare_digest(struct.pack("!i", conn.key), struct.pack("!i", key)):
            conn.cancel()


_CANCEL_BACKEND = re.compile(r"SELECT\s+(?:pg_catalog\.)?pg_cancel_backend\s*\(\s*(\d{1,10})\s*\)\s*;?", re.I)


UNGREETED_SHARE = 4  # ungreeted connections allowed, as a multiple of the pending caps
_ROOM_POLL = 0.05  # seconds between looks for a place among the pending connections


class Connection:
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
        self.status = "I"
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

    # I/O ---------------------------------------------------------------------------------
    async def _read_exact(self, n: int) -> bytes:
        if self._batching:
            return await self.reader.readexactly(n)
        self._write()  # start-up and authentication: every answer before the next read
        data = await self.reader.readexactly(n)
        self.heard = asyncio.get_running_loop().time()
        return data

    async def read_message(self) -> tuple[bytes, bytes]:
        head = await self._read_exact(5)
        kind, length = head[:1], struct.unpack("!i", head[1:])[0]
        if length < 4 or length > self.server.limits.max_message:
            raise codec.ProtocolError("invalid message length")
        return kind, await self._read_exact(length - 4)

    def send(self, data: bytes) -> None:
        """Queue a message: written in one piece at the next flush (Sync, Flush, the end of a
        simple query, as PostgreSQL does), or once 64 kB are queued."""
        self._out.append(data)
        self._queued += len(data)
        if self._queued >= 65536:
            self._write()

    def _write(self) -> None:
        if self._out:
            self.writer.write(b"".join(self._out))
            self._out.clear()
            self._queued = 0

    async def flush(self) -> None:
        self._write()
        await self.writer.drain()

    def close(self) -> None:
        try:
            self._write()
            self.writer.close()
        except Exception:  # noqa: BLE001 - closing a broken transport
            pass

    def drop(self, now: float) -> None:
        """Give this pending connection up for a newcomer: a FATAL 53300 unless it is in a TLS
        handshake, then close. A login refusal it was held for is never sent."""
        self.server.pending.pop(self.pid, None)
        self.server.ungreeted.pop(self.pid, None)
        self._dropped.set()
        log.info("dropped pending connection %s from %s, idle %.1f s", self.pid, self.address, now - self.heard)
        if not self._handshaking:
            self._out.clear()
            self.send(codec.error_response(
                "53300", "terminating connection: too many connections are logging in and this one sent nothing "
                f"for {now - self.heard:.1f} s", "reconnect and answer the server promptly", severity="FATAL"))
        self.close()

    def cancel(self) -> None:
        if self.busy and self.thread is not None:
            self.server.engine.interrupt(self.thread)

    async def run_blocking(self, fn: Callable, *args) -> Any:
        loop = asyncio.get_running_loop()

        def call():
            self.thread = threading.get_ident()
            try:
                return fn(*args)
            finally:
                self.thread = None

        self.busy = True
        try:
            return await loop.run_in_executor(self.server.executor, call)
        finally:
            self.busy = False

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
        except (asyncio.IncompleteReadError, ConnectionError, codec.ProtocolError, asyncio.TimeoutError,
                ssl.SSLError, UnicodeDecodeError, OSError):
            pass
        except Exception:  # noqa: BLE001 - one broken connection never takes the server down
            log.exception("connection %s failed", self.pid)
        finally:
            server.connections.pop(self.pid, None)
            if self.session is not None:
                self.session.close()  # the server's engine and ledger stay open for the others
            self.close()

    async def _wait_for_room(self) -> str | None:
        """A place among the pending connections, waited for while every one in the way is still
        active: a burst of logins from one BI server queues instead of being refused. The wait
        counts against the login timeout; refused (the reason) only when that runs out."""
        server, loop = self.server, asyncio.get_running_loop()
        while True:
            full = "sorry, the server is shutting down" if server._closing else server.make_room(self)
            if full is None or server._closing or loop.time() + _ROOM_POLL >= self.deadline:
                return full
            await asyncio.sleep(_ROOM_POLL)

    async def _claim_pending(self) -> bool:
        """The first message came whole: from the ungreeted to the pending connections, waiting
        for a place there if need be; a FATAL 53300 if none comes in time."""
        self.server.ungreeted.pop(self.pid, None)
        full = await self._wait_for_room()
        if full is not None:
            self.send(codec.error_response("53300", full, severity="FATAL"))
            await self.flush()
            return False
        self.server.pending[self.pid] = self
        self.heard = asyncio.get_running_loop().time()  # idle from here, not from the wait
        return True

    async def startup(self) -> bool:
        negotiations = 0  # SSLRequest and GSSENCRequest: a client sends each once at most
        while True:
            length = struct.unpack("!i", await self._read_exact(4))[0]
            if length < 8 or length > 10_000:
                raise codec.ProtocolError("invalid startup packet length")
            body = await self._read_exact(length - 4)
            if not self.greeted:
                self.greeted = True
                if not await self._claim_pending():
                    return False
            code = struct.unpack("!i", body[:4])[0]
            if code in (codec.SSL_REQUEST, codec.GSSENC_REQUEST):
                negotiations += 1
                if negotiations > 2:  # answered forever, they would keep a connection looking active
                    raise codec.ProtocolError("too many encryption requests")
            if code == codec.SSL_REQUEST:
                if self.server.tls is None or self.tls:
                    self.send(b"N")
                    continue
                self.send(b"S")
                self._handshaking = True
                await self.flush()
                await self.writer.start_tls(self.server.tls)
                self.tls, self._handshaking = True, False
                continue
            if code == codec.GSSENC_REQUEST:
                self.send(b"N")
                continue
            if code == codec.CANCEL_REQUEST:
                if len(body) >= 12:
                    pid, key = struct.unpack("!ii", body[4:12])
                    self.server.cancel(pid, key)
                return False
            if code != codec.PROTOCOL_3:
                self.send(codec.error_response("0A000", "unsupported frontend protocol", severity="FATAL"))
                await self.flush()
                return False
            params = self._startup_params(body[4:])
            break
        if self.server.require_tls and not self.tls:
            self.send(codec.error_response("28000", "this server requires TLS (sslmode=require)", severity="FATAL"))
            await self.flush()
            return False
        self.user = params.get("user", "")
        if not await self.authenticate():
            return False
        if len(self.server.connections) >= self.server.limits.max_connections:
            self.send(codec.error_response("53300", "sorry, too many clients already", severity="FATAL"))
            await self.flush()
            return False
        if params.get("application_name", "") in _DUMPERS:  # it would read every row: say what to use instead
            self.send(codec.error_response("0A000", _NO_DUMP, severity="FATAL"))
            await self.flush()
            return False
        self.server.connections[self.pid] = self
        try:
            self.session = Session(self.server.policy, self.user, engine=self.server.engine, ledger=self.server.ledger)
        except Error as e:
            self.send(codec.error_response(e.sqlstate, e.message, e.hint, severity="FATAL"))
            await self.flush()
            return False
        self.send(codec.message(b"R", codec.int32(0)))
        app = params.get("application_name", "")
        if app:
            self.session.settings.client["application_name"] = app
        for name, value in (("application_name", app), ("client_encoding", "UTF8"), ("DateStyle", "ISO, MDY"),
                            ("default_transaction_read_only", "on"), ("in_hot_standby", "off"),
                            ("integer_datetimes", "on"), ("IntervalStyle", "postgres"), ("is_superuser", "off"),
                            ("server_encoding", "UTF8"), ("server_version", f"15.0 (dpsql {__version__})"),
                            ("session_authorization", self.user), ("standard_conforming_strings", "on"),
                            ("TimeZone", "UTC")):
            self.send(codec.parameter_status(name, value))
        self.send(codec.message(b"K", codec.int32(self.pid) + codec.int32(self.key)))
        self.send(codec.ready("I"))
        await self.flush()
        return True

    @staticmethod
    def _startup_params(data: bytes) -> dict[str, str]:
        parts = data.split(b"\0")
        params = {}
        for i in range(0, len(parts) - 1, 2):
            if not parts[i]:
                break
            params[parts[i].decode("utf-8")] = parts[i + 1].decode("utf-8")
        return params

    async def authenticate(self) -> bool:
        """SCRAM-SHA-256 through the login throttle (throttle.py): a locked user name is refused
        before the exchange; after it, a right password is let in at once and a refusal is held
        first, so failures are slowed and nobody else's login is. Unknown users and wrong
        passwords fail alike, in text and in timing (a mock verifier)."""
        throttle, loop = self.server.throttle, asyncio.get_running_loop()
        verdict, final = throttle.admit(self.user, loop.time()), None
        if verdict.ok:
            final = await self._scram()
            verdict = throttle.outcome(self.user, self.address, final is not None, loop.time())
        if not verdict.ok:
            await self._refuse(verdict)
            return False
        self.send(codec.message(b"R", codec.int32(12) + final.encode()))
        return True

    async def _refuse(self, verdict: Verdict) -> None:
        """Answer a refused login once its hold has passed (cut short to be answered before the
        login timeout). A connection dropped for a newcomer meanwhile gets nothing more."""
        loop = asyncio.get_running_loop()
        until = min(loop.time() + verdict.hold, self.deadline - 0.1)
        await self._log_event(verdict.audit)
        try:
            await asyncio.wait_for(self._dropped.wait(), max(0.0, until - loop.time()))
        except asyncio.TimeoutError:
            pass
        if self._dropped.is_set():
            return
        self.send(codec.error_response(verdict.sqlstate, verdict.message, verdict.hint, severity="FATAL"))
        await self.flush()

    async def _log_event(self, kind: str) -> None:
        log.warning("%s: user %r from %s", kind, self.user, self.address)
        await self.run_blocking(self.server.ledger.record_event, kind, self.user, self.address)

    async def _scram(self) -> str | None:
        """One exchange: the server-final message if the password was right for an existing
        user, None if it was wrong, the user unknown or the client's messages malformed."""
        creds = await self.run_blocking(self.server.ledger.user_credentials, self.user)
        verifier = Verifier.mock(self.user, self.server.secret)
        if creds is not None:
            try:
                verifier = Verifier.parse(creds[0])
            except ValueError:
                creds = None
        scram = ScramServer(verifier)
        self.send(codec.message(b"R", codec.int32(10) + codec.cstr("SCRAM-SHA-256") + b"\0"))
        await self.flush()
        try:
            kind, body = await self.read_message()
            if kind != b"p":
                raise ScramError("expected a SASL response")
            r = codec.Reader(body)
            mechanism = r.cstring()
            if mechanism != "SCRAM-SHA-256":
                raise ScramError("unsupported SASL mechanism")
            n = r.int32()
            first = r.bytes(n).decode("utf-8")
            self.send(codec.message(b"R", codec.int32(11) + scram.first(first).encode()))
            await self.flush()
            kind, body = await self.read_message()
            if kind != b"p":
                raise ScramError("expected a SASL response")
            final = scram.final(body.decode("utf-8"))
        except ScramError:
            return None
        return final if creds is not None else None

    # Messages ----------------------------------------------------------------------------
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
                    e = Error("invalid byte sequence for encoding \"UTF8\"", sqlstate="22021",
                              hint="send the statement and its parameters in UTF-8")
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

    # Statement routing ---------------------------------------------------------------------
    def _answer_session(self, result: Result) -> Answer:
        fields = None
        if result.names:
            fields = [codec.Field(n, codec.oid_of(t)) for n, t in zip(result.names, result.types)]
        notices = []
        if result.dp and result.dp.get("explain") and not result.dp.get("admitted", True):
            cost, now = result.dp["cost"], result.dp["remaining_now"]
            notices.append(f"dpsql: EXPLAIN only, nothing was charged; running the query would be refused: it costs "
                           f"epsilon={cost['epsilon']:g} delta={cost['delta']:g} and epsilon={now['epsilon']:g} "
                           f"delta={now['delta']:g} is left")
        elif result.dp and result.dp.get("explain"):
            cost, left = result.dp["cost"], result.dp["remaining"]
            notices.append(f"dpsql: EXPLAIN only, nothing was charged; running the query would cost "
                           f"epsilon={cost['epsilon']:g} delta={cost['delta']:g} and leave epsilon={left['epsilon']:g} "
                           f"delta={left['delta']:g}; the budget admits {result.dp['admits_more']} more like it")
        elif result.dp and "remaining" in result.dp and result.dp.get("cost") is not None:
            cost, left = result.dp["cost"], result.dp["remaining"]
            origin = "answered from the cache, free" if result.dp.get("cached") else \
                f"cost epsilon={cost['epsilon']:g} delta={cost['delta']:g}"
            if result.dp.get("batch"):
                origin = f"one charge for this batch of {result.dp['batch']} queries, {origin}"
            notices.append(f"dpsql: {origin}; remaining epsilon={left['epsilon']:g} delta={left['delta']:g}")
        if result.dp and result.dp.get("bounds"):
            notices.append(f"dpsql: {auto_bounds.told(result.dp['bounds'])}")
        if result.dp and result.dp.get("notice"):
            notices.append(f"dpsql: {result.dp['notice']}")
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
        log.error("internal error, reference %s, for %s [%s] on the statement: %s", reference, self.user, self.pid,
                  _one_line(sql), exc_info=e.__cause__ if isinstance(e, InternalError) else e)
        error = InternalError(f"internal error in dpsql (reference {reference}); the statement was not answered",
                              hint="the connection is still usable; please report the reference to the operator, "
                                   "whose server log holds the details")
        error.reference = reference
        return error

    def _end_transaction(self, committed: bool) -> None:
        """Back to idle: a rollback undoes the transaction's SETs, a commit only its SET LOCALs."""
        restore = self._before_local if committed else self._before_transaction
        if restore is not None and self.session is not None:
            self.session.settings = restore
        self._before_transaction = self._before_local = None
        self.status = "I"

    def _run_statement(self, sql: str, params: list[Any] | None = None, routed: Routed | None = None) -> Answer:
        """One statement, on a worker thread, answered as its route says (sql/route.py): what the
        connection answers itself here (_WIRE_ANSWERS), everything else by the analyst's Session."""
        routed = routed or self.session.route(sql, WIRE_ROUTES)
        if routed.kind == Kind.EMPTY:
            return Answer(None, [], "", empty=True)
        if self.status == "E" and routed.kind not in (Kind.ROLLBACK, Kind.COMMIT):
            raise Error("current transaction is aborted, commands ignored until end of transaction block",
                        sqlstate="25P02")
        answer = _WIRE_ANSWERS.get(routed.kind)
        if answer is not None:
            return answer(self, routed, params)
        return self._answer_session(self.session.execute(routed, params or None))

    def _begin(self, routed: Routed, params: list[Any] | None) -> Answer:
        if self.status == "I":
            self._before_transaction, self._before_local = deepcopy(self.session.settings), None
        self.status = "T"
        return Answer(None, [], "BEGIN")

    def _commit(self, routed: Routed, params: list[Any] | None) -> Answer:
        tag = "ROLLBACK" if self.status == "E" else "COMMIT"
        self._end_transaction(committed=tag == "COMMIT")
        return Answer(None, [], tag)

    def _rollback(self, routed: Routed, params: list[Any] | None) -> Answer:
        if "TO" in routed.text.upper().split():
            self.status = "T"
            return Answer(None, [], "ROLLBACK")
        self._end_transaction(committed=False)
        return Answer(None, [], "ROLLBACK")

    def _set_local(self, routed: Routed, params: list[Any] | None) -> Answer:
        if self.status == "I":  # as PostgreSQL: outside a transaction block it has no effect
            return Answer(None, [], "SET", ["SET LOCAL has no effect outside a transaction block"])
        if self._before_local is None:
            self._before_local = deepcopy(self.session.settings)
        return self._answer_session(self.session.execute(routed, params or None))

    def _savepoint(self, routed: Routed, params: list[Any] | None) -> Answer:
        return Answer(None, [], first_word(routed.text))

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
        return Answer([codec.Field("pg_cancel_backend", codec.BOOL)],
                      [(self._cancel_backend(int(routed.detail[1])),)], "SELECT 1")

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
            raise Error("permission denied to cancel query", sqlstate="42501",
                        hint="only the analyst who runs a query can cancel it")
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
        if len(routes) > 1 and not any(r.kind in _WIRE_KINDS or r.kind in (Kind.ADVISORY, Kind.CATALOG) for r in routes):
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
        return [codec.Field(n, codec.oid_of(t)) for n, t in zip(*described)]

    # Simple query --------------------------------------------------------------------------
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

    # Extended query ------------------------------------------------------------------------
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
        oids = [(oids[i] if i < len(oids) and oids[i] else (inferred[i] if i < len(inferred) else codec.TEXT))
                for i in range(n)]
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
                raise Error(f"incorrect binary data format in bind parameter {i + 1}", sqlstate="22P03",
                            hint=f"a parameter of type {codec.TYPE_NAMES.get(oid, oid)} was expected") from None
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
            self.send(codec.message(b"t", codec.int16(len(stmt.param_oids))
                                    + b"".join(codec.int32(o) for o in stmt.param_oids)))
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
            self.send(codec.row_description([codec.Field(f.name, f.oid, _format(formats, i))
                                             for i, f in enumerate(fields)]))

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


def _cancel_pid(text: str) -> re.Match | None:
    return _CANCEL_BACKEND.fullmatch(without_leading_comments(text).strip())


# The wire's own routes among SELECT-shaped statements, tried before the session's, in order.
WIRE_ROUTES = (Entry(Kind.ADVISORY, resets.advisory), Entry(Kind.CANCEL_BACKEND, _cancel_pid),
               Entry(Kind.CATALOG, is_catalog_query))

# What the connection answers itself, by route; every other route is the session's.
_WIRE_ANSWERS: dict[Kind, Callable[[Connection, Routed, list[Any] | None], Answer]] = {
    Kind.BEGIN: Connection._begin, Kind.COMMIT: Connection._commit, Kind.ROLLBACK: Connection._rollback,
    Kind.SET_LOCAL: Connection._set_local, Kind.SAVEPOINT: Connection._savepoint,
    Kind.DISCARD: lambda c, r, p: Answer(None, [], f"DISCARD {c._discard(resets.discard(r.text))}"),
    Kind.DEALLOCATE: Connection._deallocate,
    Kind.NOTIFICATIONS: lambda c, r, p: Answer(None, [], resets.notifications(r.text)),
    Kind.ADVISORY: Connection._advisory, Kind.DECLARE: Connection._declare, Kind.FETCH: Connection._fetch, Kind.MOVE: Connection._fetch,
    Kind.CLOSE: Connection._close, Kind.COPY: Connection._copy, Kind.CANCEL_BACKEND: Connection._signal,
    Kind.CATALOG: Connection._catalog,
}


def _one_line(sql: str) -> str:
    """A statement as the operator's log shows it: on one line, at most 4000 characters."""
    return " ".join(sql.split())[:4000]


def _outcome(error: Error) -> str:
    """A failed statement's outcome in the statement log: its SQLSTATE, and an internal error's reference."""
    reference = getattr(error, "reference", None)
    return f"{error.sqlstate} (reference {reference})" if reference else error.sqlstate


def _peer(writer: asyncio.StreamWriter) -> str:
    """The client's address, which the login throttle and the pending caps count by."""
    peer = writer.get_extra_info("peername")
    return str(peer[0]) if isinstance(peer, tuple) and peer else "local"


def _format(formats: list[int], i: int) -> int:
    if not formats:
        return 0
    return formats[0] if len(formats) == 1 else (formats[i] if i < len(formats) else 0)


def tls_context(cert: str, key: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    return ctx


def run(server: Server) -> None:
    asyncio.run(server.serve_forever())


__all__ = ["Server", "Service", "Limits", "run", "tls_context"]

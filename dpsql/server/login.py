"""A connection's start-up: encryption negotiation (TLS), the startup packet, a place among the
pending connections, SCRAM-SHA-256 through the login throttle, and the session's start.
A mixin of app.Connection."""

from __future__ import annotations

import asyncio
import struct

from .. import __version__
from ..errors import Error
from ..session import Session
from ..session.setting_table import REPORTED
from .throttle import Verdict
from .transport import log
from .wire import codec
from .wire.codes import Authentication, Frontend, Startup
from .wire.scram import ScramError, ScramServer, Verifier

_DUMPERS = ("pg_dump", "pg_dumpall")
_NO_DUMP = (
    "pg_dump cannot dump a dpsql server: it reads every row, and rows of private tables never leave; "
    "for the schema use psql's \\d+ (tables, columns and the policy as comments), SQLAlchemy reflection "
    "(MetaData().reflect(engine)) or sqlacodegen (table definitions with the policy's comments)"
)


_ROOM_POLL = 0.05  # seconds between looks for a place among the pending connections


class Login:
    """From the first byte to ReadyForQuery."""

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
            if code in (Startup.SSL_REQUEST, Startup.GSSENC_REQUEST):
                negotiations += 1
                if negotiations > 2:  # answered forever, they would keep a connection looking active
                    raise codec.ProtocolError("too many encryption requests")
            if code == Startup.SSL_REQUEST:
                if self.server.tls is None or self.tls:
                    self.send(Startup.ENCRYPTION_REFUSED)
                    continue
                self.send(Startup.ENCRYPTION_ACCEPTED)
                self._handshaking = True
                await self.flush()
                await self.writer.start_tls(self.server.tls)
                self.tls, self._handshaking = True, False
                continue
            if code == Startup.GSSENC_REQUEST:
                self.send(Startup.ENCRYPTION_REFUSED)
                continue
            if code == Startup.CANCEL_REQUEST:
                if len(body) >= 12:
                    pid, key = struct.unpack("!ii", body[4:12])
                    self.server.cancel(pid, key)
                return False
            if code != Startup.PROTOCOL_3:
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
        self.send(codec.authentication(Authentication.OK))
        app = params.get("application_name", "")
        if app:
            self.session.settings.client["application_name"] = app
        told = {
            "application_name": app,
            "server_version": f"15.0 (dpsql {__version__})",
            "session_authorization": self.user,
        }
        for st in REPORTED:  # the settings PostgreSQL reports, as this session has them
            self.send(codec.parameter_status(st.reported_as or st.name, told.get(st.name, st.default or "")))
        self.send(codec.backend_key_data(self.pid, self.key))
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
        self.send(codec.authentication(Authentication.SASL_FINAL, final.encode()))
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
        self.send(codec.authentication(Authentication.SASL, codec.cstr("SCRAM-SHA-256") + b"\0"))
        await self.flush()
        try:
            kind, body = await self.read_message()
            if kind != Frontend.SASL_RESPONSE:
                raise ScramError("expected a SASL response")
            r = codec.Reader(body)
            mechanism = r.cstring()
            if mechanism != "SCRAM-SHA-256":
                raise ScramError("unsupported SASL mechanism")
            n = r.int32()
            first = r.bytes(n).decode("utf-8")
            self.send(codec.authentication(Authentication.SASL_CONTINUE, scram.first(first).encode()))
            await self.flush()
            kind, body = await self.read_message()
            if kind != Frontend.SASL_RESPONSE:
                raise ScramError("expected a SASL response")
            final = scram.final(body.decode("utf-8"))
        except ScramError:
            return None
        return final if creds is not None else None

"""Console logins: the wire's users and passwords (the SCRAM verifiers in the ledger), its
throttle (the same LoginThrottle instance, so failures on either count against both) and its
audit events. Unknown users and wrong passwords fail alike, in text and in timing."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from starlette.requests import Request

from ..errors import Error
from ..server.scram import Verifier, password_matches
from ..session import Session
from .logins import Login, TooManyLogins
from .web import address, blocking, console, log

ORIGIN = "console"  # the detail of the audit events a console login records


@dataclass(frozen=True)
class Refused:
    """Why a login failed, as the login page says it, with its HTTP status."""

    status: int
    message: str
    hint: str | None = None


async def log_in(request: Request, user: str, password: str) -> Login | Refused:
    """Check the password against the user's verifier, throttled like a wire login, then open
    the user's Session. A lockout or failure is recorded in the ledger's events."""
    state = console(request)
    server, where = state.server, address(request)
    loop = asyncio.get_running_loop()
    wait = server.throttle.admit(user, where, loop.time())
    if wait is None:
        await _event(request, "login locked out", user)
        return Refused(429, f'too many failed logins for user "{user}" or from this address; try again in a few minutes')
    if wait:
        await asyncio.sleep(wait)
    creds = await blocking(request, server.ledger.user_credentials, user)
    verifier = Verifier.mock(user, server.secret)
    if creds is not None:
        try:
            verifier = Verifier.parse(creds[0])
        except ValueError:
            creds = None
    ok = await blocking(request, password_matches, verifier, password) and creds is not None
    if not ok:
        server.throttle.failed(user, where, loop.time())
        await _event(request, "login failed", user)
        return Refused(401, f'password authentication failed for user "{user}"')
    server.throttle.succeeded(user, where)
    try:
        session = await blocking(request, lambda: Session(server.policy, user, engine=server.engine, ledger=server.ledger))
    except Error as e:
        return Refused(403, e.message, e.hint)
    try:
        return state.logins.add(session.user, session)
    except TooManyLogins:
        await blocking(request, session.ledger.close)
        return Refused(503, "too many console logins at once; try again shortly")


async def _event(request: Request, kind: str, user: str) -> None:
    where = address(request)
    log.warning("%s: user %r from %s (console)", kind, user, where)
    await blocking(request, console(request).server.ledger.record_event, kind, user, where, ORIGIN)

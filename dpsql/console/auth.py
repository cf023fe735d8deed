"""Console logins: the wire's users and passwords (the SCRAM verifiers in the ledger), its
throttle (the same LoginThrottle instance, so failures on either count against both) and its
audit events. Unknown users and wrong passwords fail alike, in text and in timing."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from starlette.requests import Request

from ..errors import Error
from ..server.wire.scram import Verifier, password_matches
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
    """Check the password against the user's verifier through the wire's throttle, as a wire
    login is (a refusal is held before it is answered, a right password let in at once), then
    open the user's Session. A refusal is recorded in the ledger's events."""
    state = console(request)
    server, throttle = state.server, state.server.throttle
    loop = asyncio.get_running_loop()
    verdict = throttle.admit(user, loop.time())
    if verdict.ok:
        correct = await _password_right(request, user, password)
        verdict = throttle.outcome(user, address(request), correct, loop.time())
    if not verdict.ok:
        until = loop.time() + verdict.hold
        await _event(request, verdict.audit, user)
        await asyncio.sleep(max(0.0, until - loop.time()))
        return Refused(401 if verdict.sqlstate == "28P01" else 429, verdict.message, verdict.hint)
    try:
        session = await blocking(
            request, lambda: Session(server.policy, user, engine=server.engine, ledger=server.ledger)
        )
    except Error as e:
        return Refused(403, e.message, e.hint)
    try:
        return state.logins.add(session.user, session)
    except TooManyLogins:
        await blocking(request, session.ledger.close)
        return Refused(503, "too many console logins at once; try again shortly")


async def _password_right(request: Request, user: str, password: str) -> bool:
    """Whether `password` is `user`'s, at the cost of a check against a mock verifier when the
    user is unknown."""
    server = console(request).server
    creds = await blocking(request, server.ledger.user_credentials, user)
    verifier = Verifier.mock(user, server.secret)
    if creds is not None:
        try:
            verifier = Verifier.parse(creds[0])
        except ValueError:
            creds = None
    return await blocking(request, password_matches, verifier, password) and creds is not None


async def _event(request: Request, kind: str, user: str) -> None:
    where = address(request)
    log.warning("%s: user %r from %s (console)", kind, user, where)
    await blocking(request, console(request).server.ledger.record_event, kind, user, where, ORIGIN)

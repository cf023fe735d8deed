"""The console's ASGI application (Starlette): routes, the signed session cookie, security
headers, body limits, and error pages that never show a traceback."""

from __future__ import annotations

import hashlib
import hmac
import time
from pathlib import Path

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.body_limit import RequestBodyLimitMiddleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..server.listener import Server
from . import analyst, charts, officer, synopses
from .logins import LIFETIME, Logins
from .web import Console, current, log, render

HERE = Path(__file__).parent
COOKIE = "dpsql_console"
SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
        b"frame-ancestors 'none'; base-uri 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),  # pages hold budgets and released values
]
STATIC_CACHE = b"public, max-age=3600"  # the stylesheet and icon


class SecurityHeaders:
    """Adds the security headers to every response: no scripts, no framing, nothing cached."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        static = scope["path"].startswith("/static/")

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {k.lower() for k, _ in message.get("headers", [])}
                message["headers"] = list(message.get("headers", [])) + [
                    (k, STATIC_CACHE if static and k == b"cache-control" else v)
                    for k, v in SECURITY_HEADERS
                    if k not in names
                ]
            await send(message)

        await self.app(scope, receive, with_headers)


ROUTES = [
    Route("/", analyst.home),
    Route("/login", analyst.login_page, methods=["GET"]),
    Route("/login", analyst.login_submit, methods=["POST"]),
    Route("/logout", analyst.logout, methods=["POST"]),
    Route("/budget", analyst.budget),
    Route("/history", analyst.history_page),
    Route("/explain", analyst.explain_page, methods=["GET"]),
    Route("/explain", analyst.explain_submit, methods=["POST"]),
    Route("/run", analyst.run_submit, methods=["POST"]),
    Route("/run/confirm", analyst.run_confirm, methods=["POST"]),
    Route("/officer/budgets", officer.budgets_page),
    Route("/officer/grants", officer.grants_page, methods=["GET"]),
    Route("/officer/grants", officer.grant_submit, methods=["POST"]),
    Route("/officer/audit", officer.audit_page),
    Route("/officer/audit.csv", officer.audit_csv),
    Route("/officer/policy", officer.policy_page),
    Route("/officer/ledger", officer.ledger_page),
    Route("/officer/synopses", synopses.synopses_page, methods=["GET"]),
    Route("/officer/synopses/publish", synopses.publish_submit, methods=["POST"]),
    Route("/officer/synopses/drop", synopses.drop_submit, methods=["POST"]),
    Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
]


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code in (301, 302, 303, 307, 308):
        return Response(status_code=exc.status_code, headers=exc.headers)
    login = await current(request) if "session" in request.scope else None
    return render(
        request, "error.html", exc.status_code, login=login, title=f"Error {exc.status_code}", detail=exc.detail
    )


async def _internal_error(request: Request, exc: Exception) -> Response:
    log.error("internal error in the console", exc_info=exc)
    return Response("internal error", status_code=500, media_type="text/plain")


LOOPBACK_NAMES = ["127.0.0.1", "localhost", "::1", "[::1]"]


def create_app(server: Server, *, secure: bool = False, hosts: list[str] | None = None) -> Starlette:
    """The console for `server` (its policy, engine, ledger, worker threads and login throttle).
    `secure`: it is served over TLS, so its cookie is sent over TLS only. `hosts`: the Host
    names it answers to (a console on loopback answers only to loopback names, so a web page
    elsewhere cannot reach it through DNS rebinding); None answers to any."""
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    templates.env.filters["number"] = charts.number
    templates.env.filters["utc"] = _utc
    key = hmac.new(server.secret, b"dpsql console cookie", hashlib.sha256).hexdigest()
    max_body = max(256 * 1024, 2 * server.policy.limits.max_query_bytes + 64 * 1024)
    app = Starlette(
        routes=ROUTES,
        middleware=[
            Middleware(SecurityHeaders),
            *([Middleware(TrustedHostMiddleware, allowed_hosts=hosts)] if hosts else []),
            Middleware(RequestBodyLimitMiddleware, max_body_size=max_body),
            Middleware(
                SessionMiddleware,
                secret_key=key,
                session_cookie=COOKIE,
                max_age=int(LIFETIME),
                same_site="lax",
                https_only=secure,
            ),
        ],
        exception_handlers={HTTPException: _http_error, Exception: _internal_error},
    )
    app.state.console = Console(server, templates, Logins(server.limits.max_connections), secure)
    return app


def _utc(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))

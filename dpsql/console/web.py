"""What every console page shares: the console's state, logins and roles, rendering, and
running blocking work on the server's worker threads (the event loop never waits on the
engine or the ledger)."""

from __future__ import annotations

import asyncio
import functools
import logging
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.templating import Jinja2Templates

from ..errors import Error
from ..server.listener import Server
from . import csrf
from .logins import Login, Logins, close

log = logging.getLogger("dpsql.console")

SESSION_KEY = "sid"


@dataclass
class Console:
    """The console's state: the wire server it serves beside (policy, engine, ledger, thread
    pool, login throttle), its templates and its logins."""

    server: Server
    templates: Jinja2Templates
    logins: Logins
    secure: bool  # served over TLS: cookies are Secure


def console(request: Request) -> Console:
    return request.app.state.console


async def blocking(request: Request, fn: Callable[..., Any], *args: Any) -> Any:
    """Run fn(*args) on the server's worker threads."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(console(request).server.executor, functools.partial(fn, *args))


def address(request: Request) -> str:
    return request.client.host if request.client else "local"


async def current(request: Request) -> Login | None:
    """The request's live login, after closing any that expired."""
    state = console(request)
    for gone in state.logins.expired():
        await blocking(request, close, gone)
    return state.logins.get(request.session.get(SESSION_KEY))


def page(*, officer: bool = False, post: bool = False) -> Callable:
    """An endpoint for logged-in users: POSTs are CSRF-checked first (403), then the login
    (a redirect to the login page), then the role (403 for an analyst on an officer page).
    The endpoint receives the login, and for a POST the checked form."""

    def decorate(fn: Callable[..., Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        @functools.wraps(fn)
        async def endpoint(request: Request) -> Response:
            form: FormData | None = await csrf.checked_form(request) if post else None
            login = await current(request)
            if login is None:
                return RedirectResponse("/login", status_code=303)
            if officer and not login.officer:
                raise HTTPException(403, "this page is for privacy officers (officer = true in the policy)")
            return await (fn(request, login, form) if post else fn(request, login))

        endpoint.csrf_protected = post  # type: ignore[attr-defined]
        return endpoint

    return decorate


def render(request: Request, template: str, status: int = 200, login: Login | None = None, **context: Any) -> Response:
    """A page, with what the layout needs: the login (navigation, role) and the CSRF token."""
    context.update(login=login, csrf_token=csrf.token(request), csrf_field=csrf.FIELD, path=request.url.path)
    return console(request).templates.TemplateResponse(request, template, context, status_code=status)


def refusal(e: BaseException) -> dict[str, str | None]:
    """An error as the wire shows it: dpsql's message, hint and SQLSTATE; anything else (a bug)
    becomes a generic message, logged for the operator and never shown."""
    if isinstance(e, Error):
        return {"message": e.message, "hint": e.hint, "sqlstate": e.sqlstate}
    log.error("internal error in the console", exc_info=e)
    return {
        "message": "internal error; nothing was released",
        "hint": "please report it to the operator",
        "sqlstate": "XX000",
    }

"""CSRF protection: every POST form carries a per-session token that a page from another
site cannot read (it lives in the signed, HttpOnly session cookie and in our own pages).
A POST without the matching token is refused with 403 before it does anything."""

from __future__ import annotations

import functools
import hmac
import secrets
from typing import Awaitable, Callable

from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

FIELD = "csrf"
MAX_FIELDS = 64


def token(request: Request) -> str:
    """This browser session's token, made on first use."""
    value = request.session.get(FIELD)
    if not isinstance(value, str) or not value:
        value = request.session[FIELD] = secrets.token_urlsafe(32)
    return value


def rotate(request: Request) -> str:
    """A new session and token (at login and logout), so a token seen before does not carry over."""
    request.session.clear()
    return token(request)


async def checked_form(request: Request) -> FormData:
    """The POSTed form, once its token matches the session's; 403 otherwise."""
    form = await request.form(max_files=0, max_fields=MAX_FIELDS)
    sent = form.get(FIELD)
    expected = request.session.get(FIELD)
    if not (
        isinstance(sent, str)
        and isinstance(expected, str)
        and expected
        and hmac.compare_digest(sent.encode(), expected.encode())
    ):
        raise HTTPException(403, "the form's security token is missing or out of date: reload the page and try again")
    return form


Endpoint = Callable[[Request, FormData], Awaitable[Response]]


def protected(endpoint: Endpoint) -> Callable[[Request], Awaitable[Response]]:
    """A POST endpoint that runs only with a valid token, and receives the checked form."""

    @functools.wraps(endpoint)
    async def wrapper(request: Request) -> Response:
        return await endpoint(request, await checked_form(request))

    wrapper.csrf_protected = True  # type: ignore[attr-defined]
    return wrapper

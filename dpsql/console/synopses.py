"""The privacy officer's synopses page: every declared synopsis and whether it is published for
the data as it is now; publish (one charge, to its charged_to, through the officer's Session
as `dpsql synopsis publish` does) and drop (its charge stays)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ..errors import Error
from ..synopses import store
from ..synopses.publish import spec_of
from .logins import Login
from .web import blocking, console, page, refusal, render


def _rows(server) -> list[dict[str, Any]]:
    return store.status(server.policy.synopses, store.listed(server.ledger), server.engine.data_version())


async def _view(request: Request, login: Login, status: int = 200, **context: Any) -> Response:
    rows = await blocking(request, _rows, console(request).server)
    return render(request, "synopses.html", status, login=login, title="Synopses", synopses=rows, **context)


@page(officer=True)
async def synopses_page(request: Request, login: Login) -> Response:
    done = {k: request.query_params.get(k) for k in ("published", "dropped")}
    return await _view(request, login, **done)


def _publish(login: Login, name: str) -> str:
    done = login.session.publish_synopsis(name)
    return f"{done.name} (charged epsilon {done.epsilon:g} to its payer, receipt {done.charge_id})"


def _drop(server, name: str) -> str:
    spec = spec_of(server.policy, name)
    n = store.drop(server.ledger, spec.name)
    return f"{spec.name} ({n} published version(s); the charge stays in the ledger)"


@page(officer=True, post=True)
async def publish_submit(request: Request, login: Login, form: FormData) -> Response:
    return await _act(request, login, "published", _publish, login, str(form.get("name", "")))


@page(officer=True, post=True)
async def drop_submit(request: Request, login: Login, form: FormData) -> Response:
    return await _act(request, login, "dropped", _drop, console(request).server, str(form.get("name", "")))


async def _act(request: Request, login: Login, what: str, fn, *args: Any) -> Response:
    try:
        said = await blocking(request, fn, *args)
    except Exception as e:  # noqa: BLE001 - shown as the wire shows it (refusal() hides internal errors)
        return await _view(request, login, 400 if isinstance(e, Error) else 500, error=refusal(e))
    return RedirectResponse("/officer/synopses?" + urlencode({what: said}), status_code=303)

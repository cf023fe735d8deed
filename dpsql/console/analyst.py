"""The pages every logged-in user has: log in and out, their own budget and history, the
EXPLAIN playground and the charged run."""

from __future__ import annotations

import json
from typing import Callable

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ..errors import Error
from . import auth, budgets, csrf, history, queries, results
from .logins import Login, close
from .web import SESSION_KEY, address, blocking, console, current, page, refusal, render

NAMES_KEPT = 256  # described column names a login keeps, per SQL text


async def home(request: Request) -> Response:
    return RedirectResponse("/budget" if await current(request) else "/login", status_code=303)


async def login_page(request: Request) -> Response:
    if await current(request):
        return RedirectResponse("/budget", status_code=303)
    return render(request, "login.html", title="Log in")


@csrf.protected
async def login_submit(request: Request, form: FormData) -> Response:
    user, password = str(form.get("user", "")).strip(), str(form.get("password", ""))
    outcome = await auth.log_in(request, user, password)
    if isinstance(outcome, auth.Refused):
        return render(
            request,
            "login.html",
            outcome.status,
            title="Log in",
            user=user,
            error={"message": outcome.message, "hint": outcome.hint},
        )
    csrf.rotate(request)
    request.session[SESSION_KEY] = outcome.sid
    return RedirectResponse("/budget", status_code=303)


@page(post=True)
async def logout(request: Request, login: Login, form: FormData) -> Response:
    console(request).logins.remove(login.sid)
    await blocking(request, close, login)
    csrf.rotate(request)
    return RedirectResponse("/login", status_code=303)


@page()
async def budget(request: Request, login: Login) -> Response:
    server = console(request).server
    view = await blocking(request, budgets.analyst_budget, server.policy, server.ledger, server.engine, login.user.name)
    return render(request, "budget.html", login=login, title="Budget", view=view)


def _describer(login: Login) -> Callable[[str], list[str] | None]:
    """Column names of a past query by a free Describe (nothing runs, nothing is charged), memoised."""

    def describe(sql: str) -> list[str] | None:
        with login.lock:
            if sql not in login.names:
                try:
                    described = login.session.describe(sql)
                except Error:
                    described = None
                if len(login.names) >= NAMES_KEPT:
                    login.names.pop(next(iter(login.names)))
                login.names[sql] = None if described is None else described[0]
            return login.names[sql]

    return describe


@page()
async def history_page(request: Request, login: Login) -> Response:
    try:
        number = int(request.query_params.get("page", "1"))
    except ValueError:
        number = 1
    ledger = console(request).server.ledger
    entries, pages = await blocking(request, history.page, ledger, login.user.name, number, _describer(login))
    return render(
        request,
        "history.html",
        login=login,
        title="History",
        entries=entries,
        pages=pages,
        number=min(max(1, number), pages),
    )


@page()
async def explain_page(request: Request, login: Login) -> Response:
    policy = console(request).server.policy
    return render(
        request,
        "explain.html",
        login=login,
        title="EXPLAIN",
        q=queries.QueryForm(sql=budgets.typical_query(policy) or ""),
    )


def _refused(request: Request, login: Login, form: FormData, e: BaseException, status: int = 200) -> Response:
    """The EXPLAIN page again, with the form's SQL as typed and why it was refused (refusal()
    hides internal errors)."""
    q = queries.QueryForm(str(form.get("sql", "")))
    return render(request, "explain.html", status, login=login, title="EXPLAIN", q=q, error=refusal(e))


@page(post=True)
async def explain_submit(request: Request, login: Login, form: FormData) -> Response:
    try:
        q = queries.QueryForm.read(form)
    except Error as e:
        return _refused(request, login, form, e, 400)
    try:
        info = await blocking(request, queries.explain, login, q)
    except Exception as e:  # noqa: BLE001 - shown as the wire shows it (refusal() hides internal errors)
        return render(request, "explain.html", login=login, title="EXPLAIN", q=q, error=refusal(e))
    return render(request, "explain.html", login=login, title="EXPLAIN", q=q, info=info)


@page(post=True)
async def run_submit(request: Request, login: Login, form: FormData) -> Response:
    """The confirmation step: what the run would cost and leave, before anything is charged."""
    try:
        q = queries.QueryForm.read(form)
        info = await blocking(request, queries.explain, login, q)
    except Exception as e:  # noqa: BLE001
        return _refused(request, login, form, e)
    return render(
        request,
        "confirm.html",
        login=login,
        title="Confirm the run",
        q=q,
        info=info,
        cost=json.dumps(info.get("cost", {})),
    )


@page(post=True)
async def run_confirm(request: Request, login: Login, form: FormData) -> Response:
    """The charged run, once confirmed at the cost the confirmation page showed."""
    try:
        q = queries.QueryForm.read(form)
        ran = await blocking(request, queries.run, login, q, queries.confirmed_cost(form))
    except Exception as e:  # noqa: BLE001
        return _refused(request, login, form, e)
    if ran.changed is not None:
        return render(
            request,
            "confirm.html",
            login=login,
            title="Confirm the run",
            q=q,
            info=ran.changed,
            cost=json.dumps(ran.changed.get("cost", {})),
            changed=True,
        )
    result = ran.result
    dp = result.dp
    if dp is not None and dp.cached:
        detail = json.dumps({"receipt": dp.receipt, "sql": q.sql[:2000]})
        await blocking(
            request,
            console(request).server.ledger.record_event,
            history.CACHE_EVENT,
            login.user.name,
            address(request),
            detail,
        )
    answer = results.table(result.names, result.rows, None if dp is None else dp.ci, "run")
    return render(request, "result.html", login=login, title="Result", q=q, result=result, dp=dp, answer=answer)

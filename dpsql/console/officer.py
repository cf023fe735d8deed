"""The privacy officer's pages (officer = true in the policy): every budget, grants with a
reason, the audit log and its CSV export, the policy, and the ledger's verification."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from typing import Any
from urllib.parse import urlencode

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ..accounting.cost import show
from ..config import Policy, exact
from ..engines import Engine
from ..errors import Error, invalid_parameter
from ..ledger import Ledger
from ..session import budget_summary
from . import audit, budgets, policy_view
from .logins import Login
from .web import address, blocking, console, page, refusal, render

GRANT_EVENT = "grant"
MAX_REASON = 1000
AUDIT_SHOWN = 200  # records the search page lists (the CSV export has them all)


def _all_budgets(policy: Policy, ledger: Ledger, engine: Engine) -> dict[str, Any]:
    return {
        "analysts": [budgets.analyst_budget(policy, ledger, engine, name, compact=True) for name in policy.users],
        "global": budgets.global_budget(policy, ledger, engine),
    }


@page(officer=True)
async def budgets_page(request: Request, login: Login) -> Response:
    server = console(request).server
    views = await blocking(request, _all_budgets, server.policy, server.ledger, server.engine)
    return render(request, "officer_budgets.html", login=login, title="All budgets", **views)


def _amount(text: str, name: str) -> Fraction:
    try:
        value = float(text)
    except ValueError:
        raise invalid_parameter(f"{name} must be a number, not {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise invalid_parameter(f"{name} must be a positive number")
    return exact(value)


def grant(
    policy: Policy, ledger: Ledger, officer: str, analyst: str, epsilon: str, delta: str, reason: str, where: str
) -> str:
    """More budget for an analyst (as `dpsql budget grant` gives it), and an audit event naming
    the officer and the reason. Returns the budget after the grant, in words."""
    u = policy.user(analyst)
    eps = _amount(epsilon, "epsilon")
    if eps <= 0:
        raise invalid_parameter("epsilon must be a positive number")
    d = _amount(delta, "delta") if delta else (Fraction(0) if u.filter == "basic" else u.delta)
    if u.filter != "basic" and d <= 0:
        raise invalid_parameter(f"the {u.filter} filter needs a delta > 0 for a grant")
    if not reason:
        raise invalid_parameter("say why: a grant needs a reason, which goes into the audit log")
    ledger.grant(
        u.name,
        eps,
        d,
        u.budget,
        event=(
            GRANT_EVENT,
            where,
            json.dumps({"officer": officer, "epsilon": show(eps), "delta": show(d), "reason": reason}),
        ),
    )
    return budget_summary(policy, ledger, u.name)["detail"]


def _grants(policy: Policy, ledger: Ledger) -> list[dict[str, Any]]:
    """Every grant in the ledger, newest first, with the officer and reason of the audit event
    recorded with it (grants made with `dpsql budget grant` have none)."""
    out = []
    for name in policy.users:
        events = []
        for e in ledger.events(name):
            if e["kind"] == GRANT_EVENT:
                try:
                    events.append((e["at"], json.loads(e["detail"])))
                except ValueError:
                    continue
        for g in ledger.grants(name):
            eps, dlt = show(g["epsilon"]), show(g["delta"])
            match = next(
                (
                    ev
                    for ev in events
                    if ev[0] >= g["at"]
                    and ev[0] - g["at"] < 60
                    and ev[1].get("epsilon") == eps
                    and ev[1].get("delta") == dlt
                ),
                None,
            )
            if match is not None:
                events.remove(match)
            out.append(
                {
                    "at": g["at"],
                    "user": name,
                    "epsilon": eps,
                    "delta": dlt,
                    "officer": match[1].get("officer", "") if match else "",
                    "reason": match[1].get("reason", "") if match else "",
                }
            )
    return sorted(out, key=lambda g: g["at"], reverse=True)


async def _grants_view(request: Request, login: Login, status: int = 200, **context: Any) -> Response:
    server = console(request).server
    grants = await blocking(request, _grants, server.policy, server.ledger)
    return render(
        request,
        "grants.html",
        status,
        login=login,
        title="Grants",
        grants=grants,
        analysts=list(server.policy.users),
        **context,
    )


@page(officer=True)
async def grants_page(request: Request, login: Login) -> Response:
    return await _grants_view(request, login, granted=request.query_params.get("granted"))


@page(officer=True, post=True)
async def grant_submit(request: Request, login: Login, form: FormData) -> Response:
    server = console(request).server
    fields = {k: str(form.get(k, "")).strip() for k in ("user", "epsilon", "delta", "reason")}
    if len(fields["reason"]) > MAX_REASON:
        return await _grants_view(
            request, login, 400, form=fields, error={"message": f"the reason is longer than {MAX_REASON} characters"}
        )
    try:
        await blocking(
            request,
            grant,
            server.policy,
            server.ledger,
            login.user.name,
            fields["user"],
            fields["epsilon"],
            fields["delta"],
            fields["reason"],
            address(request),
        )
    except Exception as e:  # noqa: BLE001 - shown as the wire shows it (refusal() hides internal errors)
        return await _grants_view(request, login, 400 if isinstance(e, Error) else 500, form=fields, error=refusal(e))
    return RedirectResponse("/officer/grants?" + urlencode({"granted": fields["user"]}), status_code=303)


@page(officer=True)
async def audit_page(request: Request, login: Login) -> Response:
    try:
        s = audit.Search.read(request.query_params)
    except Error as e:
        return render(
            request,
            "audit.html",
            400,
            login=login,
            title="Audit log",
            search=audit.Search(),
            records=[],
            total=0,
            error=refusal(e),
            kinds=audit.KINDS,
            analysts=list(console(request).server.policy.users),
        )
    records = await blocking(request, audit.search, console(request).server.ledger, s)
    return render(
        request,
        "audit.html",
        login=login,
        title="Audit log",
        search=s,
        records=records[:AUDIT_SHOWN],
        total=len(records),
        kinds=audit.KINDS,
        analysts=list(console(request).server.policy.users),
    )


@page(officer=True)
async def audit_csv(request: Request, login: Login) -> Response:
    try:
        s = audit.Search.read(request.query_params)
    except Error as e:
        return Response(e.message, status_code=400, media_type="text/plain")
    ledger = console(request).server.ledger
    text = await blocking(request, lambda: audit.csv_text(audit.search(ledger, s)))
    return Response(
        text,
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": 'attachment; filename="dpsql-audit.csv"'},
    )


@page(officer=True)
async def policy_page(request: Request, login: Login) -> Response:
    policy = console(request).server.policy
    return render(request, "policy.html", login=login, title="Policy", policy=policy_view.overview(policy))


def _verify(ledger: Ledger) -> dict[str, Any]:
    return {"problems": ledger.verify(), "ledger_id": ledger.identity.ledger_id}


@page(officer=True)
async def ledger_page(request: Request, login: Login) -> Response:
    try:
        status = await blocking(request, _verify, console(request).server.ledger)
    except Exception as e:  # noqa: BLE001
        return render(request, "ledger.html", login=login, title="Ledger", error=refusal(e))
    return render(request, "ledger.html", login=login, title="Ledger", **status)

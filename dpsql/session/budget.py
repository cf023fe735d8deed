"""An analyst's budget in force, as the dashboards, SHOW dpsql.budget and the dpsql.budget
relation show it: totals, spending, what is left and how many more queries it admits."""

from __future__ import annotations

import datetime
from typing import Any

from ..accounting.cost import Cost
from ..accounting.filters import Filter, Totals, simulate
from ..config import BudgetPolicy, Policy
from ..ledger import Ledger, window_of
from .result import Result


def admits_more(ledger: Ledger, who: str, budget: BudgetPolicy, f: Filter, totals: Totals, cost: Cost) -> int:
    """How many more releases of this cost the filter `f` (at `totals`) admits, and the budget's
    lifetime cap if it has one: an estimate for dashboards, charged nothing."""
    n = simulate(f, cost, limit=10**6, start=totals)
    life = ledger.lifetime(who, budget)
    return n if life is None else min(n, simulate(life[0], cost, limit=10**6, start=life[1]))


def budget_summary(policy: Policy, ledger: Ledger, user: str, detail: bool = True) -> dict[str, Any]:
    """An analyst's budget in force: totals, spending and what is left, as exact rationals, and
    (`detail`) the filter's own account of it in words, which SHOW dpsql.budget does not need."""
    u = policy.user(user)
    f, totals = ledger.state(u.name, u.budget)
    left = f.remaining(totals)
    out: dict[str, Any] = {
        "user": u.name,
        "filter": f.name,
        "epsilon": {"total": f.epsilon, "spent": totals.epsilon, "remaining": left["epsilon"]},
        "delta": {"total": f.delta, "spent": totals.delta, "remaining": left["delta"]},
        "queries": totals.queries,
        "detail": f.describe(totals) if detail else "",
    }
    window = window_of(u.budget, ledger.now()) if u.budget.window is not None else None
    if window is not None:
        out["window"] = {"seconds": u.budget.window, "refreshes": _utc(window[2])}
        out["detail"] += f"; this window refreshes at {_utc(window[2])}" if detail else ""
    life = ledger.lifetime(u.name, u.budget)
    if life is not None:
        lf, lt = life
        out["lifetime"] = {
            "epsilon": {"total": lf.epsilon, "spent": lt.epsilon, "remaining": lf.remaining(lt)["epsilon"]},
            "delta": {"total": lf.delta, "spent": lt.delta},
        }
        out["detail"] += f"; lifetime cap: {lf.describe(lt)} (never refreshes)" if detail else ""
    return out


BUDGET_COLUMNS = [
    "user",
    "filter",
    "epsilon_total",
    "epsilon_spent",
    "epsilon_remaining",
    "delta_total",
    "delta_spent",
    "delta_remaining",
    "queries",
    "window_refreshes",
    "lifetime_epsilon_remaining",
]
BUDGET_TYPES = ["VARCHAR", "VARCHAR"] + ["DOUBLE"] * 6 + ["BIGINT", "VARCHAR", "DOUBLE"]


def budget_result(policy: Policy, ledger: Ledger, user: str) -> Result:
    """SHOW dpsql.budget, and the dpsql.budget relation's one row."""
    b = budget_summary(policy, ledger, user, detail=False)
    life = b.get("lifetime")
    row = (
        b["user"],
        b["filter"],
        float(b["epsilon"]["total"]),
        float(b["epsilon"]["spent"]),
        float(b["epsilon"]["remaining"]),
        float(b["delta"]["total"]),
        float(b["delta"]["spent"]),
        float(b["delta"]["remaining"]),
        b["queries"],
        b["window"]["refreshes"] if b.get("window") else None,
        float(life["epsilon"]["remaining"]) if life else None,
    )
    return Result(list(BUDGET_COLUMNS), list(BUDGET_TYPES), [row], "SHOW")


def _utc(at: float) -> str:
    return datetime.datetime.fromtimestamp(at, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")

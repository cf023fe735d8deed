"""What the budget pages show: a budget's state, its history as a chart, and how many more
typical queries it admits. Blocking (ledger reads): called on the server's worker threads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from markupsafe import Markup

from ..accounting.cost import Cost
from ..config import BudgetPolicy, Policy
from ..engines import Engine
from ..errors import Error
from ..ledger import GLOBAL, Ledger
from ..prepare import prepare
from ..session import admits_more, budget_summary, default_settings
from ..sql.classify import Query, classify
from . import charts
from .timeline import Point, replay


@dataclass(frozen=True)
class BudgetView:
    """One budget (an analyst's or the global one) as a page shows it."""

    name: str
    summary: dict[str, Any]
    points: list[Point]
    chart: Markup
    admits: int | None  # more typical queries the budget admits now (None: no typical query)
    typical: str | None


def typical_query(policy: Policy) -> str | None:
    """The query the admitted-query estimate counts: one COUNT(*) over the first private table,
    at the policy's default epsilon and mechanism (what a query costs unless SET otherwise)."""
    for table in policy.tables.values():
        if not table.public:
            return f'SELECT COUNT(*) FROM "{table.name}"'
    return None


def typical_cost(policy: Policy, engine: Engine, user: str) -> Cost | None:
    """The typical query's cost for `user`, planned and calibrated as a session would (nothing
    runs and nothing is charged); None when there is none or the policy refuses it."""
    sql = typical_query(policy)
    if sql is None:
        return None
    stmt = classify(sql, policy.limits)
    if not isinstance(stmt, Query):
        return None
    try:
        _, cal = prepare(stmt.tree, policy, engine.schema(), default_settings(policy, policy.user(user)), stmt.options)
    except Error:
        return None
    return None if cal is None else cal.cost


def analyst_budget(policy: Policy, ledger: Ledger, engine: Engine, user: str, *, compact: bool = False) -> BudgetView:
    """An analyst's budget in force, its history since the first charge, and its admitted-query estimate."""
    u = policy.user(user)
    summary = budget_summary(policy, ledger, u.name)
    charges = [(h["at"], h["cost"]) for h in ledger.history(u.name)]
    return _view(policy, ledger, engine, u.name, u.budget, summary, charges, ledger.grants(u.name), compact)


def global_budget(policy: Policy, ledger: Ledger, engine: Engine, *, compact: bool = False) -> BudgetView | None:
    """The budget all analysts share, when the policy declares one ([privacy.global])."""
    budget = policy.privacy.global_budget
    if budget is None:
        return None
    f, totals = ledger.state(GLOBAL, budget)
    left = f.remaining(totals)
    summary = {
        "user": "all analysts",
        "filter": f.name,
        "epsilon": {"total": f.epsilon, "spent": totals.epsilon, "remaining": left["epsilon"]},
        "delta": {"total": f.delta, "spent": totals.delta, "remaining": left["delta"]},
        "queries": totals.queries,
        "detail": f.describe(totals),
    }
    charges = [(h["at"], h["cost"]) for h in ledger.history()]
    return _view(policy, ledger, engine, GLOBAL, budget, summary, charges, ledger.grants(GLOBAL), compact)


def _view(
    policy: Policy,
    ledger: Ledger,
    engine: Engine,
    who: str,
    budget: BudgetPolicy,
    summary: dict[str, Any],
    charges: list,
    grants: list,
    compact: bool,
) -> BudgetView:
    points = replay(budget, charges, grants, ledger.now())
    label = "the global budget" if who == GLOBAL else f"the budget of {who}"
    chart = charts.time_chart(
        [
            charts.Series("total", [(p.at, p.total) for p in points], "total"),
            charts.Series("spent", [(p.at, p.spent) for p in points], "spent"),
            charts.Series("remaining", [(p.at, p.remaining) for p in points], "remaining"),
        ],
        chart_id=f"budget-{'global' if who == GLOBAL else who}".replace(" ", "-"),
        title=f"Epsilon of {label} over time ({summary['filter']} filter)",
        **({"width": 480, "height": 200} if compact else {}),
    )
    user = who if who in policy.users else next(iter(policy.users), None)  # the global budget: any analyst's
    cost = typical_cost(policy, engine, user) if user is not None else None
    admits = None
    if cost is not None:
        f, totals = ledger.state(who, budget)
        admits = admits_more(ledger, who, budget, f, totals, cost)
    return BudgetView(who, summary, points, chart, admits, typical_query(policy) if cost is not None else None)

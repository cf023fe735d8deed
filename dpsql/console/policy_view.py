"""The policy as a privacy officer reads it, from the Policy object alone: tables, privacy
units, contribution limits, bounds and key domains; budgets and filters; statement limits.
Connection details (URLs, file paths) are left out: they are configuration, not policy."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..accounting.cost import show
from ..config import BudgetPolicy, ColumnPolicy, Policy, TablePolicy

KEYS_SHOWN = 20  # keys listed per column before "and N more"


@dataclass(frozen=True)
class ColumnView:
    name: str
    bounds: str
    domain: str


@dataclass(frozen=True)
class TableView:
    name: str
    public: bool
    unit: str
    limits: str
    source: str
    columns: list[ColumnView]


def _column(c: ColumnPolicy) -> ColumnView:
    bounds = (
        f"[{show(c.lower)}, {show(c.upper)}]" if c.bounded else (f"[{c.dates[0]}, {c.dates[1]}]" if c.dates else "")
    )
    domain = ""
    if c.keys is not None:
        shown = ", ".join(_key(k) for k in c.keys[:KEYS_SHOWN])
        more = len(c.keys) - KEYS_SHOWN
        domain = f"{len(c.keys)} keys: {shown}" + (f", and {more} more" if more > 0 else "")
    elif c.keys_from is not None:
        domain = f"keys from the public column {c.keys_from[0]}.{c.keys_from[1]}"
    if c.type:
        domain = f"{domain}; read as {c.type}" if domain else f"read as {c.type}"
    return ColumnView(c.name, bounds, domain)


def _key(k: Any) -> str:
    """A key as the policy file writes it."""
    if isinstance(k, bool):
        return "true" if k else "false"
    return repr(k) if isinstance(k, str) else str(k)


def _table(t: TablePolicy) -> TableView:
    if t.public:
        unit, limits = "", "public: readable row by row, free"
    else:
        unit = 'each row (privacy_unit = "row")' if t.row_unit else str(t.privacy_unit)
        limits = f"max_groups {t.max_groups}, max_rows {t.max_rows}"
        if t.max_contributions is not None:
            limits += f", max_contributions {t.max_contributions}"
    source = t.source.name if t.source is not None else "the engine's database"
    return TableView(t.name, t.public, unit, limits, source, [_column(c) for c in t.columns.values()])


def budget_text(b: BudgetPolicy) -> str:
    text = f"{b.filter} filter, epsilon {show(b.epsilon)}, delta {show(b.delta)}"
    if b.delta_reserve:
        text += f", delta_reserve {show(b.delta_reserve)}"
    if b.rdp_order is not None:
        text += f", rdp_order {show(b.rdp_order)}"
    if b.window is not None:
        text += f", window {_duration(b.window)}"
    if b.lifetime_epsilon is not None:
        text += f", lifetime cap epsilon {show(b.lifetime_epsilon)} delta {show(b.lifetime_delta)}"
    return text


def _duration(seconds: int) -> str:
    for unit, size in (("w", 7 * 86400), ("d", 86400), ("h", 3600)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def overview(policy: Policy) -> dict[str, Any]:
    p = policy.privacy
    return {
        "tables": [_table(t) for t in policy.tables.values()],
        "engine": policy.engine.kind,
        "defaults": {
            "query_epsilon": show(p.query_epsilon),
            "query_delta": show(p.default_query_delta),
            "mechanism": p.mechanism,
            "confidence": f"{p.confidence:g}",
        },
        "global": None if p.global_budget is None else budget_text(p.global_budget),
        "users": [
            {"name": u.name, "budget": budget_text(u.budget), "officer": u.officer} for u in policy.users.values()
        ],
        "limits": dataclasses.asdict(policy.limits),
    }

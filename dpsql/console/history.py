"""An analyst's history: every charged release (the ledger's charges: SQL, cost, noise, the
released values with the names and intervals recorded with them; for records that hold rows
only, the names and intervals of the cached answer carrying the charge's receipt) and the
console's answers served from the cache, free."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable

from ..accounting.cost import show
from ..ledger import Ledger, failure_of, failure_text
from . import results

CACHE_EVENT = "answer from cache"  # the audit event of an answer the console served from the cache
PER_PAGE = 20
ROWS_SHOWN = 50  # rows of one released answer a history entry shows


@dataclass
class Entry:
    at: float
    cached: bool  # served from the cache (free), or a charged, fresh answer
    receipt: int | None  # the charge's id (for a cached answer: the charge that released it)
    sql: str
    epsilon: str = "0"
    delta: str = "0"
    status: str = ""
    noise: list[dict[str, Any]] = field(default_factory=list)
    answers: list[results.Table] = field(default_factory=list)


def page(
    ledger: Ledger, user: str, number: int, describe: Callable[[str], list[str] | None]
) -> tuple[list[Entry], int]:
    """One page of the user's history, newest first, and the number of pages."""
    items: list[tuple[float, str, dict[str, Any]]] = [(h["at"], "charge", h) for h in ledger.history(user)]
    items += [(e["at"], "cached", e) for e in ledger.events(user) if e["kind"] == CACHE_EVENT]
    items.sort(key=lambda item: item[0], reverse=True)
    pages = max(1, -(-len(items) // PER_PAGE))
    number = min(max(1, number), pages)
    chosen = items[(number - 1) * PER_PAGE : number * PER_PAGE]
    receipts = {item["id"] for _, kind, item in chosen if kind == "charge"}
    cached = ledger.cached_answers(user, receipts) if receipts else {}
    entries = [
        _charge(item, cached.get(item["id"]), describe) if kind == "charge" else _cached(item)
        for _, kind, item in chosen
    ]
    return entries, pages


def _charge(h: dict[str, Any], answer: dict[str, Any] | None, describe: Callable[[str], list[str] | None]) -> Entry:
    detail = h["detail"]
    entry = Entry(h["at"], False, h["id"], h["sql"], show(h["cost"].epsilon), show(h["cost"].delta))
    released = h["released"]
    noise = detail.get("mechanisms", []) if isinstance(detail, dict) else []
    if isinstance(detail, dict) and "queries" in detail:
        noise = [m for q in detail["queries"] for m in q.get("mechanisms", [])]
    entry.noise = noise
    if released is None:
        entry.status = "charged; no answer was released (the query failed after its charge)"
    elif failure_of(released) is not None:
        entry.status = failure_text(failure_of(released))
    elif isinstance(released, dict) and "names" in released:  # one query: its rows, names and intervals
        entry.status = "released"
        entry.answers.append(
            results.table(released["names"], released["rows"], released.get("ci"), f"h{h['id']}", ROWS_SHOWN)
        )
    elif isinstance(released, dict):
        entry.status = f"released {released.get('rows', 0)} randomized rows (randomized response)"
    elif isinstance(detail, dict) and "batch" in detail:
        entry.status = f"released (a batch of {detail['batch']} queries, charged once)"
        for i, (sql, rows) in enumerate(zip(h["sql"].split("\n;\n"), released)):
            entry.answers.append(_answer(sql, rows, None, describe, f"h{h['id']}-{i}"))
    else:
        entry.status = "released"
        entry.answers.append(_answer(h["sql"], released, answer, describe, f"h{h['id']}"))
    return entry


def _answer(
    sql: str, rows: list, answer: dict[str, Any] | None, describe: Callable[[str], list[str] | None], chart_prefix: str
) -> results.Table:
    """A released answer: names and intervals from the cached answer with this receipt, else
    the names a free Describe gives (no intervals)."""
    width = len(rows[0]) if rows else 0
    names = answer["names"] if answer else describe(sql)
    if not names or len(names) != width:
        names = [f"column {j + 1}" for j in range(width)]
    ci = (answer.get("dp") or {}).get("ci") if answer else None
    return results.table(names, rows, ci, chart_prefix, ROWS_SHOWN)


def _cached(e: dict[str, Any]) -> Entry:
    try:
        detail = json.loads(e["detail"])
    except ValueError:
        detail = {}
    receipt = detail.get("receipt") if isinstance(detail, dict) else None
    return Entry(
        e["at"],
        True,
        receipt if isinstance(receipt, int) else None,
        str(detail.get("sql", "")),
        status="answered from the cache, free: the same answer again, so no new privacy cost",
    )

"""A budget over time, replayed from the ledger's charges and grants.

The ledger keeps running totals only for the segment in force; the console draws how they
got there by replaying every charge and grant in time order through the same functions the
ledger charges with (`segment_filter`, `window_of`, the filter's `usage` and `remaining`), so
the chart's last point is the budget `SHOW dpsql.budget` reports.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Sequence

from ..accounting.cost import Cost
from ..accounting.filters import Filter, Totals
from ..config import BudgetPolicy
from ..ledger import segment_filter, window_of

MAX_POINTS = 400  # points drawn; every charge is still replayed
LEAD = 5.0  # seconds at least of the untouched budget drawn before the first event


@dataclass(frozen=True)
class Point:
    """The budget just after one event, as SHOW dpsql.budget states it: the filter's epsilon,
    what it has left (the largest epsilon of one more Laplace release it admits) and the
    epsilons charged in this segment (under filters other than basic they may add up to more
    than the total: those filters admit more than the sum)."""

    at: float
    total: float
    remaining: float
    spent: float


def replay(
    budget: BudgetPolicy, charges: Sequence[tuple[float, Cost]], grants: Sequence[dict[str, Any]], now: float
) -> list[Point]:
    """The budget after each charge and grant (and at the start of each window), oldest first,
    ending at `now`; thinned to MAX_POINTS, keeping the last."""
    events = sorted(
        [(at, 1, cost) for at, cost in charges] + [(g["at"], 0, (g["epsilon"], g["delta"])) for g in grants],
        key=lambda e: (e[0], e[1]),
    )
    first = events[0][0] if events else now
    window = window_of(budget, first)
    granted: list[tuple[Fraction, Fraction]] = []
    segment, f = segment_filter(budget, granted)
    totals = Totals()
    lead = max(LEAD, (now - first) * 0.1)  # the untouched budget, drawn a little before the first event
    start = first - lead if window is None else max(first - lead, window[1])
    states: list[tuple[float, Filter, Totals]] = [(start, f, totals)]
    for at, kind, item in events:
        current = window_of(budget, at)
        if current is not None and window is not None and current[0] != window[0]:
            window, granted, totals = current, [], Totals()
            segment, f = segment_filter(budget, granted)
            states.append((current[1], f, totals))
        if kind == 0:
            granted.append(item)
            new_segment, f = segment_filter(budget, granted)
            if new_segment != segment:
                segment, totals = new_segment, Totals()
        else:
            totals = totals.plus(f.usage(item))
        states.append((at, f, totals))
    current = window_of(budget, now)
    if current is not None and window is not None and current[0] != window[0]:
        f = segment_filter(budget, [])[1]
        states.append((current[1], f, Totals()))
        states.append((now, f, Totals()))
    elif now > states[-1][0]:
        states.append((now, states[-1][1], states[-1][2]))
    step = max(1, -(-len(states) // MAX_POINTS))
    kept = states[::step]
    if kept[-1] is not states[-1]:
        kept.append(states[-1])
    return [Point(at, float(flt.epsilon), float(flt.remaining(t)["epsilon"]), float(t.epsilon)) for at, flt, t in kept]

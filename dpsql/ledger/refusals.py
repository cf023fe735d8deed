"""Why a filter refuses a charge, in words the analyst can act on (pure)."""

from __future__ import annotations

import dataclasses
from fractions import Fraction

from ..accounting.cost import Cost, show
from ..accounting.filters import Filter, Totals
from ..errors import BudgetExceeded
from .jobs import GLOBAL
from .schema import _date


def refusal(
    who: str, user: str, f: Filter, totals: Totals, cost: Cost, refresh: float | None = None, lifetime: bool = False
) -> BudgetExceeded:
    """Why the filter halts, said as it is: "exhausted" only when nothing is left; a query that
    needs a delta the budget does not provide, or more epsilon than is left, is told so; a
    windowed budget says when it refreshes, a lifetime cap that it never does."""
    whose = "the global budget shared by all analysts" if who == GLOBAL else f'the privacy budget of analyst "{user}"'
    if lifetime:
        whose = f"the lifetime cap of {whose} (over all budget windows; it never refreshes)"
    elif refresh is not None:
        whose = f"{whose} for this window (it refreshes at {_date(refresh)})"
    left = f.remaining(totals)
    state = f.describe(totals)
    costs = f"this query costs epsilon={show(cost.epsilon)}, delta={show(cost.delta)}"
    cache = "identical repeats of earlier queries are answered from the cache at no cost"
    without_delta = Cost.of([dataclasses.replace(p, delta=Fraction(0)) for p in cost.parts])
    if f.name == "gdp" and any(p.kind != "gaussian" and p.delta > 0 for p in cost.parts):
        return BudgetExceeded(
            f"{whose} is a Gaussian DP (gdp) filter, which admits Gaussian and pure epsilon-DP "
            "(Laplace) releases, but this release has delta > 0 of another kind (partition selection "
            f"of undeclared group keys, or a PLD-planned batch) and no GDP guarantee: {costs}; {state}",
            hint="declare the group keys in the policy (then no partition selection is needed), or "
            "send the queries one by one; nothing was charged",
        )
    if cost.delta > 0 and f.admits_cost(totals, without_delta):
        if f.delta_left(Totals()) == 0 and f.delta_left(totals) == 0:
            setting = "delta" if f.name == "basic" or f.delta == 0 else "delta_reserve"
            return BudgetExceeded(
                f"{whose} provides no delta for releases like this one (partition selection of "
                f"undeclared group keys, or Gaussian noise): {costs}; {state}",
                hint=f"declare the group keys in the policy, use Laplace noise, or set {setting} in "
                "the policy's budget; nothing was charged",
            )
        return BudgetExceeded(
            f"{whose} has delta={show(left['delta'])} left, less than this query needs: {costs}; {state}",
            hint=f"SET dpsql.delta to at most {show(left['delta'])}, or ask with Laplace noise over "
            f"declared group keys, which needs no delta; {cache}",
        )
    if left["epsilon"] > 0:
        return BudgetExceeded(
            f"{whose} has epsilon={show(left['epsilon'])} left, not enough for this query: {costs}; {state}",
            hint=f"a cheaper query still fits: SET dpsql.epsilon = "
            f"{show(_round_down(left['epsilon']))} (or less); {cache}",
        )
    return BudgetExceeded(
        f"{whose} is exhausted: {costs}; {state}", hint=f"an administrator can grant more (dpsql budget grant); {cache}"
    )


def _round_down(x: Fraction) -> Fraction:
    """A short decimal no larger than x, for hints people can type."""
    if Fraction(repr(float(x))) == x:
        return x
    return Fraction(int(x * 10**6), 10**6)

"""A column's declared bounds narrowed by the query's own WHERE (issue 32): `SUM(cost) ... WHERE
cost < 500` sums values in [lower, 500], not the policy's whole range, so its clamp, its
sensitivity and its noise follow the narrower range.

Pure and data-independent: the narrowing reads the query's text and the policy only. It is sound
whatever rows pass the filter, because the measure clamps every row's value to the bounds it is
given (measures.Sum), and its sensitivity is computed from those same bounds; when the filter
does imply them (a top-level conjunct comparing the very column with a constant), the clamp cuts
nothing.
"""

from __future__ import annotations

from typing import Sequence

from sqlglot import exp

from .bounds import UNBOUNDED, Interval, interval
from .scope import conjuncts

# col OP constant: the interval a row's value must be in for the comparison to hold (closed: a
# strict bound is kept as its limit, which loses nothing for a clamp).
_UPPER = (exp.LT, exp.LTE)
_LOWER = (exp.GT, exp.GTE)


def narrowed(column: exp.Column, bounds: Interval, where: Sequence[exp.Expression]) -> Interval:
    """`bounds` intersected with what each top-level conjunct of `where` says of `column`
    (comparisons and BETWEEN with constants); `bounds` itself when that leaves no width (a
    single value or a contradiction: the policy's range then stays, as for any query)."""
    if not bounds.finite:
        return bounds
    text = column.sql()
    lo, hi = bounds.lo, bounds.hi
    for w in where:
        for c in conjuncts(w):
            implied = _implied(c, text)
            lo, hi = max(lo, implied.lo), min(hi, implied.hi)
    return Interval(lo, hi) if lo < hi else bounds


def _implied(cond: exp.Expression, text: str) -> Interval:
    if isinstance(cond, exp.Between) and _is(cond.this, text):
        low, high = _constant(cond.args.get("low")), _constant(cond.args.get("high"))
        if low is not None and high is not None:
            return Interval(low, high)
        return UNBOUNDED
    if not isinstance(cond, _UPPER + _LOWER):
        return UNBOUNDED
    left, right = cond.this, cond.expression
    if _is(left, text) and (v := _constant(right)) is not None:
        return Interval(-UNBOUNDED.hi, v) if isinstance(cond, _UPPER) else Interval(v, UNBOUNDED.hi)
    if _is(right, text) and (v := _constant(left)) is not None:  # constant OP col: the other way
        return Interval(v, UNBOUNDED.hi) if isinstance(cond, _UPPER) else Interval(-UNBOUNDED.hi, v)
    return UNBOUNDED


def _is(node: exp.Expression | None, text: str) -> bool:
    return isinstance(node, exp.Column) and node.sql() == text


def _constant(node: exp.Expression | None) -> float | None:
    """A numeric constant's value (a literal, a negation, arithmetic of literals), else None."""
    if node is None or node.find(exp.Column) is not None:
        return None
    value = interval(node, lambda _: UNBOUNDED)
    return value.lo if value.finite and value.lo == value.hi else None

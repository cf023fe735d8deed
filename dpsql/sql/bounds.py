"""Interval arithmetic over SQL expressions: the bounds of `SUM(salary / 12)` from salary's.

Bounds come from the policy (public), never from data. They serve twice: as the clamp range
that makes a sum's sensitivity finite, and (over noisy outputs) to carry confidence intervals
through post-processing arithmetic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from sqlglot import exp

INF = math.inf


@dataclass(frozen=True)
class Interval:
    lo: float
    hi: float

    @property
    def finite(self) -> bool:
        return math.isfinite(self.lo) and math.isfinite(self.hi)

    def hull(self, other: "Interval") -> "Interval":
        return Interval(min(self.lo, other.lo), max(self.hi, other.hi))


UNBOUNDED = Interval(-INF, INF)
BOOLEAN = Interval(0.0, 1.0)

EXTRACT_RANGES = {
    "MONTH": (1, 12),
    "DAY": (1, 31),
    "HOUR": (0, 23),
    "MINUTE": (0, 59),
    "SECOND": (0, 60),
    "DOW": (0, 6),
    "DAYOFWEEK": (0, 6),
    "ISODOW": (1, 7),
    "DOY": (1, 366),
    "DAYOFYEAR": (1, 366),
    "QUARTER": (1, 4),
    "WEEK": (1, 53),
}
_NUMERIC_CASTS = {
    "TINYINT",
    "SMALLINT",
    "INT",
    "INTEGER",
    "BIGINT",
    "HUGEINT",
    "FLOAT",
    "DOUBLE",
    "REAL",
    "DECIMAL",
    "NUMERIC",
    "DOUBLE PRECISION",
    "UTINYINT",
    "USMALLINT",
    "UINT",
    "UBIGINT",
    "FLOAT4",
    "FLOAT8",
    "INT2",
    "INT4",
    "INT8",
    "BIGDECIMAL",
    "MONEY",
}
_INTEGER_CASTS = {
    "TINYINT",
    "SMALLINT",
    "INT",
    "INTEGER",
    "BIGINT",
    "HUGEINT",
    "UTINYINT",
    "USMALLINT",
    "UINT",
    "UBIGINT",
    "INT2",
    "INT4",
    "INT8",
}

Lookup = Callable[[exp.Column], Interval]


def _mul(a: Interval, b: Interval) -> Interval:
    products = []
    for x in (a.lo, a.hi):
        for y in (b.lo, b.hi):
            # 0 * inf is 0 here: a factor pinned at 0 contributes 0 whatever the other factor is.
            products.append(0.0 if x == 0 or y == 0 else x * y)
    return Interval(min(products), max(products))


def _div(a: Interval, b: Interval) -> Interval:
    if b.lo <= 0 <= b.hi:
        return UNBOUNDED
    q = _mul(a, Interval(1 / b.hi, 1 / b.lo))
    # Integer division truncates toward zero; widen so either semantics is covered.
    return Interval(
        min(q.lo, math.trunc(q.lo)) if math.isfinite(q.lo) else q.lo,
        max(q.hi, math.trunc(q.hi)) if math.isfinite(q.hi) else q.hi,
    )


def _monotone(f: Callable[[float], float], a: Interval) -> Interval:
    try:
        return Interval(f(a.lo), f(a.hi))
    except (OverflowError, ValueError):
        return UNBOUNDED


def interval(node: exp.Expression, lookup: Lookup) -> Interval:
    """Bounds of a numeric expression; UNBOUNDED (possibly half-bounded) when not derivable."""
    f = _RULES.get(type(node))
    if f is not None:
        return f(node, lookup)
    if isinstance(node, (exp.Predicate, exp.Connector, exp.Not, exp.Boolean)):
        return BOOLEAN
    return UNBOUNDED


def _literal(node: exp.Literal, _: Lookup) -> Interval:
    if node.is_string:
        return UNBOUNDED
    v = float(node.this)
    return Interval(v, v)


def _hull_of(values: list[exp.Expression], lookup: Lookup) -> Interval:
    parts = [interval(v, lookup) for v in values if not isinstance(v, exp.Null)]
    if not parts:
        return UNBOUNDED
    out = parts[0]
    for p in parts[1:]:
        out = out.hull(p)
    return out


def _case(node: exp.Case, lookup: Lookup) -> Interval:
    branches = [i.args["true"] for i in node.args.get("ifs") or []]
    if node.args.get("default") is not None:
        branches.append(node.args["default"])
    return _hull_of(branches, lookup)


def _if(node: exp.If, lookup: Lookup) -> Interval:
    return _hull_of([x for x in (node.args.get("true"), node.args.get("false")) if x is not None], lookup)


def _least(node: exp.Expression, lookup: Lookup) -> Interval:
    parts = [interval(a, lookup) for a in [node.this, *node.expressions]]
    return Interval(min(p.lo for p in parts), min(p.hi for p in parts))


def _greatest(node: exp.Expression, lookup: Lookup) -> Interval:
    parts = [interval(a, lookup) for a in [node.this, *node.expressions]]
    return Interval(max(p.lo for p in parts), max(p.hi for p in parts))


def _cast(node: exp.Cast, lookup: Lookup) -> Interval:
    to = node.to.this.value if isinstance(node.to.this, exp.DataType.Type) else str(node.to.this)
    to = to.upper()
    if to == "BOOLEAN":
        return BOOLEAN
    if to not in _NUMERIC_CASTS:
        return UNBOUNDED
    inner = interval(node.this, lookup)
    if to in _INTEGER_CASTS:
        return Interval(
            math.floor(inner.lo) if math.isfinite(inner.lo) else inner.lo,
            math.ceil(inner.hi) if math.isfinite(inner.hi) else inner.hi,
        )
    return inner


def _abs(node: exp.Abs, lookup: Lookup) -> Interval:
    a = interval(node.this, lookup)
    if a.lo >= 0:
        return a
    if a.hi <= 0:
        return Interval(-a.hi, -a.lo)
    return Interval(0.0, max(-a.lo, a.hi))


def _mod(node: exp.Mod, lookup: Lookup) -> Interval:
    a, b = interval(node.this, lookup), interval(node.expression, lookup)
    m = max(abs(b.lo), abs(b.hi))
    if not math.isfinite(m):
        return UNBOUNDED
    return Interval(0.0 if a.lo >= 0 else -m, 0.0 if a.hi <= 0 else m)


def _rounding(node: exp.Expression, lookup: Lookup) -> Interval:
    a = interval(node.this, lookup)
    digits = node.args.get("decimals")
    if digits is not None:
        d = interval(digits, lambda _: UNBOUNDED)
        if not d.finite or d.lo != d.hi:
            return UNBOUNDED
        if d.lo < 0:  # ROUND(150, -2) = 200: rounding may step past the bound
            step = 10.0**-d.lo
            return Interval(a.lo - step, a.hi + step)
    return Interval(math.floor(a.lo) if math.isfinite(a.lo) else a.lo, math.ceil(a.hi) if math.isfinite(a.hi) else a.hi)


def _extract(node: exp.Extract, lookup: Lookup) -> Interval:
    part = node.this.name.upper() if isinstance(node.this, (exp.Var, exp.Identifier)) else ""
    r = EXTRACT_RANGES.get(part)
    return Interval(*map(float, r)) if r else UNBOUNDED


def _sqrt(node: exp.Sqrt, lookup: Lookup) -> Interval:
    a = interval(node.this, lookup)
    if a.hi < 0:
        return UNBOUNDED
    return Interval(math.sqrt(max(a.lo, 0.0)), math.sqrt(a.hi) if math.isfinite(a.hi) else INF)


def _ln(node: exp.Ln, lookup: Lookup) -> Interval:
    a = interval(node.this, lookup)
    if a.lo <= 0:
        return UNBOUNDED
    return _monotone(math.log, a)


def _exp(node: exp.Exp, lookup: Lookup) -> Interval:
    a = interval(node.this, lookup)
    return _monotone(math.exp, a) if a.finite else Interval(0.0, INF)


def _pow(node: exp.Pow, lookup: Lookup) -> Interval:
    e = node.expression
    if not (isinstance(e, exp.Literal) and not e.is_string):
        return UNBOUNDED
    n = float(e.this)
    if n != int(n) or not 0 <= n <= 16:
        return UNBOUNDED
    base = interval(node.this, lookup)
    out = Interval(1.0, 1.0)
    for _ in range(int(n)):
        out = _mul(out, base)
    return out


def _nullif(node: exp.Nullif, lookup: Lookup) -> Interval:
    return interval(node.this, lookup)


_RULES: dict[type, Callable[[exp.Expression, Lookup], Interval]] = {
    exp.Literal: _literal,
    exp.Column: lambda n, lookup: lookup(n),
    exp.Paren: lambda n, lookup: interval(n.this, lookup),
    exp.Neg: lambda n, lookup: (lambda a: Interval(-a.hi, -a.lo))(interval(n.this, lookup)),
    exp.Add: lambda n, lookup: (lambda a, b: Interval(a.lo + b.lo, a.hi + b.hi))(
        interval(n.this, lookup), interval(n.expression, lookup)
    ),
    exp.Sub: lambda n, lookup: (lambda a, b: Interval(a.lo - b.hi, a.hi - b.lo))(
        interval(n.this, lookup), interval(n.expression, lookup)
    ),
    exp.Mul: lambda n, lookup: _mul(interval(n.this, lookup), interval(n.expression, lookup)),
    exp.Div: lambda n, lookup: _div(interval(n.this, lookup), interval(n.expression, lookup)),
    exp.IntDiv: lambda n, lookup: _div(interval(n.this, lookup), interval(n.expression, lookup)),
    exp.Mod: _mod,
    exp.Abs: _abs,
    exp.Sign: lambda n, lookup: Interval(-1.0, 1.0),
    exp.Round: _rounding,
    exp.Floor: _rounding,
    exp.Ceil: _rounding,
    exp.Least: _least,
    exp.Greatest: _greatest,
    exp.Coalesce: lambda n, lookup: _hull_of([n.this, *n.expressions], lookup),
    exp.Case: _case,
    exp.If: _if,
    exp.Cast: _cast,
    exp.TryCast: _cast,
    exp.Extract: _extract,
    exp.Sqrt: _sqrt,
    exp.Ln: _ln,
    exp.Exp: _exp,
    exp.Pow: _pow,
    exp.Nullif: _nullif,
    exp.Null: lambda n, lookup: UNBOUNDED,
    exp.Length: lambda n, lookup: Interval(0.0, INF),
}

"""Row-level expressions that cannot fail (total functions): whether a query fails must not depend on a private value.

An engine error on one row (a failed cast, an overflow, a division by zero) would end the
query, so its text or mere occurrence could reveal that row. Every row-level expression dpsql
runs over private data goes through nonfailing(): casts become TRY_CAST and anything else that
could fail is wrapped in TRY, which yields NULL instead.
"""

from __future__ import annotations

from typing import Mapping

from sqlglot import exp


def try_casts(node: exp.Expression) -> exp.Expression:
    return node.copy().transform(
        lambda n: (
            exp.TryCast(this=n.this, to=n.to) if isinstance(n, exp.Cast) and not isinstance(n, exp.TryCast) else n
        ),
        copy=False,
    )


def try_wrap(node: exp.Expression) -> exp.Expression:
    """TRY(node): the value, or NULL where computing it fails. Each engine lowers it to its own
    total form, or refuses the query before anything is charged (engines/)."""
    return exp.Try(this=node)


_NUMERIC = (
    "INT",
    "BIGINT",
    "SMALLINT",
    "TINYINT",
    "HUGEINT",
    "DOUBLE",
    "FLOAT",
    "REAL",
    "DECIMAL",
    "UBIGINT",
    "UINTEGER",
    "USMALLINT",
    "UTINYINT",
    "UHUGEINT",
)


def _category(t: str | None) -> str | None:
    if t is None:
        return None
    t = t.upper()
    if t.startswith(_NUMERIC):
        return "number"
    if t in ("VARCHAR", "TEXT"):
        return "string"
    return t


def _cannot_fail(node: exp.Expression, types: Mapping[tuple[str, str], str]) -> bool:
    """True for the few shapes that can never raise in the engine, so they need no TRY (and
    stay visible to the optimizer: hash joins, filter pushdown)."""
    if isinstance(node, (exp.Column, exp.Literal, exp.Boolean, exp.Null)):
        return True
    if isinstance(node, exp.Not):
        return _cannot_fail(node.this, types)
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        return isinstance(node.this, exp.Column)
    if isinstance(node, (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)):
        a, b = node.this, node.expression
        cats = []
        for side in (a, b):
            if isinstance(side, exp.Column):
                cats.append(_category(types.get((side.table, side.name))))
            elif isinstance(side, exp.Literal):
                cats.append("string" if side.is_string else "number")
            else:
                return False
        return cats[0] is not None and cats[0] == cats[1]
    return False


def nonfailing(node: exp.Expression, types: Mapping[tuple[str, str], str] | None = None) -> exp.Expression:
    """Make a row-level expression total: casts become TRY_CAST, and any other engine error
    becomes NULL, so whether a query fails cannot depend on a private value."""
    return _nonfailing(finite(try_casts(node)), types or {})


_MATH = (exp.Sqrt, exp.Ln, exp.Log, exp.Exp, exp.Pow)
# NaN and the infinities pass through these unchanged (or as NaN): one guard at the top of a
# chain of them covers every math function inside.
_PROPAGATING = (
    exp.Add,
    exp.Sub,
    exp.Mul,
    exp.Div,
    exp.IntDiv,
    exp.Mod,
    exp.Neg,
    exp.Paren,
    exp.Abs,
    exp.Round,
    exp.Floor,
    exp.Ceil,
    *_MATH,
)


def finite(node: exp.Expression) -> exp.Expression:
    """Where PostgreSQL raises an error (division by zero, the square root or logarithm of a
    negative number, an overflowing power), DuckDB returns NULL, NaN or an infinity, and NaN
    compares greater than every number: `WHERE sqrt(x) > 1` would count every row. Each
    divisor becomes NULLIF(divisor, 0), and the top of each chain of arithmetic holding a math
    function or a division is NULL where it is not finite, so failing arithmetic is NULL as
    documented (in place; the caller's copy). The guard refers to its value once (nested
    NULLIFs: NaN is equal to itself in every engine) and only where a chain ends, so nesting
    such functions adds to the expression instead of multiplying it."""
    tops: dict[int, exp.Expression] = {}
    for n in list(node.find_all(exp.Div, exp.IntDiv, exp.Mod, *_MATH)):
        if isinstance(n, (exp.Div, exp.IntDiv, exp.Mod)):
            if _nonzero_number(n.expression):
                continue  # x / 10: cannot fail, and stays as written
            n.set("expression", exp.Nullif(this=n.expression, expression=exp.Literal.number(0)))
        if isinstance(n, (exp.Div, *_MATH)):
            top = n
            while top is not node and isinstance(top.parent, _PROPAGATING):
                top = top.parent
            tops[id(top)] = top
    for top in tops.values():
        if top is node:
            node = _not_finite_to_null(top)
        else:
            spot = exp.Null()
            top.replace(spot)
            spot.replace(_not_finite_to_null(top))
    return node


def _nonzero_number(node: exp.Expression) -> bool:
    while isinstance(node, (exp.Paren, exp.Neg)):
        node = node.this
    try:
        return isinstance(node, exp.Literal) and not node.is_string and float(node.this) != 0
    except ValueError:
        return False


def _not_finite_to_null(value: exp.Expression) -> exp.Expression:
    for special in ("Infinity", "-Infinity", "NaN"):
        value = exp.Nullif(
            this=value, expression=exp.Cast(this=exp.Literal.string(special), to=exp.DataType.build("DOUBLE"))
        )
    return value


def _nonfailing(node: exp.Expression, types: Mapping[tuple[str, str], str]) -> exp.Expression:
    if _cannot_fail(node, types):
        return node
    if node.find(exp.Subquery, exp.Select) is None:
        return try_wrap(node)
    # DuckDB's TRY cannot wrap a subquery: make each subquery-free operand total instead (the
    # subquery itself reads public tables only, so its failures cannot depend on private rows).
    for key, value in list(node.args.items()):
        if isinstance(value, exp.Expression) and not isinstance(value, (exp.Subquery, exp.Select)):
            node.set(key, _nonfailing(value, types))
        elif isinstance(value, list):
            node.set(
                key,
                [
                    _nonfailing(v, types)
                    if isinstance(v, exp.Expression) and not isinstance(v, (exp.Subquery, exp.Select))
                    else v
                    for v in value
                ],
            )
    return node


def clamp(value: exp.Expression, lower: float, upper: float) -> exp.Expression:
    """value clamped to [lower, upper], NULL kept NULL: GREATEST and LEAST skip NULL arguments
    (in DuckDB as in PostgreSQL), so a bare LEAST(GREATEST(NULL, 0), 9) is 0, and a NULL
    would enter sums and averages as a bound."""
    inner = exp.func("LEAST", exp.func("GREATEST", value.copy(), exp.Literal.number(lower)), exp.Literal.number(upper))
    return exp.Case(ifs=[exp.If(this=exp.Is(this=value.copy(), expression=exp.Null()), true=exp.Null())], default=inner)

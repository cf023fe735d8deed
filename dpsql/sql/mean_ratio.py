"""A mean written as a ratio, read as the mean it is: SUM(x) / COUNT(x) is AVG(x), and
SUM(x) / COUNT(*) is AVG(COALESCE(x, 0)), over the same rows (the same FILTER, or none).

Analysts and BI tools write averages both ways (a dashboard's "average" is often a sum over a
count). Released as two aggregates, the ratio splits the query's epsilon between a sum and a
count, each with its own noise and one total bound for both (a count's truncation against a
sum's clamp), where AVG has an estimator of its own (a centred sum over a count, `families._Avg`,
with its split of epsilon): `SELECT ward, SUM(cost) / COUNT(*)` had 36 % median error on the
sample where AVG(cost) had 9 %. Both readings are equal on any data: AVG(x) is NULL where COUNT(x)
is 0, as SUM(x) / COUNT(x) is (SUM is NULL there), and SUM(x) / COUNT(*) divides the non-null
values' total by all the rows, as the mean of x with NULL read as 0 does.

The forms read (each side may be in parentheses): a numerator SUM(x), CAST(SUM(x) AS t) or
SUM(x) * 1.0 (either side); a denominator COUNT(x) or COUNT(*), NULLIF(COUNT(..), 0) or a cast
of it. Neither may be DISTINCT. PostgreSQL divides integers by truncating (sql/division.py), so
where the sum is of an integer value and neither side is cast or scaled, the caller truncates the
mean (`Mean.plain`). Pure: the analyst's tree in, a new tree out; nothing is read from the data.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from .arguments import literal_number


@dataclass(frozen=True)
class Mean:
    """The AVG a ratio is (`avg`, a new tree), the value it averages as written (`value`), and
    whether both sides are as written (`plain`: then the division is PostgreSQL's integer one
    when the value is an integer). A cast numerator's mean is a DOUBLE, as AVG's is."""

    avg: exp.Expression
    value: exp.Expression
    plain: bool


def as_mean(node: exp.Expression) -> Mean | None:
    """The mean a division of a SUM by a COUNT over the same rows is, or None for any other node."""
    if not isinstance(node, exp.Div):
        return None
    top = _numerator(node.this.unnest())
    bottom = _denominator(node.expression.unnest())
    if top is None or bottom is None:
        return None
    (total, cast, scaled), (count, count_cast) = top, bottom
    total_agg, total_where = _filtered(total)
    count_agg, count_where = _filtered(count)
    if not isinstance(total_agg, exp.Sum) or not isinstance(count_agg, exp.Count):
        return None
    if _distinct(total_agg) or _distinct(count_agg) or _text(total_where) != _text(count_where):
        return None
    value = total_agg.this
    counted = count_agg.this
    if value is None or isinstance(value, exp.Star):
        return None
    if counted is None or isinstance(counted, exp.Star):
        averaged: exp.Expression = exp.Coalesce(this=value.copy(), expressions=[exp.Literal.number(0)])
    elif _text(counted) == _text(value):
        averaged = value.copy()
    else:
        return None
    avg: exp.Expression = exp.Avg(this=averaged)
    if total_where is not None:
        avg = exp.Filter(this=avg, expression=total_where.copy())
    integer_count = count_cast is None or count_cast.this in exp.DataType.INTEGER_TYPES
    return Mean(avg, value, plain=cast is None and not scaled and integer_count)


def _numerator(node: exp.Expression) -> tuple[exp.Expression, exp.DataType | None, bool] | None:
    """(the SUM, the type it is cast to, whether it is multiplied by one) of a numerator."""
    if isinstance(node, (exp.Cast, exp.TryCast)) and node.to.this not in exp.DataType.INTEGER_TYPES:
        inner = node.this.unnest()
        return (inner, node.to, False) if _aggregate(inner) else None
    if isinstance(node, exp.Mul):
        for one, other in ((node.this, node.expression), (node.expression, node.this)):
            if literal_number(one) == 1 and _aggregate(other.unnest()):
                return other.unnest(), None, True
        return None
    return (node, None, False) if _aggregate(node) else None


def _denominator(node: exp.Expression) -> tuple[exp.Expression, exp.DataType | None] | None:
    """(the COUNT, the type it is cast to) of a denominator: NULLIF(.., 0) and casts read through."""
    cast = None
    if isinstance(node, (exp.Cast, exp.TryCast)):
        cast, node = node.to, node.this.unnest()
    if isinstance(node, exp.Nullif) and literal_number(node.expression) == 0:
        node = node.this.unnest()
    if cast is None and isinstance(node, (exp.Cast, exp.TryCast)):
        cast, node = node.to, node.this.unnest()
    return (node, cast) if _aggregate(node) else None


def _aggregate(node: exp.Expression) -> bool:
    inner = node.this if isinstance(node, exp.Filter) else node
    return isinstance(inner, (exp.Sum, exp.Count))


def _filtered(node: exp.Expression) -> tuple[exp.Expression, exp.Expression | None]:
    """An aggregate and its FILTER clause (None without one)."""
    if isinstance(node, exp.Filter):
        return node.this, node.expression
    return node, None


def _distinct(agg: exp.Expression) -> bool:
    return isinstance(agg.this, exp.Distinct) or bool(agg.args.get("distinct"))


def _text(node: exp.Expression | None) -> str | None:
    return None if node is None else node.sql(dialect="postgres")

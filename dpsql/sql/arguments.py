"""An aggregate's argument, read for the plan (analyze): FILTER (WHERE c) as CASE, a quantile's
literal fraction, the declared keys COUNT(DISTINCT x) counts, and the refusal that names the
bounds to declare for a value without them. Pure: the query text and the policy only."""

from __future__ import annotations

import re
from typing import Any, Callable

from sqlglot import exp

from ..errors import ProgrammingError, unsupported
from .domains import column_values, literal_domain
from .scope import Source

MAX_DISTINCT_KEYS = 256  # declared keys a COUNT(DISTINCT column) may count
DISTINCT_HINT = (
    "declare the column's keys in the policy (columns.NAME = { keys = [...] }); "
    "COUNT(DISTINCT unit_column) counts people"
)


def distinct_keys(
    text: str, arg: exp.Expression, value: exp.Expression, source: Callable[[str], Source]
) -> tuple[Any, ...]:
    """The declared keys COUNT(DISTINCT arg) counts (`value`: arg resolved; `source`: a table
    alias's Source), or the refusal that names what to declare."""
    inner = value.this if isinstance(value, exp.Paren) else value
    keys = None
    if isinstance(inner, exp.Column):
        src = source(inner.table)
        keys = column_values(src, inner.name)
        if keys is None and src.table.column(inner.name).keys_from is not None:
            raise unsupported(
                f"{text}: COUNT(DISTINCT ...) needs the keys listed in the policy; "
                f"{inner.name} takes its keys from a table",
                hint=DISTINCT_HINT,
            )
    else:
        keys = literal_domain(inner)
    if keys is None:
        raise unsupported(
            f"{text}: the values of {arg.sql(dialect='postgres')} are not declared, so which ones exist is private",
            hint=DISTINCT_HINT,
        )
    if len(keys) > MAX_DISTINCT_KEYS:
        raise unsupported(
            f"{text}: {len(keys)} declared keys; COUNT(DISTINCT ...) supports up to {MAX_DISTINCT_KEYS}",
            hint="group by the column and count the groups with COUNT(*) instead",
        )
    return keys


def unbounded(
    node: exp.Expression,
    arg: exp.Expression,
    value: exp.Expression,
    source: Callable[[str], Source],
    quantile: str | None = None,
) -> ProgrammingError:
    """The refusal of an aggregate whose value has no bounds: the column to declare bounds for,
    or how to clamp the value; `source`: a table alias's Source."""
    text = node.sql(dialect="postgres")
    how = (
        f"and {quantile} is answered as a DP quantile over the column's declared range"
        if quantile
        else "so one person's influence on the result is unlimited"
    )
    missing = []
    for col in value.find_all(exp.Column):
        src = source(col.table)
        if not src.table.column(col.name).bounded:
            missing.append((src.table.name, col.name, src.columns.get(col.name, "")))
    if missing and quantile and _TEXTUAL.search(missing[0][2].upper()):
        return ProgrammingError(
            f"{text}: {missing[0][0]}.{missing[0][1]} is text, and {quantile} is answered as a "
            "DP quantile, which needs a number or a date",
            sqlstate="42P22",
            hint=f"to see which of its values occur, ask SELECT {missing[0][1]}, COUNT(*) ... GROUP BY {missing[0][1]}",
        )
    if missing:
        table, column, _ = missing[0]
        fix = (
            f"declare bounds in the policy: columns.{column} = {{ lower = ..., upper = ... }} in [tables.{table}], "
            f"or clamp it in the query: LEAST(GREATEST({column}, low), high)"
        )
        return ProgrammingError(
            f"{text}: the column {table}.{column} has no declared bounds, {how}", sqlstate="42P22", hint=fix
        )
    return ProgrammingError(
        f"{text}: cannot derive bounds for {arg.sql(dialect='postgres')}",
        sqlstate="42P22",
        hint="wrap it in LEAST(GREATEST(expression, low), high), and avoid dividing by a value that may be 0",
    )


_TEXTUAL = re.compile(r"CHAR|TEXT|STRING|UUID|ENUM|BLOB|BYTEA")


def quantile_fraction(p: exp.Expression, text: str) -> float:
    """The literal fraction of a quantile, in [0, 1]: it must not depend on data."""
    try:
        value = literal_number(p)
    except ValueError:
        value = None
    if value is None or not 0.0 <= value <= 1.0:
        raise ProgrammingError(
            f"{text}: the fraction must be a number literal between 0 and 1",
            sqlstate="22003",
            hint="for example PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY x), or QUANTILE(x, 0.9)",
        )
    return value


def literal_number(p: exp.Expression) -> float | None:
    """A number written as a literal (in parentheses, negated, or a difference of two), else None."""
    if isinstance(p, exp.Paren):
        return literal_number(p.this)
    if isinstance(p, exp.Literal) and not p.is_string:
        return float(p.this)
    if isinstance(p, exp.Neg):
        v = literal_number(p.this)
        return None if v is None else -v
    if isinstance(p, exp.Sub):
        a, b = literal_number(p.this), literal_number(p.expression)
        return None if a is None or b is None else a - b
    return None


def unfilter(node: exp.Filter) -> exp.Expression:
    """AGG(x) FILTER (WHERE c) as AGG(CASE WHEN c THEN x END); COUNT(*) counts CASE WHEN c THEN 1 END."""
    agg = node.this.copy()
    cond = node.expression.this if isinstance(node.expression, exp.Where) else node.expression
    if isinstance(agg, exp.WithinGroup) or not isinstance(agg, exp.AggFunc):
        raise unsupported(
            f"{node.sql(dialect='postgres')}: FILTER on this aggregate is not supported",
            hint="move the condition into WHERE, or into CASE WHEN condition THEN x END",
        )
    arg = agg.this
    if isinstance(arg, exp.Distinct):
        arg.set("expressions", [exp.Case(ifs=[exp.If(this=cond.copy(), true=e)]) for e in arg.expressions])
    else:
        value = exp.Literal.number(1) if arg is None or isinstance(arg, exp.Star) else arg
        agg.set("this", exp.Case(ifs=[exp.If(this=cond.copy(), true=value)]))
    return agg

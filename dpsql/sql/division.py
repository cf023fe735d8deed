"""PostgreSQL's `/` between integers: analysts write SQL as PostgreSQL reads it, where 7 / 2 is 3
(truncated toward zero), while DuckDB's `/` always divides as doubles (3.5). A dashboard's
`age / 10 * 10` buckets or `WHERE age / 10 = 4` filters would silently mean something else.

One pass over a resolved expression (columns qualified by dpsql's aliases): each `/` whose two
operands are integers by PostgreSQL's rules becomes an integer division node (IntDiv), which
every engine's dialect writes as its own truncating integer division. Anything whose type is not
known to be an integer keeps `/` (a numeric or double division in both readings).
"""

from __future__ import annotations

from typing import Callable

from sqlglot import exp

from ..config import INTEGER_TYPES

ColumnType = Callable[[exp.Column], "str | None"]

_INTEGER_NAMES = {*INTEGER_TYPES, "INT1", "INT2", "INT4", "INT8", "SHORT", "LONG", "SIGNED"}  # with aliases
_INT8_MAX = 2**63 - 1  # a larger literal is a NUMERIC in PostgreSQL


def integer_division(node: exp.Expression, column_type: ColumnType) -> exp.Expression:
    """`node` with each integer-by-integer `/` replaced by IntDiv (in place; `node` is the
    caller's own copy). All divisions are decided before any is replaced, so a chain such as
    a / b / c is judged on the analyst's tree."""
    divisions = [d for d in node.find_all(exp.Div) if d.args.get("typed") and integral(d, column_type)]
    for d in divisions:
        replacement = exp.IntDiv(this=d.this, expression=d.expression)
        if d is node:
            node = replacement
        else:
            d.replace(replacement)
    return node


def integral(node: exp.Expression, column_type: ColumnType) -> bool:
    """Whether PostgreSQL types `node` as an integer (smallint, integer or bigint)."""
    if isinstance(node, (exp.Paren, exp.Neg, exp.Abs)):
        return integral(node.this, column_type)
    if isinstance(node, exp.Literal):
        return not node.is_string and node.this.isdigit() and int(node.this) <= _INT8_MAX
    if isinstance(node, exp.Column):
        return _integer_type(column_type(node))
    if isinstance(node, (exp.Cast, exp.TryCast)):
        return node.to.this in exp.DataType.INTEGER_TYPES
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Mod, exp.Div)):
        if isinstance(node, exp.Div) and not node.args.get("typed"):
            return False
        return integral(node.this, column_type) and integral(node.expression, column_type)
    if isinstance(node, exp.IntDiv):  # the pass makes one of integers only; PostgreSQL's DIV() is NUMERIC
        return integral(node.this, column_type) and integral(node.expression, column_type)
    if isinstance(node, exp.Count):
        return True
    if isinstance(node, exp.Case):
        branches = [i.args["true"] for i in node.args.get("ifs") or []]
        default = node.args.get("default")
        branches += [default] if default is not None else []
        return bool(branches) and all(isinstance(b, exp.Null) or integral(b, column_type) for b in branches)
    if isinstance(node, (exp.Coalesce, exp.Greatest, exp.Least)):
        return all(integral(a, column_type) for a in [node.this, *node.expressions])
    return False


def _integer_type(name: str | None) -> bool:
    return name is not None and name.split("(")[0].strip().upper() in _INTEGER_NAMES

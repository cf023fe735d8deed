"""Parameters of a statement bound into its parsed tree as literals (%s, %(name)s, $n), never
spliced into text, so a parameter can never become SQL."""

from __future__ import annotations

import datetime
import decimal
import math
from typing import Any, Mapping, Sequence

from sqlglot import exp

from ..errors import ProgrammingError
from ..sql.classify import array_comparisons


def bind_parameters(tree: exp.Query, params: Sequence[Any] | Mapping[str, Any] | None) -> exp.Query:
    """Substitute %s / %(name)s / $n placeholders with literals in the parsed tree (never by
    splicing text, so a parameter can never become SQL)."""
    holders = [n for n in tree.walk() if isinstance(n, (exp.Placeholder, exp.Parameter))]
    if not holders:
        if params:
            raise ProgrammingError("parameters were given but the query has no placeholders", sqlstate="08P01")
        return tree
    if params is None:
        raise ProgrammingError("the query has placeholders but no parameters were given", sqlstate="08P01")
    tree = tree.copy()
    holders = [n for n in tree.walk() if isinstance(n, (exp.Placeholder, exp.Parameter))]
    position = 0
    for node in holders:
        if isinstance(node, exp.Parameter):
            index = int(node.this.this) - 1 if isinstance(node.this, exp.Literal) else -1
            value = _param(params, index)
        elif node.this:
            if not isinstance(params, Mapping):
                raise ProgrammingError(
                    f"named parameter %({node.name})s needs a mapping of parameters", sqlstate="08P01"
                )
            if node.name not in params:
                raise ProgrammingError(f"no value for parameter {node.name!r}", sqlstate="08P01")
            value = params[node.name]
        else:
            value = _param(params, position)
            position += 1
        node.replace(to_literal(value))
    return array_comparisons(tree)


def null_parameters(tree: exp.Query) -> dict[str, None] | list[None]:
    holders = [n for n in tree.walk() if isinstance(n, (exp.Placeholder, exp.Parameter))]
    named = [n.name for n in holders if isinstance(n, exp.Placeholder) and n.this]
    if named:
        return {name: None for name in named}
    count = max([int(n.this.this) for n in holders if isinstance(n, exp.Parameter)] + [len(holders)])
    return [None] * count


def _param(params, index: int) -> Any:
    if isinstance(params, Mapping) or not 0 <= index < len(params):
        raise ProgrammingError(f"no value for parameter {index + 1}", sqlstate="08P01")
    return params[index]


def to_literal(value: Any) -> exp.Expression:
    if value is None:
        return exp.Null()
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, int):
        return exp.Literal.number(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return exp.Cast(this=exp.Literal.string(repr(value)), to=exp.DataType.build("DOUBLE"))
        return exp.Literal.number(repr(value))
    if isinstance(value, decimal.Decimal):
        return exp.Literal.number(str(value))
    if isinstance(value, datetime.datetime):
        return exp.Cast(this=exp.Literal.string(value.isoformat(sep=" ")), to=exp.DataType.build("TIMESTAMP"))
    if isinstance(value, datetime.date):
        return exp.Cast(this=exp.Literal.string(value.isoformat()), to=exp.DataType.build("DATE"))
    if isinstance(value, str):
        return exp.Literal.string(value)
    raise ProgrammingError(f"cannot use a {type(value).__name__} as a query parameter", sqlstate="22023")

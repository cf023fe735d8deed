"""Parameters bound into a parsed statement as literals (%s, %(name)s, $n), never spliced into
text, so a parameter can never become SQL. The one binder: the session binds an analyst's
statement with it (a missing or surplus value is an error, 08P01), the catalog a tool's catalog
query (a placeholder without a value is NULL, as when a statement is described before its values
are known)."""

from __future__ import annotations

import datetime
import decimal
import math
from typing import Any, Mapping, Sequence

from sqlglot import exp

from ..errors import ProgrammingError
from .classify import array_comparisons

Params = Sequence[Any] | Mapping[str, Any]


def bind(tree: exp.Expression, params: Params | None, *, absent_as_null: bool = False) -> exp.Expression:
    """`tree` with each placeholder replaced by its value as a literal (a copy; `tree` is not
    changed). $n takes the n-th value, %s the next one in order, %(name)s the mapping's. Strict
    (the default): a placeholder without a value, values without placeholders, or a named
    placeholder without a mapping is 08P01. `absent_as_null`: a placeholder without a value is
    NULL and values nobody asks for are ignored."""
    holders = [n for n in tree.walk() if isinstance(n, (exp.Placeholder, exp.Parameter))]
    if not holders:
        if params and not absent_as_null:
            raise ProgrammingError("parameters were given but the query has no placeholders", sqlstate="08P01")
        return tree
    if params is None and not absent_as_null:
        raise ProgrammingError("the query has placeholders but no parameters were given", sqlstate="08P01")
    values: Params = params if params is not None else ()
    tree = tree.copy()
    # In the order they are written: %s is the next value (a breadth-first walk would fill a
    # shallow placeholder before a deeper one written earlier).
    holders = [n for n in tree.walk(bfs=False) if isinstance(n, (exp.Placeholder, exp.Parameter))]
    position = 0
    for node in holders:
        if isinstance(node, exp.Parameter):
            index = int(node.this.this) - 1 if isinstance(node.this, exp.Literal) else -1
            value = _value(values, index, absent_as_null)
        elif node.this and not absent_as_null:
            if not isinstance(values, Mapping):
                raise ProgrammingError(
                    f"named parameter %({node.name})s needs a mapping of parameters", sqlstate="08P01"
                )
            if node.name not in values:
                raise ProgrammingError(f"no value for parameter {node.name!r}", sqlstate="08P01")
            value = values[node.name]
        else:
            value = _value(values, position, absent_as_null)
            position += 1
        node.replace(to_literal(value))
    return tree


def bind_parameters(tree: exp.Query, params: Params | None) -> exp.Query:
    """An analyst's statement bound (strict), its `x = ANY(<list>)` read as IN lists."""
    bound = bind(tree, params)
    return array_comparisons(bound) if bound is not tree else tree  # type: ignore[return-value]


def null_parameters(tree: exp.Query) -> dict[str, None] | list[None]:
    """A NULL for each placeholder: what a statement is described with before its values are known."""
    holders = [n for n in tree.walk() if isinstance(n, (exp.Placeholder, exp.Parameter))]
    named = [n.name for n in holders if isinstance(n, exp.Placeholder) and n.this]
    if named:
        return {name: None for name in named}
    count = max([int(n.this.this) for n in holders if isinstance(n, exp.Parameter)] + [len(holders)])
    return [None] * count


def _value(params: Params, index: int, absent_as_null: bool) -> Any:
    if isinstance(params, Mapping) or not 0 <= index < len(params):
        if absent_as_null:
            return None
        raise ProgrammingError(f"no value for parameter {index + 1}", sqlstate="08P01")
    return params[index]


SHOWN_VALUE_CHARS = 200  # of one parameter's value in the ledger's record of a statement


def recorded(sql: str, params: Params | None) -> str:
    """A statement's text as the ledger records it: its parameters' values after it, so an officer
    reading the history sees what was asked (the text alone shows $1 or %s)."""
    if not params:
        return sql
    items = params.items() if isinstance(params, Mapping) else ((f"${i}", v) for i, v in enumerate(params, 1))
    return f"{sql}\n-- parameters: " + ", ".join(f"{name} = {_shown(v)}" for name, v in items)


def _shown(value: Any) -> str:
    try:
        text = to_literal(value).sql(dialect="postgres")
    except ProgrammingError:
        text = repr(value)
    return text if len(text) <= SHOWN_VALUE_CHARS else text[: SHOWN_VALUE_CHARS - 3] + "..."


def to_literal(value: Any) -> exp.Expression:
    """A Python value as a SQL literal of its type (22023 for a type a parameter cannot have)."""
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

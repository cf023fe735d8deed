"""Builders for the bounded query's sqlglot trees, so that no stage is written as text and
parsed again. Nodes are the ones sqlglot's DuckDB reader produces for the same SQL (engines
transpile and lower them: engines/)."""

from __future__ import annotations

from functools import lru_cache
from typing import Iterable, Sequence, TypeVar

import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect

Node = exp.Expression
DUCKDB = Dialect.get_or_raise("duckdb")  # one instance: a dialect's name is looked up and instantiated per use
Operand = Node | int | float | str
E = TypeVar("E", bound=exp.Expression)


def positionless(tree: E) -> E:
    """`tree` without the positions sqlglot's parser records on its nodes (meta line, col,
    start, end), which dpsql never reads: every copy of a tree deep-copies each node's meta in
    Python, which makes copying a parsed tree two to four times as slow as copying a built one,
    and the rewrite copies analysts' expressions many times over."""
    for n in tree.walk():
        n._meta = None
    return tree


def node(x: Operand) -> Node:
    """An expression; a Python number is a literal, a string a column name."""
    if isinstance(x, exp.Expression):
        return x
    if isinstance(x, str):
        return col(x)
    if isinstance(x, float) and x < 0 or isinstance(x, int) and x < 0:
        return exp.Neg(this=exp.Literal.number(-x))
    return exp.Literal.number(x)


def neutral(expression: exp.Expression) -> exp.Expression:
    """An analyst's row expression (read as PostgreSQL) in the engine-neutral reading, DuckDB's,
    which every engine's lowering and sqlglot's transpilation start from: the two readings
    differ in places (EXTRACT(dow) is DAYOFWEEK, an integer `/` a double division, INITCAP's
    word boundaries), and the bounded query must mean the same on every engine."""
    return _neutral(expression.sql(dialect=DUCKDB)).copy()


@lru_cache(maxsize=4096)
def _neutral(text: str) -> exp.Expression:
    return positionless(sqlglot.parse_one(text, read=DUCKDB))


def col(name: str, table: str | None = None) -> exp.Column:
    """A column of the bounded query's own (unquoted, lower-case) names: unit, k0, m0, t.k0."""
    return exp.Column(this=exp.to_identifier(name), table=exp.to_identifier(table) if table else None)


def quoted(name: str, table: str | None = None) -> exp.Column:
    """A column of a policy table, quoted as it is spelled there."""
    return exp.Column(this=exp.Identifier(this=name, quoted=True), table=exp.to_identifier(table) if table else None)


def qualified(name: str, alias: str) -> exp.Table:
    """A table by its qualified name as DuckDB spells it (a weighted copy's), parsed once per name."""
    t = _qualified(name).copy()
    t.set("alias", exp.TableAlias(this=exp.to_identifier(alias)))
    return t


@lru_cache(maxsize=256)
def _qualified(name: str) -> exp.Table:
    return positionless(exp.to_table(name, dialect=DUCKDB))


def table(name: str, alias: str | None = None, quote: bool = False) -> exp.Table:
    t = exp.Table(this=exp.Identifier(this=name, quoted=quote))
    if alias:
        t.set("alias", exp.TableAlias(this=exp.to_identifier(alias)))
    return t


def subquery(query: Node, alias: str, columns: Iterable[str] = ()) -> exp.Subquery | exp.Values:
    names = [exp.to_identifier(c) for c in columns]
    table_alias = exp.TableAlias(this=exp.to_identifier(alias), columns=names or None)
    if isinstance(query, exp.Values):
        query.set("alias", table_alias)
        return query
    return exp.Subquery(this=query, alias=table_alias)


def _wrap(x: Operand) -> Node:
    n = node(x)
    return exp.Paren(this=n) if isinstance(n, exp.Binary) and not isinstance(n, exp.Dot) else n


def binary(kind: type[exp.Binary], a: Operand, b: Operand) -> Node:
    return kind(this=_wrap(a), expression=_wrap(b))


def mul(a: Operand, b: Operand) -> Node:
    return binary(exp.Mul, a, b)


def idiv(a: Operand, b: Operand) -> Node:
    """a // b, truncated toward zero on integers (PostgreSQL's DIV, Spark's DIV)."""
    return binary(exp.IntDiv, a, b)


def func(name: str, *args: Operand) -> Node:
    """A function as DuckDB's reader builds it (GREATEST and LEAST skip NULLs, as there)."""
    return exp.func(name, *[node(a) for a in args], dialect=DUCKDB)


def anonymous(name: str, *args: Operand) -> Node:
    """dpsql's own functions (DPSQL_HASH, DPSQL_COIN), lowered by each engine."""
    return exp.Anonymous(this=name, expressions=[node(a) for a in args])


@lru_cache(maxsize=256)
def _data_type(type_name: str, dialect: str | None) -> exp.DataType:
    return positionless(exp.DataType.build(type_name, dialect=dialect))


def dtype(type_name: str, dialect: str | None = None) -> exp.DataType:
    """A type node, parsed once per name (DataType.build parses its string every time)."""
    return _data_type(type_name, dialect).copy()


def cast(x: Operand, type_name: str) -> Node:
    return exp.Cast(this=node(x), to=dtype(type_name))


def count(x: Operand | None = None) -> Node:
    return exp.Count(this=exp.Star() if x is None else node(x), big_int=True)


def div(a: Operand, b: Operand) -> Node:
    """a / b in DuckDB's sense: a double quotient."""
    return exp.Div(this=_wrap(a), expression=_wrap(b), typed=False, safe=False)


def total(x: Operand) -> Node:
    return exp.Sum(this=node(x))


def case(*whens: tuple[Node, Operand], default: Operand | None = None) -> Node:
    return exp.Case(
        ifs=[exp.If(this=c, true=node(t)) for c, t in whens], default=None if default is None else node(default)
    )


def not_null(x: Operand) -> Node:
    """x IS NOT NULL, as DuckDB's reader builds it (NOT x IS NULL)."""
    return exp.Not(this=exp.Is(this=node(x), expression=exp.Null()))


def conjunction(conditions: Sequence[Node]) -> Node:
    out = conditions[0]
    for c in conditions[1:]:
        out = exp.And(this=out, expression=c)
    return out


def disjunction(conditions: Sequence[Node]) -> Node:
    out = conditions[0]
    for c in conditions[1:]:
        out = exp.Or(this=out, expression=c)
    return out


def named(x: Operand, name: str) -> Node:
    return exp.Alias(this=node(x), alias=exp.to_identifier(name))


def select(
    items: Sequence[Node],
    source: Node,
    *,
    where: Sequence[Node] | None = None,
    group: Sequence[Operand] | None = None,
    joins: list[exp.Join] | None = None,
    qualify: Node | None = None,
    distinct: bool = False,
) -> exp.Select:
    """One SELECT built in place (sqlglot's chained builders copy the tree at every step)."""
    q = exp.Select(expressions=items, from_=exp.From(this=source))
    if distinct:
        q.set("distinct", exp.Distinct())
    if joins:
        q.set("joins", joins)
    if where:
        q.set("where", exp.Where(this=conjunction(where)))
    if group:
        q.set("group", exp.Group(expressions=[node(g) for g in group]))
    if qualify is not None:
        q.set("qualify", exp.Qualify(this=qualify))
    return q


def join(target: Node, on: Node | None = None, *, kind: str | None = None, using: list[str] | None = None) -> exp.Join:
    j = exp.Join(this=target)
    if on is not None:
        j.set("on", on)
    if using:
        j.set("using", [exp.to_identifier(u) for u in using])
    if kind in ("LEFT",):
        j.set("side", kind)
    elif kind:
        j.set("kind", kind)
    return j


def with_ctes(ctes: list[tuple[str, exp.Select]], final: exp.Select) -> exp.Select:
    final.set(
        "with_",
        exp.With(expressions=[exp.CTE(this=q, alias=exp.TableAlias(this=exp.to_identifier(name))) for name, q in ctes]),
    )
    return final

"""Queries over public tables only: whether a query touches a private table, the checks a
query that reads rows passes, and the public query as it runs (pure). Such a query is answered
as-is, uncharged: it depends on public tables and constants only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from sqlglot import exp

from ..config import Policy
from .allowlist import check_node
from .scope import Resolver


@dataclass
class PublicQuery:
    """A query over public tables only: runs as-is (rebuilt from checked nodes)."""

    tree: exp.Query


def _public_column_type(tree: exp.Query, schema: Mapping[str, Mapping[str, str]]):
    """Column types for the division pass over a public query: a column of a table in its FROM
    clauses, by alias or name, or unqualified when one of them has it; None otherwise (a CTE's
    or subquery's column keeps `/`)."""
    tables: dict[str, Mapping[str, str]] = {}
    for t in tree.find_all(exp.Table):
        columns = schema.get(t.name.lower()) if isinstance(t.this, exp.Identifier) else None
        if columns is not None:
            tables[t.alias_or_name.lower()] = {c.lower(): v for c, v in columns.items()}

    def column_type(column: exp.Column) -> str | None:
        name = column.name.lower()
        if column.table:
            return tables.get(column.table.lower(), {}).get(name)
        found = {cols[name] for cols in tables.values() if name in cols}
        return found.pop() if len(found) == 1 else None

    return column_type


def _unqualified(tree: exp.Query) -> exp.Query:
    """The public query with PostgreSQL's schema qualifier ("public"."wards", Metabase's
    "public"."wards"."name") dropped: the engine keeps the declared tables in its own default
    schema."""

    def qualified(node: exp.Expression) -> bool:
        return isinstance(node, (exp.Table, exp.Column)) and node.text("db").lower() == "public"

    if not any(qualified(n) for n in tree.walk()):
        return tree

    def visit(node: exp.Expression) -> exp.Expression:
        if qualified(node):
            node.set("db", None)
        return node

    return tree.transform(visit, copy=True)


def touches_private(tree: exp.Expression, policy: Policy) -> bool:
    cte_names = {c.alias.lower() for c in tree.find_all(exp.CTE)}
    for t in tree.find_all(exp.Table):
        if not isinstance(t.this, exp.Identifier):
            return True  # a table function: refused by the resolver with its reason
        name = t.name.lower()
        table = policy.table(name)
        if table is None and name in cte_names and not t.db:
            continue
        if table is None or not table.public:
            return True
    return False


_PUBLIC_STRUCTURE = (
    exp.Select,
    exp.Subquery,
    exp.From,
    exp.Join,
    exp.TableAlias,
    exp.Where,
    exp.Group,
    exp.Having,
    exp.Order,
    exp.Limit,
    exp.Offset,
    exp.With,
    exp.CTE,
)


def check_rows_query(tree: exp.Select, resolver: Resolver) -> None:
    """A query that reads rows (of public tables; of private ones only to learn its columns,
    sql/wrappers.py, never run) goes through allowlisted nodes and declared tables only; the
    functions allowed over public tables (allowlist.PUBLIC_FUNCTIONS) included."""
    cte_names = {c.alias.lower() for c in tree.find_all(exp.CTE)}
    for node in tree.walk():
        if isinstance(node, exp.Table):
            if not (node.name.lower() in cte_names and not node.db):
                resolver.base_table(node)
        elif isinstance(node, exp.AggFunc) and not isinstance(node, exp.Anonymous):
            continue
        elif not isinstance(node, _PUBLIC_STRUCTURE) and node.find_ancestor(exp.Table) is None:
            check_node(node, public=True)

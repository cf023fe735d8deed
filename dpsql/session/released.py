"""Queries over rows already released (or the budget's): an outer query around a DP query,
run as post-processing in the locked-down post-processing DuckDB, free."""

from __future__ import annotations

from typing import Sequence

from sqlglot import exp

from ..errors import unsupported
from ..postprocess import PostProcessor
from ..sql.pgfunctions import postgres_meaning
from ..sql.scope import output_name
from .result import Result


def over_rows(
    post: PostProcessor, tree: exp.Select, alias: str, names: list[str], types: list[str], rows: list
) -> Result:
    """`tree` run over rows already released (or the budget's) held as the relation `alias`."""
    outer = outer_query(tree, alias)
    out_names, out_types, out_rows = post.run_released(outer, alias, names, types, rows)
    return Result(public_names(outer, out_names), out_types, out_rows, f"SELECT {len(out_rows)}")


def outer_query(tree: exp.Select, alias: str) -> exp.Select:
    """The outer query reading the released rows as the table `alias`, and nothing else: other
    tables and subqueries are refused."""
    outer = postgres_meaning(tree)
    outer = outer.copy() if outer is tree else outer
    outer.set("from_", exp.From(this=exp.Table(this=exp.Identifier(this=alias, quoted=True))))
    outer.set("with_", None)
    for node in outer.walk():
        if isinstance(node, exp.Table) and node.name != alias:
            raise unsupported(
                f"the outer query may read only the inner query's rows, not {node.name}",
                hint="join inside the inner (DP) query instead",
            )
        if isinstance(node, (exp.Subquery, exp.Select)) and node is not outer:
            raise unsupported("subqueries in the outer query over a DP query are not supported")
    return outer


def public_names(tree: exp.Query, engine_names: Sequence[str]) -> list[str]:
    """PostgreSQL's column names (count, not DuckDB's count_star()) when the select list has no *."""
    items = tree.expressions if isinstance(tree, exp.Select) else []
    if len(items) != len(engine_names) or any(
        i.find(exp.Star) is not None and not isinstance(i, exp.Count) for i in items
    ):
        return list(engine_names)
    return [output_name(i) for i in items]

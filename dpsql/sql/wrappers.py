"""SQL that tools wrap around the analyst's question (pure: shapes of the tree only).

- Schema probes: `... WHERE 1=0`, `WHERE false`, `LIMIT 0` (Tableau, jupysql, JDBC drivers,
  Superset's dataset editor) ask for the columns of a query and no rows. They are answered from
  binding alone, free.
- Column probes: `SELECT * FROM t LIMIT 1` (Django's inspectdb): the columns, no row.
- Released subqueries: `SELECT ... FROM (<a DP aggregate query>) AS virtual_table WHERE ...
  ORDER BY ... LIMIT n` (Superset's SQL Lab and virtual datasets, Metabase's nested questions,
  Tableau's custom SQL), at any depth (a derived table over one: Metabase's questions built on
  questions). The inner query is answered and charged as usual, once; each query around it is
  post-processing of the rows released below it, free.
"""

from __future__ import annotations

from sqlglot import exp

from ..config import Policy
from .scope import grouped_item


def schema_probe(tree: exp.Expression) -> exp.Select | None:
    """The query without its probe (a constant-false WHERE, or LIMIT 0), or None."""
    if not isinstance(tree, exp.Select):
        return None
    limit = tree.args.get("limit")
    where = tree.args.get("where")
    if limit is not None and _number(limit.expression) == 0:
        stripped = tree.copy()
        stripped.set("limit", None)
        return stripped
    if where is not None and _constant(where.this) is False:
        stripped = tree.copy()
        stripped.set("where", None)
        return stripped
    return None


def column_probe(tree: exp.Expression) -> bool:
    """`SELECT * FROM t LIMIT 1` and nothing more: Django's inspectdb reads a table's columns
    from such a query's description. Over a private table it is answered with the columns and
    no row (a row is never shown), with a notice saying so."""
    if not isinstance(tree, exp.Select) or set(k for k, v in tree.args.items() if v) != {
        "expressions",
        "from_",
        "limit",
    }:
        return False
    limit = tree.args["limit"]
    source = tree.args["from_"].this
    return (
        len(tree.expressions) == 1
        and isinstance(tree.expressions[0], exp.Star)
        and isinstance(limit, exp.Limit)
        and _number(limit.expression) == 1
        and isinstance(source, exp.Table)
    )


def released_subquery(tree: exp.Expression, policy: Policy) -> tuple[exp.Select, str] | None:
    """(the inner query, its alias) when `tree` reads nothing but one subquery that aggregates
    private rows without grouping by a privacy unit (a per-unit subquery, grouped by the unit,
    is analysis' own business: sql/derived.py), or that is itself such a query around one."""
    if not isinstance(tree, exp.Select) or tree.args.get("joins"):
        return None
    source = tree.args.get("from_")
    inner = source.this if source is not None else None
    query, alias = _derived(tree, inner)
    if query is None:
        return None
    if not (query.args.get("group") is not None or any(_aggregates(e) for e in query.expressions)):
        # a derived table over a derived table over a DP query (Metabase's nested questions):
        # the query in between is post-processing too, answered the same way in its turn
        return (query, alias) if released_subquery(query, policy) is not None else None
    if _grouped_by_unit(query, policy):
        return None
    return query, alias


def _derived(tree: exp.Select, source: exp.Expression | None) -> tuple[exp.Select | None, str]:
    """The query a FROM item stands for: a subquery, or a CTE (a session view) of the query's
    own WITH, which then carries the WITH's other CTEs it may read."""
    with_ = tree.args.get("with_")
    if isinstance(source, exp.Subquery) and isinstance(source.this, exp.Select) and with_ is None:
        return source.this, source.alias_or_name or "subquery"
    if isinstance(source, exp.Table) and with_ is not None and not source.db:
        ctes = {c.alias_or_name.lower(): c for c in with_.expressions}
        cte = ctes.get(source.name.lower())
        if cte is not None and isinstance(cte.this, exp.Select):
            query = cte.this.copy()
            others = [c.copy() for name, c in ctes.items() if name != source.name.lower()]
            if others:
                own = query.args.get("with_")
                query.set("with_", exp.With(expressions=others + (list(own.expressions) if own else [])))
            return query, source.alias_or_name
    return None, ""


def _aggregates(node: exp.Expression) -> bool:
    return node.find(exp.AggFunc) is not None


def _grouped_by_unit(query: exp.Select, policy: Policy) -> bool:
    group = query.args.get("group")
    if group is None or len(group.expressions) != 1:
        return False
    g = grouped_item(query, group.expressions[0])
    if not isinstance(g, exp.Column):
        return False
    units = {
        t.privacy_unit
        for t in (policy.table(tb.name) for tb in query.find_all(exp.Table))
        if t is not None and not t.public and t.privacy_unit
    }
    return g.name.lower() in {u.lower() for u in units}


def _number(node: exp.Expression | None) -> float | None:
    if isinstance(node, exp.Literal) and not node.is_string:
        try:
            return float(node.this)
        except ValueError:
            return None
    if isinstance(node, exp.Neg):
        inner = _number(node.this)
        return None if inner is None else -inner
    if isinstance(node, exp.Paren):
        return _number(node.this)
    return None


def _constant(node: exp.Expression) -> bool | None:
    """The value of a condition made of literals only (1 = 0, FALSE, NOT TRUE, 1 <> 1 AND x),
    or None when it depends on anything else."""
    if isinstance(node, exp.Paren):
        return _constant(node.this)
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Not):
        inner = _constant(node.this)
        return None if inner is None else not inner
    if isinstance(node, exp.And):
        a, b = _constant(node.this), _constant(node.expression)
        return False if False in (a, b) else (True if a is True and b is True else None)
    if isinstance(node, exp.Or):
        a, b = _constant(node.this), _constant(node.expression)
        return True if True in (a, b) else (False if a is False and b is False else None)
    compare = {
        exp.EQ: lambda x, y: x == y,
        exp.NEQ: lambda x, y: x != y,
        exp.GT: lambda x, y: x > y,
        exp.GTE: lambda x, y: x >= y,
        exp.LT: lambda x, y: x < y,
        exp.LTE: lambda x, y: x <= y,
    }
    op = compare.get(type(node))
    if op is not None:
        a, b = _number(node.this), _number(node.expression)
        if a is not None and b is not None:
            return op(a, b)
    return None

"""Answers of queries that are not planned as a DP aggregate: the budget relation, a tool's
schema or column probe, a DP query used as a derived table, a declared domain's keys. Each is
free but the derived table's inner query, which is answered and charged as any DP query."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlglot import exp

from ..errors import BUDGET_RELATION, Error
from ..prepare import plan_query
from ..release import NoisyTable, key_order
from ..sql.analyze import Plan, touches_private
from ..sql.classify import Query
from ..sql.options import QueryOptions
from ..sql.wrappers import column_probe, released_subquery, schema_probe
from .bounded import key_domain
from .budget import budget_result
from .charging import charge_told
from .describe import describe_tree, reads_budget
from .released import outer_query, over_rows
from .result import Result

if TYPE_CHECKING:
    from .pipeline import Session


def routed(session: Session, stmt: Query, tree: exp.Query) -> Result | None:
    """The answer of a query that is not planned as a DP aggregate: the budget relation, a
    tool's schema probe, a DP query used as a derived table, a declared domain's keys."""
    if reads_budget(tree):
        r = budget_result(session.policy, session.ledger, session.user.name)
        return over_rows(session._post, tree, BUDGET_RELATION, r.names, r.types, r.rows)
    if not touches_private(tree, session.policy):
        return None
    if schema_probe(tree) is not None:  # a tool asking for the columns: answered free, no rows
        names, types = describe_tree(session, tree, stmt.options)
        return Result(names, types, [], "SELECT 0")
    if column_probe(tree):
        names, types = describe_tree(session, tree, stmt.options)
        return Result(names, types, [], "SELECT 0",
                      {"notice": "rows of a private table are never shown: this answer has its columns only; "
                                 "ask for an aggregate, e.g. SELECT COUNT(*) FROM " + tree.args["from_"].this.name})
    wrapped = released_subquery(tree, session.policy)
    if wrapped is not None:
        return derived_table(session, stmt, tree, *wrapped)
    return declared_keys(session, tree, stmt.options)


def declared_keys(session: Session, tree: exp.Query, options: QueryOptions) -> Result | None:
    """GROUP BY (or SELECT DISTINCT) over keys with declared domains and no aggregate, as
    BI tools ask for a filter's values: the declared domain, which is public, free. None
    when the query is not of that shape or a key has no declared domain."""
    if not isinstance(tree, exp.Select) or any(isinstance(n, exp.AggFunc) for n in tree.walk()):
        return None
    probe = tree.copy()
    if probe.args.get("distinct") is not None and probe.args.get("group") is None:
        probe.set("distinct", None)
        probe.set("group", exp.Group(expressions=[(e.unalias() if isinstance(e, exp.Alias) else e).copy()
                                                  for e in probe.expressions]))
    if probe.args.get("group") is None or probe.args.get("distinct") is not None:
        return None
    probe.set("expressions", [*probe.expressions, exp.alias_(exp.Count(this=exp.Star()), "__dpsql_n")])
    try:
        plan = plan_query(probe, session.policy, session.engine.schema(), session.settings.mechanism, options)
    except Error:
        return None
    if not isinstance(plan, Plan) or not plan.keys or not plan.declared or len(plan.estimates) != 1:
        return None  # more than the probe's COUNT(*): an aggregate sqlglot does not know as one
    with charge_told("nothing was charged"):
        rs = key_domain(session, plan)
    post = plan.post.copy()
    post.set("expressions", post.expressions[:-1])  # the probe's COUNT(*)
    rows = sorted(zip(*rs.columns), key=key_order)
    noisy = NoisyTable([list(c) for c in zip(*rows)] if rows else [[] for _ in rs.columns], list(rs.types), [], [], [])
    out = session._post.run(post, noisy)
    result = Result(out.names, out.types, out.rows, f"SELECT {len(out.rows)}")
    if tree.args.get("where") is not None or tree.args.get("joins"):  # a cascading filter's: all keys it allows
        result.dp = {"notice": "these are all the declared keys that the conditions on the keys themselves and "
                               "joins with public tables allow, whatever the WHERE clause says of other columns: "
                               "which of them have rows is private (ask COUNT(*) ... GROUP BY for noisy counts); free"}
    return result


def derived_table(session: Session, stmt: Query, tree: exp.Select, inner: exp.Select, alias: str) -> Result:
    """A DP query used as a derived table: the inner query answered and charged as usual,
    then the outer query run over its released rows (post-processing, free)."""
    outer_query(tree, alias)  # refused before the inner query is charged
    inner_result = session._query(Query(inner.sql(dialect="postgres"), inner, stmt.options), inner)
    result = over_rows(session._post, tree, alias, inner_result.names, inner_result.types, inner_result.rows)
    result.dp = {k: v for k, v in (inner_result.dp or {}).items() if k != "ci"}
    return result

"""Names and types of what a statement would return, from binding alone (the wire protocol's
Describe, a view's columns): nothing runs, nothing is charged."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

from sqlglot import exp

from ..errors import BUDGET_RELATION
from ..guarantee.families import family
from ..prepare import plan_query
from ..sql.analyze import PublicQuery, check_rows_query, touches_private
from ..sql.classify import Explain, Query, SetCommand, ShowCommand, Statement, TransactionCommand, ViewCommand
from ..sql.clock import now as clock_now
from ..sql.clock import pinned
from ..sql.options import QueryOptions
from ..sql.parameters import bind_parameters, null_parameters
from ..sql.rewrite import rewrite
from ..sql.scope import Resolver
from ..sql.wrappers import released_subquery, schema_probe
from .budget import budget_result
from .released import over_rows, public_names

if TYPE_CHECKING:
    from .pipeline import Session

Shape = tuple[list[str], list[str]]


def describe_statement(
    session: Session, stmt: Statement, params: Sequence[Any] | Mapping[str, Any] | None
) -> Shape | None:
    """What the statement would return (None: no rows)."""
    if isinstance(stmt, (SetCommand, TransactionCommand, ViewCommand)):
        return None
    if isinstance(stmt, ShowCommand):  # SHOW's own answer (free, no data): Describe matches it, SHOW ALL too
        r = session.show(stmt.name)
        return r.names, r.types
    if isinstance(stmt, Explain):
        return ["QUERY PLAN"], ["VARCHAR"]
    if isinstance(stmt, Query) and not stmt.placeholders and not session._views:
        # A function of the text, the settings, the policy, the schema and the data version (the
        # plan's key), never of the rows: kept for every session of the analyst over the engine,
        # so that a new connection's first Describe does not plan the query again.
        key = ("describe", session._plan_key(stmt.tree, stmt.options or QueryOptions(), stmt.sql))
        shape = session._plans.shape(key)
        if shape is None:
            names, types = _described(session, stmt, params)
            shape = (tuple(names), tuple(types))
            session._plans.put_shape(key, shape)
        return list(shape[0]), list(shape[1])
    return _described(session, stmt, params)


def _described(session: Session, stmt: Statement, params: Sequence[Any] | Mapping[str, Any] | None) -> Shape:
    tree = bind_parameters(stmt.tree, params if params is not None else null_parameters(stmt.tree))
    return describe_tree(session, pinned(session._views.expand(tree), clock_now()), stmt.options)


def describe_tree(session: Session, tree: exp.Query, options: QueryOptions) -> Shape:
    """Names and types of a query's answer from binding alone: nothing runs, nothing is
    charged. A schema probe is described as the query it probes; a released subquery's outer
    query over its inner one's columns; a query that would read private rows (which is
    refused when run) by binding it on the engine, which reads the schema only."""
    if reads_budget(tree):
        r = budget_result(session.policy, session.ledger, session.user.name)
        described = over_rows(session._post, tree, BUDGET_RELATION, r.names, r.types, [])
        return described.names, described.types
    probed = schema_probe(tree)
    if probed is not None and touches_private(probed, session.policy):
        return describe_tree(session, probed, options)
    wrapped = released_subquery(tree, session.policy)
    if wrapped is not None and touches_private(wrapped[0], session.policy):
        names, types = describe_tree(session, wrapped[0], options)
        described = over_rows(session._post, tree, wrapped[1], names, types, [])
        return described.names, described.types
    if isinstance(tree, exp.Select) and reads_rows(tree):
        check_rows_query(tree, Resolver(session.policy, session.engine.schema()))
        empty = tree.copy()
        empty.set("limit", exp.Limit(expression=exp.Literal.number(0)))
        for t in empty.find_all(exp.Table):  # the engine's own names: "public".x is x there
            if t.db.lower() == "public":
                t.set("db", None)
        names, types = session.engine.describe(session.engine.sql_of(empty))
        return public_names(tree, names), types
    plan = plan_query(tree, session.policy, session.engine.schema(), session.settings.mechanism, options)
    if isinstance(plan, PublicQuery):
        names, types = session.engine.describe(session.engine.sql_of(plan.tree))
        return public_names(plan.tree, names), types
    names, types = session.engine.describe(session.engine.sql_of(rewrite(plan, plan.literal_domain_size()), owned=True))
    key_types = types[: len(plan.keys)]
    est_types = [family(e).result_type for e in plan.estimates]
    return session._post.describe(plan.post, key_types, est_types)


def reads_budget(tree: exp.Query) -> bool:
    if not isinstance(tree, exp.Select) or tree.args.get("joins") or tree.args.get("with_"):
        return False
    source = tree.args.get("from_")
    t = source.this if source is not None else None
    return (
        isinstance(t, exp.Table)
        and isinstance(t.this, exp.Identifier)
        and t.name.lower() == BUDGET_RELATION
        and t.db.lower() in ("", "public", "dpsql")
    )


def reads_rows(tree: exp.Select) -> bool:
    """A SELECT with no aggregate and no GROUP BY: it would return rows as they are."""
    return tree.args.get("group") is None and not any(e.find(exp.AggFunc) for e in tree.expressions)

"""The query routes: a bound query's way (`way`, a pure function of the tree and the policy),
and the answers of those not planned as a DP aggregate: the budget relation, a tool's schema or
column probe, a DP query used as a derived table, a declared domain's keys. Each is free but the
derived table's inner query, answered and charged as any DP query. Ways tried before the plan
cache (a published synopsis's answer) are entries of EARLY."""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable

from sqlglot import exp

from ..answer_record import AnswerRecord
from ..config import Policy
from ..errors import BUDGET_RELATION, Error
from ..guarantee.plan import Plan
from ..guarantee.release import NoisyTable, key_order
from ..prepare import plan_query
from ..sql.analyze import touches_private
from ..sql.classify import Query
from ..sql.options import QueryOptions
from ..sql.wrappers import column_probe, released_subquery, schema_probe
from ..synopses import route as synopsis_route
from .bounded import key_domain
from .budget import budget_result
from .charging import charge_told
from .describe import describe_tree, reads_budget
from .released import outer_query, over_rows
from .result import Result

if TYPE_CHECKING:
    from .pipeline import Session


class Way(enum.Enum):
    """A query's way once its parameters are bound (sql/route.py routed the statement)."""

    SYNOPSIS = "synopsis"  # a function of a published synopsis: answered free from it
    BUDGET = "budget relation"  # dpsql.budget: the analyst's own budget, free
    PLANNED = "planned"  # public tables only, or a DP aggregate: planned (prepare.py)
    SCHEMA_PROBE = "schema probe"  # a tool asking for the columns: no rows
    COLUMN_PROBE = "column probe"  # rows of a private table asked for: its columns only
    DERIVED = "derived table"  # a DP query used as a derived table: the outer query over its release
    KEYS = "declared keys"  # keys without an aggregate: the declared domain if it has one, else planned


def way(tree: exp.Query, policy: Policy) -> tuple[Way, Any]:
    """The way of a bound query, from the tree and the policy alone (pure), with what its
    answer needs (the derived table's inner query and alias)."""
    if reads_budget(tree):
        return Way.BUDGET, None
    if not touches_private(tree, policy):
        return Way.PLANNED, None
    if schema_probe(tree) is not None:
        return Way.SCHEMA_PROBE, None
    if column_probe(tree):
        return Way.COLUMN_PROBE, None
    wrapped = released_subquery(tree, policy)
    if wrapped is not None:
        return Way.DERIVED, wrapped
    return Way.KEYS, None


@dataclass(frozen=True)
class Early:
    """A way tried before the plan cache, when the policy has what it needs (`applies`, public
    metadata only); its answer None lets the query go on its way."""

    way: Way
    applies: Callable[[Policy], bool]
    answer: Callable[[Session, Query, exp.Query], Result | None]


def _synopsis(session: Session, stmt: Query, tree: exp.Query) -> Result | None:
    answered = synopsis_route.answer(session, stmt, tree)
    if answered is None:
        return None
    return Result(answered.names, answered.types, answered.rows, f"SELECT {len(answered.rows)}", answered.dp)


EARLY = (Early(Way.SYNOPSIS, lambda policy: bool(policy.synopses), _synopsis),)


def early(session: Session, stmt: Query, tree: exp.Query) -> Result | None:
    """The answer of the first early way that applies and answers, or None."""
    for route in EARLY:
        if route.applies(session.policy):
            answered = route.answer(session, stmt, tree)
            if answered is not None:
                return answered
    return None


def routed(session: Session, stmt: Query, tree: exp.Query) -> Result | None:
    """The answer of a query that is not planned as a DP aggregate (None: it is planned)."""
    kind, detail = way(tree, session.policy)
    answer = _ANSWERS.get(kind)
    return None if answer is None else answer(session, stmt, tree, detail)


def _budget(session: Session, stmt: Query, tree: exp.Query, detail: Any) -> Result:
    r = budget_result(session.policy, session.ledger, session.user.name)
    return over_rows(session._post, tree, BUDGET_RELATION, r.names, r.types, r.rows)


def _schema_probe(session: Session, stmt: Query, tree: exp.Query, detail: Any) -> Result:
    names, types = describe_tree(session, tree, stmt.options)
    return Result(names, types, [], "SELECT 0")


def _column_probe(session: Session, stmt: Query, tree: exp.Query, detail: Any) -> Result:
    names, types = describe_tree(session, tree, stmt.options)
    return Result(
        names,
        types,
        [],
        "SELECT 0",
        AnswerRecord(
            notice="rows of a private table are never shown: this answer has its columns only; "
            "ask for an aggregate, e.g. SELECT COUNT(*) FROM " + tree.args["from_"].this.name
        ),
    )


def declared_keys(session: Session, tree: exp.Query, options: QueryOptions) -> Result | None:
    """GROUP BY (or SELECT DISTINCT) over keys with declared domains and no aggregate, as
    BI tools ask for a filter's values: the declared domain, which is public, free. None
    when the query is not of that shape or a key has no declared domain."""
    if not isinstance(tree, exp.Select) or any(isinstance(n, exp.AggFunc) for n in tree.walk()):
        return None
    probe = tree.copy()
    if probe.args.get("distinct") is not None and probe.args.get("group") is None:
        probe.set("distinct", None)
        probe.set(
            "group",
            exp.Group(expressions=[(e.unalias() if isinstance(e, exp.Alias) else e).copy() for e in probe.expressions]),
        )
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
        result.dp = AnswerRecord(
            notice="these are all the declared keys that the conditions on the keys themselves and "
            "joins with public tables allow, whatever the WHERE clause says of other columns: "
            "which of them have rows is private (ask COUNT(*) ... GROUP BY for noisy counts); free"
        )
    return result


def derived_table(session: Session, stmt: Query, tree: exp.Select, inner: exp.Select, alias: str) -> Result:
    """A DP query used as a derived table: the inner query answered and charged as usual,
    then the outer query run over its released rows (post-processing, free)."""
    outer_query(tree, alias)  # refused before the inner query is charged
    inner_result = session._query(Query(inner.sql(dialect="postgres"), inner, stmt.options), inner)
    result = over_rows(session._post, tree, alias, inner_result.names, inner_result.types, inner_result.rows)
    result.dp = None if inner_result.dp is None else replace(inner_result.dp, ci=None)
    return result


_ANSWERS: dict[Way, Callable[[Session, Query, exp.Query, Any], Result | None]] = {
    Way.BUDGET: _budget,
    Way.SCHEMA_PROBE: _schema_probe,
    Way.COLUMN_PROBE: _column_probe,
    Way.DERIVED: lambda session, stmt, tree, wrapped: derived_table(session, stmt, tree, *wrapped),
    Way.KEYS: lambda session, stmt, tree, detail: declared_keys(session, tree, stmt.options),
}

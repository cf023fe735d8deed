"""Plans and calibrations kept per query shape for every session over an engine
(plan_cache.py): by the statement's text, or from the template of its shape, a text that
differs from others only in the values its WHERE compares with (sql/slots.py, DESIGN
"Templates of a query shape")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlglot import exp

from ..guarantee.calibration import Calibration
from ..guarantee.plan import Plan
from ..plan_cache import UNUSABLE, Bounded, Seen, Template
from ..sql import slots
from ..sql.analyze import PublicQuery
from ..sql.options import QueryOptions
from ..sql.rewrite import rewrite
from .bounded import bounded_query, built

if TYPE_CHECKING:
    from .pipeline import Session

Prepared = tuple[Plan | PublicQuery, Calibration | None]


def prepare_query(
    session: Session, tree: exp.Query, options: QueryOptions | None = None, text: str | None = None
) -> Prepared:
    """Plan and calibrate, memoised per query shape (`text`, the statement that parses to
    `tree`, or the tree's SQL) for every session over this engine: both are pure functions
    of the query, the settings `prepare` reads, the policy and the schema, so a dashboard's
    repeated queries skip them, in any of its connections (the charge, the engine and the
    noise are never cached here). Kept per analyst, so that no analyst can time whether
    another has asked the same query."""
    options = options or QueryOptions()
    key = plan_key(session, tree, options, text)
    return session._plans.plan(key) or planned(session, key, tree, options)


def planned(session: Session, key: str, tree: exp.Query, options: QueryOptions, owned: bool = False) -> Prepared:
    """`owned`: the caller hands over a copy of its own, planned as it is."""
    prepared = session._plan_and_calibrate(tree if owned else tree.copy(), options)
    session._plans.put_plan(key, prepared)
    return prepared


def shaped(session: Session, key: str, tree: exp.Query, options: QueryOptions) -> Prepared:
    """`_planned`, from the template of the query's shape when there is one: a text that
    differs from others only in the values its WHERE compares with (sql/slots.py) takes their
    plan, calibration and bounded query with its own values put in, skipping the analysis,
    the rewrite and the SQL generation. A shape's first text is planned in full; its second
    too, and then builds the template, kept only if it reproduces both texts' bounded
    queries exactly and they were calibrated alike (else the shape is always planned in
    full). Only on engines that write a value's SQL apart from the query (`literal_sql`)."""
    literal_sql = session.engine.literal_sql if session.engine.capabilities.literal_sql else None
    if literal_sql is None:
        return planned(session, key, tree, options)
    marked, literals = slots.tagged(tree)  # a copy, planned as it is
    if not literals:
        return planned(session, key, marked, options, owned=True)
    tkey = plan_key(session, tree, options, None, slots.shape(marked, literals))
    entry = session._plans.template(tkey)
    if isinstance(entry, Template):
        plan = slots.instantiate(entry.plan, literals)
        sql = entry.splice(entry.sql, [literal_sql(lit) for lit in literals])
        session._plans.derived(plan, "bounded", lambda: built(session, plan, None, (sql, entry.timeless)))
        session._plans.put_plan(key, (plan, entry.cal))
        return plan, entry.cal
    prepared = planned(session, key, marked, options, owned=True)
    plan, cal = prepared
    if entry == UNUSABLE or not isinstance(plan, Plan):
        return prepared
    bounded = bounded_query(session, plan, None)
    values = tuple(literal_sql(lit) for lit in literals)
    session._plans.put_template(
        tkey,
        Seen(cal, bounded.sql, values)
        if entry is None
        else template(session, plan, cal, literals, bounded, values, entry),
    )
    return prepared


def template(
    session: Session,
    plan: Plan,
    cal: Calibration,
    literals: list[exp.Literal],
    bounded: Bounded,
    values: tuple[str, ...],
    seen: Seen,
) -> Template | str:
    """The template of a shape from its second text's plan, checked against both texts."""
    if cal != seen.cal or slots.slots_in(plan) != set(range(len(literals))):
        return UNUSABLE
    marked = slots.instantiate(plan, [slots.MARKERS.marker(i, lit) for i, lit in enumerate(literals)], check=False)
    sql = session.engine.sql_of(
        rewrite(marked, marked.literal_domain_size(), None, session._weighting(marked)), owned=True
    )
    splice = slots.MARKERS.splicer(literals, session.engine.literal_sql)
    if splice(sql, values) != bounded.sql or splice(sql, seen.values) != seen.sql:
        return UNUSABLE
    return Template(plan, cal, sql, bounded.timeless, splice)


def plan_key(
    session: Session, tree: exp.Query, options: QueryOptions, text: str | None, shape: str | None = None
) -> str:
    s = session.settings
    if shape is not None:
        query = ("shape", shape)
    elif text is not None:
        query = ("text", text)
    else:
        query = ("tree", tree.sql(dialect="postgres"))
    return repr(
        (
            session.user.name,
            query,
            options,
            s.epsilon,
            s.delta,
            s.mechanism,
            s.planner,
            s.target_error,
            s.confidence,
            s.exact_curve,
            s.bounds,
            session.engine.data_version(),
        )
    )

"""The plan's bounded query in the engine's SQL, checked by the engine before the charge, with
its declared keys' domain (public data, free), and its exact result (reused where the data
alone determines it)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from ..engines.base import ResultSet
from ..errors import OperationalError, ProgrammingError
from ..guarantee.empty_groups import with_empty_groups
from ..guarantee.families import family
from ..guarantee.plan import Plan
from ..plan_cache import Bounded
from ..postprocess import is_trivial
from ..sql.allowlist import CLOCK_FUNCTIONS
from ..sql.frozen import stored
from ..sql.narrow import narrowing
from ..sql.rewrite import declared_domain, rewrite

if TYPE_CHECKING:
    from .pipeline import Session


def bounded_query(session: Session, plan: Plan, salt: str | None) -> Bounded:
    """The plan's bounded query in the engine's SQL, memoised per plan (salted ones, new for
    every execution, are not), with its declared keys' domain as the engine lists them
    (public data only: listed before the charge, free)."""
    if salt is None:  # a plan is cached per data version, so its weighted copy is current
        return session._plans.derived(plan, "bounded", lambda: built(session, plan, None))
    return built(session, plan, salt)


def built(
    session: Session, plan: Plan, salt: str | None, spliced: tuple[str, bool] | None = None, copies: bool = True
) -> Bounded:
    """`spliced`: the SQL and timelessness of the plan's unsalted bounded query, from its
    shape's template (checked here as one built afresh is). `copies`: whether a weighted copy
    may serve (not for limits chosen per query, which would build one copy per choice)."""
    if spliced is not None:
        sql, timeless = spliced
    else:
        tree = rewrite(plan, plan.literal_domain_size(), salt, session._weighting(plan) if copies else None)
        timeless = tree.find(*CLOCK_FUNCTIONS) is None  # then its result is the data's alone
        sql = session.engine.sql_of(tree, owned=True)
    if salt is not None:
        return Bounded(sql, timeless)
    # The engine's own work (binding the query, listing public keys) is not the statement's
    # planning: a busy engine or cluster must not make planning_seconds refuse a query.
    with session._deadline.paused():
        check_post(session, plan, sql)
        domain = tuple(zip(*key_domain(session, plan).columns)) if plan.keys and plan.declared else None
    return Bounded(sql, timeless, domain)


def domain_size(session: Session, plan: Plan) -> int | None:
    """How many groups the declared key domain holds (public), or None when the query has none."""
    return key_domain(session, plan).row_count if plan.keys and plan.declared else None


def exact_result(session: Session, plan: Plan, salt: str | None = None) -> ResultSet:
    """The exact values a release of the plan noises, empty groups of a declared domain
    included (tests and audits compare neighbouring datasets on them)."""
    bounded = bounded_query(session, plan, None)
    rs = session.engine.execute(bounded.sql if salt is None else bounded_query(session, plan, salt).sql)
    return released_groups(plan, bounded, rs)


def run(session: Session, plan: Plan, bounded: Bounded, stop: threading.Event | None = None) -> ResultSet:
    """The bounded query's exact result. When the data alone determines it (no sampling salt,
    no clock), an engine that can keep it per data version (DuckDB's execute_reused) gives a
    repeated query's from memory (unless SET dpsql.reuse = off: engine work every time, as
    benchmarks against a plain engine need); the noise is drawn afresh either way."""
    stoppable = () if stop is None else (stop,)  # only engines that overlap the admission take one
    return exact(session, bounded.sql, plan.sample_rate is None and bounded.timeless, *stoppable)


def exact(session: Session, sql: str, reusable: bool, *stop: threading.Event) -> ResultSet:
    """The engine's exact result of `sql`, kept per analyst and data version (execute_reused)
    where the engine can, the session allows it and the data alone determines it."""
    if reusable and session.settings.reuse and session.engine.capabilities.execute_reused:
        return session.engine.execute_reused(sql, session.user.name, *stop)
    return session.engine.execute(sql, *stop)


def key_domain(session: Session, plan: Plan) -> ResultSet:
    """The key tuples of the plan's declared domain, as the engine casts and lists them
    (public data, free), narrowed by the query's conditions on its keys (sql/narrow.py): kept
    per data version, keys' declarations and narrowing, which the plans of many query texts
    share (a dashboard's filters on other columns change the WHERE clause, not the keys), so
    that a new text does not build and generate the domain's SQL again (2-4 ms)."""
    key = (session.engine.data_version(), tuple(k.declaration() for k in plan.keys), narrowing(plan).signature())
    hit = session._plans.domains.get(key)
    if hit is None:
        hit = session.engine.execute(session.engine.sql_of(declared_domain(plan), owned=True))
        session._plans.put_domain(key, hit)
    return hit


def check_post(session: Session, plan: Plan, sql: str) -> None:
    """Bind the outer part of the query (HAVING, ORDER BY, LIMIT, expressions over the
    aggregates) against the result's types before the charge: a mistake there, such as
    ORDER BY 10 over one column, is refused free instead of failing after the charge.
    Describing the bounded query also has the engine bind it, so that a type error there
    is refused free too; an outer part that only picks columns cannot fail, and is not run.
    The outer part's check is kept per outer part and key types: the texts of one query
    shape (sql/slots.py) share their plan's outer part and estimates."""
    key_types = session.engine.describe(sql)[1][: len(plan.keys)]
    if is_trivial(plan.post):
        return
    post = stored(plan, "post")  # the plan's own tree, as the key only: texts of one shape share it
    session._plans.derived(post, f"post over {key_types!r}", lambda: check_outer(session, plan, key_types))


def check_outer(session: Session, plan: Plan, key_types: list[str]) -> None:
    try:
        session._post.describe(plan.post, key_types, [family(e).result_type for e in plan.estimates])
    except OperationalError as e:
        detail = e.message.replace("post-processing of the noisy result failed: ", "").splitlines()[0]
        raise ProgrammingError(
            f"the query's outer part (ORDER BY, HAVING, LIMIT or arithmetic on the aggregates) "
            f"cannot be computed: {detail}",
            sqlstate="42601",
            hint="fix it and send the query again; nothing was charged",
        ) from None


def released_groups(plan: Plan, bounded: Bounded, rs: ResultSet) -> ResultSet:
    """The bounded result as it is noised: over declared keys, exactly the domain's groups."""
    return rs if bounded.domain is None else with_empty_groups(rs, len(plan.keys), bounded.domain)

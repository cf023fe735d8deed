"""One analyst's session: the pipeline every front end shares (DESIGN §2).

classify -> route -> plan -> bound -> charge -> run -> release -> answer. A refusal anywhere
before the charge costs nothing; after the charge, the cost stays (a failure may depend on
data) and the answer is released only then. Each step's work is in a module of its own beside
this one; this file is the sequence.
"""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from fractions import Fraction
from functools import partial
from typing import Any, Mapping, Sequence

from sqlglot import exp

from .. import plan_cache
from ..answer_record import AnswerRecord
from ..config import Policy
from ..engines import Engine, open_engine
from ..engines.base import ResultSet
from ..errors import Error, InternalError, forbidden
from ..guarantee.calibration import Calibration
from ..guarantee.plan import Plan
from ..ledger import Ledger, open_ledger
from ..postprocess import PostProcessor
from ..prepare import Settings, prepare
from ..sql.analyze import PublicQuery
from ..sql.classify import Query, Statement, split_statements
from ..sql.clock import now as clock_now
from ..sql.clock import pinned
from ..sql.narrow import unlisted
from ..sql.options import QueryOptions
from ..sql.parameters import bind_parameters, recorded
from ..sql.route import Entry, Kind, Routed, empty_refusal
from ..sql.scope import as_written
from ..synopses import publish as synopsis_publish
from . import answer_cache, auto, batch, bounded, describe, explain, randomized, routes, settings, shapes, weighting
from .answer import answer, noise_detail, null_by_construction, record
from .boundary import no_internals
from .budget import budget_result, budget_summary
from .charging import Stopper, charge_told, charging, overlapping
from .released import public_names
from .result import Result
from .statements import Statements
from .views import Views

Params = Sequence[Any] | Mapping[str, Any] | None


class Session:
    def __init__(self, policy: Policy, user: str, *, engine: Engine | None = None, ledger: Ledger | None = None):
        self.policy = policy
        self.user = policy.user(user)
        self.engine = engine or open_engine(policy)
        self._owns = (engine is None, ledger is None)  # what close() may close: not a server's shared ones
        self.ledger = ledger or open_ledger(policy.ledger_path, policy.ledger_url, identity=policy.ledger_identity)
        self.budget_policy = self.user.budget
        self.global_budget = policy.privacy.global_budget
        self.settings = settings.default_settings(policy, self.user)
        self._post = PostProcessor()
        self._lock = threading.Lock()
        self._views = Views()
        self._statements = Statements(policy.limits)
        self._plans = plan_cache.for_engine(self.engine)  # shared with every session over this engine
        self._deadline = policy.limits.deadline()  # the planning time budget of the statement under way
        self._headroom = None  # the last admitted query's charge, and room for its cost (charging.overlapping)
        self._shaping = answer_cache.answer_shaping(policy)  # the policy's part of the answer cache's key

    # Entry points --------------------------------------------------------------------------
    def execute(self, sql: str | Routed, params: Params = None) -> Result:
        """Run one statement (its text, or its route from `route`). Raises dpsql.errors.Error
        subclasses only. The data version is read once for it (Engine.one_version)."""
        with self._lock, no_internals("the query"), self.engine.one_version():
            return self._execute(sql, params)

    def describe(self, sql: str | Routed, params: Params = None) -> tuple[list[str], list[str]] | None:
        """Names and types of what `sql` would return (None: no rows), without running it or
        charging anything: the wire protocol's Describe."""
        with self._lock, self.engine.one_version():
            try:
                routed = sql if isinstance(sql, Routed) else self.route(sql)
                if routed.statement is None and routed.error is None:  # empty, or a front end's own route
                    if routed.kind == Kind.EMPTY:
                        raise empty_refusal()
                    routed = self.route(routed.text)
                return describe.describe_statement(self, routed.checked(), params)
            except Error:
                raise
            except Exception as e:
                raise InternalError("internal error while describing the query", hint=type(e).__name__) from e

    def route(self, text: str, entries: Sequence[Entry] = ()) -> Routed:
        """The statement's way (sql/route.py), with a front end's own `entries`; kept for queries."""
        return self._statements.route(text, entries)

    def route_one(self, part: str, entries: Sequence[Entry] = ()) -> Routed:
        """The way of one statement split from a script."""
        return self._statements.route_one(part, entries)

    def _classify(self, sql: str) -> Statement:
        return self.route(sql).checked()

    # classify -> route ---------------------------------------------------------------------
    def _execute(self, sql: str | Routed, params) -> Result:
        self._deadline = self.policy.limits.deadline()
        routed = sql if isinstance(sql, Routed) else self.route(sql)
        return _ANSWERS.get(routed.kind, Session._unrouted)(self, routed, params)

    def _set(self, routed: Routed, params) -> Result:
        stmt = routed.checked()
        if params:
            raise forbidden("parameters are not allowed in SET")
        self.settings, status = settings.assign(self.settings, self.policy, self.user, stmt)
        return Result(status=status)

    def _show(self, routed: Routed, params) -> Result:
        return self.show(routed.checked().name)

    def _transaction(self, routed: Routed, params) -> Result:
        return Result(status=routed.checked().verb)  # no-ops: dpsql is read-only

    def _view(self, routed: Routed, params) -> Result:
        return Result(status=self._views.apply(routed.checked(), self.policy))

    def _explain(self, routed: Routed, params) -> Result:
        stmt = routed.checked()
        tree = self._views.expand(bind_parameters(stmt.query.tree, params))
        return explain.explain_result(self, tree, stmt.query.options)

    def _unrouted(self, routed: Routed, params) -> Result:
        """What the session does not answer: refused (a front end's own route, answered by it)."""
        if routed.kind == Kind.EMPTY:
            raise empty_refusal()
        if routed.error is None:  # a front end's route (catalog, advisory lock) reached the session: a query here
            return self._execute(self.route(routed.text), params)
        raise routed.error

    def _statement(self, routed: Routed, params) -> Result:
        stmt = routed.checked()
        sql = routed.text
        tree = bind_parameters(stmt.tree, params) if params or stmt.placeholders else stmt.tree
        expanded = self._views.expand(tree)
        if stmt.clocked or expanded is not stmt.tree:
            expanded = pinned(expanded, clock_now())  # the clock read once, as literals (sql/clock.py)
        if params:  # the ledger records the values with the text (`stmt.sql` is what a charge records);
            # replaced after its tree walks (placeholders, clocked), kept with the statement, are read
            stmt = replace(stmt, sql=recorded(stmt.sql, params))
        # Without parameters (or views) the statement's text is the query: it keys the plan
        # cache (no SQL generation from the tree on every execution).
        return self._query(stmt, expanded, sql if expanded is stmt.tree else None)

    # plan -> bound -> charge -> run -> release -> answer ------------------------------------
    def _query(self, stmt: Query, tree: exp.Query, text: str | None = None) -> Result:
        # A text planned before took the planned way then, and takes it again: the checks
        # below are pure functions of the tree, the policy and the settings its key holds.
        answered = routes.early(self, stmt, tree)  # a published synopsis's answer, free (routes.EARLY)
        if answered is not None:
            return answered
        options = stmt.options or QueryOptions()
        key = self._plan_key(tree, options, text) if text is not None else None
        planned = self._plans.plan(key) if key is not None else None
        if planned is None:
            routed = routes.routed(self, stmt, tree)
            if routed is not None:
                return routed
            key = key or self._plan_key(tree, options, text)
            planned = self._plans.plan(key) or shapes.shaped(self, key, tree, options)
        plan, cal = planned
        self._deadline.check()
        if isinstance(plan, PublicQuery):
            with charge_told("nothing was charged"):
                rs = self.engine.execute(self.engine.sql_of(plan.tree))
            rows = list(zip(*rs.columns)) if rs.row_count else []
            return Result(public_names(plan.tree, rs.names), list(rs.types), rows, f"SELECT {len(rows)}")
        s = self.settings
        key = answer_cache.cache_key(self, tree, stmt.options) if s.cache else None
        if s.cache:
            cached = self.ledger.cache_get(self.user.name, key)
            if cached is not None and answer_cache.receipted(self, cached):
                return answer_cache.cached_answer(self, cached)
        cal, target = auto.targeted(self, plan, cal, options, tree)  # dpsql.target_error's epsilon, before any charge
        chosen = auto.chosen_per_query(self, plan, cal, options)
        detail = self._plans.derived(cal, "detail", lambda: noise_detail(plan, cal))  # read-only: shared
        # An engine's refusal comes before the charge (under chosen limits, the policy's plan is
        # bound in the engine: the chosen one differs in its clamps and total bound only).
        bound = (
            self._plans.derived(plan, "unweighted", lambda: bounded.built(self, plan, None, copies=False))
            if chosen
            else bounded.bounded_query(self, plan, None)
        )
        if bound.domain == ():  # every declared key tuple is NULL or filtered out: nothing to release, free
            names, types = describe.describe_tree(self, tree, stmt.options)
            return Result(
                names,
                types,
                [],
                "SELECT 0",
                AnswerRecord(
                    notice="the group keys' declared values give no group under this expression (each "
                    "becomes NULL) or the query's conditions on them exclude every one, so nothing "
                    "was released or charged"
                ),
            )
        self._deadline.check()
        if chosen:
            result, charge = auto.answer_auto(self, stmt, tree, plan, cal, options, bound.domain, target)
            return record(self, self._told(plan, result), charge, key, bounds=True)
        stopper = Stopper(self.engine) if overlapping(self, cal.cost) else None
        detail_text = self._plans.derived(cal, "detail_text", lambda: json.dumps(detail, default=str))
        pending = charging(self, cal.cost, stmt.sql, detail_text, stopper)
        self._headroom = None  # kept again only once this charge is admitted
        charge = None if stopper is not None else pending.admitted()  # else admitted while the engine runs
        result = answer(self, plan, bound, cal, charge, detail, pending, stopper)
        charge = pending.admitted()
        return record(self, self._told(plan, result), charge, key)

    def _told(self, plan: Plan, result: Result) -> Result:
        """The answer with what its query's text and the policy alone tell of it (kept per plan)."""
        told = self._plans.derived(plan, "told", lambda: _told_of(plan))
        if told:
            dp = result.dp or AnswerRecord()
            result.dp = replace(dp, notice="; ".join(([dp.notice] if dp.notice else []) + list(told)))
        return result

    # Planning seams (tests replace these on a session) --------------------------------------
    def _prepare(
        self, tree: exp.Query, options: QueryOptions | None = None, text: str | None = None
    ) -> tuple[Plan | PublicQuery, Calibration | None]:
        """Plan and calibrate, memoised per query shape for every session over this engine (shapes.py)."""
        return shapes.prepare_query(self, tree, options, text)

    def _plan_and_calibrate(
        self, tree: exp.Query, options: QueryOptions
    ) -> tuple[Plan | PublicQuery, Calibration | None]:
        return prepare(tree, self.policy, self.engine.schema(), self.settings, options)

    def _plan_key(self, tree: exp.Query, options: QueryOptions, text: str | None, shape: str | None = None) -> str:
        return shapes.plan_key(self, tree, options, text, shape)

    def _weighting(self, plan: Plan):
        return weighting.weighting(self, plan)

    # What front ends ask beside statements -------------------------------------------------
    def discard(self, *, settings: bool, views: bool) -> None:
        """DISCARD: back to a new session's settings (RESET ALL), and/or without temporary views
        (DISCARD TEMP). Nothing charged or cached is forgotten."""
        if settings:
            self.settings = self._defaults()
        if views:
            self._views.clear()

    def _defaults(self) -> Settings:
        return settings.default_settings(self.policy, self.user)

    def setting(self, name: str) -> str | None:
        """A setting's value as SHOW gives it (current_setting() reads it too); None if unknown."""
        return settings.setting(self.settings, name)

    def show(self, name: str) -> Result:
        return self.budget_result() if name == "dpsql.budget" else settings.show(self.settings, name)

    def budget(self, detail: bool = True) -> dict[str, Any]:
        return budget_summary(self.policy, self.ledger, self.user.name, detail)

    def budget_result(self) -> Result:
        return budget_result(self.policy, self.ledger, self.user.name)

    def view_columns(self) -> list[tuple[str, dict[str, str]]]:
        """Each temporary view's columns and engine types (the catalog lists them; free)."""
        return list(self._views.columns(partial(describe.describe_tree, self)))

    def explain_plan(self, tree: exp.Query, options: QueryOptions | None = None) -> dict[str, Any]:
        return explain.explain_plan(self, tree, options)

    def bounded_sql(self, plan: Plan, salt: str | None = None) -> str:
        """The plan's bounded query as the engine runs it (EXPLAIN's detail, tests, benchmarks)."""
        return bounded.bounded_query(self, plan, salt).sql

    def bounded_result(self, plan: Plan, salt: str | None = None) -> ResultSet:
        """The exact values a release of the plan noises, empty groups of a declared domain
        included (tests and audits compare neighbouring datasets on them)."""
        return bounded.exact_result(self, plan, salt)

    def randomized_response(
        self,
        table: str,
        columns: Sequence[str],
        epsilon: float | Fraction,
        method: str = "auto",
        epsilon_size: float | Fraction | None = None,
        null_category: bool = True,
    ) -> randomized.LocalRelease:
        """One randomized row per person of `table` over `columns` (randomized.py)."""
        with self._lock:
            return randomized.randomized_response(self, table, columns, epsilon, method, epsilon_size, null_category)

    def publish_synopsis(self, name: str):
        """Publish the policy's synopsis `name` (dpsql/synopses/publish.py): one charge, to its
        charged_to. An analyst publishes the synopses charged to them; a privacy officer any."""
        with self._lock, no_internals("the synopsis"):
            spec = synopsis_publish.spec_of(self.policy, name)
            if spec.charged_to != self.user.name and not self.user.officer:
                raise forbidden(
                    f"synopsis {spec.name} is charged to {spec.charged_to}, not to {self.user.name}",
                    hint="its payer or a privacy officer publishes it (dpsql synopsis publish NAME)",
                )
            self._headroom = None  # charging.overlapping judges by the session's latest charge
            return synopsis_publish.publish(self, spec.name)

    # Batches -------------------------------------------------------------------------------
    def execute_script(self, text: str) -> list[Result]:
        """A string of several statements, as the wire's simple query sends them. When every
        statement is a DP query, they form one PLD-planned batch at the session's (ε, δ);
        otherwise they run one after another, as PostgreSQL would."""
        statements = split_statements(text, self.policy.limits)
        if len(statements) <= 1:
            return [self.execute(text)]
        routes = [self.route_one(st) for st in statements]  # split once: each part routed as it is
        if self.batchable(routes):
            return self.execute_batch(statements)
        return [self.execute(r) for r in routes]

    def batchable(self, statements: Sequence[str] | Sequence[Routed]) -> bool:
        """Whether the statements (texts, or their routes) are all DP queries, which a script
        answers as one batch."""
        with self._lock:
            return batch.batchable(self.policy, [s if isinstance(s, Routed) else self.route_one(s) for s in statements])

    def execute_batch(
        self,
        sqls: Sequence[str],
        epsilon: float | Fraction | None = None,
        delta: float | Fraction | None = None,
        weights: Sequence[float] | None = None,
    ) -> list[Result]:
        """Answer several DP queries calibrated jointly by PLD planning, charged once as one
        (ε, δ) release. `weights` (one per query) give a query less noise relative to the others."""
        with self._lock, no_internals("the batch"), self.engine.one_version():
            return batch.answer_batch(self, sqls, epsilon, delta, weights)

    def close(self) -> None:
        owns_engine, owns_ledger = self._owns
        if owns_ledger:
            self.ledger.close()
        if owns_engine:
            self.engine.close()


# The session's answer to each route (sql/route.py); the others are refused (`_unrouted`).
_ANSWERS = {
    Kind.SET: Session._set,
    Kind.SET_LOCAL: Session._set,
    Kind.SHOW: Session._show,
    Kind.BEGIN: Session._transaction,
    Kind.COMMIT: Session._transaction,
    Kind.ROLLBACK: Session._transaction,
    Kind.SAVEPOINT: Session._transaction,
    Kind.NO_OP: Session._transaction,
    Kind.VIEW: Session._view,
    Kind.EXPLAIN: Session._explain,
    Kind.QUERY: Session._statement,
}


def _told_of(plan: Plan) -> tuple[str, ...]:
    """Notices from the plan alone: keys NULL by construction, and values compared with a column's
    declared keys that are none of them (sql/narrow.unlisted)."""
    dropped = [as_written(k.expr)[:80] for k in plan.keys if k.declared and null_by_construction(k.expr)]
    nulls = (
        f"rows where {' or '.join(dropped)} is NULL are in no group: a declared domain holds values, not "
        "NULL; to count them, give them a value, e.g. COALESCE(key, 'none')"
    )
    return ((nulls,) if dropped else ()) + unlisted(plan)

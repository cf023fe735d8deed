"""One analyst's session: the pipeline every front end shares (DESIGN §2).

classify -> analyze -> calibrate -> ledger.charge -> engine.execute(rewrite) -> release ->
post-process. A refusal anywhere before the charge costs nothing; after the charge, the
cost stays (a failure may depend on data) and the answer is released only then.
"""

from __future__ import annotations

import contextlib
import datetime
import decimal
import hashlib
import json
import logging
import math
import secrets
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from fractions import Fraction
from functools import partial
from typing import Any, Callable, Iterator, Mapping, NoReturn, Sequence

import sqlglot
from sqlglot import exp

from . import auto_bounds, guard, local, plan_cache
from .accounting.cost import Cost, show
from .accounting.filters import PAIR_FILTERS, Filter, Totals, simulate
from .calibration import Calibration, calibrate, measure_weights
from .config import MECHANISMS, BudgetPolicy, Policy, TablePolicy, UserPolicy
from .empty_groups import with_empty_groups
from .engines import Engine, open_engine
from .engines.base import ResultSet
from .errors import (
    BUDGET_RELATION,
    Error,
    InternalError,
    OperationalError,
    ProgrammingError,
    forbidden,
    invalid_parameter,
    unsupported,
)
from .families import family
from .ledger import Charge, Ledger, PendingCharge, open_ledger, window_of
from .plan_cache import UNUSABLE, Bounded, Seen, Template
from .postprocess import PostProcessor, is_trivial
from .prepare import (
    CLIENT_SETTINGS,
    Settings,
    open_unit,
    plan_query,
    positive,
    prepare,
    probability,
    within_cap,
)
from .release import NoisyTable, key_order, release
from .sql import build as b
from .sql import slots
from .sql.allowlist import CLOCK_FUNCTIONS
from .sql.analyze import Plan, PublicQuery, check_rows_query, touches_private
from .sql.bounding import SplitCopy, WeightedCopy, copy_column, unit_norm
from .sql.classify import (
    Explain,
    Query,
    SetCommand,
    ShowCommand,
    TransactionCommand,
    ViewCommand,
    array_comparisons,
    classify,
    classify_one,
    split_statements,
)
from .sql.clock import now as clock_now
from .sql.clock import pinned
from .sql.measures import COUNT_BITS, Count, Measure, squares_measure, sum_measure
from .sql.narrow import narrowing
from .sql.options import QueryOptions
from .sql.pgfunctions import postgres_meaning
from .sql.rewrite import declared_domain, rewrite
from .sql.scope import Resolver, as_written, output_name
from .sql.wrappers import column_probe, released_subquery, schema_probe
from .synopses import publish as synopsis_publish
from .synopses import route as synopsis_route
from .targets import (
    batch_cost,
    calibrate_planned,
    planned_mechanisms,
    pld_multiplier,
)

log = logging.getLogger("dpsql")

STATEMENT_CACHE_SIZE = 256  # query texts whose parse a session keeps

# The session's own settings (SET, SHOW, current_setting), named once for the hints that list them.
DP_SETTINGS = ("dpsql.epsilon", "dpsql.delta", "dpsql.mechanism", "dpsql.confidence", "dpsql.cache", "dpsql.reuse",
               "dpsql.planner", "dpsql.target_error", "dpsql.bounds")

# Settings that cannot change an answer's value or accuracy: every other dpsql.* setting is part of
# the answer cache's key, so a setting added later is keyed by default.
_ANSWER_NEUTRAL = frozenset({"dpsql.cache", "dpsql.reuse"})

_READ_ONLY = {"server_version", "server_version_num", "server_encoding", "integer_datetimes", "max_identifier_length", "is_superuser",
              "session_authorization"}


@dataclass
class Result:
    """What a statement returns, whatever the front end."""

    names: list[str] = field(default_factory=list)
    types: list[str] = field(default_factory=list)
    rows: list[tuple] = field(default_factory=list)
    status: str = "SELECT 0"
    dp: dict[str, Any] | None = None


class Session:
    def __init__(self, policy: Policy, user: str, *, engine: Engine | None = None, ledger: Ledger | None = None):
        self.policy = policy
        self.user = policy.user(user)
        self.engine = engine or open_engine(policy)
        self._owns = (engine is None, ledger is None)  # what close() may close: not a server's shared ones
        self.ledger = ledger or open_ledger(policy.ledger_path, policy.ledger_url, identity=policy.ledger_identity)
        self.budget_policy = self.user.budget
        self.global_budget = policy.privacy.global_budget
        self.settings = self._defaults()
        self._post = PostProcessor()
        self._lock = threading.Lock()
        self._views: dict[str, exp.Query] = {}  # session-local views: name -> definition
        self._statements: OrderedDict[str, Query] = OrderedDict()
        self._plans = plan_cache.for_engine(self.engine)  # shared with every session over this engine
        self._deadline = policy.limits.deadline()  # the planning time budget of the statement under way
        self._headroom: tuple[Charge, bool] | None = None  # the last admitted query's charge, and room for its cost
        self._shaping = _answer_shaping(policy)  # the policy's part of the answer cache's key

    def _defaults(self) -> Settings:
        return default_settings(self.policy, self.user)

    def discard(self, *, settings: bool, views: bool) -> None:
        """DISCARD: back to a new session's settings (RESET ALL), and/or without temporary views
        (DISCARD TEMP). Nothing charged or cached is forgotten."""
        if settings:
            self.settings = self._defaults()
        if views:
            self._views.clear()

    # Entry point ---------------------------------------------------------------------------
    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None) -> Result:
        """Run one statement. Raises dpsql.errors.Error subclasses only."""
        with self._lock, _no_internals("the query"):
            return self._execute(sql, params)

    def _classify(self, sql: str):
        """classify(), memoised for SELECTs (parsing is pure): a dashboard resends the same text.
        The tree is shared: whatever would change it works on a copy (bind_parameters, and
        _prepare before analysis)."""
        hit = self._statements.get(sql)
        if hit is not None:
            self._statements.move_to_end(sql)
            return hit
        stmt = classify(sql, self.policy.limits)
        if isinstance(stmt, Query):
            self._statements[sql] = stmt
            if len(self._statements) > STATEMENT_CACHE_SIZE:
                self._statements.popitem(last=False)
        return stmt

    def _execute(self, sql: str, params) -> Result:
        self._deadline = self.policy.limits.deadline()
        stmt = self._classify(sql)
        if isinstance(stmt, SetCommand):
            if params:
                raise forbidden("parameters are not allowed in SET")
            return self._set(stmt)
        if isinstance(stmt, ShowCommand):
            return self._show(stmt.name)
        if isinstance(stmt, TransactionCommand):
            return Result(status=stmt.verb)
        if isinstance(stmt, ViewCommand):
            return self._view(stmt)
        if isinstance(stmt, Explain):
            return self._explain(self._with_views(bind_parameters(stmt.query.tree, params)), stmt.query.options)
        tree = bind_parameters(stmt.tree, params) if params or stmt.placeholders else stmt.tree
        expanded = self._with_views(tree)
        if stmt.clocked or expanded is not stmt.tree:
            expanded = pinned(expanded, clock_now())  # the clock read once, as literals (sql/clock.py)
        # Without parameters (or views) the statement's text is the query: it keys the plan
        # cache (no SQL generation from the tree on every execution).
        return self._query(stmt, expanded, sql if expanded is stmt.tree else None)

    def _view(self, cmd: ViewCommand) -> Result:
        """Session-local views: definitions only, run (and charged) when a query reads them."""
        if cmd.query is None:
            if cmd.name not in self._views and not cmd.if_exists:
                raise ProgrammingError(f'view "{cmd.name}" does not exist', sqlstate="42P01")
            self._views.pop(cmd.name, None)
            return Result(status="DROP VIEW")
        if self.policy.table(cmd.name) is not None:
            raise ProgrammingError(f'"{cmd.name}" is a table of the policy', sqlstate="42P07",
                                   hint="give the view another name")
        if cmd.name in self._views and not cmd.replace:
            raise ProgrammingError(f'relation "{cmd.name}" already exists', sqlstate="42P07",
                                   hint="CREATE OR REPLACE TEMPORARY VIEW, or DROP VIEW first")
        definition = self._with_views(cmd.query.tree)  # views it reads are expanded now
        own = {c.alias_or_name.lower() for c in definition.find_all(exp.CTE)}
        if any(t.name.lower() == cmd.name and t.name.lower() not in own for t in definition.find_all(exp.Table)):
            raise ProgrammingError(f'view "{cmd.name}" would read itself', sqlstate="42P17",
                                   hint="define it over tables or other views")
        self._views[cmd.name] = definition
        return Result(status="CREATE VIEW")

    def view_columns(self) -> list[tuple[str, dict[str, str]]]:
        """Each temporary view's columns and engine types, described from its definition (the
        catalog lists them; nothing runs, nothing is charged)."""
        out = []
        for name, definition in self._views.items():
            try:
                names, types = self._describe_tree(definition, QueryOptions())
            except Error:
                continue  # a view that no longer binds is listed by nothing
            out.append((name, dict(zip(names, types))))
        return out

    def _with_views(self, tree: exp.Query) -> exp.Query:
        """The query with the session's views it reads put in front as CTEs (a CTE of its own
        with the same name still wins), or the query itself when it reads none."""
        if not self._views:
            return tree
        own = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
        used = [t.name.lower() for t in tree.find_all(exp.Table)
                if t.name.lower() in self._views and t.name.lower() not in own and t.db.lower() in ("", "pg_temp", "public")]
        if not used:
            return tree
        out = tree.copy()
        for t in out.find_all(exp.Table):
            if t.name.lower() in used and t.db:
                t.set("db", None)
        ctes = [exp.CTE(this=self._views[name].copy(), alias=exp.TableAlias(this=exp.to_identifier(name)))
                for name in dict.fromkeys(used)]
        existing = out.args.get("with_")
        out.set("with_", exp.With(expressions=ctes + (list(existing.expressions) if existing else [])))
        return out

    def describe(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None
                 ) -> tuple[list[str], list[str]] | None:
        """Names and types of what `sql` would return (None: no rows), without running it or
        charging anything: the wire protocol's Describe."""
        with self._lock:
            try:
                return self._describe(sql, params)
            except Error:
                raise
            except Exception as e:
                raise InternalError("internal error while describing the query", hint=type(e).__name__) from e

    def _describe(self, sql: str, params) -> tuple[list[str], list[str]] | None:
        stmt = classify(sql, self.policy.limits)
        if isinstance(stmt, (SetCommand, TransactionCommand)):
            return None
        if isinstance(stmt, ShowCommand):  # SHOW's own answer (free, no data): Describe matches it, SHOW ALL too
            r = self._show(stmt.name)
            return r.names, r.types
        if isinstance(stmt, Explain):
            return ["QUERY PLAN"], ["VARCHAR"]
        if isinstance(stmt, ViewCommand):
            return None
        tree = bind_parameters(stmt.tree, params if params is not None else _null_parameters(stmt.tree))
        return self._describe_tree(pinned(self._with_views(tree), clock_now()), stmt.options)

    def _describe_tree(self, tree: exp.Query, options: QueryOptions) -> tuple[list[str], list[str]]:
        """Names and types of a query's answer from binding alone: nothing runs, nothing is
        charged. A schema probe is described as the query it probes; a released subquery's outer
        query over its inner one's columns; a query that would read private rows (which is
        refused when run) by binding it on the engine, which reads the schema only."""
        if _reads_budget(tree):
            r = self.budget_result()
            described = self._over_rows(tree, BUDGET_RELATION, r.names, r.types, [])
            return described.names, described.types
        probed = schema_probe(tree)
        if probed is not None and touches_private(probed, self.policy):
            return self._describe_tree(probed, options)
        wrapped = released_subquery(tree, self.policy)
        if wrapped is not None and touches_private(wrapped[0], self.policy):
            names, types = self._describe_tree(wrapped[0], options)
            described = self._over_rows(tree, wrapped[1], names, types, [])
            return described.names, described.types
        if isinstance(tree, exp.Select) and _reads_rows(tree):
            check_rows_query(tree, Resolver(self.policy, self.engine.schema()))
            empty = tree.copy()
            empty.set("limit", exp.Limit(expression=exp.Literal.number(0)))
            for t in empty.find_all(exp.Table):  # the engine's own names: "public".x is x there
                if t.db.lower() == "public":
                    t.set("db", None)
            names, types = self.engine.describe(self.engine.prepare(empty))
            return public_names(tree, names), types
        plan = plan_query(tree, self.policy, self.engine.schema(), self.settings.mechanism, options)
        if isinstance(plan, PublicQuery):
            names, types = self.engine.describe(self.engine.prepare(plan.tree))
            return public_names(plan.tree, names), types
        names, types = self.engine.describe(self.engine.prepare(rewrite(plan, plan.literal_domain_size()), owned=True))
        key_types = types[:len(plan.keys)]
        est_types = [family(e).result_type for e in plan.estimates]
        return self._post.describe(plan.post, key_types, est_types)

    # Settings ------------------------------------------------------------------------------
    def _set(self, cmd: SetCommand) -> Result:
        name, value = cmd.name, cmd.value
        s = self.settings
        if name == "all" and value is None:
            self.settings = self._defaults()
            return Result(status="RESET")
        if name.startswith("dpsql."):
            key = name[len("dpsql."):]
            d = self._defaults()
            if key == "epsilon":
                s.epsilon = d.epsilon if value is None else within_cap(self.policy, positive(value, name))
            elif key == "delta":
                s.delta = d.delta if value is None else probability(value, name)
            elif key == "mechanism":
                v = (value or d.mechanism).lower()
                if v not in MECHANISMS:
                    raise invalid_parameter(f"invalid value for {name}: {value!r}", hint="use 'laplace' or 'gaussian'")
                s.mechanism = v
            elif key == "confidence":
                s.confidence = d.confidence if value is None else open_unit(value, name)
            elif key == "cache":
                s.cache = True if value is None else _boolean(value, name)
            elif key == "reuse":
                s.reuse = True if value is None else _boolean(value, name)
            elif key == "target_error":
                off = value is None or value.strip().lower() in ("0", "off", "none", "default")
                s.target_error = None if off else float(positive(value, name, f"SET {name} = 50, or off"))
            elif key == "bounds":
                v = (value or d.bounds).lower()
                if v not in ("policy", "auto"):
                    raise invalid_parameter(f"invalid value for {name}: {value!r}",
                                            hint="'auto' chooses each query's limits with part of its epsilon; "
                                                 "'policy' uses the policy's limits as they are")
                s.bounds = v
            elif key == "planner":
                v = (value or "filter").lower()
                if v not in ("filter", "pld"):
                    raise invalid_parameter(f"invalid value for {name}: {value!r}",
                                            hint="'filter' splits a query's epsilon equally; 'pld' calibrates its aggregates jointly")
                s.planner = v
            else:
                raise _unknown_setting(name)
            return Result(status="RESET" if value is None else "SET")
        if name in CLIENT_SETTINGS and name not in _READ_ONLY:
            s.client[name] = CLIENT_SETTINGS[name] if value is None else value
            return Result(status="RESET" if value is None else "SET")
        raise forbidden(f'setting "{name}" cannot be changed through dpsql',
                        hint=f"the engine's settings are fixed; {', '.join(DP_SETTINGS)} are yours to set")

    def setting(self, name: str) -> str | None:
        """A setting's value as SHOW gives it (current_setting() reads it too); None if unknown."""
        if name in self.settings.client:
            return self.settings.client[name]
        return self._dp_settings().get(name)

    def _dp_settings(self) -> dict[str, str]:
        """Every dpsql.* setting and its value, in DP_SETTINGS' order."""
        s = self.settings
        return {"dpsql.epsilon": show(s.epsilon), "dpsql.delta": show(s.delta), "dpsql.mechanism": s.mechanism,
                "dpsql.confidence": repr(s.confidence), "dpsql.cache": "on" if s.cache else "off",
                "dpsql.reuse": "on" if s.reuse else "off",
                "dpsql.planner": s.planner,
                "dpsql.target_error": "off" if s.target_error is None else repr(s.target_error),
                "dpsql.bounds": s.bounds}

    def _show(self, name: str) -> Result:
        s = self.settings
        if name == "dpsql.budget":
            return self.budget_result()
        values = self._dp_settings()
        if name in values:
            return Result([name.split(".", 1)[1]], ["VARCHAR"], [(values[name],)], "SHOW")
        if name in s.client:
            return Result([name], ["VARCHAR"], [(s.client[name],)], "SHOW")
        if name == "all":
            rows = sorted({**s.client, **values}.items())
            return Result(["name", "setting"], ["VARCHAR", "VARCHAR"], rows, "SHOW")
        raise _unknown_setting(name)

    def budget(self, detail: bool = True) -> dict[str, Any]:
        return budget_summary(self.policy, self.ledger, self.user.name, detail)

    def budget_result(self) -> Result:
        b = self.budget(detail=False)
        names = ["user", "filter", "epsilon_total", "epsilon_spent", "epsilon_remaining",
                 "delta_total", "delta_spent", "delta_remaining", "queries", "window_refreshes",
                 "lifetime_epsilon_remaining"]
        life = b.get("lifetime")
        row = (b["user"], b["filter"], float(b["epsilon"]["total"]), float(b["epsilon"]["spent"]),
               float(b["epsilon"]["remaining"]), float(b["delta"]["total"]), float(b["delta"]["spent"]),
               float(b["delta"]["remaining"]), b["queries"], b["window"]["refreshes"] if b.get("window") else None,
               float(life["epsilon"]["remaining"]) if life else None)
        types = ["VARCHAR", "VARCHAR"] + ["DOUBLE"] * 6 + ["BIGINT", "VARCHAR", "DOUBLE"]
        return Result(names, types, [row], "SHOW")

    # Queries -------------------------------------------------------------------------------
    def _prepare(self, tree: exp.Query, options: QueryOptions | None = None, text: str | None = None
                 ) -> tuple[Plan | PublicQuery, Calibration | None]:
        """Plan and calibrate, memoised per query shape (`text`, the statement that parses to
        `tree`, or the tree's SQL) for every session over this engine: both are pure functions
        of the query, the settings `prepare` reads, the policy and the schema, so a dashboard's
        repeated queries skip them, in any of its connections (the charge, the engine and the
        noise are never cached here). Kept per analyst, so that no analyst can time whether
        another has asked the same query."""
        options = options or QueryOptions()
        key = self._plan_key(tree, options, text)
        return self._plans.plan(key) or self._planned(key, tree, options)

    def _planned(self, key: str, tree: exp.Query, options: QueryOptions, owned: bool = False
                 ) -> tuple[Plan | PublicQuery, Calibration | None]:
        """`owned`: the caller hands over a copy of its own, planned as it is."""
        prepared = self._plan_and_calibrate(tree if owned else tree.copy(), options)
        self._plans.put_plan(key, prepared)
        return prepared

    def _shaped(self, key: str, tree: exp.Query, options: QueryOptions
                ) -> tuple[Plan | PublicQuery, Calibration | None]:
        """`_planned`, from the template of the query's shape when there is one: a text that
        differs from others only in the values its WHERE compares with (sql/slots.py) takes their
        plan, calibration and bounded query with its own values put in, skipping the analysis,
        the rewrite and the SQL generation. A shape's first text is planned in full; its second
        too, and then builds the template, kept only if it reproduces both texts' bounded
        queries exactly and they were calibrated alike (else the shape is always planned in
        full). Only on engines that write a value's SQL apart from the query (`literal_sql`)."""
        literal_sql = self.engine.literal_sql if self.engine.capabilities.literal_sql else None
        if literal_sql is None:
            return self._planned(key, tree, options)
        marked, literals = slots.tagged(tree)  # a copy, planned as it is
        if not literals:
            return self._planned(key, marked, options, owned=True)
        tkey = self._plan_key(tree, options, None, slots.shape(marked, literals))
        entry = self._plans.template(tkey)
        if isinstance(entry, Template):
            plan = slots.instantiate(entry.plan, literals)
            sql = entry.splice(entry.sql, [literal_sql(lit) for lit in literals])
            self._plans.derived(plan, "bounded", lambda: self._built_bounded(plan, None, (sql, entry.timeless)))
            self._plans.put_plan(key, (plan, entry.cal))
            return plan, entry.cal
        prepared = self._planned(key, marked, options, owned=True)
        plan, cal = prepared
        if entry == UNUSABLE or not isinstance(plan, Plan):
            return prepared
        bounded = self._bounded(plan, None)
        values = tuple(literal_sql(lit) for lit in literals)
        self._plans.put_template(tkey, Seen(cal, bounded.sql, values) if entry is None
                                 else self._template(plan, cal, literals, bounded, values, entry))
        return prepared

    def _template(self, plan: Plan, cal: Calibration, literals: list[exp.Literal], bounded: Bounded,
                  values: tuple[str, ...], seen: Seen) -> Template | str:
        """The template of a shape from its second text's plan, checked against both texts."""
        if cal != seen.cal or slots.slots_in(plan) != set(range(len(literals))):
            return UNUSABLE
        marked = slots.instantiate(plan, [slots.MARKERS.marker(i, lit) for i, lit in enumerate(literals)], check=False)
        sql = self.engine.prepare(rewrite(marked, marked.literal_domain_size(), None, self._weighting(marked)),
                                  owned=True)
        splice = slots.MARKERS.splicer(literals, self.engine.literal_sql)
        if splice(sql, values) != bounded.sql or splice(sql, seen.values) != seen.sql:
            return UNUSABLE
        return Template(plan, cal, sql, bounded.timeless, splice)

    def _plan_key(self, tree: exp.Query, options: QueryOptions, text: str | None, shape: str | None = None) -> str:
        s = self.settings
        if shape is not None:
            query = ("shape", shape)
        elif text is not None:
            query = ("text", text)
        else:
            query = ("tree", tree.sql(dialect="postgres"))
        return repr((self.user.name, query, options, s.epsilon, s.delta, s.mechanism, s.planner, s.target_error,
                     s.confidence, s.exact_curve, s.bounds, self.engine.data_version()))

    def _plan_and_calibrate(self, tree: exp.Query, options: QueryOptions
                            ) -> tuple[Plan | PublicQuery, Calibration | None]:
        return prepare(tree, self.policy, self.engine.schema(), self.settings, options)

    def _query(self, stmt: Query, tree: exp.Query, text: str | None = None) -> Result:
        # A text planned before took the planned way then, and takes it again: the checks
        # below are pure functions of the tree, the policy and the settings its key holds.
        if self.policy.synopses:  # answered free from a published synopsis when it is a function of one
            answered = synopsis_route.answer(self, stmt, tree)
            if answered is not None:
                return Result(answered.names, answered.types, answered.rows, f"SELECT {len(answered.rows)}", answered.dp)
        options = stmt.options or QueryOptions()
        key = self._plan_key(tree, options, text) if text is not None else None
        planned = self._plans.plan(key) if key is not None else None
        if planned is None:
            routed = self._routed(stmt, tree)
            if routed is not None:
                return routed
            key = key or self._plan_key(tree, options, text)
            planned = self._plans.plan(key) or self._shaped(key, tree, options)
        plan, cal = planned
        self._deadline.check()
        if isinstance(plan, PublicQuery):
            with _charge_told("nothing was charged"):
                rs = self.engine.execute(self.engine.prepare(plan.tree))
            rows = list(zip(*rs.columns)) if rs.row_count else []
            return Result(public_names(plan.tree, rs.names), list(rs.types), rows, f"SELECT {len(rows)}")
        s = self.settings
        key = self._cache_key(tree, stmt.options) if s.cache else None
        if s.cache:
            cached = self.ledger.cache_get(self.user.name, key)
            if cached is not None and self._receipted(cached):
                return self._from_cache(cached)
        auto = self._auto_bounded(plan, cal, options)
        detail = self._plans.derived(cal, "detail", lambda: _detail(plan, cal))  # read-only: shared by executions
        # An engine's refusal comes before the charge (under chosen limits, the policy's plan is
        # bound in the engine: the chosen one differs in its clamps and total bound only).
        bounded = self._plans.derived(plan, "unweighted", lambda: self._built_bounded(plan, None, copies=False)) \
            if auto else self._bounded(plan, None)
        if bounded.domain == ():  # every declared key tuple is NULL or filtered out: nothing to release, free
            names, types = self._describe_tree(tree, stmt.options)
            return Result(names, types, [], "SELECT 0",
                          {"notice": "the group keys' declared values give no group under this expression (each "
                                     "becomes NULL) or the query's conditions on them exclude every one, so nothing "
                                     "was released or charged"})
        self._deadline.check()
        if auto:
            return self._kept(self._auto_answer(stmt, tree, plan, cal, options, bounded.domain), key)
        stopper = _Stopper(self.engine) if self._overlapping(cal.cost) else None
        detail_text = self._plans.derived(cal, "detail_text", lambda: json.dumps(detail, default=str))
        pending = self.ledger.charging(self.user.name, self.budget_policy, cal.cost, stmt.sql, detail_text,
                                       self.global_budget, stopper)
        self._headroom = None  # kept again only once this charge is admitted
        charge = None if stopper is not None else pending.admitted()  # else admitted while the engine runs
        result = self._answer(plan, bounded, cal, charge, detail, pending, stopper)
        charge = pending.admitted()
        dropped = self._plans.derived(plan, "dropped", lambda: [as_written(k.expr)[:80] for k in plan.keys
                                                                 if k.declared and _null_by_construction(k.expr)])
        if dropped:
            result.dp["notice"] = (f"rows where {' or '.join(dropped)} is NULL are in no group: a declared domain "
                                   "holds values, not NULL; to count them, give them a value, e.g. COALESCE(key, 'none')")
        # what left, as it left: the audit log and the console's history show it with its intervals
        self.ledger.record_release(charge.id, {"names": result.names, "rows": result.rows,
                                               "ci": (result.dp or {}).get("ci"),
                                               "confidence": (result.dp or {}).get("confidence")})
        if s.cache:
            self.ledger.cache_put(self.user.name, key, _to_cache(result))
        return result

    def _auto_bounded(self, plan: Plan, cal: Calibration, options: QueryOptions) -> bool:
        """Whether the query's limits are chosen per query (auto_bounds.py): SET dpsql.bounds = auto,
        a plan of a kind it can choose for, the filter planner at a plain epsilon, something to choose."""
        s = self.settings
        if s.bounds != "auto" or s.planner != "filter" or s.target_error is not None or cal.selection is not None:
            return False
        if options.max_groups is not None or options.max_rows is not None:
            return False  # the query states its own limits (BigQuery's clause): they are kept as written
        if any(p.kind != "laplace" for p in cal.cost.parts):
            return False
        if auto_bounds.counts_units(plan, s.mechanism):
            return cal.groups_per_unit < (plan.literal_domain_size() or cal.groups_per_unit + 1)
        if not auto_bounds.eligible(plan, s.mechanism):
            return False
        return auto_bounds.ceiling(plan) > 1 or bool(auto_bounds.columns(plan))

    def _auto_explained(self, plan: Plan, cal: Calibration, options: QueryOptions) -> dict[str, Any]:
        """What EXPLAIN says of limits chosen per query: the profile's and the correction's shares
        of epsilon, and by how much the release's smaller share scales the noise up."""
        if not self._auto_bounded(plan, cal, options):
            return {"auto_bounds": None, "auto_correction": None, "auto_release": 1.0}
        fix = auto_bounds.correction_share(plan, self.settings.mechanism,
                                          self._domain(plan).row_count if plan.keys and plan.declared else 1)
        profile = Fraction(0) if auto_bounds.counts_units(plan, self.settings.mechanism) else auto_bounds.SHARE
        return {"auto_bounds": float(profile) or None, "auto_correction": float(fix) or None,
                "auto_release": float(1 / (1 - profile - fix))}

    def _auto_answer(self, stmt: Query, tree: exp.Query, policy_plan: Plan, policy_cal: Calibration,
                     options: QueryOptions, groups: tuple | None) -> tuple[Result, Charge]:
        """One charge for the profile and the release, durable before the profile runs (so no
        refusal or failure after it depends on the data); then the chosen plan's release."""
        s = self.settings
        if auto_bounds.counts_units(policy_plan, s.mechanism):
            return self._units_answer(stmt, policy_plan, policy_cal, options, groups)
        top, cols = auto_bounds.ceiling(policy_plan), auto_bounds.columns(policy_plan)
        correct = auto_bounds.corrected(policy_plan, len(groups) if groups else 1)
        epsilon = policy_cal.cost.epsilon
        rest = auto_bounds.release_epsilon(epsilon, correct)
        weights = measure_weights(policy_plan, options.weights)
        at_rest = calibrate(policy_plan, rest, Fraction(0), s.mechanism, policy_plan.literal_domain_size(), weights)
        by_group = auto_bounds.profiled_groups(policy_plan, len(groups) if groups else 0)  # public
        cost = Cost.of(auto_bounds.parts(epsilon, cols, top, correct, bool(by_group)) + at_rest.cost.parts)
        pending = self.ledger.charging(self.user.name, self.budget_policy, cost, stmt.sql,
                                       json.dumps(_detail(policy_plan, at_rest), default=str), self.global_budget)
        charge = pending.admitted()
        with self._charged_work(pending, charge, "the query's cost stays charged: its limits were being chosen "
                                                 "from the data"):
            profile = auto_bounds.noised(self._profile_rows(policy_plan, cols, top, bool(by_group)), cols, top,
                                         epsilon, by_group)
            choice = auto_bounds.choose(policy_plan, profile, cols, top, epsilon, len(groups) if groups else 1,
                                        correct)
            plan, cal, bounded = self._plans.derived(policy_plan, f"chosen {choice.options(QueryOptions())}",
                                                     lambda: self._chosen(tree, options, choice, rest))
            if _shares(cal.cost) != _shares(at_rest.cost):
                raise OperationalError("the chosen limits changed the release's cost", sqlstate="XX000",
                                       hint="this is a bug in dpsql, please report it")
            correction = self._correction(policy_plan, choice, epsilon, correct) if correct else None
        result = self._answer(plan, bounded, cal, charge, _detail(plan, cal), pending,
                              adjust=None if correction is None else partial(_corrected, plan, correction))
        result.dp["bounds"] = choice.describe() | ({"correction": correction.describe()} if correction else {})
        return result, charge

    def _units_answer(self, stmt: Query, plan: Plan, policy_cal: Calibration, options: QueryOptions,
                      groups: tuple | None) -> tuple[Result, Charge]:
        """Units per group at the policy's limits, corrected for the groups max_groups cuts: one
        charge for the correction (auto_bounds.groups_query) and the release at the rest."""
        s = self.settings
        epsilon = policy_cal.cost.epsilon
        g, far = policy_cal.groups_per_unit, max(len(groups or ()), policy_cal.groups_per_unit)
        share = auto_bounds.correction_share(plan, s.mechanism)
        at_rest = calibrate(plan, epsilon * (1 - share), Fraction(0), s.mechanism, plan.literal_domain_size(),
                            measure_weights(plan, options.weights))
        parts = tuple(auto_bounds._part(epsilon * auto_bounds.UNITS_SHARE) for _ in range(2))
        pending = self.ledger.charging(self.user.name, self.budget_policy, Cost.of(parts + at_rest.cost.parts),
                                       stmt.sql, json.dumps(_detail(plan, at_rest), default=str), self.global_budget)
        charge = pending.admitted()
        with self._charged_work(pending, charge, "the query's cost stays charged: the groups its limits cut were "
                                                 "being counted"):
            row = self._correction_row(plan, f"groups {g} {far}", lambda: auto_bounds.groups_query(plan, g, far))
            correction = auto_bounds.noised_correction(row, g, far, epsilon, s.confidence,
                                                       (auto_bounds.UNITS_SHARE, auto_bounds.UNITS_SHARE))
            bounded = self._bounded(plan, None)
        result = self._answer(plan, bounded, at_rest, charge, _detail(plan, at_rest), pending,
                              adjust=partial(_corrected, plan, correction))
        result.dp["bounds"] = {"max_groups": g, "correction": correction.describe()}
        return result, charge

    @contextlib.contextmanager
    def _charged_work(self, pending: PendingCharge, charge: Charge, status: str) -> Iterator[None]:
        """Data-dependent work between a charge's admission and its answer: a failure stays
        charged and is recorded as such (_failed); an interrupt is raised once the charge is
        durable."""
        try:
            yield
        except Exception as e:
            pending.durable()
            self._failed(charge, e, status)
        except BaseException:
            pending.durable()
            raise

    def _correction_row(self, plan: Plan, name: str, query) -> tuple:
        """A correction query's exact row (kept per analyst and data version like a profile's)."""
        sql, timeless = self._plans.derived(plan, name, lambda: self._prepared(query()))
        rs = self._exact(sql, timeless)
        return next(zip(*rs.columns)) if rs.row_count else (0, 0)

    def _correction(self, plan: Plan, choice: auto_bounds.Choice, epsilon: Fraction, shares: tuple[Fraction, ...]
                    ) -> auto_bounds.Correction:
        """The rows the chosen total bound keeps and cuts (auto_bounds.Correction), noised: part of
        the query's charge, drawn once it is durable."""
        c, far = choice.max_contributions or 1, choice.reach or auto_bounds.reach(plan)
        row = self._correction_row(plan, f"correction {c} {far}", lambda: auto_bounds.correction_query(plan, c, far))
        return auto_bounds.noised_correction(row, c, far, epsilon, self.settings.confidence, shares)

    def _chosen(self, tree: exp.Query, options: QueryOptions, choice: auto_bounds.Choice, rest: Fraction
                ) -> tuple[Plan, Calibration, Bounded]:
        """The plan at the chosen limits, calibrated at the release's epsilon, and its bounded query
        (kept per policy plan and choice: a repeated query's choices repeat)."""
        s = self.settings
        plan = plan_query(tree, self.policy, self.engine.schema(), s.mechanism, choice.options(options))
        cal = calibrate(plan, rest, Fraction(0), s.mechanism, plan.literal_domain_size(),
                        measure_weights(plan, options.weights))
        return plan, cal, self._built_bounded(plan, None, copies=False)

    def _profile_rows(self, plan: Plan, cols: tuple[auto_bounds.Column, ...], top: int, by_group: bool
                      ) -> list[tuple]:
        """The profile's exact rows; like a bounded result, kept per analyst and data version when
        the data alone determines them (the noise is drawn afresh each time)."""
        sql, timeless = self._plans.derived(plan, f"profile {by_group}", lambda: self._prepared(
            auto_bounds.profile_query(plan, cols, top, by_group)))
        rs = self._exact(sql, timeless)
        return list(zip(*rs.columns)) if rs.row_count else []

    def _prepared(self, tree: exp.Select) -> tuple[str, bool]:
        return self.engine.prepare(tree, owned=True), tree.find(*CLOCK_FUNCTIONS) is None

    def _rows_of(self, tree: exp.Select) -> list[tuple]:
        rs = self.engine.execute(self.engine.prepare(tree, owned=True))
        return list(zip(*rs.columns)) if rs.row_count else []

    def _kept(self, answered: tuple[Result, Charge], key: str | None) -> Result:
        """An answer's release record and cache entry, as any DP answer's."""
        result, charge = answered
        self.ledger.record_release(charge.id, {"names": result.names, "rows": result.rows,
                                               "ci": (result.dp or {}).get("ci"),
                                               "confidence": (result.dp or {}).get("confidence"),
                                               "bounds": (result.dp or {}).get("bounds")})
        if self.settings.cache:
            self.ledger.cache_put(self.user.name, key, _to_cache(result))
        return result

    def _routed(self, stmt: Query, tree: exp.Query) -> Result | None:
        """The answer of a query that is not planned as a DP aggregate: the budget relation, a
        tool's schema probe, a DP query used as a derived table, a declared domain's keys."""
        if _reads_budget(tree):
            r = self.budget_result()
            return self._over_rows(tree, BUDGET_RELATION, r.names, r.types, r.rows)
        if not touches_private(tree, self.policy):
            return None
        if schema_probe(tree) is not None:  # a tool asking for the columns: answered free, no rows
            names, types = self._describe_tree(tree, stmt.options)
            return Result(names, types, [], "SELECT 0")
        if column_probe(tree):
            names, types = self._describe_tree(tree, stmt.options)
            return Result(names, types, [], "SELECT 0",
                          {"notice": "rows of a private table are never shown: this answer has its columns only; "
                                     "ask for an aggregate, e.g. SELECT COUNT(*) FROM " + tree.args["from_"].this.name})
        wrapped = released_subquery(tree, self.policy)
        if wrapped is not None:
            return self._outer_query(stmt, tree, *wrapped)
        return self._declared_keys(tree, stmt.options)

    def _overlapping(self, cost: Cost) -> bool:
        """Whether the engine may start while the ledger admits the charge (saving the admission's
        time, a fifth to a third of a small query's): only when the engine can be stopped by a
        refusal and this session's last admitted charge left room for this one (for a repeated
        cost, judged while that charge's commit reached the disk). So a refusal
        the session can foresee (the budget spent, a query past it, the first query, any query
        after a refusal) always comes before any engine work; one it cannot (the budget spent
        meanwhile by another connection of the analyst, or the global budget by others) stops
        the query, and the next one waits for its admission again."""
        if self._headroom is None or not self.engine.capabilities.overlaps_admission:
            return False
        last, room = self._headroom
        return room if cost is last.cost or cost == last.cost else last.filter.admits_cost(last.totals, cost)

    def _answer(self, plan: Plan, bounded: Bounded, cal: Calibration, charge: Charge | None, detail: dict[str, Any],
                pending: PendingCharge | None = None, stopper: _Stopper | None = None,
                adjust: Callable[[NoisyTable], None] | None = None) -> Result:
        """Run the bounded query (prepared before the charge), have the release guard check it
        against the charge's receipt, noise it and post-process. A sampled plan gets a fresh
        secret salt here. With `pending`, the charge is admitted (written in its open
        transaction) but its commit may still be on its way to the disk: the engine runs, the
        noise is drawn and the answer post-processed meanwhile, and none of it, nor any error,
        leaves until the commit is durable (if it cannot be, nothing was charged and the answer
        is dropped). With `stopper` too, its admission may still be under way (`charge` is None):
        a refusal stops the engine (_Stopper), and nothing of the run, its failure included, is
        told before the admission."""
        s = self.settings
        try:
            salted = None if plan.sample_rate is None else self._bounded(plan, secrets.token_hex(16))
            rs, failure = self._run_bounded(plan, salted or bounded, stopper and stopper.stop), None
        except Exception as e:  # told once the charge stands: whether a query fails can depend on the data
            rs, failure = None, e
        finally:
            if stopper is not None:
                stopper.ended.set()
        if pending is not None:
            charge = pending.admitted()  # a refusal, or a ledger that cannot record it: raised here, first
        if failure is not None:
            if pending is not None:
                pending.durable()  # raises instead, with nothing charged, if the commit fails
            self._failed(charge, failure)
        try:
            noisy = release(plan, cal, _released_groups(plan, bounded, rs), s.confidence, charge, self.policy)
            if adjust is not None:
                adjust(noisy)  # post-processing of the noisy values (a correction of truncation)
            out = self._post.run(plan.post, noisy)
            left = charge.filter.remaining(charge.totals)
            room = charge.filter.admits_cost(charge.totals, charge.cost) if pending is not None else None
        finally:
            if pending is not None:
                pending.durable()  # raises instead, with nothing charged, if the commit fails
        if pending is not None:
            self._headroom = (charge, room)
        rows = [tuple(_plain(v) for v in r) for r in out.rows]
        dp = {"cost": charge.cost.as_dict(), "remaining": {k: float(v) for k, v in left.items()},
              "ci": dict(out.ci), "confidence": s.confidence, "mechanism": s.mechanism, "cached": False,
              "noise": [dict(m) for m in detail["mechanisms"]], "receipt": charge.id}
        return Result(out.names, out.types, rows, f"SELECT {len(rows)}", dp)

    def _failed(self, charge: Charge, failure: BaseException,
                status: str = "the query's cost stays charged, because whether a query fails can depend on the data"
                ) -> NoReturn:
        """A query that fails after its charge (the engine's memory or time limit, a cancel, an
        engine error): the charge stays, as whether it fails can depend on the data; its release
        record says it failed and why (dpsql's own words), and the client gets the error with
        its SQLSTATE and what happened to the budget."""
        error = failure if isinstance(failure, Error) else None
        self.ledger.record_failure(charge.id, error.sqlstate if error else "XX000",
                                   error.message if error else "internal error")
        with _charge_told(status):
            raise failure

    def _run_bounded(self, plan: Plan, bounded: Bounded, stop: threading.Event | None = None) -> ResultSet:
        """The bounded query's exact result. When the data alone determines it (no sampling salt,
        no clock), an engine that can keep it per data version (DuckDB's execute_reused) gives a
        repeated query's from memory (unless SET dpsql.reuse = off: engine work every time, as
        benchmarks against a plain engine need); the noise is drawn afresh either way."""
        stoppable = () if stop is None else (stop,)  # only engines that overlap the admission take one
        return self._exact(bounded.sql, plan.sample_rate is None and bounded.timeless, *stoppable)

    def _exact(self, sql: str, reusable: bool, *stop: threading.Event) -> ResultSet:
        """The engine's exact result of `sql`, kept per analyst and data version (execute_reused)
        where the engine can, the session allows it and the data alone determines it."""
        if reusable and self.settings.reuse and self.engine.capabilities.execute_reused:
            return self.engine.execute_reused(sql, self.user.name, *stop)
        return self.engine.execute(sql, *stop)

    def _bounded(self, plan: Plan, salt: str | None) -> Bounded:
        """The plan's bounded query in the engine's SQL, memoised per plan (salted ones, new for
        every execution, are not), with its declared keys' domain as the engine lists them
        (public data only: listed before the charge, free)."""
        if salt is None:  # a plan is cached per data version, so its weighted copy is current
            return self._plans.derived(plan, "bounded", lambda: self._built_bounded(plan, None))
        return self._built_bounded(plan, salt)

    def _built_bounded(self, plan: Plan, salt: str | None, spliced: tuple[str, bool] | None = None,
                       copies: bool = True) -> Bounded:
        """`spliced`: the SQL and timelessness of the plan's unsalted bounded query, from its
        shape's template (checked here as one built afresh is). `copies`: whether a weighted copy
        may serve (not for limits chosen per query, which would build one copy per choice)."""
        if spliced is not None:
            sql, timeless = spliced
        else:
            tree = rewrite(plan, plan.literal_domain_size(), salt, self._weighting(plan) if copies else None)
            timeless = tree.find(*CLOCK_FUNCTIONS) is None  # then its result is the data's alone
            sql = self.engine.prepare(tree, owned=True)
        if salt is not None:
            return Bounded(sql, timeless)
        self._check_post(plan, sql)
        domain = tuple(zip(*self._domain(plan).columns)) if plan.keys and plan.declared else None
        return Bounded(sql, timeless, domain)

    def bounded_sql(self, plan: Plan, salt: str | None = None) -> str:
        """The plan's bounded query as the engine runs it (EXPLAIN's detail, tests, benchmarks)."""
        return self._bounded(plan, salt).sql

    def bounded_result(self, plan: Plan, salt: str | None = None) -> ResultSet:
        """The exact values a release of the plan noises, empty groups of a declared domain
        included (tests and audits compare neighbouring datasets on them)."""
        bounded = self._bounded(plan, None)
        rs = self.engine.execute(bounded.sql if salt is None else self._bounded(plan, salt).sql)
        return _released_groups(plan, bounded, rs)

    def _domain(self, plan: Plan) -> ResultSet:
        """The key tuples of the plan's declared domain, as the engine casts and lists them
        (public data, free), narrowed by the query's conditions on its keys (sql/narrow.py): kept
        per data version, keys' declarations and narrowing, which the plans of many query texts
        share (a dashboard's filters on other columns change the WHERE clause, not the keys), so
        that a new text does not build and generate the domain's SQL again (2-4 ms)."""
        key = (self.engine.data_version(), tuple(k.declaration() for k in plan.keys), narrowing(plan).signature())
        hit = self._plans.domains.get(key)
        if hit is None:
            hit = self.engine.execute(self.engine.prepare(declared_domain(plan), owned=True))
            self._plans.put_domain(key, hit)
        return hit

    def _check_post(self, plan: Plan, sql: str) -> None:
        """Bind the outer part of the query (HAVING, ORDER BY, LIMIT, expressions over the
        aggregates) against the result's types before the charge: a mistake there, such as
        ORDER BY 10 over one column, is refused free instead of failing after the charge.
        Describing the bounded query also has the engine bind it, so that a type error there
        is refused free too; an outer part that only picks columns cannot fail, and is not run.
        The outer part's check is kept per outer part and key types: the texts of one query
        shape (sql/slots.py) share their plan's outer part and estimates."""
        key_types = self.engine.describe(sql)[1][:len(plan.keys)]
        if is_trivial(plan.post):
            return
        self._plans.derived(plan.post, f"post over {key_types!r}", lambda: self._check_outer(plan, key_types))

    def _check_outer(self, plan: Plan, key_types: list[str]) -> None:
        try:
            self._post.describe(plan.post, key_types, [family(e).result_type for e in plan.estimates])
        except OperationalError as e:
            detail = e.message.replace("post-processing of the noisy result failed: ", "").splitlines()[0]
            raise ProgrammingError(f"the query's outer part (ORDER BY, HAVING, LIMIT or arithmetic on the aggregates) "
                                   f"cannot be computed: {detail}", sqlstate="42601",
                                   hint="fix it and send the query again; nothing was charged") from None

    def _weighting(self, plan: Plan) -> WeightedCopy | SplitCopy | None:
        """The engine's weighted copy of the plan's private table (built or brought up to date
        here) as the plan can use it: whole for a weightable plan, else split by its units' rows
        (filtered, per-group caps, joins on unique keys of public tables); None where neither
        applies."""
        weighted_copy = self.engine.weighted_copy if self.engine.capabilities.weighted_copy else None
        whole = plan.weightable()
        split = None if whole else plan.split_keys()
        if weighted_copy is None or (split is None and not whole):
            return None
        with self._deadline.paused():
            return self._copy_for(plan, weighted_copy, split)

    def _copy_for(self, plan: Plan, weighted_copy, split: list[tuple[str, str]] | None) -> WeightedCopy | SplitCopy | None:
        if split is not None and not all(self._unique_key(t, c) for t, c in split):
            return None
        source = plan.relation.sources[0]
        stored = self._plans.stored.get((source.table.name, plan.total_rows))
        if stored is None:  # pure in the policy: once per table and limit
            # Nothing ready-weighted where the engine's copies hold the weights only (PostgreSQL, Spark).
            measures = _precomputed(source.table) if self.engine.capabilities.weights_store_sums else {}
            norms = {name: f"{name}_norm" for name, m in measures.items() if m.own_norm}
            stored = self._plans.stored[(source.table.name, plan.total_rows)] = (
                {name: copy_column(m, plan.total_rows, norms.get(name)).sql(dialect="duckdb")
                 for name, m in measures.items()},
                {m.spec(): name for name, m in measures.items()},
                {norms[name]: unit_norm(m).sql(dialect="duckdb") for name, m in measures.items() if name in norms})
        table = weighted_copy(source.table.name, plan.unit.name, plan.total_rows, COUNT_BITS, stored[0], stored[2])
        if split is not None:
            return SplitCopy(plan.bounding, table, plan.bounding.light_rows(plan.literal_domain_size()),
                             distinct_units=plan.needs_selection)
        totals = self.engine.copy_totals if self.engine.capabilities.copy_totals else None
        return WeightedCopy(plan.bounding, table, {j: stored[1][m.spec()] for j, m in enumerate(plan.measures)
                                                   if m.value is not None and m.spec() in stored[1]},
                            totals(table) if totals is not None else None)

    def _unique_key(self, table: str, column: str) -> bool:
        """Whether a public table's column holds each non-NULL value once (public data: asking
        costs nothing), per data version."""
        version = self.engine.data_version()
        seen = self._plans.unique.get((table, column))
        known = seen[1] if seen is not None and seen[0] == version else None
        if known is None:
            tree = b.select([b.named(exp.EQ(this=b.count(b.quoted(column)),
                                            expression=exp.Count(this=exp.Distinct(expressions=[b.quoted(column)]))),
                                     "u")], b.table(table, quote=True))
            with _charge_told("nothing was charged"):
                rs = self.engine.execute(self.engine.prepare(tree, owned=True))
            known = bool(rs.columns[0][0])
            self._plans.unique[(table, column)] = (version, known)
        return known

    def _declared_keys(self, tree: exp.Query, options: QueryOptions) -> Result | None:
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
            plan = plan_query(probe, self.policy, self.engine.schema(), self.settings.mechanism, options)
        except Error:
            return None
        if not isinstance(plan, Plan) or not plan.keys or not plan.declared or len(plan.estimates) != 1:
            return None  # more than the probe's COUNT(*): an aggregate sqlglot does not know as one
        with _charge_told("nothing was charged"):
            rs = self._domain(plan)
        post = plan.post.copy()
        post.set("expressions", post.expressions[:-1])  # the probe's COUNT(*)
        rows = sorted(zip(*rs.columns), key=key_order)
        noisy = NoisyTable([list(c) for c in zip(*rows)] if rows else [[] for _ in rs.columns], list(rs.types), [], [], [])
        out = self._post.run(post, noisy)
        result = Result(out.names, out.types, out.rows, f"SELECT {len(out.rows)}")
        if tree.args.get("where") is not None or tree.args.get("joins"):  # a cascading filter's: all keys it allows
            result.dp = {"notice": "these are all the declared keys that the conditions on the keys themselves and "
                                   "joins with public tables allow, whatever the WHERE clause says of other columns: "
                                   "which of them have rows is private (ask COUNT(*) ... GROUP BY for noisy counts); free"}
        return result

    def _outer_query(self, stmt: Query, tree: exp.Select, inner: exp.Select, alias: str) -> Result:
        """A DP query used as a derived table: the inner query answered and charged as usual,
        then the outer query run over its released rows (post-processing, free)."""
        _outer(tree, alias)  # refused before the inner query is charged
        inner_result = self._query(Query(inner.sql(dialect="postgres"), inner, stmt.options), inner)
        result = self._over_rows(tree, alias, inner_result.names, inner_result.types, inner_result.rows)
        result.dp = {k: v for k, v in (inner_result.dp or {}).items() if k != "ci"}
        return result

    def _over_rows(self, tree: exp.Select, alias: str, names: list[str], types: list[str], rows: list) -> Result:
        """`tree` run over rows already released (or the budget's) held as the relation `alias`:
        post-processing in the locked-down post-processing DuckDB, free."""
        outer = _outer(tree, alias)
        out_names, out_types, out_rows = self._post.run_released(outer, alias, names, types, rows)
        return Result(public_names(outer, out_names), out_types, out_rows, f"SELECT {len(out_rows)}")

    def randomized_response(self, table: str, columns: Sequence[str], epsilon: float | Fraction,
                            method: str = "auto", epsilon_size: float | Fraction | None = None,
                            null_category: bool = True) -> LocalRelease:
        """One randomized row per person of `table` over `columns` (declared keys), charged at
        epsilon before any row is drawn (dpsql/local.py). The rows may then be published."""
        with self._lock:
            t = self.policy.table(table)
            if t is None or t.public:
                raise ProgrammingError(f"{table} is not a private table of the policy", sqlstate="42P01",
                                       hint="name a private table; public tables need no randomizing")
            keys = []
            for c in columns:
                col = t.columns.get(c.lower())
                if col is None or col.keys is None:
                    raise unsupported(f"{table}.{c} has no declared keys, so its values cannot be randomized over them",
                                      hint=f"declare them: columns.{c} = {{ keys = [...] }}")
                keys.append(col.keys)
            size = None if epsilon_size is None else positive(_text(epsilon_size), "epsilon_size")
            spec = local.spec(t.name, [c.lower() for c in columns], keys, positive(_text(epsilon), "epsilon"), method,
                              size, null_category)
            per_person = self._person_values(t, spec)
            detail = {"randomized_response": {"table": t.name, "columns": list(spec.columns), "method": spec.method,
                                              "epsilon_rr": float(spec.epsilon_rr),
                                              "epsilon_size": float(spec.epsilon_size)}}
            text = f"RANDOMIZED RESPONSE {t.name} ({', '.join(spec.columns)}) [{spec.method}]"
            self._headroom = None  # _overlapping judges by the session's latest charge
            charge = self.ledger.charge(self.user.name, self.budget_policy, Cost.pure(spec.epsilon), text, detail,
                                        self.global_budget)
            rows = local.randomize([local.person_category(r, spec) for r in per_person], spec)
            self.ledger.record_release(charge.id, {"rows": len(rows)})
            left = charge.filter.remaining(charge.totals)
            return LocalRelease(spec, rows, charge.id, {k: float(v) for k, v in left.items()})

    def publish_synopsis(self, name: str):
        """Publish the policy's synopsis `name` (dpsql/synopses/publish.py): one charge, to its
        charged_to. An analyst publishes the synopses charged to them; a privacy officer any."""
        with self._lock, _no_internals("the synopsis"):
            spec = synopsis_publish.spec_of(self.policy, name)
            if spec.charged_to != self.user.name and not self.user.officer:
                raise forbidden(f"synopsis {spec.name} is charged to {spec.charged_to}, not to {self.user.name}",
                                hint="its payer or a privacy officer publishes it (dpsql synopsis publish NAME)")
            self._headroom = None  # _overlapping judges by the session's latest charge
            return synopsis_publish.publish(self, spec.name)

    def _person_values(self, table: TablePolicy, spec: local.LocalSpec) -> list[list]:
        """Each person's (tuple of the columns, rows) counts, read from the engine."""
        cols = [exp.column(c, quoted=True) for c in spec.columns]
        if table.row_unit:
            query = exp.select(*cols).from_(exp.to_table(table.name, quoted=True))
        else:
            unit = exp.column(table.privacy_unit, quoted=True)
            query = (exp.select(unit, *cols, exp.Count(this=exp.Star())).from_(exp.to_table(table.name, quoted=True))
                     .where(b.not_null(unit.copy())).group_by(unit.copy(), *cols))
        with _charge_told("nothing was charged"):
            rs = self.engine.execute(self.engine.prepare(query))
        rows = list(zip(*rs.columns)) if rs.row_count else []
        if table.row_unit:
            return [[(r, 1)] for r in rows]
        people: dict[Any, list] = {}
        for r in rows:
            people.setdefault(r[0], []).append((tuple(r[1:-1]), r[-1]))
        return list(people.values())

    def execute_script(self, text: str) -> list[Result]:
        """A string of several statements, as the wire's simple query sends them. When every
        statement is a DP query, they form one PLD-planned batch at the session's (ε, δ);
        otherwise they run one after another, as PostgreSQL would."""
        statements = split_statements(text, self.policy.limits)
        if len(statements) <= 1:
            return [self.execute(text)]
        if self.batchable(statements):
            return self.execute_batch(statements)
        return [self.execute(st) for st in statements]

    def batchable(self, statements: Sequence[str]) -> bool:
        """Whether the statements are all DP queries, which a script answers as one batch."""
        with self._lock:
            kinds = [classify_one(st, self.policy.limits) for st in statements]
            return all(isinstance(k, Query) and touches_private(k.tree, self.policy) for k in kinds)

    def execute_batch(self, sqls: Sequence[str], epsilon: float | Fraction | None = None,
                      delta: float | Fraction | None = None, weights: Sequence[float] | None = None) -> list[Result]:
        """Answer several DP queries calibrated jointly by PLD planning, charged once as one
        (ε, δ) release. `weights` (one per query) give a query less noise relative to the others."""
        with self._lock, _no_internals("the batch"):
            return self._batch(sqls, epsilon, delta, weights)

    def _batch(self, sqls, epsilon, delta, weights) -> list[Result]:
        s = self.settings
        deadline = self.policy.limits.deadline()
        eps = within_cap(self.policy, s.epsilon if epsilon is None
                         else positive(str(epsilon), "epsilon", "execute_batch(..., epsilon=0.1)"))
        dlt = s.delta if delta is None else probability(str(delta), "delta")
        weights = list(weights) if weights is not None else [1.0] * len(sqls)
        if len(weights) != len(sqls) or any(not (w > 0 and math.isfinite(w)) for w in weights):
            raise invalid_parameter("weights must be positive numbers, one per query")
        if not sqls:
            raise invalid_parameter("the batch is empty")
        plans: list[Plan] = []
        bounded: list[Bounded] = []  # each plan's bounded query, prepared before the charge
        at = clock_now()  # one instant for the batch's clocks
        for sql in sqls:
            stmt = classify(sql, self.policy.limits)
            if not isinstance(stmt, Query):
                raise unsupported("a batch holds SELECT queries only", hint="send SET and SHOW on their own")
            plan = plan_query(pinned(stmt.tree, at), self.policy, self.engine.schema(), s.mechanism, stmt.options)
            if isinstance(plan, PublicQuery):
                raise unsupported("a query over public tables only needs no planning", hint="send it on its own")
            bounded.append(self._bounded(plan, None))  # an engine's refusal comes before the charge
            plans.append(plan)
            deadline.check()
        mechanisms = [m for p, w in zip(plans, weights)
                      for m in planned_mechanisms(p, s.mechanism, p.literal_domain_size(), w)]
        multiplier = pld_multiplier(mechanisms, eps, dlt)
        cost = batch_cost(eps, dlt, multiplier, len(mechanisms))
        cals = [calibrate_planned(p, s.mechanism, multiplier, p.literal_domain_size(), w) for p, w in zip(plans, weights)]
        detail = {"batch": len(sqls), "noise_multiplier": multiplier,
                  "queries": [_detail(p, c) for p, c in zip(plans, cals)]}
        self._headroom = None  # _overlapping judges by the session's latest charge
        charge = self.ledger.charge(self.user.name, self.budget_policy, cost, "\n;\n".join(sqls), detail,
                                    self.global_budget)
        results = [self._answer(p, q, c, charge, d) for p, q, c, d in zip(plans, bounded, cals, detail["queries"])]
        self.ledger.record_release(charge.id, [r.rows for r in results])
        for r in results:
            r.dp["batch"] = len(results)  # each carries the batch's one charge
        return results

    def _cache_key(self, tree: exp.Query, options: QueryOptions) -> str:
        settings = {k: v for k, v in self._dp_settings().items() if k not in _ANSWER_NEUTRAL}
        text = json.dumps([tree.sql(dialect="postgres", normalize=True), settings, self.engine.data_version(),
                           repr(options), self._shaping])
        return hashlib.sha256(text.encode()).hexdigest()

    def _receipted(self, cached: dict[str, Any]) -> bool:
        """A cached answer goes out again only with the receipt of its recorded charge; one
        without (or with a forged one) is not an answer: the query runs and is charged anew."""
        try:
            guard.check_cached(cached, lambda charge_id: self.ledger.release_recorded(self.user.name, charge_id))
        except guard.ReleaseRefused:
            log.warning("a cached answer without a valid receipt was ignored")
            return False
        return True

    def _from_cache(self, cached: dict[str, Any]) -> Result:
        rows = [tuple(r) for r in cached["rows"]]
        dp = dict(cached["dp"])
        f, totals = self.ledger.state(self.user.name, self.budget_policy)
        dp["cost"] = {"epsilon": 0.0, "delta": 0.0}
        dp["remaining"] = {k: float(v) for k, v in f.remaining(totals).items()}
        dp["cached"] = True
        dp["ci"] = {k: (None if v is None else [None if x is None else tuple(x) for x in v]) for k, v in dp["ci"].items()}
        return Result(cached["names"], cached["types"], rows, f"SELECT {len(rows)}", dp)

    # EXPLAIN -------------------------------------------------------------------------------
    def explain_plan(self, tree: exp.Query, options: QueryOptions | None = None) -> dict[str, Any]:
        plan, cal = self._prepare(pinned(tree, clock_now()), options)
        if isinstance(plan, PublicQuery):
            return {"public": True, "sql": self.engine.prepare(plan.tree)}
        s = self.settings
        f, totals = self.ledger.state(self.user.name, self.budget_policy)
        after = totals.plus(f.usage(cal.cost))
        mechanisms = []
        scaled_up = 1 / plan.sample_rate if plan.sample_rate else 1.0  # TABLESAMPLE's estimates are divided by the rate
        for m, mn in zip(plan.measures, cal.measures):
            unit = m.unit_scale * scaled_up
            mechanisms.append({
                "measure": m.describe(), "noise": mn.noise.kind, "l1_sensitivity": None if mn.l1 is None else mn.l1 * unit,
                "l2_sensitivity": math.sqrt(mn.l2_squared) * unit, "scale": mn.noise.scale * unit,
                "half_width": mn.noise.half_width(s.confidence) * unit,
                "epsilon": None if mn.epsilon is None else float(mn.epsilon),
                "rho": None if mn.rho is None else float(mn.rho)})
        return {
            "public": False,
            "sql": _pretty(self.bounded_sql(plan), self.engine.dialect),
            "sample_rate": plan.sample_rate,
            "ratios": [e.text for e in plan.estimates if family(e).centred_sum],
            "max_groups_per_unit": cal.groups_per_unit, "max_rows_per_group": plan.max_rows,
            "max_rows_per_unit": plan.total_rows if plan.total_bound else None,
            "groups": self._domain(plan).row_count if plan.keys and plan.declared else None,
            "narrowed_by": list(narrowing(plan).used),
            **self._auto_explained(plan, cal, options or QueryOptions()),
            "mechanisms": mechanisms,
            "selection": None if cal.selection is None else {
                "threshold": cal.selection.threshold, "scale": cal.selection.noise.scale,
                "epsilon": float(cal.selection.epsilon), "delta": float(cal.selection.delta)},
            "confidence": s.confidence,
            "target_error": None if options and options.epsilon is not None else s.target_error,
            "cost": cal.cost.as_dict(),
            "admitted": f.admits(after),
            "admits_more": self._admits_more(f, totals, cal.cost),
            "filter": f.name,
            "remaining_after": {k: float(v) for k, v in f.remaining(after).items()},
            "remaining_now": {k: float(v) for k, v in f.remaining(totals).items()},
        }

    def _admits_more(self, f: Filter, totals: Totals, cost: Cost) -> int:
        """How many more queries of this cost the budget admits now (this window's filter, and
        the lifetime cap if there is one): an estimate for dashboards, charged nothing."""
        return admits_more(self.ledger, self.user.name, self.budget_policy, f, totals, cost)

    def _explain(self, tree: exp.Query, options: QueryOptions | None = None) -> Result:
        info = self.explain_plan(tree, options)
        dp = None if info["public"] else {"cost": info["cost"], "remaining": info["remaining_after"], "explain": True,
                                          "admits_more": info["admits_more"], "admitted": info["admitted"],
                                          "remaining_now": info["remaining_now"]}
        lines = explain_lines(info) + (synopsis_route.explain(self, tree, options) if not info["public"] else [])
        return Result(["QUERY PLAN"], ["VARCHAR"], [(line,) for line in lines], "EXPLAIN", dp)

    def close(self) -> None:
        owns_engine, owns_ledger = self._owns
        if owns_ledger:
            self.ledger.close()
        if owns_engine:
            self.engine.close()


@contextlib.contextmanager
def _no_internals(what: str) -> Iterator[None]:
    """Only dpsql's own errors leave a session: a tree too deep for a recursive pass becomes a
    54001 refusal, and a bug an InternalError whose text carries no traceback and no value (the
    operator's log has the traceback, without row data)."""
    try:
        yield
    except Error:
        raise
    except RecursionError:  # a shape the limits let through that a recursive pass cannot walk
        raise ProgrammingError("the statement nests too deeply to plan", sqlstate="54001",
                               hint="simplify the statement, or lower max_expression_depth in the policy's "
                                    "[limits] section; nothing was released") from None
    except Exception as e:
        log.exception("internal error while answering %s", what)
        raise InternalError(f"internal error while answering {what}; nothing was released",
                            hint=f"please report it ({type(e).__name__})") from e


STOP_TRIES = 10_000  # interrupts, a millisecond apart, of a query stopped by a refused charge


class _Stopper:
    """What a refused (or unrecordable) charge does, from the ledger's writer thread, to the
    query this thread started meanwhile: `stop` keeps it from starting, and interrupts end it,
    so the refusal comes when the ledger decides, whatever the query would have taken. An
    interrupt that reaches DuckDB just before the query begins is lost, so they are repeated
    on a thread of their own until the engine call has returned (`ended`), at most STOP_TRIES
    times; the writer thread never waits for them."""

    def __init__(self, engine: Any):
        self.engine, self.ident = engine, threading.get_ident()
        self.stop, self.ended = threading.Event(), threading.Event()

    def __call__(self) -> None:
        self.stop.set()
        threading.Thread(target=self._interrupt, name="dpsql-stop", daemon=True).start()

    def _interrupt(self) -> None:
        for _ in range(STOP_TRIES):
            self.engine.interrupt(self.ident)
            if self.ended.wait(0.001):
                return


@contextlib.contextmanager
def _charge_told(status: str) -> Iterator[None]:
    """An engine failure's hint, completed with what happened to the budget: the engine does
    not know whether the statement was charged."""
    try:
        yield
    except OperationalError as e:
        if e.sqlstate not in ("XX000", "42883", "57014", "53100", "53200"):  # cancelled, out of memory or disk
            raise
        raise OperationalError(e.message, sqlstate=e.sqlstate, hint=f"{e.hint}; {status}" if e.hint else status) from None


def _answer_shaping(policy: Policy) -> str:
    """What of the policy shapes an answer (each table's unit, limits, bounds, keys and types,
    the join limit), as text the same in every process: a cached answer computed under other
    bounds or limits is not served after the policy changes. Where a table's files live is not
    part of it (the data version is)."""
    tables = [(t.name, t.public, t.privacy_unit, t.max_groups, t.max_rows, t.max_contributions,
               [repr(c) for c in t.columns.values()]) for t in policy.tables.values()]
    return hashlib.sha256(repr((tables, policy.limits.max_join_rows)).encode()).hexdigest()


def _corrected(plan: Plan, correction: auto_bounds.Correction, noisy: NoisyTable) -> None:
    """Counts and sums scaled by the correction of truncation, in place (post-processing)."""
    for i, est in enumerate(plan.estimates):
        if est.func in auto_bounds.CORRECTED + ("units",):
            noisy.estimates[i], noisy.intervals[i] = auto_bounds.scaled(
                noisy.estimates[i], noisy.intervals[i], correction, noisy.estimate_types[i] == "BIGINT")


def _shares(cost: Cost) -> list[tuple]:
    """What a cost charges, part by part (not the noise multipliers it reports, which are rounded)."""
    return [(p.kind, p.epsilon, p.delta, p.rho, p.count) for p in cost.parts]


def _detail(plan: Plan, cal: Calibration) -> dict[str, Any]:
    """Noise of each measure, in the value's units, for the audit log and cursor.dp."""
    return {"mechanisms": [{"measure": m.describe(), "kind": mn.noise.kind, "scale": mn.noise.scale * m.unit_scale}
                           for m, mn in zip(plan.measures, cal.measures)],
            "selection_threshold": cal.selection.threshold if cal.selection else None}


def _precomputed(table: TablePolicy) -> dict[str, Measure]:
    """What a weighted copy holds ready-weighted, per bounded column at its declared bounds: its
    SUM (centre 0, clipped by its own norm), its AVG/STDDEV sum (centred), its STDDEV sum of
    squares and its non-NULL count; a query that clamps tighter or sums an expression computes
    its own per row."""
    out = {}
    for col in table.columns.values():
        if col.bounded and col.dates is None:
            lo, hi = float(col.lower), float(col.upper)
            column = exp.column(col.name)
            out[f"__dpsql_ws_{col.name}_0"] = sum_measure(column, lo, hi, 0.0, own_norm=True)
            out[f"__dpsql_ws_{col.name}_c"] = sum_measure(column, lo, hi, (lo + hi) / 2)
            out[f"__dpsql_ws_{col.name}_q"] = squares_measure(column, lo, hi)
            out[f"__dpsql_wn_{col.name}"] = Count(column, bits=COUNT_BITS)
    return out


@dataclass(frozen=True)
class LocalRelease:
    """A randomized-response release: its spec, its rows (category indexes, or OUE bit tuples),
    the charge's receipt and what is left of the budget."""

    spec: local.LocalSpec
    rows: list
    receipt: int
    remaining: dict[str, float]

    def estimates(self, confidence: float = 0.95) -> list[dict[str, Any]]:
        return local.estimates(self.rows, self.spec, confidence)

    def records(self) -> list[tuple]:
        """The rows as the released table holds them: the category's values (k-RR), or one
        boolean per category (OUE)."""
        if self.spec.method == "krr":
            return [self.spec.categories[i] for i in self.rows]
        return [tuple(r) for r in self.rows]

    def column_names(self) -> list[str]:
        if self.spec.method == "krr":
            return list(self.spec.columns)
        return ["=".join(str(v) for v in c) if c[0] is not None else "null" for c in self.spec.categories]


def default_settings(policy: Policy, user: UserPolicy) -> Settings:
    """A new session's settings for `user`: the policy's defaults (what SET ... TO DEFAULT restores)."""
    p = policy.privacy
    pairs = user.budget.filter in PAIR_FILTERS and (
        p.global_budget is None or p.global_budget.filter in PAIR_FILTERS)
    return Settings(epsilon=p.query_epsilon, delta=p.default_query_delta, mechanism=p.mechanism,
                    confidence=p.confidence, exact_curve=pairs, bounds=p.bounds)


def admits_more(ledger: Ledger, who: str, budget: BudgetPolicy, f: Filter, totals: Totals, cost: Cost) -> int:
    """How many more releases of this cost the filter `f` (at `totals`) admits, and the budget's
    lifetime cap if it has one: an estimate for dashboards, charged nothing."""
    n = simulate(f, cost, limit=10**6, start=totals)
    life = ledger.lifetime(who, budget)
    return n if life is None else min(n, simulate(life[0], cost, limit=10**6, start=life[1]))


def budget_summary(policy: Policy, ledger: Ledger, user: str, detail: bool = True) -> dict[str, Any]:
    """An analyst's budget in force: totals, spending and what is left, as exact rationals, and
    (`detail`) the filter's own account of it in words, which SHOW dpsql.budget does not need."""
    u = policy.user(user)
    f, totals = ledger.state(u.name, u.budget)
    left = f.remaining(totals)
    out: dict[str, Any] = {"user": u.name, "filter": f.name,
                           "epsilon": {"total": f.epsilon, "spent": totals.epsilon, "remaining": left["epsilon"]},
                           "delta": {"total": f.delta, "spent": totals.delta, "remaining": left["delta"]},
                           "queries": totals.queries, "detail": f.describe(totals) if detail else ""}
    window = window_of(u.budget, ledger.now()) if u.budget.window is not None else None
    if window is not None:
        out["window"] = {"seconds": u.budget.window, "refreshes": _utc(window[2])}
        out["detail"] += f"; this window refreshes at {_utc(window[2])}" if detail else ""
    life = ledger.lifetime(u.name, u.budget)
    if life is not None:
        lf, lt = life
        out["lifetime"] = {"epsilon": {"total": lf.epsilon, "spent": lt.epsilon, "remaining": lf.remaining(lt)["epsilon"]},
                           "delta": {"total": lf.delta, "spent": lt.delta}}
        out["detail"] += f"; lifetime cap: {lf.describe(lt)} (never refreshes)" if detail else ""
    return out


def _null_by_construction(expr: exp.Expression) -> bool:
    """A key expression written to yield NULL for some rows (a NULL branch, NULLIF, a CASE
    without ELSE): PostgreSQL would show a NULL group, which a declared domain leaves out."""
    return any(isinstance(n, (exp.Null, exp.Nullif)) or isinstance(n, exp.Case) and n.args.get("default") is None
               for n in expr.walk())


def _reads_budget(tree: exp.Query) -> bool:
    if not isinstance(tree, exp.Select) or tree.args.get("joins") or tree.args.get("with_"):
        return False
    source = tree.args.get("from_")
    t = source.this if source is not None else None
    return (isinstance(t, exp.Table) and isinstance(t.this, exp.Identifier) and t.name.lower() == BUDGET_RELATION
            and t.db.lower() in ("", "public", "dpsql"))


def _outer(tree: exp.Select, alias: str) -> exp.Select:
    """The outer query reading the released rows as the table `alias`, and nothing else: other
    tables and subqueries are refused."""
    outer = postgres_meaning(tree)
    outer = outer.copy() if outer is tree else outer
    outer.set("from_", exp.From(this=exp.Table(this=exp.Identifier(this=alias, quoted=True))))
    outer.set("with_", None)
    for node in outer.walk():
        if isinstance(node, exp.Table) and node.name != alias:
            raise unsupported(f"the outer query may read only the inner query's rows, not {node.name}",
                              hint="join inside the inner (DP) query instead")
        if isinstance(node, (exp.Subquery, exp.Select)) and node is not outer:
            raise unsupported("subqueries in the outer query over a DP query are not supported")
    return outer


def _reads_rows(tree: exp.Select) -> bool:
    """A SELECT with no aggregate and no GROUP BY: it would return rows as they are."""
    return tree.args.get("group") is None and not any(e.find(exp.AggFunc) for e in tree.expressions)


def _text(x: float | Fraction) -> str | Fraction:
    return x if isinstance(x, Fraction) else str(x)


def _utc(at: float) -> str:
    return datetime.datetime.fromtimestamp(at, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def explain_lines(info: dict[str, Any]) -> list[str]:
    if info["public"]:
        return ["public query (no private tables): runs as written, free", info["sql"]]
    pct = f"{info['confidence'] * 100:g}%"
    lines = [f"cost: epsilon={info['cost']['epsilon']:g} delta={info['cost']['delta']:g}"
             f" ({'admitted' if info['admitted'] else 'REFUSED: over budget'}; EXPLAIN itself charges nothing)",
             f"remaining after: epsilon={info['remaining_after']['epsilon']:g} delta={info['remaining_after']['delta']:g}",
             f"the budget admits {info['admits_more']} more queries like this one",
             *([f"epsilon chosen as the smallest giving COUNT and SUM a {pct} error within ±{info['target_error']:g} "
                "(dpsql.target_error)"] if info.get("target_error") else []),
             (f"contribution bounds: {info['max_rows_per_unit']} row(s) per unit in all, in any groups "
              "(a unit with more has each row scaled down)" if info.get("max_rows_per_unit") else
              f"contribution bounds: {info['max_groups_per_unit']} group(s) per unit, {info['max_rows_per_group']} row(s) per group"),
             *([f"groups: the {info['groups']} key tuple(s) of the declared domain"
                + (f" that the conditions on the keys allow ({'; '.join(info['narrowed_by'])}), evaluated over the "
                   "declared values and public tables only" if info.get("narrowed_by") else "")
                + ", each answered with noise whether or not it has rows"] if info.get("groups") is not None else []),
             *([f"limits chosen when the query runs (dpsql.bounds = auto): {info['auto_bounds']:.0%} of its epsilon "
                "profiles its rows, then a total bound on a unit's rows and clamps of summed values are chosen within "
                "the policy's limits above; the noise below is at the policy's limits (the chosen ones are shown "
                "with the answer); SET dpsql.bounds = policy to keep them"] if info.get("auto_bounds") else []),
             *([f"counts corrected for truncation (dpsql.bounds = auto): {info['auto_correction']:.0%} of its epsilon "
                "counts the rows (or groups) a unit's limits keep and those they cut, and the counts are scaled by "
                "(kept + cut) / kept; the release gets the rest"] if info.get("auto_correction") else [])]
    for m in info["mechanisms"]:
        share = (f"epsilon {m['epsilon']:.6g}" if m["epsilon"] is not None
                 else f"rho {m['rho']:.6g}" if m["rho"] is not None else "PLD-planned")
        lines.append(f"{m['measure']}: {share}, {m['noise']} noise, scale {m['scale']:.6g}, "
                     f"L1 sensitivity {m['l1_sensitivity']:.6g}, {pct} error within ±{m['half_width']:.6g}")
    if info.get("auto_bounds") or info.get("auto_correction"):
        lines.append(f"dpsql.bounds = auto: the release gets {1 / info['auto_release']:.0%} of the epsilon, at limits "
                     f"no looser than these, so each noise above is at most {info['auto_release']:.4g} times as "
                     "large (scale and interval), plus what the chosen limits cut; the limits, and any correction, "
                     "come with the answer")
    if info.get("ratios"):
        lines.append(f"{', '.join(sorted(set(info['ratios'])))}: a ratio of the noisy totals above to the noisy count, "
                     "so its error shrinks as its group grows (about ±(total error + |value| × count error) / count)")
    if info.get("sample_rate"):
        lines.append(f"TABLESAMPLE: estimates are divided by the rate {info['sample_rate']:g}, and so is the noise "
                     "above; the sample's own error comes on top (the answer's intervals include both)")
    if info["selection"]:
        sel = info["selection"]
        lines.append(f"partition selection: a group is shown when its noisy unit count (laplace scale {sel['scale']:.6g}) "
                     f"reaches {sel['threshold']}; epsilon={sel['epsilon']:g} delta={sel['delta']:g}")
    lines.append("rewritten query:")
    lines.extend(info["sql"].splitlines())
    return lines


def _released_groups(plan: Plan, bounded: Bounded, rs: ResultSet) -> ResultSet:
    """The bounded result as it is noised: over declared keys, exactly the domain's groups."""
    return rs if bounded.domain is None else with_empty_groups(rs, len(plan.keys), bounded.domain)


def _pretty(sql: str, dialect: str) -> str:
    """The bounded query laid out one clause a line, for people (EXPLAIN): as the engine runs it
    when the engine's own SQL cannot be read back."""
    try:
        return sqlglot.transpile(sql, read=dialect, write=dialect, pretty=True)[0]
    except sqlglot.errors.SqlglotError:
        return sql


def public_names(tree: exp.Query, engine_names: Sequence[str]) -> list[str]:
    """PostgreSQL's column names (count, not DuckDB's count_star()) when the select list has no *."""
    items = tree.expressions if isinstance(tree, exp.Select) else []
    if len(items) != len(engine_names) or any(i.find(exp.Star) is not None and not isinstance(i, exp.Count)
                                              for i in items):
        return list(engine_names)
    return [output_name(i) for i in items]


# Parameters ---------------------------------------------------------------------------------
def bind_parameters(tree: exp.Query, params: Sequence[Any] | Mapping[str, Any] | None) -> exp.Query:
    """Substitute %s / %(name)s / $n placeholders with literals in the parsed tree (never by
    splicing text, so a parameter can never become SQL)."""
    holders = [n for n in tree.walk() if isinstance(n, (exp.Placeholder, exp.Parameter))]
    if not holders:
        if params:
            raise ProgrammingError("parameters were given but the query has no placeholders", sqlstate="08P01")
        return tree
    if params is None:
        raise ProgrammingError("the query has placeholders but no parameters were given", sqlstate="08P01")
    tree = tree.copy()
    holders = [n for n in tree.walk() if isinstance(n, (exp.Placeholder, exp.Parameter))]
    position = 0
    for node in holders:
        if isinstance(node, exp.Parameter):
            index = int(node.this.this) - 1 if isinstance(node.this, exp.Literal) else -1
            value = _param(params, index)
        elif node.this:
            if not isinstance(params, Mapping):
                raise ProgrammingError(f"named parameter %({node.name})s needs a mapping of parameters", sqlstate="08P01")
            if node.name not in params:
                raise ProgrammingError(f"no value for parameter {node.name!r}", sqlstate="08P01")
            value = params[node.name]
        else:
            value = _param(params, position)
            position += 1
        node.replace(to_literal(value))
    return array_comparisons(tree)


def _null_parameters(tree: exp.Query) -> dict[str, None] | list[None]:
    holders = [n for n in tree.walk() if isinstance(n, (exp.Placeholder, exp.Parameter))]
    named = [n.name for n in holders if isinstance(n, exp.Placeholder) and n.this]
    if named:
        return {name: None for name in named}
    count = max([int(n.this.this) for n in holders if isinstance(n, exp.Parameter)] + [len(holders)])
    return [None] * count


def _param(params, index: int) -> Any:
    if isinstance(params, Mapping) or not 0 <= index < len(params):
        raise ProgrammingError(f"no value for parameter {index + 1}", sqlstate="08P01")
    return params[index]


def to_literal(value: Any) -> exp.Expression:
    if value is None:
        return exp.Null()
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, int):
        return exp.Literal.number(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return exp.Cast(this=exp.Literal.string(repr(value)), to=exp.DataType.build("DOUBLE"))
        return exp.Literal.number(repr(value))
    if isinstance(value, decimal.Decimal):
        return exp.Literal.number(str(value))
    if isinstance(value, datetime.datetime):
        return exp.Cast(this=exp.Literal.string(value.isoformat(sep=" ")), to=exp.DataType.build("TIMESTAMP"))
    if isinstance(value, datetime.date):
        return exp.Cast(this=exp.Literal.string(value.isoformat()), to=exp.DataType.build("DATE"))
    if isinstance(value, str):
        return exp.Literal.string(value)
    raise ProgrammingError(f"cannot use a {type(value).__name__} as a query parameter", sqlstate="22023")


# Small helpers ------------------------------------------------------------------------------
def _plain(v: Any) -> Any:
    if isinstance(v, decimal.Decimal):
        return float(v)
    return v


def _to_cache(result: Result) -> dict[str, Any]:
    return {"names": result.names, "types": result.types, "rows": [list(r) for r in result.rows], "dp": result.dp}


def _boolean(value: str, name: str) -> bool:
    v = value.strip().lower()
    if v in ("on", "true", "1", "yes"):
        return True
    if v in ("off", "false", "0", "no"):
        return False
    raise invalid_parameter(f"invalid value for {name}: {value!r}", hint="use on or off")


def _unknown_setting(name: str) -> ProgrammingError:
    return ProgrammingError(f'unrecognized configuration parameter "{name}"', sqlstate="42704",
                            hint=f"dpsql settings: {', '.join(DP_SETTINGS)}; SHOW dpsql.budget shows your remaining "
                                 "budget")

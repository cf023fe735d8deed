"""Routing: whether a query is a function of a published synopsis the analyst may read, and
then its answer, free.

Decided from the query text, the policy and the synopsis's public metadata only (its
dimensions and their values, its data version): never from the data. A query is answered from
a synopsis when, planned as any DP query is, it reads the synopsis's tables (its own, and those
its dimensions are joined from, each once, inner-joined on the privacy unit; no sample) and
- every GROUP BY key is one of its dimensions, written as the synopsis's own bucket expression
  for a bucketed one (e.g. FLOOR(age / 10) * 10);
- every WHERE term is `dim = v`, `dim IN (...)`, `dim <> v` on a dimension, or a comparison of
  a bucketed column with a bucket-aligned bound (age >= 30 AND age < 50);
- every aggregate is COUNT(*), SUM(col) or AVG(col) of its measures at the policy's bounds;
and anything over them (ORDER BY, LIMIT, HAVING, arithmetic, DP_INTERVAL_LOW/HIGH, a BI tool's
wrapper) is post-processing, as for any answer. Everything else goes the per-query way.

Every answer sums cells of the synopsis's one consistent cube (integers), so totals and their
breakdowns agree exactly. Intervals come from the least-squares estimator's exact variance
(axes.variance, for the cells the answer sums) at the session's confidence: the wider of a Laplace and a normal interval
of that variance (_half; the non-negativity step is not accounted, see reconstruct.py;
coverage is tested by simulation). AVG(col) is SUM(col) / COUNT(*): rows whose col is NULL are in its
denominator (equal to SQL's AVG when col has no NULLs).
"""

from __future__ import annotations

import datetime
import math
from collections import OrderedDict
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np
from sqlglot import exp

from ..answer_record import Amount, AnswerRecord, frozen_ci
from ..errors import Error
from ..guarantee.families import family
from ..guarantee.measures import Count, Sum
from ..guarantee.plan import Plan
from ..guarantee.release import NoisyTable, key_order
from ..prepare import plan_query
from ..sql.scope import conjuncts
from . import axes as ax
from . import store
from .axes import Axis, flat
from .publish import cube_plan, decode
from .reconstruct import from_masks

DECISIONS = 512  # query texts whose route each process remembers


@dataclass(frozen=True)
class Route:
    """A query answerable from synopsis `name`: per plan key, its dimension; per dimension, the
    selected value indexes (None: all); per estimate, (func, measure names)."""

    name: str
    data_version: str
    dims: tuple[int, ...]
    selection: tuple[tuple[int, ...] | None, ...]
    estimates: tuple[tuple[str, str], ...]


_decisions: OrderedDict[tuple, Route | None] = OrderedDict()
_key_sql: dict[tuple, dict[str, int]] = {}


def candidates(session, tree: exp.Expression, kept: bool = False) -> list[store.Stored]:
    """Published, current synopses over a table the query reads, that this analyst may read.
    `kept`: the tree is a statement's the session keeps parsed (asked again at every execution
    of its text), whose tables are walked once."""
    synopses = session.policy.synopses
    if not synopses or not isinstance(tree, exp.Select):
        return []
    tables = session._plans.derived(tree, "tables", lambda: _read_tables(tree)) if kept else _read_tables(tree)
    specs = [s for s in synopses.values() if {s.table, *s.joined} <= tables]
    if not specs:
        return []
    version = session.engine.data_version()
    out = []
    for spec in specs:
        stored = store.current(session.ledger, spec.name, version)
        if stored is not None and session.user.name in stored.body["readers"]:
            out.append(stored)
    return out


def _read_tables(tree: exp.Expression) -> frozenset[str]:
    return frozenset(t.name.lower() for t in tree.find_all(exp.Table))


def answer(session, stmt, tree: exp.Expression) -> Answer | None:
    """The query's answer from a synopsis, or None: the per-query way."""
    found = candidates(session, tree, kept=tree is stmt.tree)
    if not found:
        return None
    route = decide(session, stmt, tree, found)
    if route is None:
        return None
    stored = next(s for s in found if s.name == route.name)
    plan = _plan(session, stmt, tree)
    return result_from(session, plan, stored, route)


def decide(session, stmt, tree: exp.Expression, found: list[store.Stored]) -> Route | None:
    key = (
        session.user.name,
        tree.sql(dialect="postgres"),
        repr(stmt.options),
        session.settings.mechanism,
        tuple((s.name, s.data_version, s.charge_id) for s in found),
    )
    if key in _decisions:
        _decisions.move_to_end(key)
        return _decisions[key]
    plan = _plan(session, stmt, tree)
    route = None
    if plan is not None:
        for stored in found:
            route = match(session.policy, session.engine.schema(), plan, stored)
            if route is not None:
                break
    _decisions[key] = route
    if len(_decisions) > DECISIONS:
        _decisions.popitem(last=False)
    return route


def _plan(session, stmt, tree: exp.Expression) -> Plan | None:
    try:
        plan = plan_query(
            tree.copy(), session.policy, session.engine.schema(), session.settings.mechanism, stmt.options
        )
    except Error:
        return None  # refused or not a DP aggregate: the per-query way says why
    return plan if isinstance(plan, Plan) else None


def _tables(plan: Plan) -> dict[str, str]:
    """Each source's alias in the plan -> its table's name."""
    return {s.alias: s.table.name for s in plan.relation.sources}


def _canonical(e: exp.Expression, tables: dict[str, str]) -> str:
    """An expression's SQL with each column qualified by its table's name (not the alias)."""
    return e.transform(
        lambda n: exp.column(n.name, table=tables.get(n.table, n.table)) if isinstance(n, exp.Column) else n
    ).sql(dialect="duckdb")


def _dimension_keys(policy, schema, stored: store.Stored) -> dict[str, int]:
    """Each dimension's GROUP BY expression as a planned key (canonical SQL) -> its index."""
    cache = (stored.name, stored.data_version, stored.charge_id)
    hit = _key_sql.get(cache)
    if hit is None:
        plan = cube_plan(policy.synopses[stored.name], policy, schema)
        hit = {_canonical(k.expr, _tables(plan)): i for i, k in enumerate(plan.keys)}
        _key_sql[cache] = hit
    return hit


def _joined_as_the_cube(plan: Plan, spec) -> bool:
    """The query reads the synopsis's table and each table its dimensions are joined from, once
    each, as base tables, inner-joined (the planner has checked the joins are on the privacy
    unit and bounded them as the cube's: the same tables, the same max_join_rows)."""
    rel = plan.relation
    names = [s.table.name for s in rel.sources]
    return (
        sorted(names) == sorted([spec.table, *spec.joined])
        and all(s.derived is None for s in rel.sources)
        and all(j.kind == "inner" for j in rel.joins)
        and len(rel.joins) == len(spec.joined)
    )


def _unit_equality(term: exp.Expression, plan: Plan) -> bool:
    """Whether a term is `a.unit = b.unit` between two sources (the join through the unit)."""
    if not isinstance(term, exp.EQ) or not all(isinstance(x, exp.Column) for x in (term.this, term.expression)):
        return False
    units = {(s.alias, s.table.privacy_unit) for s in plan.relation.sources}
    a, b = term.this, term.expression
    return a.table != b.table and (a.table, a.name) in units and (b.table, b.name) in units


def match(policy, schema, plan: Plan, stored: store.Stored) -> Route | None:
    """The route of `plan` through `stored`, or None when its answer is not a function of it."""
    body = stored.body
    spec = policy.synopses.get(stored.name)
    rel = plan.relation
    if spec is None or plan.sample_rate is not None or not _joined_as_the_cube(plan, spec):
        return None
    keys = _dimension_keys(policy, schema, stored)
    tables = _tables(plan)
    dims = []
    for k in plan.keys:
        i = keys.get(_canonical(k.expr, tables))
        if i is None or i in dims:
            return None
        dims.append(i)
    selection: list[set[int] | None] = [None] * len(body["dimensions"])
    unit = plan.unit.sql() if plan.unit is not None else None
    for cond in list(rel.where) + [j.on for j in rel.joins]:
        for term in conjuncts(cond):
            if (
                (
                    unit is not None
                    and term.sql() == exp.Not(this=exp.Is(this=plan.unit.copy(), expression=exp.Null())).sql()
                )
                or (isinstance(term, exp.Boolean) and term.this)
                or _unit_equality(term, plan)
            ):
                continue
            picked = _selection(term, body, keys, tables)
            if picked is None:
                return None
            i, chosen = picked
            selection[i] = chosen if selection[i] is None else selection[i] & chosen
    estimates = []
    for e in plan.estimates:
        needed = _estimate(plan, e, body, policy, tables)
        if needed is None:
            return None
        estimates.append(needed)
    return Route(
        stored.name,
        stored.data_version,
        tuple(dims),
        tuple(None if s is None else tuple(sorted(s)) for s in selection),
        tuple(estimates),
    )


def _estimate(plan: Plan, e, body: dict, policy, tables: dict[str, str]) -> tuple[str, str] | None:
    measures = {m["name"] for m in body["measures"]}
    table = policy.table(body["table"])
    if e.func == "count":
        m = plan.measures[e.count]
        every_row = m.value is None or (isinstance(m.value, exp.Literal) and not isinstance(m.value, exp.Null))
        return ("count", "count") if isinstance(m, Count) and every_row and "count" in measures else None
    if e.func in ("sum", "whole_sum", "avg"):  # whole_sum: SUM of an integer column, an integer
        m = plan.measures[e.total]
        if not isinstance(m, Sum) or not isinstance(m.value, exp.Column) or tables.get(m.value.table) != body["table"]:
            return None
        col = table.columns.get(m.value.name.lower())
        name = f"sum({m.value.name.lower()})"
        if col is None or name not in measures or (m.lower, m.upper) != (col.lower, col.upper):
            return None  # another clamp than the policy's bounds, which the synopsis measured
        if e.func == "avg" and "count" not in measures:
            return None
        return (e.func, name)
    return None


def _literal(e: exp.Expression) -> tuple[bool, Any]:
    """(True, value) of a literal the query compares with, else (False, None)."""
    if isinstance(e, exp.Boolean):
        return True, bool(e.this)
    if isinstance(e, exp.Literal):
        if e.is_string:
            return True, e.this
        try:
            return True, int(e.this)
        except ValueError:
            return True, float(e.this)
    if isinstance(e, exp.Neg):
        ok, v = _literal(e.this)
        return (ok and isinstance(v, (int, float)) and not isinstance(v, bool)), (-v if ok else None)
    if isinstance(e, exp.Cast) and isinstance(e.this, exp.Literal) and e.this.is_string:
        to = e.to.this
        try:
            if to == exp.DataType.Type.DATE:
                return True, datetime.date.fromisoformat(e.this.this)
        except ValueError:
            return False, None
    return False, None


def _same(a: Any, b: Any) -> bool:
    """Whether a literal and a dimension value are the same key (types apart: 1 is not '1')."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and a == b


_FLIP = {exp.GT: exp.LT, exp.GTE: exp.LTE, exp.LT: exp.GT, exp.LTE: exp.GTE, exp.EQ: exp.EQ, exp.NEQ: exp.NEQ}


def _selection(
    term: exp.Expression, body: dict, keys: dict[str, int], tables: dict[str, str]
) -> tuple[int, set[int]] | None:
    """(dimension, value indexes) that a WHERE term keeps, or None when it is not a selection
    of whole cells of one dimension."""
    dims = body["dimensions"]
    if isinstance(term, exp.Paren):
        return _selection(term.this, body, keys, tables)
    if isinstance(term, exp.In) and not term.args.get("query"):
        i = _dimension_of(term.this, body, keys, tables, exact=True)
        if i is None:
            return None
        literals = [_literal(v) for v in term.expressions]
        if not all(ok for ok, _ in literals):
            return None
        values = [decode(v) for v in dims[i]["values"]]
        return i, {j for j, v in enumerate(values) if any(_same(lit, v) for _, lit in literals)}
    if isinstance(term, exp.Between):
        low = _selection(exp.GTE(this=term.this.copy(), expression=term.args["low"].copy()), body, keys, tables)
        high = _selection(exp.LTE(this=term.this.copy(), expression=term.args["high"].copy()), body, keys, tables)
        if low is None or high is None or low[0] != high[0]:
            return None
        return low[0], low[1] & high[1]
    if type(term) not in _FLIP:
        return None
    left, right, op = term.this, term.expression, type(term)
    ok, value = _literal(right)
    if not ok:
        ok, value = _literal(left)
        left, op = right, _FLIP[op]
    if not ok:
        return None
    i = _dimension_of(left, body, keys, tables, exact=True)
    if i is not None:  # the dimension's own value (a key, or a bucket expression)
        values = [decode(v) for v in dims[i]["values"]]
        if op in (exp.EQ, exp.NEQ):
            hit = {j for j, v in enumerate(values) if _same(value, v)}
            return i, hit if op is exp.EQ else set(range(len(values))) - hit
        if dims[i]["width"] is None and dims[i]["unit"] is None:
            return None
        return _aligned(i, dims[i], values, op, value, bucket_value=True)
    i = _dimension_of(left, body, keys, tables, exact=False)
    if i is None:
        return None
    values = [decode(v) for v in dims[i]["values"]]
    return _aligned(i, dims[i], values, op, value, bucket_value=False)


def _dimension_of(
    e: exp.Expression, body: dict, keys: dict[str, int], tables: dict[str, str], exact: bool
) -> int | None:
    """The dimension `e` is: its key expression (exact), or the raw column of a bucketed one."""
    if exact:
        return keys.get(_canonical(e, tables))
    if isinstance(e, exp.Column):
        for i, d in enumerate(body["dimensions"]):
            same = d["column"] == e.name.lower() and d.get("table", body["table"]) == tables.get(e.table)
            if same and (d["width"] is not None or d["unit"] is not None):
                return i
    return None


def _bucket(d: dict, v: Any) -> tuple[Any, Any]:
    """A bucket's first and last value: buckets of integer columns hold whole numbers, and
    buckets of dates whole days."""
    if d["width"] is not None:
        return math.ceil(v), math.ceil(v + d["width"]) - 1
    day = v.date() if isinstance(v, datetime.datetime) else v
    if d["unit"] == "year":
        return day, datetime.date(day.year, 12, 31)
    following = datetime.date(day.year + (day.month == 12), day.month % 12 + 1, 1)
    return day, following - datetime.timedelta(days=1)


_TESTS = {
    exp.GT: lambda x, b: x > b,
    exp.GTE: lambda x, b: x >= b,
    exp.LT: lambda x, b: x < b,
    exp.LTE: lambda x, b: x <= b,
    exp.EQ: lambda x, b: x == b,
    exp.NEQ: lambda x, b: x != b,
}


def _aligned(i: int, d: dict, values: list, op, bound: Any, bucket_value: bool) -> tuple[int, set[int]] | None:
    """Buckets kept by `op bound` on the bucket's value (bucket_value), or on the raw column
    when the bound cuts no bucket (else None): a comparison is monotone, so it keeps a whole
    bucket when it agrees at the bucket's first and last value."""
    if d["unit"] is not None:
        if isinstance(bound, str):
            try:
                bound = datetime.date.fromisoformat(bound)
            except ValueError:
                return None
        if not isinstance(bound, datetime.date) or isinstance(bound, datetime.datetime):
            return None
    elif isinstance(bound, bool) or not isinstance(bound, (int, float)):
        return None
    test = _TESTS[op]
    keep = set()
    for j, v in enumerate(values):
        first, last = _bucket(d, v)
        if bucket_value:
            if test(first if d["unit"] is not None else v, bound):
                keep.add(j)
            continue
        if op in (exp.EQ, exp.NEQ) or test(first, bound) != test(last, bound):
            return None
        if test(first, bound):
            keep.add(j)
    return i, keep


@dataclass(frozen=True)
class Answer:
    """What the session returns for a query answered from a synopsis."""

    names: list[str]
    types: list[str]
    rows: list[tuple]
    dp: AnswerRecord


def result_from(session, plan: Plan, stored: store.Stored, route: Route) -> Answer:
    """The query's answer from the synopsis's cube, through the query's own post-processing."""
    body = stored.body
    sizes = tuple(body["sizes"])
    values = [[decode(v) for v in d["values"]] for d in body["dimensions"]]
    cubes = {m["name"]: np.array(m["cube"]).reshape(sizes) for m in body["measures"]}
    axes, eigen = estimator(body)
    index = [np.arange(n) if s is None else np.array(s, dtype=int) for n, s in zip(sizes, route.selection)]
    grouped = list(route.dims)
    queries = _queries(axes, grouped, index)

    def reduced(name: str) -> np.ndarray:
        sub = cubes[name][np.ix_(*index)]
        summed = sub.sum(axis=tuple(i for i in range(len(sizes)) if i not in grouped))
        # the remaining axes are in dimension order; put them in the query's key order
        order = sorted(grouped)
        return np.transpose(summed, [order.index(i) for i in grouped]) if grouped else summed

    confidence = session.settings.confidence
    cells = [list(idx) for idx in np.ndindex(*[len(index[i]) for i in grouped])] if grouped else [[]]
    rows = [tuple(values[i][index[i][j]] for i, j in zip(grouped, c)) for c in cells]
    order = sorted(range(len(rows)), key=lambda r: key_order(rows[r]))
    arrays = {name: reduced(name) for name in cubes}
    estimates, intervals, types = [], [], []
    for e, (func, name) in zip(plan.estimates, route.estimates):
        if func == "avg":
            s_, c_ = arrays[name], arrays["count"]
            vs, vc = ax.variance(eigen[name], axes, queries), ax.variance(eigen["count"], axes, queries)
        vals, cis = [], []
        for r in order:
            at = tuple(cells[r])
            if func == "avg":
                s, c = float(s_[at]), float(c_[at])
                v = s / c if c > 0 else None
                half = None if v is None else _half(math.sqrt(vs + v * v * vc) / c, confidence)
            else:
                v = float(arrays[name][at])
                v = int(round(v)) if func in ("count", "whole_sum") else v
                half = _half(math.sqrt(ax.variance(eigen[name], axes, queries)), confidence)
            vals.append(v)
            cis.append((math.nan, math.nan) if v is None else (v - half, v + half))
        estimates.append(vals)
        intervals.append(cis)
        types.append(family(e).result_type)
    keys = [[rows[r][j] for r in order] for j in range(len(grouped))]
    key_types = [_type_of(values[i][0]) for i in grouped]
    noisy = NoisyTable(keys, key_types, estimates, intervals, types)
    out = session._post.run(plan.post, noisy)
    f, totals = session.ledger.state(session.user.name, session.budget_policy)
    published = datetime.datetime.fromtimestamp(stored.at, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    dp = AnswerRecord(
        cost=Amount(0.0, 0.0),
        remaining=Amount.of(f.remaining(totals)),
        ci=frozen_ci(out.ci),
        confidence=confidence,
        mechanism="synopsis",
        cached=False,
        synopsis=route.name,
        receipt=stored.charge_id,
        notice=f"answered from synopsis {route.name} (published {published}), free",
    )
    return Answer(out.names, out.types, [tuple(r) for r in out.rows], dp)


def estimator(body: dict) -> tuple[tuple[Axis, ...], dict[str, np.ndarray]]:
    """A published synopsis's axes and each measure's eigenvalues over their levels (a body
    published before hierarchies: plain axes, eigenvalues by subspace mask)."""
    sizes = tuple(body["sizes"])
    if "axes" not in body:
        axes = tuple(flat(n) for n in sizes)
        return axes, {m["name"]: from_masks(np.array(m["eigen"]), len(sizes)) for m in body["measures"]}
    axes = tuple(Axis(tuple(b)) for b in body["axes"])
    shape = tuple(a.top + 1 for a in axes)
    return axes, {m["name"]: np.array(m["eigen"]).reshape(shape) for m in body["measures"]}


def _queries(axes: tuple[Axis, ...], grouped: list[int], index) -> list[np.ndarray]:
    """Per dimension, the cells one answered group sums: one cell of a grouped dimension (every
    cell's variance is the same), the selected cells of the others."""
    return [ax.picks(a, [0]) if i in grouped else ax.picks(a, index[i]) for i, a in enumerate(axes)]


def _half(std: float, confidence: float) -> float:
    """The half-width of an interval for an estimate with this standard deviation: the larger of
    a Laplace's (exact when one measurement determines the estimate) and a normal's (the limit
    of a combination of many). The Laplace one alone is too narrow below about 90 %: at 50 %
    it is 0.49 standard deviations against the normal's 0.67."""
    alpha = 1 - confidence
    return std * max(math.log(1 / alpha) / math.sqrt(2), NormalDist().inv_cdf(1 - alpha / 2))


def _type_of(v: Any) -> str:
    if isinstance(v, bool):
        return "BOOLEAN"
    if isinstance(v, int):
        return "BIGINT"
    if isinstance(v, float):
        return "DOUBLE"
    if isinstance(v, datetime.datetime):
        return "TIMESTAMP"
    if isinstance(v, datetime.date):
        return "DATE"
    return "VARCHAR"


def explain(session, tree: exp.Expression, options) -> list[str]:
    """EXPLAIN's lines on the route: the synopsis that would answer, free, with each aggregate's
    expected error per group; or why the query goes the per-query way (whose cost and error
    the lines above give)."""
    found = candidates(session, tree)
    if not found:
        return []
    stmt = _Options(options)
    route = decide(session, stmt, tree, found)
    names = ", ".join(s.name for s in found)
    if route is None:
        return [f"route: per query (charged as above): not a function of published synopsis {names}"]
    stored = next(s for s in found if s.name == route.name)
    sizes = tuple(stored.body["sizes"])
    axes, eigen = estimator(stored.body)
    index = [range(n) if s is None else s for n, s in zip(sizes, route.selection)]
    queries = _queries(axes, list(route.dims), index)
    pct = f"{session.settings.confidence * 100:g}%"
    measured = stored.body.get("strategy")
    lines = [
        f"route: synopsis {route.name}, free (instead of the per-query cost above)"
        + (f"; it measured {measured}" if measured else "")
    ]
    for func, name in route.estimates:
        half = _half(math.sqrt(ax.variance(eigen[name], axes, queries)), session.settings.confidence)
        column = name[4:-1] if name.startswith("sum(") else "*"
        label = "COUNT(*)" if func == "count" else f"{func.upper().replace('WHOLE_', '')}({column})"
        part = f" (its SUM({column}); divided by the count)" if func == "avg" else ""
        lines.append(
            f"  {label} from the synopsis{part}: {pct} error within ±{half:.6g} per group, "
            "against the per-query error above"
        )
    return lines


@dataclass(frozen=True)
class _Options:
    options: Any

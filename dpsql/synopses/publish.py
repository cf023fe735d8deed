"""Publishing a synopsis: ONE charge, durable before the data is read; the bounded cube; Laplace
noise on each measured marginal (guarantee/mechanisms.py, OpenDP's samplers), checked by the release
guard first; least squares and non-negativity (post-processing); the result stored and its
release recorded.

Sensitivity. The cube is a GROUP BY over every dimension, planned and bounded as any query is
(the table's max_groups/max_rows, the columns' bounds): one person changes the bounded cube's
measure vector by at most its L1 sensitivity Delta (plan.bounding.l1). Every measured marginal
sums cells of that cube, which cannot increase an L1 distance, so each marginal moves by at
most Delta too, and marginal m measured at epsilon_m with Laplace scale Delta / epsilon_m is
epsilon_m-DP; together (sequential composition) the sum of the epsilon_m, which is what is
charged. Least squares, non-negativity and every answer are post-processing.
"""

from __future__ import annotations

import datetime
import time
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any

import numpy as np
import sqlglot
from sqlglot import exp

from ..errors import Error, OperationalError, ProgrammingError, unsupported
from ..guarantee import guard
from ..guarantee.mechanisms import add_noise
from ..guarantee.plan import Plan
from ..guarantee.release import key_order
from ..prepare import plan_query
from ..sql.options import QueryOptions
from ..sql.rewrite import declared_domain
from . import axes as ax
from . import budget as bud
from . import reconstruct, store
from .budget import Budget, budget_of, payers
from .spec import SynopsisSpec
from .strategy import Charts, Strategy, choose, default_charts, with_trees


@dataclass(frozen=True)
class Published:
    name: str
    charge_id: int
    epsilon: float
    data_version: str
    cells: int
    marginals: int  # measurements: marginals and hierarchies
    seconds: float
    measured: str = ""  # what was measured (Strategy.describe) and with which noise
    delta: float = 0.0


def spec_of(policy, name: str) -> SynopsisSpec:
    spec = policy.synopses.get(name.lower())
    if spec is None:
        known = ", ".join(sorted(policy.synopses)) or "none is declared"
        raise ProgrammingError(
            f'synopsis "{name}" is not declared in {policy.path}',
            sqlstate="42704",
            hint=f"declared synopses: {known}; declare one as a [synopses.NAME] section",
        )
    return spec


def dimension_sql(spec: SynopsisSpec, i: int) -> str:
    """The GROUP BY expression of dimension i (the cube's, and a query's that matches it)."""
    d = spec.dimensions[i]
    col = f'"{d.table or spec.table}"."{d.column}"'
    if d.width is not None:
        w = int(d.width) if float(d.width).is_integer() else d.width
        return f"FLOOR({col} / {w}) * {w}"
    if d.unit is not None:
        return f"DATE_TRUNC('{d.unit}', {col})"
    return col


def cube_query(spec: SynopsisSpec, policy) -> exp.Select:
    """SELECT <dimensions>, COUNT(*), SUM(col)... FROM table [JOIN other ON the privacy unit]...
    GROUP BY <dimensions>: a joined dimension's table is joined as an analyst's query would
    join it, so the planner bounds each person's rows exactly as it bounds that query's."""
    dims = [f"{dimension_sql(spec, i)} AS d{i}" for i in range(len(spec.dimensions))]
    measures = [
        ("COUNT(*)" if m.kind == "count" else f'SUM("{spec.table}"."{m.column}")') + f" AS m{j}"
        for j, m in enumerate(spec.measures)
    ]
    unit = policy.table(spec.table).privacy_unit
    joins = "".join(
        f' JOIN "{t}" ON "{spec.table}"."{unit}" = "{t}"."{policy.table(t).privacy_unit}"' for t in spec.joined
    )
    group = ", ".join(str(i + 1) for i in range(len(spec.dimensions)))
    return sqlglot.parse_one(
        f'SELECT {", ".join(dims + measures)} FROM "{spec.table}"{joins} GROUP BY {group}', read="postgres"
    )


def cube_plan(spec: SynopsisSpec, policy, schema) -> Plan:
    """The cube's plan at the policy's limits (pure: the policy and the schema)."""
    try:
        plan = plan_query(cube_query(spec, policy), policy, schema, "laplace", QueryOptions())
    except Error as e:
        raise unsupported(
            f"synopsis {spec.name}: its cube cannot be planned: {e.message}",
            hint="bucket numeric dimensions of integer columns by width and date columns by unit; "
            "give every other dimension declared keys; a joined table's rows must fit max_join_rows",
        ) from None
    if not isinstance(plan, Plan) or not plan.declared or plan.sample_rate is not None:
        raise unsupported(
            f"synopsis {spec.name}: a dimension has no declared domain",
            hint="width buckets need an integer column with bounds; dates need date bounds",
        )
    if len(plan.estimates) != len(spec.measures) or any(m.width != 1 for m in plan.measures):
        raise unsupported(f"synopsis {spec.name}: its measures do not plan as one count or sum each")
    return plan


def measure_index(plan: Plan, j: int) -> int:
    """The plan's measure that holds the synopsis's measure j."""
    e = plan.estimates[j]
    return e.count if e.func == "count" else e.total


def domain_values(engine, plan: Plan) -> list[list[Any]]:
    """Each dimension's values, as the engine lists the declared domain (public data, free)."""
    rs = engine.execute(engine.sql_of(declared_domain(plan), owned=True))
    values = []
    for col in rs.columns[: len(plan.keys)]:
        seen = list(dict.fromkeys(col))
        seen.sort(key=lambda v: key_order((v,)))
        values.append(seen)
    return values


def charts_of(spec: SynopsisSpec) -> Charts:
    """The class of charts the strategy is tuned to: the declared charts (else every chart of at
    most two dimensions), filtered on the declared filters."""
    k = len(spec.dimensions)
    groupings = (
        default_charts(k).groupings
        if spec.charts is None
        else tuple(dict.fromkeys(sum(1 << i for i in c) for c in spec.charts))
    )
    return Charts(groupings, sum(1 << i for i in spec.filters))


@lru_cache(maxsize=64)
def _strategy(sizes: tuple[int, ...], charts: Charts, bucketed: tuple[int, ...], gaussian: bool) -> Strategy:
    """The strategy for public inputs only (so it is kept: republishing does not search again)."""
    return with_trees(choose(sizes, charts, gaussian), sizes, charts, bucketed, gaussian)


def strategy_for(
    spec: SynopsisSpec, sizes: tuple[int, ...], budget: Budget, split: list[Fraction]
) -> tuple[Strategy, list[list[Fraction]]]:
    """What is measured (marginals, and hierarchies over bucketed dimensions where they lower the
    class's error) and each (measure, measurement)'s share of the budget (an epsilon, or a rho):
    the budget split among the measures by `split` (budget.measure_shares), then by the strategy
    among measurements."""
    bucketed = tuple(i for i, d in enumerate(spec.dimensions) if d.bucketed)
    strategy = _strategy(sizes, charts_of(spec), bucketed, budget.gaussian)
    return strategy, [strategy.epsilons(budget.whole * s) for s in split]


def measure_split(spec: SynopsisSpec, policy, plan: Plan, cells: int, budget: Budget) -> list[Fraction]:
    """Each measure's share of the budget (budget.measure_shares: from the plan's sensitivities
    and the policy's bounds, public)."""
    measures = [plan.measures[measure_index(plan, j)] for j in range(len(spec.measures))]
    deltas = [plan.bounding.l1(m, cells) * m.unit_scale for m in measures]
    scales = bud.relative_scales(spec, policy, deltas)
    return bud.measure_shares(scales, [m.kind for m in spec.measures], budget.gaussian)


def measurement_name(spec: SynopsisSpec, strategy: Strategy, t: int) -> str:
    """The t-th measurement's name: a marginal's dimensions ("total" for none), or a hierarchy."""
    if t < len(strategy.marginals):
        return "×".join(_names(spec, strategy.marginals[t])) or "total"
    dim, axis = strategy.trees[t - len(strategy.marginals)]
    return f"hierarchy over {spec.dimensions[dim].label} (blocks {axis.blocks[1:-1]})"


def publish(session, name: str) -> Published:
    """Publish synopsis `name` for the data as it is now (replacing one of this data version)."""
    start = time.perf_counter()
    policy, engine, ledger = session.policy, session.engine, session.ledger
    spec = spec_of(policy, name)
    plan = cube_plan(spec, policy, engine.schema())
    values = domain_values(engine, plan)
    sizes = tuple(len(v) for v in values)
    cells = int(np.prod(sizes))
    budget = budget_of(spec, policy)
    measures = [plan.measures[measure_index(plan, j)] for j in range(len(spec.measures))]
    l1 = [plan.bounding.l1(m, cells) for m in measures]
    if any(x is None for x in l1):
        raise unsupported(f"synopsis {spec.name}: a measure has no L1 sensitivity under the policy's limits")
    split = measure_split(spec, policy, plan, cells, budget)
    strategy, shares = strategy_for(spec, sizes, budget, split)
    axes = strategy.axes(sizes)
    measurements = strategy.measurements(sizes)
    l2 = [plan.bounding.l2_squared(m, cells) for m in measures]
    noises = [
        [bud.noise(budget, sh, l1[j], l2[j], lv) for lv, sh in zip(measurements, shares[j])]
        for j in range(len(spec.measures))
    ]
    session.bounded_sql(plan)  # the engine binds the bounded query before the charge: a refusal is free
    version = engine.data_version()
    cost = bud.cost(
        budget,
        [
            (sh, n, l1[j] * ax.partitions(lv))
            for j in range(len(spec.measures))
            for lv, sh, n in zip(measurements, shares[j], noises[j])
        ],
    )
    measured = f"{strategy.describe([d.label for d in spec.dimensions])}, {budget.mechanism} noise"
    who = payers(spec, policy)
    detail = {
        "synopsis": spec.name,
        "table": spec.table,
        "data_version": version,
        "dimensions": [d.describe() for d in spec.dimensions],
        "measures": [m.name for m in spec.measures],
        "marginals": [list(_names(spec, m)) for m in strategy.marginals],
        "measure_shares": {m.name: float(x) for m, x in zip(spec.measures, split)},
        "strategy": measured,
        "mechanisms": [
            {
                "measure": spec.measures[j].name,
                "marginal": measurement_name(spec, strategy, t),
                "kind": n.kind,
                ("rho" if budget.gaussian else "epsilon"): float(sh),
                "scale": n.scale,
            }
            for j in range(len(spec.measures))
            for t, (sh, n) in enumerate(zip(shares[j], noises[j]))
        ],
    }
    pending = ledger.charging(
        who[0],
        policy.user(who[0]).budget,
        cost,
        f"SYNOPSIS PUBLISH {spec.name}",
        detail,
        policy.privacy.global_budget,
        others=[(u, policy.user(u).budget) for u in who[1:]],
    )
    charge = pending.durable()
    try:
        rs = session.bounded_result(plan)
    except Error as e:
        raise OperationalError(
            f"publishing synopsis {spec.name} failed: {e.message}",
            sqlstate=e.sqlstate,
            hint="its cost stays charged, because whether a query fails can depend on the data",
        )
    draws = [
        guard.SynopsisDraw(measure_index(plan, j), sh, n, ax.partitions(lv), all(ks == (0,) for ks in lv))
        for j in range(len(spec.measures))
        for lv, sh, n in zip(measurements, shares[j], noises[j])
    ]
    guard.check_synopsis(plan, rs, charge, policy, draws, cells)
    exact = exact_cubes(plan, rs, values, sizes, len(spec.measures))
    body = {
        "name": spec.name,
        "table": spec.table,
        "data_version": version,
        "charge_id": charge.id,
        "epsilon": float(spec.epsilon),
        "mechanism": budget.mechanism,
        "charged_to": spec.charged_to,
        "readers": list(spec.readers(policy.users)),
        "sizes": list(sizes),
        "axes": [list(a.blocks) for a in axes],
        "strategy": measured,
        "published_at": time.time(),
        "dimensions": [
            {
                "column": d.column,
                "table": d.table or spec.table,
                "width": d.width,
                "unit": d.unit,
                "sql": dimension_sql(spec, i),
                "values": [encode(v) for v in values[i]],
            }
            for i, d in enumerate(spec.dimensions)
        ],
        "measures": [],
    }
    for j, m in enumerate(spec.measures):
        unit = plan.measures[measure_index(plan, j)].unit_scale
        rhs, precision = np.zeros(sizes), {}
        for levels, n in zip(measurements, noises[j]):
            w = 1.0 / (bud.variance(n) * unit * unit)
            precision[levels] = precision.get(levels, 0.0) + w
            for combo, part in ax.released(exact[j], axes, levels).items():
                flat = [int(v) for v in np.ravel(part)]
                noisy = np.array(add_noise(flat, n), dtype=float).reshape(np.shape(part)) * unit
                rhs = rhs + w * ax.spread(noisy, axes, combo)
        lam = ax.eigenvalues(precision, axes)
        cube = reconstruct.least_squares(rhs, lam, axes)
        if m.kind == "count":  # not sums: clipping their many small noisy cells would bias every total up
            cube = reconstruct.non_negative(cube, lam, axes)
        cube = reconstruct.rounded(cube)
        body["measures"].append(
            {
                "name": m.name,
                "kind": m.kind,
                "column": m.column,
                "cube": [float(v) for v in np.ravel(cube)],
                "eigen": [float(v) for v in np.ravel(lam)],
            }
        )
    store.put(ledger, spec.name, version, charge.id, body)
    ledger.record_release(
        charge.id,
        {"synopsis": spec.name, "data_version": version, "cells": cells, "measures": [m.name for m in spec.measures]},
    )
    return Published(
        spec.name,
        charge.id,
        float(cost.epsilon),
        version,
        cells,
        len(measurements),
        time.perf_counter() - start,
        body["strategy"],
        float(cost.delta),
    )


def _names(spec: SynopsisSpec, mask: int) -> list[str]:
    return [d.label for i, d in enumerate(spec.dimensions) if mask >> i & 1]


def exact_cubes(plan: Plan, rs, values: list[list[Any]], sizes: tuple[int, ...], n_measures: int) -> list[np.ndarray]:
    """The bounded result as one exact integer cube per measure (never released)."""
    k = len(sizes)
    index = [{repr(v): i for i, v in enumerate(vs)} for vs in values]
    cubes = [np.zeros(sizes, dtype=object) for _ in range(n_measures)]
    columns = [rs.columns[k + 1 + measure_index(plan, j)] for j in range(n_measures)]
    for r in range(rs.row_count):
        at = tuple(index[i][repr(rs.columns[i][r])] for i in range(k))
        for j in range(n_measures):
            cubes[j][at] = int(columns[j][r])
    return cubes


def encode(v: Any) -> Any:
    """A dimension value as JSON holds it (dates tagged)."""
    if isinstance(v, datetime.datetime):
        return {"timestamp": v.isoformat()}
    if isinstance(v, datetime.date):
        return {"date": v.isoformat()}
    return v


def decode(v: Any) -> Any:
    if isinstance(v, dict):
        if "date" in v:
            return datetime.date.fromisoformat(v["date"])
        return datetime.datetime.fromisoformat(v["timestamp"])
    return v

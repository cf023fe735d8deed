"""The bounded query: a plan rendered as one dialect-neutral sqlglot tree with one CTE per
stage (DESIGN §4). Engines transpile the tree; two functions are dpsql's own and each engine
lowers them: TRY(x) (x, or NULL where computing it fails) and DPSQL_HASH(a, ...) (a keyed hash
of its arguments, uniform on [0, 2^64)).

filtered   FROM/JOIN/WHERE, the unit, group keys and per-row measure values: clamped to their
           bounds and converted to fixed point, so sums are exact integers;
per_unit   GROUP BY unit and keys: each unit's partial counts and sums in each group; under
           partition selection at most max_groups groups per unit (by a hash of its own keys);
per_group  totals per group after bounding each unit's contribution to max_rows rows (and,
           with declared keys, scaling a unit in G > max_groups groups by max_groups / G), and
           the number of distinct units (for partition selection);
final      declared key domains joined in, so empty groups appear with zeros.

A unit with n > max_rows rows in a group contributes its sum scaled by max_rows/n (its count
capped at max_rows) rather than an arbitrary max_rows of its rows: the same sensitivity bound,
one aggregation instead of a window, and the unit's own mean is kept. The same holds across
groups: scaling every share by max_groups / G keeps the L1 bound max_groups * max_rows * R and
the L2 bound sqrt(max_groups) * max_rows * R, and costs a GROUP BY unit instead of a sort.
Under a total bound of C rows with Gaussian noise, a unit's rows per group are scaled by
C / max(||n||_2, C): its shares' L2 norm is at most C (and C * R for a sum).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Mapping

import sqlglot
from sqlglot import exp

from .analyze import COUNT_BITS, GroupKey, Measure, Plan
from .derived import Derived
from .scope import Relation, Source
from .total import clamp, total, try_casts, try_wrap


@dataclass(frozen=True)
class Weighting:
    """Where a weightable plan reads its rows: a copy of its one private table with each row's
    weight, min(1, limit / rows of its unit in the table) in fixed point, so bounding becomes a
    weighted sum the engine does in one scan; `values` are the measures whose weighted per-row
    values the copy already holds (measure index -> column). Engine state, kept out of the plan."""

    table: str
    values: Mapping[int, str] = field(default_factory=dict)


def _conjuncts(node: exp.Expression) -> list[exp.Expression]:
    if isinstance(node, exp.And):
        return _conjuncts(node.this) + _conjuncts(node.expression)
    if isinstance(node, exp.Paren) and isinstance(node.this, exp.And):
        return _conjuncts(node.this)
    return [node]


def _condition(nodes: list[exp.Expression], types) -> list[str]:
    """Conjuncts, each made total on its own (a failing one must not hide the others)."""
    return [_sql(total(c, types)) for n in nodes for c in _conjuncts(n)]


def _sql(node: exp.Expression) -> str:
    """A sub-expression in the tree's spelling (sqlglot's DuckDB dialect, parsed back whole at
    the end): engines transpile the finished tree, so nothing here depends on a backend."""
    return node.sql(dialect="duckdb")


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(value: Any) -> exp.Expression:
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, (int, float)):
        return exp.Literal.number(value)
    if isinstance(value, datetime.date):
        return exp.Cast(this=exp.Literal.string(value.isoformat()), to=exp.DataType.build("DATE"))
    return exp.Literal.string(str(value))


def _values(values, type_name: str | None) -> str:
    rows = []
    for v in values:
        lit = _literal(v)
        if type_name and not isinstance(v, datetime.date):
            lit = exp.TryCast(this=lit, to=exp.DataType.build(type_name, dialect="duckdb"))
        rows.append(f"({_sql(lit)})")
    return f"VALUES {', '.join(rows)}"


def _domain_sql(key: GroupKey, i: int) -> str:
    """A key's domain, each key once as the engine sees it: declared values are cast to the
    column's type and deduplicated there (' 1', '01' and 1 are one INTEGER key), so no group
    can be released twice."""
    if key.domain is not None:
        return f"(SELECT DISTINCT k{i} FROM ({_values(key.domain, key.type_name)}) AS d{i}(k{i}) WHERE k{i} IS NOT NULL)"
    if key.image is not None:
        f = _sql(total(key.image.expr))
        return (f"(SELECT DISTINCT {f} AS k{i} FROM ({_values(key.image.values, key.image.type_name)}) AS d(c) "
                f"WHERE {f} IS NOT NULL)")
    table, column = key.domain_table
    return f"(SELECT DISTINCT {_q(column)} AS k{i} FROM {_q(table)} WHERE {_q(column)} IS NOT NULL)"




def _measure_value(m: Measure) -> str:
    if m.kind == "count":
        return _sql(total(m.value))
    if m.categories is not None:
        value = _sql(total(m.value))
        whens = " ".join(f"WHEN {_sql(_literal(k))} THEN {i}" for i, k in enumerate(m.categories))
        return f"CASE {value} {whens} END"
    double = exp.DataType.build("DOUBLE")
    if isinstance(m.value, exp.Column):
        as_double = exp.TryCast(this=m.value.copy(), to=double)
    else:
        as_double = try_wrap(exp.Cast(this=try_casts(m.value), to=double))
    clamped = _sql(clamp(as_double, m.lower, m.upper))
    if m.kind == "histogram":
        per_bin = float(m.bins / (m.upper - m.lower))
        position = exp.Floor(this=exp.Mul(this=exp.Paren(this=exp.Sub(this=as_double, expression=exp.Literal.number(m.lower))),
                                          expression=exp.Literal.number(per_bin)))
        return f"CAST({_sql(clamp(position, 0, m.bins - 1))} AS INTEGER)"
    centred = f"({clamped} - {m.centre!r})" if m.centre else clamped
    return f"CAST(ROUND({centred} * {float(2.0 ** m.bits)!r}) AS BIGINT)"


def columns(j: int, m: Measure) -> list[str]:
    """Result columns of measure j: one, or one per histogram bin."""
    if m.kind == "histogram":
        return [f"m{j}_{b}" for b in range(m.bins)]
    return [f"m{j}"]


def _types(rel: Relation) -> dict[tuple[str, str], str]:
    return {(s.alias, c): t for s in rel.sources for c, t in s.columns.items()}


def _from(rel: Relation, row_id_source: str | None = None, weights_table: str | None = None) -> str:
    def render(source: Source) -> str:
        if source.derived is not None:
            return f"({_derived_sql(source.derived)}) AS {source.alias}"
        if weights_table is not None and source.private:
            return f"{weights_table} AS {source.alias}"
        if row_id_source == source.alias:
            return f"(SELECT *, ROW_NUMBER() OVER () AS __dpsql_rid FROM {_q(source.table.name)}) AS {source.alias}"
        return f"{_q(source.table.name)} AS {source.alias}"

    parts = [render(rel.sources[0])]
    for j in rel.joins:
        word = "LEFT JOIN" if j.kind == "left" else "JOIN"
        on = " AND ".join(_condition([j.on], _types(rel))) or "TRUE"
        parts.append(f"{word} {render(j.source)} ON {on}")
    return "\n    ".join(parts)


def _derived_sql(d: Derived) -> str:
    """A per-unit subquery: bounded aggregates per unit, then its outputs over them (made
    total there: the engine cannot TRY an aggregate, but it can TRY arithmetic over one)."""
    unit = _sql(d.unit)
    aggs = ", ".join([f"{unit} AS unit"] + [f"{_sql(a)} AS a{i}" for i, a in enumerate(d.aggregates)])
    where = _condition(d.relation.where, _types(d.relation)) + [f"{unit} IS NOT NULL"]
    inner = (f"SELECT {aggs} FROM {_from(d.relation)} WHERE {' AND '.join(where)} GROUP BY {unit}")
    items = ", ".join([f"agg.unit AS {_q(d.unit_name)}"] + [f"{_sql(total(e))} AS {_q(name)}" for name, e in d.items])
    sql = f"SELECT {items} FROM ({inner}) AS agg"
    if d.having is not None:
        sql += f" WHERE {_sql(total(d.having))}"
    return sql


def _scaled(share: str, plan: Plan, groups: int, column: str = "groups") -> str:
    """A unit's share in one group, scaled by max_groups / G (G in `column`) when it is in
    G > max_groups groups; // truncates toward zero, so a scaled share never exceeds the unscaled bound."""
    if not plan.scale_groups:
        return share
    return f"({share}) * {groups} // GREATEST({column}, {groups})"


def _unit_groups(plan: Plan) -> tuple[str, str]:
    """Per unit: its groups, and what its shares are scaled by under total_bound: its rows in
    all (shares scaled by C / max(rows, C)), or under L2 clipping a fixed-point weight
    floor(2^b C / max(||n||_2, C)) of its rows per group n. The norm is a double SQRT made an
    upper bound by a relative margin of 2^-40 (far above its rounding error), and every engine
    rounds the same IEEE operations alike. A SUM's own total j gets w{j}, see _own_weight."""
    items = ["unit", "COUNT(*) AS groups"]
    limit = plan.total_rows
    if plan.l2_clip:
        norm = "SQRT(CAST(SUM(n * n) AS DOUBLE)) * (1 + POWER(2, -40))"
        items.append(f"CAST(FLOOR({limit * 2 ** COUNT_BITS} / GREATEST({norm}, {limit})) AS BIGINT) AS unit_weight")
    else:
        items.append("SUM(n) AS unit_rows")
    if plan.total_bound:
        items += [f"{_own_weight(f'SUM(ABS(s{j}))', plan, m)} AS w{j}" for j, m in enumerate(plan.measures) if m.own_norm]
    return ("unit_groups", f"SELECT {', '.join(items)}\n  FROM per_unit\n  GROUP BY unit")


def _own_weight(norm: str, plan: Plan, m: Measure) -> str:
    """A SUM's weight floor(2^b K / max(norm, K)), K = C * row_bound its L1 sensitivity, `norm`
    the L1 norm of the unit's own sums (over its groups, or of its rows' values): a unit's
    shares then add at most K in all however many rows it has, and a unit whose values are
    small keeps all of them (integers throughout, so exact on every engine)."""
    bound = plan.total_rows * m.row_bound
    # At most 2^b: a BIGINT, so a weighted value stays one too (DuckDB sums a wider type slower).
    return f"CAST({bound << COUNT_BITS} // GREATEST({norm}, {bound}) AS BIGINT)"


def _total_share(value: str, plan: Plan, ug: str = "") -> str:
    """A unit's share `value` in one group under total_bound (see _unit_groups): truncated
    toward zero, so its magnitude never grows."""
    if plan.l2_clip:
        return _weighted(value, f"{ug}unit_weight")
    return f"({value} * {plan.total_rows}) // GREATEST({ug}unit_rows, {plan.total_rows})"


def _weighted_per_group(plan: Plan, weighting: Weighting, keys: list[str], group_by: str) -> str:
    """Totals per group from rows weighted by their unit's share w = floor(C 2^b / max(N, C))
    (N: the unit's rows in the table, C: its limit): a unit's n <= N rows in the query add at
    most n C / max(N, C) <= C rows, and a sum row adds v w / 2^b truncated toward zero. A count
    in whole rows (no GROUP BY) floors the one weighted total: floor moves by at most C too."""
    aggs = ["0 AS units"]  # unit counts serve partition selection only, which this path excludes
    for j, m in enumerate(plan.measures):
        if m.kind == "count":
            if j in weighting.values:  # the copy holds each row's weight where the value is not NULL
                weighted = f"SUM(v{j})"
            else:
                weighted = "SUM(w)" if m.value is None else f"SUM(CASE WHEN v{j} IS NOT NULL THEN w END)"
            if m.bits < COUNT_BITS:  # whole rows, one group only (see Plan.weightable)
                weighted = f"{weighted} // {2 ** (COUNT_BITS - m.bits)}"
            aggs.append(f"{weighted} AS m{j}")
        elif j in weighting.values:
            aggs.append(f"SUM(v{j}) AS m{j}")  # the copy holds each row's weighted value
        elif m.kind == "sum":
            aggs.append(f"SUM({_weighted(f'v{j}', 'w')}) AS m{j}")
    return f"SELECT {', '.join(keys + aggs)}\n  FROM filtered{group_by}"


def _weighted(value: str, weight: str) -> str:
    """A row's fixed-point value times its weight, truncated toward zero (see _weighted_per_group)."""
    return f"({value} * {weight}) // {2 ** COUNT_BITS}"


def weighted_value_sql(m: Measure, plan: Plan, unit: str, weight: str = "__dpsql_w") -> str:
    """A count or sum measure's weighted per-row value, for an engine to store in its weighted
    copy (of a table whose unit column is `unit`, under the plan's total bound): the row's
    weight, or for a SUM's own total the weight from its unit's sum of |value| (_own_weight;
    a bound for any grouping and filter), applied as the bounded query would."""
    value = _measure_value(m)
    if m.kind == "count":
        return f"CASE WHEN ({value}) IS NOT NULL THEN {weight} END"
    if m.own_norm:
        weight = _own_weight(f"SUM(ABS({value})) OVER (PARTITION BY {_q(unit)})", plan, m)
    return _weighted(f"({value})", f"({weight})")


def _histogram_ctes(plan: Plan, weighting: Weighting | None, j: int, m: Measure, keys: list[str],
                    groups: int) -> list[tuple[str, str]]:
    """Histogram j in long form (one row per group and non-empty bin), then pivoted to one
    column per bin: counting per (unit, group, bin) and pivoting the small per-group result
    is several times faster than one conditional count per bin at the per-unit stage.
    A unit's n rows in a group add c * max_rows / n to the bin holding c of them when
    n > max_rows (floored), so its bins sum to at most max_rows, as a count's would (under
    total_bound: c * C / N, with N the unit's rows in all and C its limit)."""
    unit = 2 ** m.bits
    group_cols = ", ".join(keys + [f"v{j}"])
    if weighting is not None:
        ctes = [(f"bins{j}", f"SELECT {group_cols}, SUM(w) AS s\n  FROM filtered\n  WHERE v{j} IS NOT NULL\n"
                             f"  GROUP BY {group_cols}")]
    elif plan.unit is None:
        cells = (f"SELECT {group_cols}, COUNT(*) * {unit} AS s\n  FROM filtered\n  WHERE v{j} IS NOT NULL\n"
                 f"  GROUP BY {group_cols}")
        ctes = [(f"bins{j}", cells)]
    else:
        on = " AND ".join(["c.unit = p.unit"] + [f"c.{k} IS NOT DISTINCT FROM p.{k}" for k in keys])
        join_groups = " JOIN unit_groups AS ug ON ug.unit = c.unit" if plan.scale_groups or plan.total_bound else ""
        if plan.total_bound:
            scaled = _total_share(f"c.c * {unit}", plan, "ug.")
        else:
            share = (f"CASE WHEN p.n{j} > {plan.rows_per_group} THEN (c.c * {plan.rows_per_group * unit}) // p.n{j} "
                     f"ELSE c.c{f' * {unit}' if m.bits else ''} END")
            scaled = _scaled(share, plan, groups, "ug.groups")
        c_keys = ", ".join([f"c.{k}" for k in keys] + [f"c.v{j}"])
        ctes = [(f"cells{j}", f"SELECT unit, {group_cols}, COUNT(*) AS c\n  FROM filtered\n  WHERE v{j} IS NOT NULL\n"
                              f"  GROUP BY unit, {group_cols}"),
                (f"bins{j}", f"SELECT {c_keys}, SUM({scaled}) AS s\n  FROM cells{j} AS c JOIN per_unit AS p ON {on}"
                             f"{join_groups}\n  GROUP BY {c_keys}")]
    pivot = ", ".join(f"SUM(CASE WHEN v{j} = {b} THEN s END) AS m{j}_{b}" for b in range(m.bins))
    ctes.append((f"wide{j}", f"SELECT {', '.join(keys + [pivot])}\n  FROM bins{j}" + (f"\n  GROUP BY {', '.join(keys)}" if keys else "")))
    return ctes


COIN_BITS = 60  # DPSQL_COIN(unit, salt) is uniform on [0, 2^60)


def rewrite(plan: Plan, domain_size: int | None = None, salt: str | None = None,
            weighting: Weighting | None = None) -> exp.Query:
    """The bounded query. Output columns: k0.., units, m0.. (one m per measure). `weighting`
    (only for a plan.weightable() plan) reads the rows from the engine's weighted copy.

    With TABLESAMPLE, a unit is kept iff DPSQL_COIN(unit, salt) < floor(rate * 2^60): the
    first 60 bits of SHA-256(salt || ':' || unit), a keyed pseudorandom function, so whole
    units are sampled and each unit's coin is independent of every other's (a plain keyed hash
    such as DuckDB's hash(unit, salt) = hash(salt) XOR c(unit) correlates units whose public
    c(unit) agree). The salt is 128 secret bits, new for every execution."""
    keys = [f"k{i}" for i in range(len(plan.keys))]
    key_list = ", ".join(keys)
    select = []
    if weighting is not None and not plan.weightable():
        raise ValueError("a weighted copy serves only a weightable plan")
    stored = weighting.values if weighting is not None else {}
    if plan.unit is not None and weighting is None:  # a weighted copy's rows all have a unit
        select.append(f"{_sql(plan.unit)} AS unit")
    select += [f"{_sql(total(k.expr))} AS k{i}" for i, k in enumerate(plan.keys)]
    alias = plan.relation.sources[0].alias
    for j, m in enumerate(plan.measures):
        if j in stored:
            select.append(f"{alias}.{_q(stored[j])} AS v{j}")
        elif m.value is not None:
            select.append(f"{_measure_value(m)} AS v{j}")
    if len(select) == 0:
        select.append("1 AS one")
    # The weighted copy holds the rows whose unit is not NULL, the only condition it admits.
    where = _condition(plan.relation.where, _types(plan.relation)) if weighting is None else []
    if plan.sample_rate is not None:
        threshold = int(Fraction(repr(plan.sample_rate)) * 2**COIN_BITS)
        secret = "'' /* a secret salt, new for each execution */" if salt is None else _sql(exp.Literal.string(salt))
        where.append(f"DPSQL_COIN({_sql(plan.unit)}, {secret}) < {threshold}")
    if weighting is not None:
        select.append(f"{alias}.__dpsql_w AS w")
    filtered = f"SELECT {', '.join(select)}\n  FROM {_from(plan.relation, plan.row_id_source, weighting and weighting.table)}"
    if where:
        filtered += "\n  WHERE " + "\n    AND ".join(where)
    declared = [(i, k) for i, k in enumerate(plan.keys) if k.declared]
    # Weighted rows add to their own group only, and groups outside a declared domain are never
    # released (the final join starts from the domain): no membership filter is needed then.
    if declared and weighting is None:
        filtered = (f"SELECT * FROM ({filtered}) AS f\n  WHERE "
                    + " AND ".join(f"k{i} IN (SELECT k{i} FROM domain{i})" for i, _ in declared))

    # Each declared domain once, as a CTE: it filters the rows and then supplies empty groups.
    ctes = [(f"domain{i}", f"SELECT * FROM {_domain_sql(k, i)} AS dd{i}") for i, k in declared]
    ctes.append(("filtered", filtered))
    group_by = f"\n  GROUP BY {key_list}" if keys else ""
    m_rows = plan.rows_per_group
    groups = plan.groups_per_unit(domain_size)
    if weighting is not None:
        ctes.append(("per_group", _weighted_per_group(plan, weighting, keys, group_by)))
    elif plan.unit is None:
        aggs = ["COUNT(*) AS units"]
        for j, m in enumerate(plan.measures):
            if m.kind == "units":
                aggs.append(f"COUNT(*) AS m{j}")  # every row is its own unit here
            elif m.kind == "count":
                aggs.append(f"COUNT({'*' if m.value is None else f'v{j}'}) AS m{j}")
            elif m.kind == "sum":
                aggs.append(f"SUM(v{j}) AS m{j}")
        ctes.append(("per_group", f"SELECT {', '.join(keys + aggs)}\n  FROM filtered{group_by}"))
    else:
        partial = ["COUNT(*) AS n"]
        for j, m in enumerate(plan.measures):
            if m.value is not None:
                partial.append(f"COUNT(v{j}) AS n{j}")
            if m.kind == "sum":
                partial.append(f"SUM(v{j}) AS s{j}")
        per_unit = f"SELECT {', '.join(['unit'] + keys + partial)}\n  FROM filtered\n  GROUP BY {', '.join(['unit'] + keys)}"
        if plan.select_groups:
            hashed = ", ".join((["unit"] if plan.unit_in_hash else []) + keys)
            per_unit += f"\n  QUALIFY ROW_NUMBER() OVER (PARTITION BY unit ORDER BY DPSQL_HASH({hashed})) <= {groups}"
        ctes.append(("per_unit", per_unit))
        source = "per_unit"
        if plan.scale_groups or plan.total_bound:
            ctes.append(_unit_groups(plan))
            source = "per_unit JOIN unit_groups USING (unit)"
        aggs = ["COUNT(*) AS units"]
        for j, m in enumerate(plan.measures):
            n = "n" if m.value is None else f"n{j}"
            unit = 2 ** m.bits
            if m.kind == "units":
                share = _scaled(str(unit), plan, groups)  # one per unit and group
            elif plan.total_bound and m.kind == "count":
                # A unit's N rows in all count C / N each when N > C: its shares sum to at most C.
                share = _total_share(f"{n} * {unit}", plan)
            elif plan.total_bound and m.kind == "sum" and m.own_norm:
                share = _weighted(f"s{j}", f"w{j}")
            elif plan.total_bound and m.kind == "sum":
                share = _total_share(f"s{j}", plan)
            elif m.kind == "count":
                share = _scaled(f"LEAST({n}, {m_rows})" + (f" * {unit}" if m.bits else ""), plan, groups)
            elif m.kind == "sum":
                share = _scaled(f"CASE WHEN {n} > {m_rows} THEN (s{j} * {m_rows}) // {n} ELSE s{j} END", plan, groups)
            else:
                continue
            aggs.append(f"SUM({share}) AS m{j}")
        ctes.append(("per_group", f"SELECT {', '.join(keys + aggs)}\n  FROM {source}{group_by}"))
    histograms = [(j, m) for j, m in enumerate(plan.measures) if m.kind == "histogram"]
    if histograms:
        ctes[-1] = ("per_group_totals", ctes[-1][1])
        for j, m in histograms:
            ctes += _histogram_ctes(plan, weighting, j, m, keys, groups)
        joins = "".join(f"\n  LEFT JOIN wide{j} AS w{j} ON " + (" AND ".join(
            f"w{j}.{k} IS NOT DISTINCT FROM t.{k}" for k in keys) or "TRUE") for j, _ in histograms)
        wide = [f"w{j}.{c}" for j, m in histograms for c in columns(j, m)]
        ctes.append(("per_group", f"SELECT t.*, {', '.join(wide)}\n  FROM per_group_totals AS t{joins}"))

    values = ["COALESCE(g.units, 0) AS units"] + [f"COALESCE(g.{c}, 0) AS {c}" for j, m in enumerate(plan.measures)
                                                  for c in columns(j, m)]
    if keys and plan.declared:
        domain = " CROSS JOIN ".join(f"domain{i}" for i in range(len(plan.keys)))
        on = " AND ".join(f"d.k{i} = g.k{i}" for i in range(len(keys)))
        final = (f"SELECT {', '.join([f'd.k{i}' for i in range(len(keys))] + values)}\n"
                 f"FROM (SELECT * FROM {domain}) AS d\nLEFT JOIN per_group AS g ON {on}")
    elif keys:
        final = f"SELECT {', '.join([f'g.k{i}' for i in range(len(keys))] + values)}\nFROM per_group AS g"
    else:
        final = f"SELECT {', '.join(values)}\nFROM per_group AS g"
    body = ",\n".join(f"{name} AS (\n  {sql}\n)" for name, sql in ctes)
    return sqlglot.parse_one(f"WITH {body}\n{final}", read="duckdb")

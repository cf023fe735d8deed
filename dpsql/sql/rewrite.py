"""The bounded query: a plan rendered as SQL with one CTE per stage (DESIGN §4).

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
"""

from __future__ import annotations

from typing import Any, Mapping

from sqlglot import exp

from .analyze import GroupKey, Measure, Plan


def _try_casts(node: exp.Expression) -> exp.Expression:
    return node.copy().transform(
        lambda n: exp.TryCast(this=n.this, to=n.to) if isinstance(n, exp.Cast) and not isinstance(n, exp.TryCast) else n,
        copy=False,
    )


def _try(node: exp.Expression) -> exp.Expression:
    return exp.Anonymous(this="TRY", expressions=[node])


_NUMERIC = ("INT", "BIGINT", "SMALLINT", "TINYINT", "HUGEINT", "DOUBLE", "FLOAT", "REAL", "DECIMAL", "UBIGINT",
            "UINTEGER", "USMALLINT", "UTINYINT", "UHUGEINT")


def _category(t: str | None) -> str | None:
    if t is None:
        return None
    t = t.upper()
    if t.startswith(_NUMERIC):
        return "number"
    if t in ("VARCHAR", "TEXT"):
        return "string"
    return t


def _cannot_fail(node: exp.Expression, types: Mapping[tuple[str, str], str]) -> bool:
    """True for the few shapes that can never raise in the engine, so they need no TRY (and
    stay visible to the optimizer: hash joins, filter pushdown)."""
    if isinstance(node, (exp.Column, exp.Literal, exp.Boolean, exp.Null)):
        return True
    if isinstance(node, exp.Not):
        return _cannot_fail(node.this, types)
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        return isinstance(node.this, exp.Column)
    if isinstance(node, (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)):
        a, b = node.this, node.expression
        cats = []
        for side in (a, b):
            if isinstance(side, exp.Column):
                cats.append(_category(types.get((side.table, side.name))))
            elif isinstance(side, exp.Literal):
                cats.append("string" if side.is_string else "number")
            else:
                return False
        return cats[0] is not None and cats[0] == cats[1]
    return False


def total(node: exp.Expression, types: Mapping[tuple[str, str], str] | None = None) -> exp.Expression:
    """Make a row-level expression total: casts become TRY_CAST, and any other engine error
    becomes NULL, so whether a query fails cannot depend on a private value."""
    return _total(_try_casts(node), types or {})


def _total(node: exp.Expression, types: Mapping[tuple[str, str], str]) -> exp.Expression:
    if _cannot_fail(node, types):
        return node
    if node.find(exp.Subquery, exp.Select) is None:
        return _try(node)
    # DuckDB's TRY cannot wrap a subquery: make each subquery-free operand total instead (the
    # subquery itself reads public tables only, so its failures cannot depend on private rows).
    for key, value in list(node.args.items()):
        if isinstance(value, exp.Expression) and not isinstance(value, (exp.Subquery, exp.Select)):
            node.set(key, _total(value, types))
        elif isinstance(value, list):
            node.set(key, [_total(v, types) if isinstance(v, exp.Expression) and not isinstance(v, (exp.Subquery, exp.Select))
                           else v for v in value])
    return node


def _conjuncts(node: exp.Expression) -> list[exp.Expression]:
    if isinstance(node, exp.And):
        return _conjuncts(node.this) + _conjuncts(node.expression)
    if isinstance(node, exp.Paren) and isinstance(node.this, exp.And):
        return _conjuncts(node.this)
    return [node]


def _condition(nodes: list[exp.Expression], types, dialect: str) -> list[str]:
    """Conjuncts, each made total on its own (a failing one must not hide the others)."""
    return [_sql(total(c, types), dialect) for n in nodes for c in _conjuncts(n)]


def _sql(node: exp.Expression, dialect: str) -> str:
    return node.sql(dialect=dialect)


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(value: Any) -> exp.Expression:
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, (int, float)):
        return exp.Literal.number(value)
    return exp.Literal.string(str(value))


def _domain_sql(key: GroupKey, i: int, dialect: str) -> str:
    if key.domain is not None:
        rows = []
        for v in key.domain:
            lit = _literal(v)
            if key.type_name:
                lit = exp.TryCast(this=lit, to=exp.DataType.build(key.type_name, dialect=dialect))
            rows.append(f"({_sql(lit, dialect)})")
        return f"(SELECT * FROM (VALUES {', '.join(rows)}) AS d{i}(k{i}))"
    table, column = key.domain_table
    return f"(SELECT DISTINCT {_q(column)} AS k{i} FROM {_q(table)} WHERE {_q(column)} IS NOT NULL)"


def _membership(key: GroupKey, i: int, dialect: str) -> str:
    return f"k{i} IN (SELECT k{i} FROM {_domain_sql(key, i, dialect)})"


def _measure_value(m: Measure, dialect: str) -> str:
    if m.kind == "count":
        return _sql(total(m.value), dialect)
    double = exp.DataType.build("DOUBLE")
    if isinstance(m.value, exp.Column):
        as_double = exp.TryCast(this=m.value.copy(), to=double)
    else:
        as_double = _try(exp.Cast(this=_try_casts(m.value), to=double))
    clamped = f"LEAST(GREATEST({_sql(as_double, dialect)}, {m.lower!r}), {m.upper!r})"
    centred = f"({clamped} - {m.centre!r})" if m.centre else clamped
    return f"CAST(ROUND({centred} * {float(2.0 ** m.bits)!r}) AS BIGINT)"


def _types(plan: Plan) -> dict[tuple[str, str], str]:
    return {(s.alias, c): t for s in plan.relation.sources for c, t in s.columns.items()}


def _from(plan: Plan, dialect: str) -> str:
    def render(source) -> str:
        if plan.row_id_source == source.alias:
            return f"(SELECT *, ROW_NUMBER() OVER () AS __dpsql_rid FROM {_q(source.table.name)}) AS {source.alias}"
        return f"{_q(source.table.name)} AS {source.alias}"

    rel = plan.relation
    parts = [render(rel.sources[0])]
    for j in rel.joins:
        word = "LEFT JOIN" if j.kind == "left" else "JOIN"
        on = " AND ".join(_condition([j.on], _types(plan), dialect)) or "TRUE"
        parts.append(f"{word} {render(j.source)} ON {on}")
    return "\n    ".join(parts)


def rewrite(plan: Plan, dialect: str = "duckdb", domain_size: int | None = None, salt: int | None = None) -> str:
    """The bounded query. Output columns: k0.., units, m0.. (one m per measure).

    With TABLESAMPLE, a unit is kept iff hash(unit, salt) < rate * 2^64: whole units are
    sampled, independently, by a salt that is secret and new for every execution."""
    keys = [f"k{i}" for i in range(len(plan.keys))]
    key_list = ", ".join(keys)
    select = []
    if plan.unit is not None:
        select.append(f"{_sql(plan.unit, dialect)} AS unit")
    select += [f"{_sql(total(k.expr), dialect)} AS k{i}" for i, k in enumerate(plan.keys)]
    for j, m in enumerate(plan.measures):
        if m.value is not None:
            select.append(f"{_measure_value(m, dialect)} AS v{j}")
    if len(select) == 0:
        select.append("1 AS one")
    where = _condition(plan.relation.where, _types(plan), dialect)
    if plan.sample_rate is not None:
        threshold = min(2**64 - 1, int(plan.sample_rate * 2**64))
        secret = "0 /* a secret salt, new for each execution */" if salt is None else str(salt)
        where.append(f"hash({_sql(plan.unit, dialect)}, {secret}) < {threshold}")
    filtered = f"SELECT {', '.join(select)}\n  FROM {_from(plan, dialect)}"
    if where:
        filtered += "\n  WHERE " + "\n    AND ".join(where)
    declared = [(i, k) for i, k in enumerate(plan.keys) if k.declared]
    if declared:
        filtered = (f"SELECT * FROM ({filtered}) AS f\n  WHERE "
                    + " AND ".join(_membership(k, i, dialect) for i, k in declared))

    ctes = [("filtered", filtered)]
    group_by = f"\n  GROUP BY {key_list}" if keys else ""
    m_rows = plan.rows_per_group
    if plan.unit is None:
        aggs = ["COUNT(*) AS units"]
        for j, m in enumerate(plan.measures):
            if m.kind == "units":
                aggs.append(f"COUNT(*) AS m{j}")  # every row is its own unit here
            elif m.kind == "count":
                aggs.append(f"COUNT({'*' if m.value is None else f'v{j}'}) AS m{j}")
            else:
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
        groups = plan.groups_per_unit(domain_size)
        if plan.select_groups:
            hashed = ", ".join((["unit"] if plan.unit_in_hash else []) + keys)
            per_unit += f"\n  QUALIFY ROW_NUMBER() OVER (PARTITION BY unit ORDER BY hash({hashed})) <= {groups}"
        ctes.append(("per_unit", per_unit))
        source = "per_unit"
        if plan.scale_groups:
            ctes.append(("unit_groups", "SELECT unit, COUNT(*) AS groups\n  FROM per_unit\n  GROUP BY unit"))
            source = "per_unit JOIN unit_groups USING (unit)"
        aggs = ["COUNT(*) AS units"]
        for j, m in enumerate(plan.measures):
            n = "n" if m.value is None else f"n{j}"
            if m.kind == "units":
                share = str(2 ** m.bits)  # one per unit and group
            elif m.kind == "count":
                share = f"LEAST({n}, {m_rows})" + (f" * {2 ** m.bits}" if m.bits else "")
            else:
                share = f"CASE WHEN {n} > {m_rows} THEN (s{j} * {m_rows}) // {n} ELSE s{j} END"
            if plan.scale_groups:
                # // truncates toward zero, so a scaled share never exceeds the unscaled bound.
                share = f"({share}) * {groups} // GREATEST(groups, {groups})"
            aggs.append(f"SUM({share}) AS m{j}")
        ctes.append(("per_group", f"SELECT {', '.join(keys + aggs)}\n  FROM {source}{group_by}"))

    values = ["COALESCE(g.units, 0) AS units"] + [f"COALESCE(g.m{j}, 0) AS m{j}" for j in range(len(plan.measures))]
    if keys and plan.declared:
        domain = " CROSS JOIN ".join(_domain_sql(k, i, dialect) for i, k in enumerate(plan.keys))
        on = " AND ".join(f"d.k{i} = g.k{i}" for i in range(len(keys)))
        final = (f"SELECT {', '.join([f'd.k{i}' for i in range(len(keys))] + values)}\n"
                 f"FROM (SELECT * FROM {domain}) AS d\nLEFT JOIN per_group AS g ON {on}")
    elif keys:
        final = f"SELECT {', '.join([f'g.k{i}' for i in range(len(keys))] + values)}\nFROM per_group AS g"
    else:
        final = f"SELECT {', '.join(values)}\nFROM per_group AS g"
    body = ",\n".join(f"{name} AS (\n  {sql}\n)" for name, sql in ctes)
    return f"WITH {body}\n{final}"

"""The bounded query: a plan rendered as one dialect-neutral sqlglot tree with one CTE per
stage (DESIGN §4), built as a tree throughout (sql/build.py). Engines transpile it; dpsql's own
functions TRY(x) (x, or NULL where computing it fails), DPSQL_HASH(a, ...) (a keyed hash) and
DPSQL_COIN(unit, salt) (a keyed pseudorandom coin) are lowered by each engine.

domain<i>  a declared key domain, each key once as the engine sees it;
filtered   FROM/JOIN/WHERE, the unit, group keys and per-row measure values: clamped to their
           bounds and converted to fixed point (guarantee/measures.py), so sums are exact integers;
...        the bounding strategy's stages, from filtered to per_group (guarantee/bounding.py);
wide<j>    histogram j pivoted to one column per bin;
final      each group's totals. Over declared keys the domain is not the engine's work: the
           session keeps the groups inside it and adds its empty ones with zeros
           (guarantee/empty_groups.py), from the domain the engine lists once per plan (declared_domain),
           which spares every query a join (a whole stage on Spark).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Callable

from sqlglot import exp

from ..guarantee.bounding import SplitCopy, Stage, WeightedCopy
from ..guarantee.measures import Histogram, Measure, literal
from ..guarantee.plan import GroupKey, Plan
from . import build as b
from .build import dtype
from .derived import Derived
from .domains import COLUMN, Span
from .fold import fold
from .narrow import NONE, ROW, Narrowing, narrowing
from .nonfailing import nonfailing
from .scope import Relation, Source, conjuncts

COIN_BITS = 60  # DPSQL_COIN(unit, salt) is uniform on [0, 2^60)


def columns(j: int, m: Measure) -> list[str]:
    """Result columns of measure j: one, or one per histogram bin."""
    if isinstance(m, Histogram):
        return [f"m{j}_{k}" for k in range(m.bins)]
    return [f"m{j}"]


def rewrite(
    plan: Plan,
    domain_size: int | None = None,
    salt: str | None = None,
    weighting: WeightedCopy | SplitCopy | None = None,
) -> exp.Select:
    """The bounded query. Output columns: k0.., units, m0.. (one m per measure column).
    `weighting` reads the rows from the engine's weighted copy: whole (WeightedCopy, only for a
    plan.weightable() plan) or split by its units' rows (SplitCopy, for a plan.split_keys() plan).
    With TABLESAMPLE, a unit is kept iff DPSQL_COIN(unit, salt) < floor(rate * 2^60):
    the first 60 bits of SHA-256(salt || ':' || unit), a keyed pseudorandom function, so each
    unit's coin is independent of every other's. The salt is 128 secret bits, new for every
    execution."""
    if isinstance(weighting, WeightedCopy) and not plan.weightable():
        raise ValueError("a weighted copy serves only a weightable plan")
    if isinstance(weighting, SplitCopy) and plan.split_keys() is None:
        raise ValueError("a split weighted copy serves only a plan with split keys")
    if isinstance(weighting, WeightedCopy) and weighting.reads_totals(plan.measures, plan.keys):
        return _from_totals(plan, weighting)
    bounding = plan.bounding if weighting is None else weighting
    keys = [f"k{i}" for i in range(len(plan.keys))]
    declared = [(i, k) for i, k in enumerate(plan.keys) if k.declared]
    # Only per-query bounding (and a split copy's heavy part) filters rows by the domain; a whole
    # weighted copy's rows are not filtered by key, and the session keeps the domain's groups.
    ctes = [] if isinstance(weighting, WeightedCopy) else _domain_ctes(declared, narrowing(plan) if declared else NONE)
    rows = _rows(plan, salt, weighting)
    if isinstance(weighting, SplitCopy):
        ctes.append(("light", _filtered(plan, rows, weighting, declared, light=True)))
    ctes.append(("filtered", _filtered(plan, rows, weighting, declared)))
    ctes += bounding.stages(plan.measures, keys, domain_size)
    histograms = [(j, m) for j, m in enumerate(plan.measures) if isinstance(m, Histogram)]
    if histograms:
        ctes[-1] = ("per_group_totals", ctes[-1][1])
        joins = []
        for j, m in histograms:
            ctes += bounding.histogram_stages(j, m, keys, domain_size)
            ctes.append((f"wide{j}", _pivot(j, m, keys)))
            on = [exp.NullSafeEQ(this=b.col(k, f"w{j}"), expression=b.col(k, "t")) for k in keys]
            joins.append(b.join(b.table(f"wide{j}", f"w{j}"), b.conjunction(on) if on else exp.true(), kind="LEFT"))
        wide = [b.col(c, f"w{j}") for j, m in histograms for c in columns(j, m)]
        ctes.append(
            (
                "per_group",
                b.select(
                    [exp.Column(this=exp.Star(), table=exp.to_identifier("t"))] + wide,
                    b.table("per_group_totals", "t"),
                    joins=joins,
                ),
            )
        )
    final = _final(plan, keys)
    if isinstance(weighting, WeightedCopy):  # one SELECT, which engines plan in less time (sql/fold.py)
        folded = fold(ctes, final)
        if folded is not None:
            return folded
    return b.with_ctes(ctes, final)


def _from_totals(plan: Plan, copy: WeightedCopy) -> exp.Select:
    """The bounded query of a plan that needs only the weighted copy's totals
    (WeightedCopy.reads_totals), as one SELECT over that one-row relation: each measure's
    weighted total with its SUM over the copy's rows replaced by the SUM stored for that
    column, so its values are the stages' own. A DuckDB operator costs about 0.1 ms a query
    whatever its rows, more than this query's work."""
    alias = "t"
    stored = {"w": "__dpsql_w"} | {f"v{j}": column for j, column in copy.values.items()}

    def read(node: exp.Expression) -> exp.Expression:
        return b.quoted(stored[node.this.name], alias) if isinstance(node, exp.Sum) else node

    values = [b.named(b.cast(b.node(0), "BIGINT"), "units")]
    values += [
        b.named(b.func("COALESCE", b.cast(m.weighted(j, j in copy.values).transform(read), "BIGINT"), 0), f"m{j}")
        for j, m in enumerate(plan.measures)
    ]
    return b.select(values, b.qualified(copy.totals, alias))


def declared_domain(plan: Plan) -> exp.Select:
    """The key tuples a GROUP BY over declared keys releases whatever the data: the cross
    product of the keys' domains (policy values, or public tables'), each narrowed by the
    query's own conditions on it, and, where conditions tie keys to public tables, only the
    tuples those tables have (sql/narrow.py). A query asking for the keys alone is answered
    from it, free."""
    n = len(plan.keys)
    narrowed = narrowing(plan)
    ctes = _domain_ctes(list(enumerate(plan.keys)), narrowed)
    if not narrowed.links:
        return b.with_ctes(
            ctes, b.select([b.col(f"k{i}", "d") for i in range(n)], b.subquery(_domains_crossed(n), "d"))
        )
    keys = [b.col(f"k{i}", f"d{i}") for i in range(n)]
    sources = [b.table(f"domain{i}", f"d{i}") for i in range(n)] + [
        b.table(t, a, quote=True) for a, t in narrowed.tables
    ]
    linked = b.select(
        keys,
        sources[0],
        joins=[b.join(s, kind="CROSS") for s in sources[1:]],
        where=[c.copy() for c in narrowed.links],
        distinct=True,
    )
    return b.with_ctes(ctes, linked)


def _domain_ctes(keys: list[tuple[int, GroupKey]], narrowed: Narrowing = NONE) -> list[Stage]:
    """Each declared domain once, as a CTE domain<i>, narrowed by the conditions on its key
    alone: it filters the rows and supplies empty groups."""
    return [(f"domain{i}", _domain_cte(i, k, narrowed)) for i, k in keys]


_DOMAINS: dict[tuple[int, str, str], exp.Expression] = {}
DOMAINS_KEPT = 256


def _domain_cte(i: int, key: GroupKey, narrowed: Narrowing) -> exp.Select:
    """Built once per position, declaration and narrowing (the plans of many query texts share
    their keys; a domain of many values is the largest part of a small bounded query), copied out."""
    own = narrowed.own[i] if i < len(narrowed.own) else None
    return _built_once(
        _DOMAINS,
        DOMAINS_KEPT,
        (i, key.declaration(), narrowed.own_sql(i)),
        lambda: b.select([exp.Star()], b.subquery(_domain(key, i, own), f"dd{i}")),
    )


def _built_once(kept: dict, most: int, key: tuple, build: Callable[[], exp.Expression]) -> exp.Expression:
    """A copy of the tree kept under `key` in `kept`, built on its first use (the whole store is
    dropped once it holds `most` trees: plans of a session's texts share few distinct pieces)."""
    tree = kept.get(key)
    if tree is None:
        tree = build()
        if len(kept) >= most:
            kept.clear()
        kept[key] = tree
    return tree.copy()


def _domains_crossed(n: int) -> exp.Select:
    """Every combination of the n keys' domains (the CTEs domain0..)."""
    domains = [b.table(f"domain{i}") for i in range(n)]
    return b.select([exp.Star()], domains[0], joins=[b.join(d, kind="CROSS") for d in domains[1:]])


def _final(plan: Plan, keys: list[str]) -> exp.Select:
    """Keys and each group's totals as BIGINT: an engine's SUM of BIGINT is wider (DuckDB's
    HUGEINT, PostgreSQL's NUMERIC) and several times slower to hand to Python, and a total
    exceeds 2^63 only past 2^38 rows (per-row bounds are below 2^25), where the cast fails
    loudly instead of wrapping. Over declared keys, groups outside the domain (from a weighted
    copy, whose rows are not filtered by key) are dropped by the session with the empty groups
    added: a filter here would be pushed below the aggregation into the scan (DuckDB runs it as
    a join over every row, 1.6x the query)."""
    values = [b.named(b.func("COALESCE", b.cast(b.col("units", "g"), "BIGINT"), 0), "units")]
    values += [
        b.named(b.func("COALESCE", b.cast(b.col(c, "g"), "BIGINT"), 0), c)
        for j, m in enumerate(plan.measures)
        for c in columns(j, m)
    ]
    return b.select([b.col(k, "g") for k in keys] + values, b.table("per_group", "g"))


def _pivot(j: int, m: Histogram, keys: list[str]) -> exp.Select:
    """Bins in long form to one column per bin: counting per (unit, group, bin) and pivoting
    the small per-group result is several times faster than one conditional count per bin."""
    pivot = [
        b.named(b.total(b.case((exp.EQ(this=b.col(f"v{j}"), expression=b.node(k)), "s"))), f"m{j}_{k}")
        for k in range(m.bins)
    ]
    return b.select([b.col(k) for k in keys] + pivot, b.table(f"bins{j}"), group=list(keys) or None)


@dataclass(frozen=True)
class _Rows:
    """The filtered rows' own expressions: keys and per-row values (`items`), the conditions,
    the sampling coin and the FROM clause. Built once per bounded query (neutral() takes each
    through SQL text), the light part of a split gets copies."""

    items: list[exp.Expression]
    where: list[exp.Expression]
    coin: exp.Expression | None
    source: exp.Expression
    joins: list[exp.Join]


def _rows(plan: Plan, salt: str | None, weighting: WeightedCopy | SplitCopy | None) -> _Rows:
    whole = weighting if isinstance(weighting, WeightedCopy) else None
    stored = whole.values if whole is not None else {}
    alias = plan.relation.sources[0].alias
    items = [b.named(b.neutral(nonfailing(k.expr)), f"k{i}") for i, k in enumerate(plan.keys)]
    for j, m in enumerate(plan.measures):
        if j in stored:
            items.append(b.named(b.quoted(stored[j], alias), f"v{j}"))
        elif m.value is not None:
            items.append(b.named(_row_value(m), f"v{j}"))
    if whole is not None:
        items.append(b.named(b.col("__dpsql_w", alias), "w"))
    # The weighted copy holds the rows whose unit is not NULL, the only condition it admits.
    where = _conditions(plan.relation.where, plan.relation) + _read(plan.relation) if whole is None else []
    coin = None
    if plan.sample_rate is not None:
        threshold = int(Fraction(repr(plan.sample_rate)) * 2**COIN_BITS)
        secret = exp.Literal.string(salt or "")
        if salt is None:
            secret.add_comments(["a secret salt, new for each execution"])
        coin = exp.LT(this=b.anonymous("DPSQL_COIN", plan.unit.copy(), secret), expression=b.node(threshold))
    source, joins = _from(plan.relation, plan.row_id_source, weighting and weighting.table)
    return _Rows(items, where, coin, source, joins)


_ROW_VALUES: dict[tuple[type, str], exp.Expression] = {}
ROW_VALUES_KEPT = 1024


def _row_value(m: Measure) -> exp.Expression:
    """A measure's per-row value in the neutral reading, built once per measure class and exact
    fields (the repr of its signature, which tells 1 from 1.0 and quoted names' case apart):
    plans of many query texts share their measures, and building and reading the clamped
    fixed-point expression again cost every new text about 1 ms."""
    return _built_once(_ROW_VALUES, ROW_VALUES_KEPT, (type(m), repr(m.signature())), lambda: b.neutral(m.row_value()))


def _filtered(
    plan: Plan,
    rows: _Rows,
    weighting: WeightedCopy | SplitCopy | None,
    declared: list[tuple[int, GroupKey]],
    light: bool = False,
) -> exp.Select:
    """One row per private row: unit, keys and per-row values, every expression total (a
    failing row yields NULL, never an error that would depend on its value). From a split copy,
    the rows of units within the limit (`light`, built from copies of `rows`) or the others."""
    whole = weighting if isinstance(weighting, WeightedCopy) else None
    own = (lambda n: n.copy()) if light else (lambda n: n)
    items: list[exp.Expression] = []
    if plan.unit is not None and whole is None and (not light or weighting.light_unit):
        items.append(b.named(plan.unit.copy(), "unit"))
    items += [own(i) for i in rows.items]
    if not items:
        items.append(b.named(1, "one"))
    where = [own(c) for c in rows.where]
    if isinstance(weighting, SplitCopy):
        n, most = b.col("__dpsql_n", plan.relation.sources[0].alias), b.node(weighting.light_rows)
        where.append(exp.LTE(this=n, expression=most) if light else exp.GT(this=n, expression=most))
    if rows.coin is not None:
        where.append(own(rows.coin))
    filtered = b.select(items, own(rows.source), joins=[own(j) for j in rows.joins], where=where)
    # Weighted rows add to their own group only, and groups outside a declared domain are never
    # released (the final join starts from the domain): no membership filter is needed then.
    if declared and whole is None and not light:
        members = [
            exp.In(this=b.col(f"k{i}"), query=exp.Subquery(this=b.select([b.col(f"k{i}")], b.table(f"domain{i}"))))
            for i, _ in declared
        ]
        filtered = b.select([exp.Star()], b.subquery(filtered, "f"), where=members)
    return filtered


def _conditions(nodes: list[exp.Expression], rel: Relation) -> list[exp.Expression]:
    """Conjuncts, each made total on its own (a failing one must not hide the others)."""
    types = {(s.alias, c): t for s in rel.sources for c, t in s.columns.items()}
    return [b.neutral(nonfailing(c, types)) for n in nodes for c in conjuncts(n)]


def _read(rel: Relation) -> list[exp.Expression]:
    """The rows some aggregate reads (Relation.reads, sql/reads.py): one condition's conjuncts, or
    the disjunction of several, each disjunct made total on its own, as the aggregate's own CASE
    reads it: a disjunct that fails on a row (NULL) must not drop the row another one reads."""
    reads = list(rel.reads)
    if len(reads) <= 1:
        return _conditions(reads, rel)
    types = {(s.alias, c): t for s in rel.sources for c, t in s.columns.items()}
    return [exp.Paren(this=b.neutral(b.disjunction([exp.Paren(this=nonfailing(c, types)) for c in reads])))]


def _from(
    rel: Relation, row_id_source: str | None = None, weights_table: str | None = None
) -> tuple[exp.Expression, list[exp.Join]]:
    def render(source: Source) -> exp.Expression:
        if source.derived is not None:
            return b.subquery(_derived(source.derived), source.alias)
        if rel.unit_rows is not None and source.private:
            return b.subquery(_unit_rows(source, rel.unit_rows), source.alias)
        if weights_table is not None and source.private:
            return b.qualified(weights_table, source.alias)
        if row_id_source == source.alias:
            rid = exp.Window(this=exp.RowNumber(), over="OVER")
            numbered = b.select([exp.Star(), b.named(rid, "__dpsql_rid")], b.table(source.table.name, quote=True))
            return b.subquery(numbered, source.alias)
        return b.table(source.table.name, source.alias, quote=True)

    joins = []
    for j in rel.joins:
        on = _conditions([j.on], rel)
        joins.append(
            b.join(render(j.source), b.conjunction(on) if on else exp.true(), kind="LEFT" if j.kind == "left" else None)
        )
    return render(rel.sources[0]), joins


def _unit_rows(source: Source, keep: int) -> exp.Select:
    """A private table joined to other private tables: at most `keep` rows of each unit
    (scope.bound_unit_joins), the first by a hash of the row's values. A unit's rows kept
    depend on its own rows alone (the join's neighbours still differ by one unit), and are the
    same on every run over the same data (a repeated query's result can be reused). Columns are
    named and qualified, so that an engine that types columns by their source (PostgreSQL's
    lowering) reads the table's types through it."""
    names = list(source.columns)
    order = exp.Order(expressions=[exp.Ordered(this=b.anonymous("DPSQL_HASH", *[b.quoted(c, "s") for c in names]))])
    number = exp.Window(
        this=exp.RowNumber(), partition_by=[b.quoted(source.table.privacy_unit, "s")], order=order, over="OVER"
    )
    numbered = b.select(
        [b.named(b.quoted(c, "s"), c) for c in names] + [b.named(number, "__dpsql_jn")],
        b.table(source.table.name, "s", quote=True),
    )
    return b.select(
        [b.named(b.quoted(c, "j"), c) for c in names],
        b.subquery(numbered, "j"),
        where=[exp.LTE(this=b.col("__dpsql_jn", "j"), expression=b.node(keep))],
    )


def _derived(d: Derived) -> exp.Select:
    """A per-unit subquery: bounded aggregates per unit, then its outputs over them (made
    total there: the engine cannot TRY an aggregate, but it can TRY arithmetic over one)."""
    aggs = [b.named(d.unit.copy(), "unit")] + [b.named(b.neutral(a), f"a{i}") for i, a in enumerate(d.aggregates)]
    where = _conditions(d.relation.where, d.relation) + [b.not_null(d.unit.copy())]
    source, joins = _from(d.relation)
    inner = b.select(aggs, source, joins=joins, where=where, group=[d.unit.copy()])
    items = [exp.Alias(this=b.col("unit", "agg"), alias=exp.Identifier(this=d.unit_name, quoted=True))]
    items += [
        exp.Alias(this=b.neutral(nonfailing(e)), alias=exp.Identifier(this=name, quoted=True))
        for name, e in d.items.items()
    ]
    having = [b.neutral(nonfailing(d.having))] if d.having is not None else None
    return b.select(items, b.subquery(inner, "agg"), where=having)


def _domain(key: GroupKey, i: int, own=None) -> exp.Expression:
    """A key's domain, each key once as the engine sees it: declared values are cast to the
    column's type and deduplicated there (' 1', '01' and 1 are one INTEGER key), so no group
    can be released twice. `own` (narrow.Own): the query's conditions on this key alone, over
    its value (domains.COLUMN) or its public table's row, keep the keys they can be true for."""
    k = b.col(f"k{i}")
    not_null = b.not_null(k.copy())

    def narrowed(value: exp.Expression) -> list[exp.Expression]:
        if own is None:
            return []
        if own.over == ROW:
            return [c.copy() for c in own.conditions]
        return [c.copy().transform(lambda n: value.copy() if n == COLUMN else n) for c in own.conditions]

    if key.domain is not None and own is not None and own.image is not None:
        # A domain from the key's form, narrowed to the keys its column's allowed values give.
        f = b.neutral(nonfailing(own.image.expr))
        given = b.select(
            [f], b.subquery(_values(own.image.values, own.image.type_name), "d", ["c"]), where=narrowed(COLUMN)
        )
        return b.select(
            [k],
            b.subquery(_values(key.domain, key.type_name), f"d{i}", [f"k{i}"]),
            where=[not_null, exp.In(this=k.copy(), query=exp.Subquery(this=given))],
            distinct=not _distinct_as_cast(key.domain, key.type_name),
        )
    if key.domain is not None:
        return b.select(
            [k],
            b.subquery(_values(key.domain, key.type_name), f"d{i}", [f"k{i}"]),
            where=[not_null, *narrowed(k)],
            distinct=not _distinct_as_cast(key.domain, key.type_name),
        )
    if key.image is not None:
        f = b.neutral(nonfailing(key.image.expr))
        return b.select(
            [b.named(f, f"k{i}")],
            b.subquery(_values(key.image.values, key.image.type_name), "d", ["c"]),
            where=[b.not_null(f.copy()), *narrowed(COLUMN)],
            distinct=True,
        )
    table, column = key.domain_table
    # A private column's keys_from values read as the column's own type, as its rows are.
    value = b.quoted(column) if key.type_name is None else exp.TryCast(this=b.quoted(column), to=dtype(key.type_name))
    return b.select(
        [b.named(b.quoted(column), f"k{i}")],
        b.table(table, quote=True),
        where=[b.not_null(b.quoted(column)), *narrowed(value)],
        distinct=True,
    )


# Unbounded text types by name: the dialect reads CHAR(n) and VARCHAR(n) as TEXT too, but on
# PostgreSQL a cast to those pads or truncates, which can make distinct strings equal.
_TEXT = {"VARCHAR", "TEXT", "STRING", "CHARACTER VARYING"}


def _distinct_as_cast(values, type_name: str | None) -> bool:
    """Whether declared values stay distinct once cast to the column's type, so the engine need
    not deduplicate them (a hash aggregation, the most expensive part of a small grouped
    query): they do when each is already of that type (strings for a VARCHAR, integers for
    an integer type, booleans for a BOOLEAN: the cast is then the identity or NULL) and no two
    are equal. Anything else (a string for a DATE, ' 1' and 1 for an INTEGER) is left to the
    engine's cast and DISTINCT."""
    if type_name is None:
        return False
    kind = dtype(type_name, dialect="duckdb").this
    if isinstance(values, Span):  # distinct by construction; integers are native to an integer type
        return not values.dates and kind in exp.DataType.INTEGER_TYPES
    if type_name.strip().upper() in _TEXT:
        native = all(isinstance(v, str) for v in values)
    elif kind in exp.DataType.INTEGER_TYPES:
        native = all(isinstance(v, int) and not isinstance(v, bool) for v in values)
    elif kind == exp.DataType.Type.BOOLEAN:
        native = all(isinstance(v, bool) for v in values)
    else:
        return False
    return native and len(set(values)) == len(values)


SPAN_LITERALS = 64  # a Span longer than this is generated by the engine, not listed


def _values(values, type_name: str | None) -> exp.Values | exp.Select:
    """The declared values as a one-column relation: a VALUES list, or for a long Span a series
    the engine generates."""
    if isinstance(values, Span) and len(values) > SPAN_LITERALS:
        return _series(values, type_name)
    rows = [exp.Tuple(expressions=[_typed(literal(v), type_name)]) for v in values]
    return exp.Values(expressions=rows)


def _typed(value: exp.Expression, type_name: str | None) -> exp.Expression:
    if type_name and not isinstance(value, exp.Cast):
        return exp.TryCast(this=value, to=dtype(type_name, dialect="duckdb"))
    return value


def _series(span: Span, type_name: str | None) -> exp.Select:
    """first + i for i in 0 .. size - 1, from crossed tables of the ten digits: plain SQL that
    DuckDB, PostgreSQL and Spark all read, a few nodes however long the span."""
    places = max(len(str(span.size - 1)), 1)
    digits = [b.subquery(_values(range(10), None), f"p{j}", ["n"]) for j in range(places)]
    i: exp.Expression = b.col("n", "p0")
    for j in range(1, places):
        i = exp.Add(this=i, expression=exp.Mul(this=b.node(10**j), expression=b.col("n", f"p{j}")))
    first = literal(span.first)
    if span.dates:
        value: exp.Expression = exp.Cast(
            this=exp.DateAdd(this=first, expression=exp.Paren(this=i.copy()), unit=exp.var("DAY")), to=dtype("DATE")
        )
    else:
        value = exp.Add(this=first, expression=exp.Paren(this=i.copy()))
    return b.select(
        [b.named(_typed(value, type_name), "c")],
        digits[0],
        joins=[b.join(d, kind="CROSS") for d in digits[1:]],
        where=[exp.LT(this=exp.Paren(this=i), expression=b.node(span.size))],
    )

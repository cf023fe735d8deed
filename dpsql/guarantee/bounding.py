"""Contribution bounding strategies: each one writes the SQL stages that bound what one privacy
unit adds to a measure and, next to them, the sensitivity those stages guarantee. Calibration
reads only the sensitivity, the rewrite only the stages, so the two cannot drift apart.

The stages read `filtered` (one row per private row: unit, keys k0.., per-row integers v0..,
see rewrite.py) and end in `per_group` (keys, units, m0..): a measure's total per group.

- PerGroupCap: a unit adds at most max_rows rows to a group (its sum scaled by max_rows / n
  when it has n > max_rows, truncated toward zero) in at most G groups; with declared keys, a
  unit in more than G groups has each share scaled by G / (its groups). L1 = G * max_rows * R,
  L2^2 = G * (max_rows * R)^2 for a per-row bound R (measures.py).
- PartitionSelection: the same, keeping at most G groups per unit by a hash of its keys (the
  L0 bound partition selection needs, calibration.py).
- RowUnits: every row is its own unit (G = max_rows = 1): one aggregation, no per-unit stage.
- TotalCap: a unit adds at most C rows to the whole query: its shares are scaled by
  C / max(its rows, C), and a SUM's own total by C R / max(||own sums||_1, C R). L1 = C * R.
- L2Clip: under Gaussian noise, a unit's vector of rows per group is scaled by
  C / max(||n||_2, C): L2 = C * R, L1 = C * R * ceil(sqrt(D)) over D groups.
- WeightedCopy: TotalCap computed once per table: each row carries its unit's weight
  floor(C 2^b / max(N, C)) (N its rows in the table), so bounding is one weighted scan; a unit's
  n <= N rows add at most n C / max(N, C) <= C. Same sensitivity as the TotalCap it serves.
- SplitCopy: any query over one private table (filtered, or joined to public tables on unique
  keys) whose strategy has a per-unit stage. A unit with few enough rows N in the whole table
  (N <= C under a total bound, N <= min(G, max_rows) under per-group caps) is within every
  limit whatever the query keeps of it, so its rows are summed as they are; only the other
  units (the copy's tail, as it is ordered by N) go through the strategy's per-unit stages.
  Each unit falls in one part whatever the others hold, so the sensitivity is the strategy's,
  and the totals equal the strategy's own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from sqlglot import exp

from ..errors import OperationalError
from ..sql import build as b
from .measures import COUNT_BITS, Count, Histogram, Measure, weighted

Stage = tuple[str, exp.Select]


@dataclass(frozen=True)
class PerGroupCap:
    max_groups: int
    max_rows: int
    keyed: bool  # the query has GROUP BY keys
    scale_groups: bool = False

    def groups(self, domain_size: int | None) -> int:
        """L0 bound: a unit touches at most max_groups groups, and no more than exist."""
        if not self.keyed:
            return 1
        if domain_size is not None:
            return max(1, min(self.max_groups, domain_size))
        return self.max_groups

    # Sensitivity ------------------------------------------------------------------------
    def l1(self, m: Measure, domain_size: int | None) -> int | None:
        """L1 sensitivity of the measure's vector over all groups, in its integer units (None:
        not bounded, as under L2 clipping over a domain of unknown size)."""
        return self.groups(domain_size) * m.group_bound(self.max_rows)

    def l2_squared(self, m: Measure, domain_size: int | None) -> int:
        return self.groups(domain_size) * m.group_bound(self.max_rows) ** 2

    def light_rows(self, domain_size: int | None) -> int:
        """A unit with at most this many rows in the whole table is within every limit of this
        strategy whatever a query keeps of it (SplitCopy): with n rows it has at most n rows in
        any group, and reaches at most n groups, and never more than the query has (one when
        ungrouped, D for a declared domain of D), so the group limit binds only when the query
        may have more groups than max_groups."""
        if not self.keyed or (domain_size is not None and domain_size <= self.max_groups):
            return self.max_rows  # every unit is within the group limit
        return min(self.max_groups, self.max_rows)

    def planned(self, m: Measure, mechanism: str, domain_size: int | None) -> int:
        """The sensitivity a PLD-planned measure's noise is scaled to: its L2 (Gaussian, one
        mechanism), or one group's bound (Laplace, one mechanism per group: G of them)."""
        if mechanism == "gaussian":
            return math.isqrt(self.l2_squared(m, domain_size) - 1) + 1 if m.row_bound else 0
        return m.group_bound(self.max_rows)

    def planned_copies(self, mechanism: str, domain_size: int | None) -> int:
        return self.groups(domain_size) if mechanism == "laplace" else 1

    # SQL --------------------------------------------------------------------------------
    def stages(self, measures: Sequence[Measure], keys: list[str], domain_size: int | None) -> list[Stage]:
        stages = [("per_unit", self._per_unit(measures, keys, domain_size))]
        joins = []
        if self._joins_unit_groups:
            stages.append(("unit_groups", self._unit_groups(measures)))
            joins = [b.join(b.table("unit_groups"), using=["unit"])]
        aggs = [b.named(b.count(), "units")]
        for j, m in enumerate(measures):
            if not isinstance(m, Histogram):
                aggs.append(b.named(b.total(self._share(m, j, domain_size)), f"m{j}"))
        return stages + [
            ("per_group", b.select([b.col(k) for k in keys] + aggs, b.table("per_unit"), joins=joins, group=list(keys)))
        ]

    @property
    def _joins_unit_groups(self) -> bool:
        return self.scale_groups

    def _per_unit(self, measures: Sequence[Measure], keys: list[str], domain_size: int | None) -> exp.Select:
        partials = [b.named(b.count(), "n")] + [p for j, m in enumerate(measures) for p in m.partials(j)]
        group = ["unit"] + keys
        return b.select([b.col(c) for c in group] + partials, b.table("filtered"), group=group)

    def _unit_groups(self, measures: Sequence[Measure]) -> exp.Select:
        return b.select([b.col("unit"), b.named(b.count(), "groups")], b.table("per_unit"), group=["unit"])

    def _scaled(
        self, share: exp.Expression, domain_size: int | None, column: exp.Column | None = None
    ) -> exp.Expression:
        """A unit's share in one group times G / max(its groups, G), truncated toward zero, so a
        scaled share never exceeds the unscaled bound."""
        if not self.scale_groups:
            return share
        g = self.groups(domain_size)
        return b.idiv(b.mul(share, g), b.func("GREATEST", column or b.col("groups"), g))

    def _share(self, m: Measure, j: int, domain_size: int | None) -> exp.Expression:
        return self._scaled(m.capped(j, self.max_rows), domain_size)

    def histogram_stages(self, j: int, m: Histogram, keys: list[str], domain_size: int | None) -> list[Stage]:
        """Histogram j in long form, one row per group and non-empty bin: a unit's c rows in a
        bin count as a share of its n rows in the group (c * max_rows / n when n > max_rows), so
        its bins add up to a count's bound."""
        cell = [b.col(k) for k in keys] + [b.col(f"v{j}")]
        not_null = b.not_null(b.col(f"v{j}"))
        cells = b.select(
            [b.col("unit")] + cell + [b.named(b.count(), "c")],
            b.table("filtered"),
            where=[not_null],
            group=["unit"] + keys + [f"v{j}"],
        )
        on: list[exp.Expression] = [exp.EQ(this=b.col("unit", "c"), expression=b.col("unit", "p"))]
        on += [exp.NullSafeEQ(this=b.col(k, "c"), expression=b.col(k, "p")) for k in keys]
        joins = [b.join(b.table("per_unit", "p"), b.conjunction(on))]
        if self._joins_unit_groups:
            joins.append(
                b.join(b.table("unit_groups", "ug"), exp.EQ(this=b.col("unit", "ug"), expression=b.col("unit", "c")))
            )
        c_cols = [b.col(k, "c") for k in keys] + [b.col(f"v{j}", "c")]
        share = self._cell_share(m, j, domain_size)
        bins = b.select(
            c_cols + [b.named(b.total(share), "s")],
            b.table(f"cells{j}", "c"),
            joins=joins,
            group=[c.copy() for c in c_cols],
        )
        return [(f"cells{j}", cells), (f"bins{j}", bins)]

    def _cell_share(self, m: Histogram, j: int, domain_size: int | None) -> exp.Expression:
        n, c, unit = b.col(f"n{j}", "p"), b.col("c", "c"), m.row_bound
        capped = b.case(
            (exp.GT(this=n, expression=b.node(self.max_rows)), b.idiv(b.mul(c, self.max_rows * unit), n.copy())),
            default=b.mul(c.copy(), unit) if m.bits else c.copy(),
        )
        return self._scaled(capped, domain_size, b.col("groups", "ug"))


@dataclass(frozen=True)
class PartitionSelection(PerGroupCap):
    """Keys without a declared domain: each unit keeps at most G of its groups, chosen by a
    keyed hash of the unit (if it is a column of the rows) and the keys."""

    unit_in_hash: bool = True

    def _per_unit(self, measures: Sequence[Measure], keys: list[str], domain_size: int | None) -> exp.Select:
        q = super()._per_unit(measures, keys, domain_size)
        hashed = b.anonymous("DPSQL_HASH", *(["unit"] if self.unit_in_hash else []), *keys)
        rank = exp.Window(
            this=exp.RowNumber(),
            partition_by=[b.col("unit")],
            order=exp.Order(expressions=[exp.Ordered(this=hashed, nulls_first=False)]),
            over="OVER",
        )
        q.set("qualify", exp.Qualify(this=exp.LTE(this=rank, expression=b.node(self.groups(domain_size)))))
        return q


@dataclass(frozen=True)
class RowUnits(PerGroupCap):
    """Every row is its own unit: a group's totals are plain aggregates of the rows."""

    def stages(self, measures: Sequence[Measure], keys: list[str], domain_size: int | None) -> list[Stage]:
        aggs = [b.named(b.count(), "units")]
        per_row = [(j, m.per_row(j)) for j, m in enumerate(measures)]
        aggs += [b.named(total, f"m{j}") for j, total in per_row if total is not None]
        return [("per_group", b.select([b.col(k) for k in keys] + aggs, b.table("filtered"), group=list(keys)))]

    def histogram_stages(self, j: int, m: Histogram, keys: list[str], domain_size: int | None) -> list[Stage]:
        return [(f"bins{j}", _bins_of_rows(j, keys, b.mul(b.count(), m.row_bound)))]


@dataclass(frozen=True)
class TotalCap(PerGroupCap):
    """At most `limit` rows of a unit in the whole query, spread over groups as they fall: the
    L1 of max_groups * max_rows per group when a unit may reach max_groups groups, and far
    less data cut away. A unit count is still bounded per group (one per unit and group)."""

    limit: int = 0

    def l1(self, m: Measure, domain_size: int | None) -> int | None:
        return super().l1(m, domain_size) if not m.weighted_rows else self.limit * m.row_bound

    def l2_squared(self, m: Measure, domain_size: int | None) -> int:
        return super().l2_squared(m, domain_size) if not m.weighted_rows else (self.limit * m.row_bound) ** 2

    def planned(self, m: Measure, mechanism: str, domain_size: int | None) -> int:
        if mechanism == "gaussian":
            return super().planned(m, mechanism, domain_size)
        return self.l1(m, domain_size) or 0  # the whole vector is one mechanism

    def planned_copies(self, mechanism: str, domain_size: int | None) -> int:
        return 1

    def light_rows(self, domain_size: int | None) -> int:
        return self.limit  # under L2Clip too: a unit's L2 norm is at most its rows

    @property
    def _joins_unit_groups(self) -> bool:
        return True

    def _unit_groups(self, measures: Sequence[Measure]) -> exp.Select:
        items = [b.col("unit"), b.named(b.count(), "groups"), self._unit_scale()]
        for j, m in enumerate(measures):
            if m.own_norm:
                items.append(
                    b.named(own_weight(b.total(exp.Abs(this=b.col(f"s{j}"))), self.limit * m.row_bound), f"w{j}")
                )
        return b.select(items, b.table("per_unit"), group=["unit"])

    def _unit_scale(self) -> exp.Expression:
        return b.named(b.total("n"), "unit_rows")

    def _share(self, m: Measure, j: int, domain_size: int | None) -> exp.Expression:
        if not m.weighted_rows:
            return super()._share(m, j, domain_size)
        if m.own_norm:
            return weighted(b.col(f"s{j}"), b.col(f"w{j}"))
        return self._total_share(m.raw(j))

    def _total_share(self, value: exp.Expression, ug: str | None = None) -> exp.Expression:
        """A unit's share scaled by C / max(its rows, C), truncated toward zero."""
        return b.idiv(b.mul(value, self.limit), b.func("GREATEST", b.col("unit_rows", ug), self.limit))

    def _cell_share(self, m: Histogram, j: int, domain_size: int | None) -> exp.Expression:
        return self._total_share(b.mul(b.col("c", "c"), m.row_bound), "ug")


@dataclass(frozen=True)
class SelectedTotalCap(TotalCap, PartitionSelection):
    """A total bound over keys without a declared domain: each unit keeps at most max_groups of
    its groups, chosen by the keyed hash (PartitionSelection's per-unit stage), and its rows in
    them are weighted to `limit` in all (TotalCap's shares, its rows counted in the groups it
    keeps). A unit with at most `limit` rows is in at most that many groups, so it keeps at most
    min(limit, max_groups): measures have TotalCap's L1 of limit rows, and partition selection
    counts a unit in at most that many groups, one each."""

    def groups(self, domain_size: int | None) -> int:
        return max(1, min(self.limit, super().groups(domain_size)))

    def light_rows(self, domain_size: int | None) -> int:
        """A unit of n rows reaches at most n groups: within the total bound and the groups kept
        only when n is within both (else the hash chooses which groups it keeps); the groups
        kept, min(limit, ...), are never more than the bound."""
        return self.groups(domain_size)


@dataclass(frozen=True)
class L2Clip(TotalCap):
    """A unit's rows per group n scaled by the fixed-point weight floor(2^b C / max(||n||_2, C)).
    The norm is a double SQRT made an upper bound by a relative margin of 2^-40 (far above its
    rounding error); every engine rounds the same IEEE operations alike."""

    def l1(self, m: Measure, domain_size: int | None) -> int | None:
        if self.keyed and not m.own_norm and m.weighted_rows:  # ||x||_1 <= ceil(sqrt(D)) ||x||_2 over D groups
            if domain_size is None:
                return None
            return self.limit * m.row_bound * (math.isqrt(max(domain_size, 1) - 1) + 1)
        return super().l1(m, domain_size)

    def _unit_scale(self) -> exp.Expression:
        norm = b.mul(
            exp.Sqrt(this=b.cast(b.total(b.mul("n", "n")), "DOUBLE")),
            b.binary(exp.Add, 1, exp.Pow(this=b.node(2), expression=b.node(-40))),
        )
        weight = b.div(self.limit * 2**COUNT_BITS, b.func("GREATEST", norm, self.limit))
        return b.named(b.cast(exp.Floor(this=weight), "BIGINT"), "unit_weight")

    def _total_share(self, value: exp.Expression, ug: str | None = None) -> exp.Expression:
        return weighted(value, b.col("unit_weight", ug))


@dataclass(frozen=True)
class WeightedCopy:
    """A TotalCap read from the engine's weighted copy of the one private table: `table` holds
    its rows with weight column __dpsql_w, and `values` maps a measure's index to the column
    holding its ready-weighted per-row values (copy_column); `totals`, if the engine keeps
    them, a one-row relation of those columns' sums under the same names. Engine state, chosen
    at rewrite."""

    bound: TotalCap
    table: str
    values: Mapping[int, str] = field(default_factory=dict)
    totals: str | None = None

    def reads_totals(self, measures: Sequence[Measure], keys: Sequence[object]) -> bool:
        """Whether the query needs nothing of the copy but its totals: kept by the engine, no
        GROUP BY, and every measure a SUM of a stored column or of the weights (COUNT(*))."""
        return (
            self.totals is not None
            and not keys
            and all((isinstance(m, Count) and m.value is None) or j in self.values for j, m in enumerate(measures))
        )

    def l1(self, m: Measure, domain_size: int | None) -> int | None:
        return self.bound.l1(m, domain_size)

    def l2_squared(self, m: Measure, domain_size: int | None) -> int:
        return self.bound.l2_squared(m, domain_size)

    def stages(self, measures: Sequence[Measure], keys: list[str], domain_size: int | None) -> list[Stage]:
        aggs = []
        for j, m in enumerate(measures):
            total = m.weighted(j, j in self.values)
            if total is not None:
                aggs.append(b.named(total, f"m{j}"))
        # unit counts serve partition selection only, excluded here; without keys or another
        # aggregate (a plan of histograms alone, whose bins are other stages) an aggregate, so
        # that the stage has one row and not one per row
        aggs.insert(0, b.named(b.node(0) if keys or aggs else b.mul(b.count(), 0), "units"))
        return [("per_group", b.select([b.col(k) for k in keys] + aggs, b.table("filtered"), group=list(keys)))]

    def histogram_stages(self, j: int, m: Histogram, keys: list[str], domain_size: int | None) -> list[Stage]:
        return [(f"bins{j}", _bins_of_rows(j, keys, b.total("w")))]


@dataclass(frozen=True)
class SplitCopy:
    """A strategy over the weighted copy `table` split by its units' rows in the whole table
    (column __dpsql_n): CTE `light` holds the query's rows of units with at most `light_rows`,
    summed as they are, CTE `filtered` the rest, which `bound` bounds per unit as it would
    without the copy. `distinct_units`: the light part counts its distinct units per group
    (partition selection's count); else those counts are 0 (no release reads them)."""

    bound: PerGroupCap
    table: str
    light_rows: int
    distinct_units: bool = False

    @property
    def light_unit(self) -> bool:
        """The light part needs each row's unit: to count distinct units where a unit may
        have several rows (with one row each, a row is a unit)."""
        return self.distinct_units and self.light_rows > 1

    def l1(self, m: Measure, domain_size: int | None) -> int | None:
        return self.bound.l1(m, domain_size)

    def l2_squared(self, m: Measure, domain_size: int | None) -> int:
        return self.bound.l2_squared(m, domain_size)

    def stages(self, measures: Sequence[Measure], keys: list[str], domain_size: int | None) -> list[Stage]:
        units = b.node(0)
        if self.distinct_units:
            units = exp.Count(this=exp.Distinct(expressions=[b.col("unit")])) if self.light_unit else b.count()
        aggs = [b.named(units, "units")]
        aggs += [b.named(m.rows_total(j), f"m{j}") for j, m in enumerate(measures) if not isinstance(m, Histogram)]
        light = b.select([b.col(k) for k in keys] + aggs, b.table("light"), group=list(keys))
        heavy = self.bound.stages(measures, keys, domain_size)
        names = [a.alias for a in aggs]
        return [
            *heavy[:-1],
            ("heavy_group", heavy[-1][1]),
            ("light_group", light),
            ("per_group", _summed("light_group", "heavy_group", keys, names)),
        ]

    def histogram_stages(self, j: int, m: Histogram, keys: list[str], domain_size: int | None) -> list[Stage]:
        cell = keys + [f"v{j}"]
        light = b.select(
            [b.col(k) for k in cell] + [b.named(b.mul(b.count(), m.row_bound), "s")],
            b.table("light"),
            where=[b.not_null(b.col(f"v{j}"))],
            group=cell,
        )
        heavy = self.bound.histogram_stages(j, m, keys, domain_size)
        return [
            *heavy[:-1],
            (f"heavy_bins{j}", heavy[-1][1]),
            (f"light_bins{j}", light),
            (f"bins{j}", _summed(f"light_bins{j}", f"heavy_bins{j}", cell, ["s"])),
        ]


def _bins_of_rows(j: int, keys: list[str], total: exp.Expression) -> exp.Select:
    """Histogram j's bins per group straight from the filtered rows: `total` of each cell's rows."""
    cell = keys + [f"v{j}"]
    return b.select(
        [b.col(k) for k in cell] + [b.named(total, "s")],
        b.table("filtered"),
        where=[b.not_null(b.col(f"v{j}"))],
        group=cell,
    )


def _summed(first: str, second: str, keys: list[str], values: list[str]) -> exp.Select:
    """Two partial results with the same columns (keys, then values) added up per key."""
    both = exp.union(b.select([exp.Star()], b.table(first)), b.select([exp.Star()], b.table(second)), distinct=False)
    return b.select(
        [b.col(k) for k in keys] + [b.named(b.total(v), v) for v in values], b.subquery(both, "parts"), group=list(keys)
    )


def own_weight(norm: exp.Expression, bound: int) -> exp.Expression:
    """A SUM's weight floor(2^b K / max(norm, K)), K = C * row_bound its L1 sensitivity, `norm`
    the L1 norm of the unit's own sums: a unit's shares add at most K in all however many rows
    it has, and a unit whose values are small keeps all of them. At most 2^b: a BIGINT."""
    return b.cast(b.idiv(bound << COUNT_BITS, b.func("GREATEST", norm, bound)), "BIGINT")


def copy_column(m: Measure, limit: int, norm: str | None = None, weight: str = "__dpsql_w") -> exp.Expression:
    """A count or sum measure's weighted per-row value, for the engine's weighted copy: the
    row's weight where its value is not NULL, or its value times the weight (for a SUM's own
    total, the weight from its unit's sum of |value| in column `norm` (unit_norm), a bound for
    any grouping and filter), as the bounded query would apply them."""
    value = m.row_value()
    assert value is not None  # a weighted copy stores measures that read a value
    w: exp.Expression = b.col(weight)
    if m.own_norm:
        assert norm is not None  # the column of the unit's norm (unit_norm)
        w = own_weight(b.col(norm), limit * m.row_bound)
    return m.weighted_row(value, w)


def unit_norm(m: Measure) -> exp.Expression:
    """A unit's sum of |per-row value| over the whole table, an aggregate (a SUM's own norm)."""
    return b.total(exp.Abs(this=exp.Paren(this=m.row_value())))


# A weighted copy's columns (engines' weighted_copy): the rows of the row's unit in the whole
# table, and the row's weight.
UNIT_ROWS, ROW_WEIGHT = "__dpsql_n", "__dpsql_w"
BIGINT_MAX = 2**63 - 1


def row_weight(rows: exp.Expression, limit: int, bits: int = COUNT_BITS) -> exp.Expression:
    """The per-row weight of a weighted copy, floor(C 2^b / max(N, C)) for C = `limit` and N =
    `rows` (the row's unit's rows in the whole table, at least 1): a unit's n <= N rows weigh
    n C 2^b / max(N, C) <= C 2^b together, so it adds at most C rows (WeightedCopy's bound).
    Integers throughout: C 2^b a BIGINT constant, divided by a BIGINT with integer division
    (IntDiv: DuckDB's //, Spark's DIV, PostgreSQL's / of integers after its lowering), which
    truncates, the floor of a positive quotient. No float, so no engine rounds it upward."""
    top = limit << bits
    if top > BIGINT_MAX:  # it would not fit a BIGINT: an engine would fail, or Spark give NULL
        raise OperationalError(
            f"a unit's row limit of {limit} is too large to weight rows with 64-bit integers",
            sqlstate="54000",
            hint=f"lower the table's max_contributions (or max_groups * "
            f"max_rows) below {BIGINT_MAX >> bits}; nothing was charged",
        )
    return b.idiv(b.cast(top, "BIGINT"), b.func("GREATEST", rows, limit))


def unit_rows(source: exp.Table, unit: str, aggregates: Sequence[exp.Expression] = ()) -> exp.Select:
    """Each unit's rows in `source` (column __dpsql_n) and `aggregates` over them, one row per
    non-NULL unit (a row whose unit is NULL belongs to none, and is in no weighted copy)."""
    return b.select(
        [b.quoted(unit), b.named(b.count(), UNIT_ROWS), *aggregates],
        source,
        where=[b.not_null(b.quoted(unit))],
        group=[b.quoted(unit)],
    )


def weighted_rows(
    source: exp.Table,
    units: exp.Expression,
    unit: str,
    limit: int,
    bits: int = COUNT_BITS,
    carried: Sequence[str] = (),
    where: exp.Expression | None = None,
) -> exp.Select:
    """The weighted copy's rows: those of `source` (as t) joined to their unit's in `units` (as
    u, unit_rows'), with its __dpsql_n, the columns `carried` from it, and the weight
    __dpsql_w (row_weight) of limit `limit`, `where` holds (all rows without one)."""
    items = [
        exp.Column(this=exp.Star(), table=exp.to_identifier("t")),
        b.col(UNIT_ROWS, "u"),
        *[b.quoted(c, "u") for c in carried],
        b.named(row_weight(b.col(UNIT_ROWS, "u"), limit, bits), ROW_WEIGHT),
    ]
    source = source.copy()
    source.set("alias", exp.TableAlias(this=exp.to_identifier("t")))
    on = exp.EQ(this=b.quoted(unit, "t"), expression=b.quoted(unit, "u"))
    return b.select(items, source, joins=[b.join(units, on)], where=[where] if where is not None else None)


Bounding = PerGroupCap | WeightedCopy | SplitCopy


def choose(
    *,
    unit: bool,
    row_ids: bool,
    keyed: bool,
    declared: bool,
    domain_size: int | None,
    max_groups: int,
    max_rows: int,
    max_contributions: int | None,
    mechanism: str,
    sampled: bool,
    unit_in_hash: bool,
) -> PerGroupCap:
    """The strategy for a query: a total bound where it costs no more noise than a per-group
    one (declared by the policy as max_contributions, or a unit may reach max_groups groups;
    under Gaussian noise only when declared, since C rows cost C in L2 against sqrt(max_groups)
    * max_rows per group), else per-group caps, with partition selection for undeclared keys."""
    if not unit:
        return RowUnits(max_groups, max_rows, keyed)
    if keyed and not declared:
        if max_contributions is not None and mechanism == "laplace" and not (row_ids or sampled):
            return SelectedTotalCap(max_groups, max_rows, keyed, unit_in_hash=unit_in_hash, limit=max_contributions)
        return PartitionSelection(max_groups, max_rows, keyed, unit_in_hash=unit_in_hash)
    # With declared keys, a unit in more than max_groups groups has each share scaled down.
    scale = keyed and (domain_size is None or domain_size > max_groups)
    per_group = PerGroupCap(max_groups, max_rows, keyed, scale)
    helps = max_contributions is not None or per_group.groups(domain_size) == max_groups
    if row_ids or sampled or not helps or (mechanism != "laplace" and max_contributions is None):
        return per_group
    kind = L2Clip if mechanism == "gaussian" else TotalCap
    return kind(max_groups, max_rows, keyed, scale, limit=max_contributions or max_groups * max_rows)

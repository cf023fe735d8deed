"""The plan of one DP query and its frozen parts: the keys it groups by (GroupKey), the measures
it takes and the estimates the analyst wrote (Estimate), the bounding strategy. Built once by
sql/analyze.py; what was calibrated and charged is what runs, so everything downstream of the
analysis (rewrite, calibration, guard, release) reads this record and nothing else."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Sequence

from sqlglot import exp

from ..sql import build as b
from ..sql.domains import Image
from ..sql.frozen import Owned
from ..sql.scope import Relation, conjuncts
from .bounding import L2Clip, PerGroupCap, TotalCap
from .measures import COUNT_BITS, Count, Histogram, Measure, Units


@dataclass(frozen=True)
class Estimate:
    """One aggregate the analyst wrote, as a function of measures."""

    # its family's name in families.FAMILIES: count, units, sum, avg, var_pop, ..., quantile, min, max, distinct
    func: str
    text: str
    count: int | None = None
    total: int | None = None
    squares: int | None = None
    lower: float = 0.0
    upper: float = 0.0
    centre: float = 0.0
    quantile: float | None = None  # the fraction p of a quantile (0 for MIN, 1 for MAX)
    integral: bool = False  # a quantile of integer values: answered as an integer


@dataclass(frozen=True)
class GroupKey:
    name: str
    expr: Owned[exp.Expression] = Owned()
    domain: tuple[Any, ...] | None = None
    domain_table: tuple[str, str] | None = None
    type_name: str | None = None
    image: Image | None = None  # keys = f(c) over a column's declared values

    @property
    def declared(self) -> bool:
        return self.domain is not None or self.domain_table is not None or self.image is not None

    def declaration(self) -> str:
        """What a declared key's domain depends on (with the data version, for public tables),
        exactly: a repr, since as tuples the values 1, 1.0 and True are equal, and a VARCHAR key
        declared [1] must not share the domain of one declared [1.0] ('1' is not '1.0')."""
        image = None if self.image is None else (self.image.expr.sql(), self.image.values, self.image.type_name)
        return repr((self.domain, self.domain_table, self.type_name, image))


@dataclass(frozen=True)
class Plan:
    """Everything the rewrite, the mechanisms and the accountant need about one DP query:
    final once built (frozen), so what was calibrated is what runs."""

    relation: Relation
    unit_in_hash: bool
    row_id_source: str | None
    keys: tuple[GroupKey, ...]
    measures: tuple[Measure, ...]
    estimates: tuple[Estimate, ...]
    output_names: tuple[str, ...]
    max_groups: int
    max_rows: int
    bounding: PerGroupCap  # choose()'s strategy; a weighted copy is chosen per run (rewrite's weighting)
    unit: Owned[exp.Expression | None] = Owned()  # a copy on every read, as every tree a plan holds
    post: Owned[exp.Select] = Owned()
    sample_rate: float | None = None  # privacy units are Poisson-sampled at this rate
    item_estimates: tuple[frozenset[int], ...] = ()  # per select item, the estimates it uses
    max_contributions: int | None = None
    # (ratio as written, the AVG it is answered as): sql/mean_ratio.py, for EXPLAIN
    means_read: tuple[tuple[str, str], ...] = ()

    def with_relation(self, relation: Relation) -> Plan:
        """This plan over `relation` (its other parts shared, trees included: a plan hands out
        copies only, so the outer part stays one object, whose checks are kept: bounded.py)."""
        plan = copy.copy(self)
        object.__setattr__(plan, "relation", relation)
        return plan

    @property
    def declared(self) -> bool:
        return all(k.declared for k in self.keys)

    @property
    def needs_selection(self) -> bool:
        return bool(self.keys) and not self.declared

    def literal_domain_size(self) -> int | None:
        """Size of the cross product of literal key domains (None if a domain is a table's)."""
        return literal_domain_size_of(self.keys)

    def groups_per_unit(self, domain_size: int | None) -> int:
        return self.bounding.groups(domain_size)

    @property
    def total_bound(self) -> bool:
        """Each unit's rows are bounded in the whole query, not per group (bounding.TotalCap)."""
        return isinstance(self.bounding, TotalCap)

    @property
    def total_rows(self) -> int:
        """A unit's rows in the whole query under a total bound."""
        return self.bounding.limit if isinstance(self.bounding, TotalCap) else self.max_groups * self.max_rows

    def weightable(self) -> bool:
        """Whether total bounding can use per-row weights computed once per table: one private
        base table, no joins (so a row appears once), no filter, and measures that are weighted
        sums: counts and histograms with fractional bits (a floored weight of a whole row would
        drop heavy units), or, without GROUP BY, a count floored once from the weighted sum.
        Not under L2 clipping with GROUP BY: a unit's L2 norm depends on the query's groups."""
        rel = self.relation
        unit_check = b.not_null(self.unit).sql() if self.unit is not None else None
        # A filter would keep few rows of a heavy unit that the table-wide weight still scales
        # down (valid, but biased): filtered queries bound per query instead, as do queries whose
        # aggregates all read under FILTER (Relation.reads, sql/reads.py).
        unfiltered = all(c.sql() == unit_check for c in rel.where) and not rel.reads
        l2_keyed = isinstance(self.bounding, L2Clip) and bool(self.keys)
        return (
            self.total_bound
            and unfiltered
            and not l2_keyed
            and len(rel.sources) == 1
            and not rel.joins
            and rel.sources[0].derived is None
            and rel.sources[0].private
            and isinstance(self.unit, exp.Column)
            and not any(isinstance(m, Units) for m in self.measures)
            and all(m.bits == COUNT_BITS for m in self.measures if isinstance(m, Histogram))
            # Whole-row counts: floored once per group, which keeps a unit's L1 only with one group.
            # (a spread's count of FINE_COUNT_BITS reads the same weights, scaled up: Measure.weighted)
            and (not self.keys or all(m.bits >= COUNT_BITS for m in self.measures if isinstance(m, Count)))
        )

    def split_keys(self) -> list[tuple[str, str]] | None:
        """Whether the bounding may read the weighted copy split by its units' rows
        (bounding.SplitCopy) under any filter: one private base table, first in FROM, joined
        only to public tables. A unit with N rows in the whole table keeps at most N in the
        query only if no join repeats a row, so each join must match a column of its table to
        an expression over the tables before it: the (table, column) pairs returned must be
        unique keys of those public tables, which the caller checks on the data. None: not
        applicable."""
        rel = self.relation
        first = rel.sources[0]
        if not (
            first.private
            and first.derived is None
            and isinstance(self.unit, exp.Column)
            and self.sample_rate is None
            and self.row_id_source is None
            and len(rel.private_sources) == 1
            and not any(isinstance(m, Units) for m in self.measures)
        ):
            return None
        keys = []
        for step in rel.joins:
            column = _matched_column(step.on, step.source.alias)
            if step.source.private or step.source.derived is not None or column is None:
                return None
            keys.append((step.source.table.name, column))
        return keys


def _matched_column(on: exp.Expression, alias: str) -> str | None:
    """A column of the joined table `alias` that its ON condition equates to an expression over
    the other tables (a unique key there makes the join match at most one row), or None."""
    for term in conjuncts(on):
        if not isinstance(term, exp.EQ):
            continue
        for mine, other in ((term.this, term.expression), (term.expression, term.this)):
            if (
                isinstance(mine, exp.Column)
                and mine.table == alias
                and all(c.table != alias for c in other.find_all(exp.Column))
            ):
                return mine.name
    return None


def literal_domain_size_of(keys: Sequence[GroupKey]) -> int | None:
    size = 1
    for k in keys:
        if k.domain is None:
            return None
        size *= len(k.domain)
    return size

"""Contribution bounds chosen per query (SET dpsql.bounds = auto), with part of its epsilon.

The policy's limits are written for every query a table may see, so for most queries they are
far looser than the data needs: a SUM of costs by ward may let a patient add 40 rows of 10,000
while nine patients in ten have a handful of visits costing under 3,000. The noise follows the
limits, and the answer is mostly noise. Here a query spends `SHARE` of its epsilon on a
*profile* of its own rows (after its FROM, JOIN and WHERE) and picks, from that profile alone,
the limits that minimise a model of its error (noise plus what truncation and clipping cut):

- a total bound C on a unit's rows in the whole query (TotalCap: a unit with n > C rows has
  each of its rows weighted C / n), at most the policy's total bound
  (max_contributions, or max_groups * max_rows);
- for each summed column with lower bound >= 0, an upper clamp U at most the policy's upper bound.
  Under a total bound a SUM clips each unit's own total at K = C * U (TotalCap's own norm), so
  C = 1 with U = K is a clip of unit totals at K (each row at most its unit's total), and the
  choice reaches clips of unit totals below the policy's U as well as C times it.

The profile is two kinds of histogram over fixed, public bins, each with L1 sensitivity MASS
under adding or removing one unit, noised with discrete Laplace noise (OpenDP):

- rows: the number of units per bin of their row count n (one unit: MASS in one bin);
- values (one per summed column): the column's clamped values, each of a unit's n rows
  weighing floor(MASS / n), so a unit adds at most MASS in all.

The choice is post-processing of the profile; the release then runs at the rest of the epsilon
with the sensitivity of the chosen limits, which the plan computes as for any query. The charge
covers both before the profile is run (sequential composition: SHARE * ε + (1 - SHARE) * ε).
Everything here is pure but the noise; the session runs the profile's SQL.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from fractions import Fraction
from types import MappingProxyType
from typing import Sequence

from sqlglot import exp

from .accounting.cost import Part
from .answer_record import ChosenBounds, ChosenLimits, ExpectedError, TargetChoice
from .auto_correction import with_filtered
from .guarantee.bounding import PerGroupCap, TotalCap
from .guarantee.measures import Histogram, Sum, sum_measure
from .guarantee.mechanisms import Noise, add_noise, laplace_scale
from .guarantee.plan import Plan
from .sql import build as b
from .sql.bounds import Interval
from .sql.options import QueryOptions
from .sql.ranges import narrowed

SHARE = Fraction(1, 10)  # of the query's epsilon spent on the profile
# Counts: the truncation a total bound C makes is corrected with the rows it cut, released as two
# numbers over the profile's units (`auto_correction.Correction`), the kept rows Σ min(n, C) and the excess
# Σ min(n, reach) - min(n, C); their shares of epsilon and the release's are chosen per query by
# `split`, from the policy and the query only.
KEPT_WEIGHT = Fraction(1, 2)  # the model's excess / kept, by which the kept rows' noise moves the factor
REACH = 4  # the correction sees a unit's rows up to REACH times the policy's total bound
RESIDUAL = Fraction(1, 10)  # of what truncation cuts, the model's bias left after the correction
CORRECTED = ("count",)  # sums clip each unit's total (bounding.TotalCap), which keeps nearly all of it
# COUNT(DISTINCT unit) by group: max_groups cuts the groups of a unit in more; corrected with the
# groups it keeps and those it cuts up to the domain's size, each with this share of epsilon.
UNITS_SHARE = Fraction(1, 10)
MASS = 1024  # what one unit adds to each profile histogram
VALUE_BINS = 16  # octaves of a column's range: candidate clamps from range / 2^15 to the whole range
ROW_STEPS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)
SUMMED = ("sum", "whole_sum", "avg", "var_pop", "var_samp", "stddev_pop", "stddev_samp")
SPREADS = ("var_pop", "var_samp", "stddev_pop", "stddev_samp")
QUANTILES = ("quantile", "min", "max")


@dataclass(frozen=True)
class Column:
    """A summed column of the plan: its measure's index j (v{j} in `filtered`), the value's
    SQL (the key of its clamp), its bounds and fixed point, and the value bins' upper edges."""

    j: int
    expr: str
    lower: float
    upper: float
    centre: float
    bits: int
    declared: tuple[float, float] = (0.0, 0.0)  # the policy's bounds (lower, upper: narrowed by the WHERE)
    quantile: bool = False  # a quantile's only: its value is profiled from q{j}, added to `filtered`

    @property
    def name(self) -> str:
        """The column of `filtered` the profile bins: a sum's v{j}, or for a quantile's histogram
        (whose v{j} is a bin index) q{j}, the value in a sum's fixed point (`quantile_value`)."""
        return f"q{self.j}" if self.quantile else f"v{self.j}"

    @property
    def edges(self) -> tuple[float, ...]:
        span = self.upper - self.lower
        return tuple(self.lower + span / 2 ** (VALUE_BINS - 1 - i) for i in range(VALUE_BINS))

    def threshold(self, edge: float) -> int:
        """An edge in the fixed-point units of v{j}, rounded as the measure rounds a value."""
        return round((edge - self.centre) * 2.0**self.bits)


@dataclass(frozen=True)
class Profile:
    """What the profile released: noisy units per row-count bin (`steps`' upper edges, then
    one bin for more), noisy weighted mass per value bin of each column."""

    steps: tuple[int, ...]
    rows: tuple[float, ...]
    values: tuple[tuple[float, ...], ...]
    groups: tuple[float, ...] = ()  # noisy weighted rows of each released group, in no order


@dataclass(frozen=True)
class Choice:
    """The limits chosen for one query: released values (shown in EXPLAIN's and the answer's
    detail), never above the policy's."""

    max_contributions: int | None
    clips: tuple[tuple[str, float, float], ...]
    expected: float  # the model's relative error, summed over the query's aggregates
    policy_expected: float  # the same model at the policy's limits
    epsilon: Fraction  # spent on the profile
    reach: int | None = None  # the correction's reach (None: not corrected)
    bias: float = 0.0  # the part of `expected` the chosen limits cut (the rest: noise)
    by_aggregate: tuple[tuple[str, float, float], ...] = ()  # (aggregate, its bias, its noise) in the model
    scales: tuple[float, ...] = ()  # each aggregate's expected value in a group, in the model (its error's unit)
    reused: bool = False  # chosen from a profile released (and charged) before: `epsilon` is then 0

    def absolute_bias(self, i: int) -> float:
        """What the chosen limits cut from the plan's i-th aggregate in a group, in the
        aggregate's own units (its relative bias times the model's value of it)."""
        return self.by_aggregate[i][1] * self.scales[i]

    def options(self, base: QueryOptions) -> QueryOptions:
        return replace(base, max_contributions=self.max_contributions, clips=self.clips)

    def describe(self) -> ChosenLimits:
        return ChosenLimits(
            self.max_contributions,
            MappingProxyType({expr: (lo, hi) for expr, lo, hi in self.clips}),
            float(self.epsilon),
            self.reused,
            ExpectedError(
                self.bias,
                max(self.expected - self.bias, 0.0),
                self.policy_expected,
                tuple(
                    (text, b, n, v)
                    for (text, b, n), v in zip(self.by_aggregate, self.scales or (None,) * len(self.by_aggregate))
                ),
            ),
        )


def told(bounds: ChosenBounds) -> str:
    """The chosen limits of an answer (its dp.bounds) in words, for a client's notice."""
    parts = []
    chosen = bounds.limits
    if chosen is not None and chosen.max_contributions is not None:
        parts.append(f"at most {chosen.max_contributions} row(s) per unit in all")
    if bounds.max_groups is not None:
        parts.append(f"at most {bounds.max_groups} group(s) per unit")
    if chosen is not None:
        parts += [f"{expr} clamped to [{lo:g}, {hi:g}]" for expr, (lo, hi) in chosen.clamps.items()]
        if chosen.profile_reused:
            parts.append("chosen from this query's profile released before (reused, free: nothing charged for it)")
        model = chosen.expected
        parts.append(
            f"the profile's model expects a relative error of about {model.bias:.1%} cut by these limits "
            f"and {model.noise:.1%} of noise (summed over the aggregates; "
            f"{model.at_policy_limits:.1%} at the policy's limits)"
        )
    if (target := bounds.target) is not None:
        parts.append(f"epsilon {target.epsilon:g} chosen for dpsql.target_error = {target.error:g} {chose(target)}")
    fix = bounds.correction
    if fix:
        lo, hi = fix.factor_interval
        parts.append(f"counts scaled by {fix.factor:.4g} ({lo:.4g} to {hi:.4g}) for what these limits cut")
    return "limits chosen for this query (dpsql.bounds = auto): " + "; ".join(parts)


def chose(target: TargetChoice) -> str:
    """How dpsql.target_error's epsilon was chosen under limits chosen per query, in words."""
    if target.source == "profile":
        return (
            f"by the model of this query's profile already released (noise at the limits it chooses plus the "
            f"bias they cut: about ±{target.expected:.4g})"
        )
    return (
        "at the policy's limits, for the release's share of epsilon (no profile of this query released yet: "
        "the noise is met, what the chosen limits cut is not counted)"
    )


def corrected(plan: Plan, groups: int = 1) -> tuple[Fraction, ...]:
    """The correction's (kept, excess) shares of the query's epsilon (`split`) for plans whose
    truncation is corrected (`auto_correction.Correction`), () for the others: counts of rows only, over units
    that may have more rows than one. A total bound cuts a heavy unit's rows to C; a sum clips
    its total to C times the clamp, which keeps far more; a mean, a spread or a quantile is a
    ratio, which the cut barely moves. `groups`: the size of the released domain (public)."""
    if ceiling(plan) > 1 and all(e.func in CORRECTED for e in plan.estimates):
        return split(ceiling(plan), reach(plan), groups)
    return ()


def split(top: int, far: int, groups: int) -> tuple[Fraction, Fraction]:
    """The (kept, excess) shares of a corrected count's epsilon, the release getting the rest
    after the profile's SHARE: those that minimise the model's standard deviation of a group's
    relative error, Σ_i (a_i / ε_i)² under Σ_i ε_i fixed, whose minimum is at ε_i ∝ a_i^(2/3).
    All three noises are over the same rows (N, the query's kept rows), so N cancels and the
    choice depends on the policy and the query only: a group holds N / groups rows and its noise
    has scale C / ε_release, so a_release = C * groups; the factor (kept + excess) / kept moves
    by the excess's noise over N, a_excess = reach - C, and by the kept rows' times excess /
    kept, a_kept = C * KEPT_WEIGHT. C is not known before the profile: the model takes the
    candidates' middle on a log scale, sqrt(top)."""
    c = math.sqrt(top)
    weights = [(c * max(groups, 1)) ** (2 / 3), (c * float(KEPT_WEIGHT)) ** (2 / 3), max(far - c, 1.0) ** (2 / 3)]
    rest = 1 - SHARE
    kept = rest * Fraction(weights[1] / sum(weights)).limit_denominator(1000)
    excess = rest * Fraction(weights[2] / sum(weights)).limit_denominator(1000)
    return kept, excess


def reach(plan: Plan) -> int:
    """The correction's widest reach for a plan (the choice may take a lower one: `reaches`)."""
    return reach_of(ceiling(plan))


def reach_of(top: int) -> int:
    return REACH * top


def counts_units(plan: Plan, mechanism: str) -> bool:
    """Plans of units per group only (COUNT(DISTINCT unit) by declared keys) under per-group caps:
    their limits stay the policy's, and the groups max_groups cuts are corrected for
    (`auto_correction.groups_query`) when the domain has more groups than that."""
    return (
        mechanism == "laplace"
        and plan.sample_rate is None
        and type(plan.bounding) in (PerGroupCap, TotalCap)
        and plan.unit is not None
        and bool(plan.keys)
        and plan.declared
        and all(s.derived is None for s in plan.relation.private_sources)
        and all(e.func == "units" for e in plan.estimates)
    )


def profiled_groups(plan: Plan, groups: int) -> int:
    """The number of group masses the profile releases (0: none): the released domain's size
    (public) when it has more than one group, but none for a corrected count, whose truncation
    the correction undoes wherever the rows fall, and whose reach (`reaches`) needs the row-count
    histogram's epsilon more: its last bin, the units beyond the policy's bound, is what a lower
    reach leaves cut."""
    return groups if groups > 1 and not corrected(plan) else 0


def correction_share(plan: Plan, mechanism: str = "laplace", groups: int = 1) -> Fraction:
    """The share of a query's epsilon its correction spends (0: none); `groups`: the size of the
    released domain (public)."""
    if counts_units(plan, mechanism):
        return 2 * UNITS_SHARE
    return sum(corrected(plan, groups), Fraction(0))


# What can be chosen ------------------------------------------------------------------------
def ceiling(plan: Plan) -> int:
    """The policy's total bound on a unit's rows for the plan's private tables (what the release
    guard allows)."""
    return max(
        (s.table.max_contributions or s.table.max_groups * s.table.max_rows) for s in plan.relation.private_sources
    )


def eligible(plan: Plan, mechanism: str, sampled: bool = False) -> bool:
    """Plans whose limits this module can choose: Laplace noise, one unit per person bounded per
    query (per-group caps or a total bound; not partition selection, rows as units, L2 clipping or
    a per-unit subquery), no sampling, only aggregates the error model knows."""
    return (
        mechanism == "laplace"
        and not sampled
        and plan.sample_rate is None
        and type(plan.bounding) in (PerGroupCap, TotalCap)
        and plan.unit is not None
        and all(s.derived is None for s in plan.relation.private_sources)
        and (not plan.keys or plan.declared)
        and all(e.func in SUMMED + QUANTILES + ("count",) for e in plan.estimates)
    )


def columns(plan: Plan) -> tuple[Column, ...]:
    """The summed columns whose clamp can be chosen: a lower bound of at least 0 (a clamp of the
    upper side only), a range, and each column once. Their bounds are the policy's narrowed by
    what the query's WHERE says of the column (sql/ranges.py: from the query's text only), so
    that `WHERE cost > 2000` centres a mean of cost in [2000, U] and bins its values there."""
    out: dict[str, Column] = {}
    for est in plan.estimates:
        j = est.total if est.func in SUMMED else est.count if est.func in QUANTILES else None
        if j is None:
            continue
        m = plan.measures[j]
        usable = isinstance(m, Sum) or (isinstance(m, Histogram) and m.categories is None)
        if not usable or m.value is None or m.lower < 0 or m.upper <= m.lower:
            continue
        expr = m.value.sql(dialect="postgres")
        lo, hi = m.lower, m.upper
        if isinstance(m.value, exp.Column):
            narrow = narrowed(m.value, Interval(m.lower, m.upper), plan.relation.where)
            lo, hi = narrow.lo, narrow.hi
        if isinstance(m, Sum):
            col = Column(j, expr, lo, hi, m.centre, m.bits, declared=(m.lower, m.upper))
        else:
            bits = quantile_value(m).bits
            col = Column(j, expr, lo, hi, 0.0, bits, declared=(m.lower, m.upper), quantile=True)
        if expr not in out or (out[expr].quantile and not col.quantile):  # a sum's v{j} when there is one
            out[expr] = col
    return tuple(out.values())


def quantile_value(m: Histogram) -> Sum:
    """A quantile's value as a sum would read it (clamped to the histogram's bounds, fixed point):
    what the profile bins for a column only a quantile reads."""
    assert m.value is not None
    return sum_measure(m.value, m.lower, m.upper, 0.0)


def steps(top: int) -> tuple[int, ...]:
    """Candidate total bounds up to the policy's: the row-count bins' upper edges."""
    return tuple(c for c in ROW_STEPS if c < top) + (top,)


# The profile: SQL, noise, cost ------------------------------------------------------------
def profile_query(plan: Plan, cols: Sequence[Column], top: int, by_group: bool = False) -> exp.Select:
    """One query over the plan's own `filtered` rows (the bounded query's CTEs up to it) giving
    (kind, column, bin, mass) rows: kind 0 the row-count histogram, kind 1 + i column i's, and
    with `by_group` kind 1 + len(cols) the weighted rows of each group present (bin 0)."""
    row_bin = _bin(b.col("n"), steps(top))
    parts = [
        b.select(
            [b.node(0), b.node(0), b.named(row_bin, "bin"), b.named(b.mul(b.count(), MASS), "mass")],
            b.table("prof_units"),
            group=[row_bin.copy()],
        )
    ]
    weight = b.idiv(MASS, b.col("n", "u"))
    for i, c in enumerate(cols):
        v = b.col(c.name, "f")
        value_bin = _bin(v, tuple(c.threshold(e) for e in c.edges[:-1]))
        parts.append(
            b.select(
                [b.node(1 + i), b.node(c.j), b.named(value_bin, "bin"), b.named(b.total(weight), "mass")],
                b.table("filtered", "f"),
                joins=[
                    b.join(b.table("prof_units", "u"), exp.EQ(this=b.col("unit", "f"), expression=b.col("unit", "u")))
                ],
                where=[b.not_null(v.copy())],
                group=[value_bin.copy()],
            )
        )
    if by_group:
        keys = [b.col(f"k{i}", "f") for i in range(len(plan.keys))]
        parts.append(
            b.select(
                [b.node(1 + len(cols)), b.node(0), b.node(0), b.named(b.total(weight.copy()), "mass")],
                b.table("filtered", "f"),
                joins=[
                    b.join(b.table("prof_units", "u"), exp.EQ(this=b.col("unit", "f"), expression=b.col("unit", "u")))
                ],
                group=keys,
            )
        )
    union = parts[0]
    for p in parts[1:]:
        union = exp.union(union, p, distinct=False)
    return _with_quantile_values(plan, cols, with_filtered(plan, b.select([exp.Star()], b.subquery(union, "profile"))))


def _with_quantile_values(plan: Plan, cols: Sequence[Column], query: exp.Select) -> exp.Select:
    """`query` whose `filtered` also gives, for each quantile's column, its value in a sum's fixed
    point as q{j}, beside the histogram's bin index v{j} (in the same select, so from the same row)."""
    for c in cols:
        if not c.quantile:
            continue
        m = plan.measures[c.j]
        assert isinstance(m, Histogram)
        (cte,) = [t for t in query.args["with_"].expressions if t.alias == "filtered"]
        (alias,) = [a for a in cte.this.find_all(exp.Alias) if a.alias == f"v{c.j}"]
        select = alias.parent
        assert isinstance(select, exp.Select)
        select.append("expressions", b.named(quantile_value(m).row_value(), c.name))
    return query


def _bin(value: exp.Expression, uppers: Sequence[int]) -> exp.Expression:
    """The index of the first upper edge a value is at most (len(uppers) above them all)."""
    ifs = [(exp.LTE(this=value.copy(), expression=b.node(u)), b.node(i)) for i, u in enumerate(uppers)]
    return b.case(*ifs, default=b.node(len(uppers)))


def epsilons(epsilon: Fraction, cols: Sequence[Column], top: int, by_group: bool = False) -> tuple[Fraction, ...]:
    """The profile's share of `epsilon`, split equally over its histograms (the rows' only when
    there is a total bound to choose; the groups' when `by_group`)."""
    count = len(cols) + (1 if top > 1 else 0) + (1 if by_group else 0)
    return tuple([epsilon * SHARE / count] * count)


def _part(e: Fraction) -> Part:
    return Part("laplace", e, rho=e * e / 2, noise_multiplier=float(1 / e))


def parts(
    epsilon: Fraction,
    cols: Sequence[Column],
    top: int,
    correct: Sequence[Fraction] = (),
    by_group: bool = False,
    profiled: bool = True,
) -> tuple[Part, ...]:
    """The profile's parts of the query's cost: one Laplace mechanism per histogram (none when
    not `profiled`: a profile already released is reused, free), and the correction's two at
    its shares `correct` (`corrected`) when there is one."""
    extra = tuple(epsilon * share for share in correct)
    own = epsilons(epsilon, cols, top, by_group) if profiled else ()
    return tuple(_part(e) for e in own + extra)


def noised(rows: Sequence[tuple], cols: Sequence[Column], top: int, epsilon: Fraction, groups: int = 0) -> Profile:
    """The profile's exact rows (profile_query's result) with every bin noised, empty ones
    included, so which bins hold data is not told by their presence. With `groups` (the size of
    the released domain, public), the groups' masses are padded with empty ones to that many,
    each noised, and kept in no order (a multiset of a noisy vector: post-processing)."""
    sizes = [len(steps(top)) + 1] + [VALUE_BINS] * len(cols)
    exact = [[0] * n for n in sizes]
    present = []
    for kind, _, bin_, mass in rows:
        if int(kind) == 1 + len(cols):
            present.append(int(mass))
        else:
            exact[int(kind)][int(bin_)] += int(mass)
    if groups:
        exact.append(sorted(present)[-groups:] + [0] * max(groups - len(present), 0))
    eps = list(epsilons(epsilon, cols, top, bool(groups)))
    noisy = []
    for i, hist in enumerate(exact):
        if i == 0 and top <= 1:
            noisy.append(())  # not released: no total bound to choose (filled in below)
            continue
        e = eps.pop(0)
        noisy.append(tuple(v / MASS for v in add_noise(hist, Noise("laplace", laplace_scale(MASS, e)))))
    by_group = tuple(sorted(noisy.pop())) if groups else ()
    if top <= 1:  # one row a unit: the units are the released values' (or groups') total mass
        released = noisy[1] if len(noisy) > 1 else by_group
        noisy[0] = (max(sum(released), 0.0),) + (0.0,) * (len(steps(top)))
    return Profile(steps(top), noisy[0], tuple(noisy[1:]), by_group)


# The choice: a model of the error, minimised -----------------------------------------------
@dataclass(frozen=True)
class _Rows:
    """Units by row count, from the profile: rows kept under a total bound C."""

    reps: tuple[float, ...]
    units: tuple[float, ...]

    def kept(self, c: float) -> float:
        return _kept(self.reps, self.units, c)

    def counts(self, top: int) -> tuple[float, ...]:
        """Each bin's rows per unit, the units beyond the policy's bound taken at twice it (the
        correction's model: as many rows again as the bound)."""
        return self.reps[:-1] + (2.0 * top,)

    def total_rows(self, top: int) -> float:
        return sum(u * n for u, n in zip(self.units, self.counts(top)))

    def clipped(self, v: _Values, u: float, k: float, top: int) -> float:
        """What clipping each unit's total of values clamped at u to k cuts, summed over units:
        a unit of one row cuts its value's excess over k (from the value histogram), one of n
        rows that of a normal total of mean n * mean and variance n * variance (the values'
        clamped moments, a unit's rows taken as independent draws)."""
        return _clipped(self.counts(top), self.units, v.mids, v.mass, u, k)


def _rows(profile: Profile) -> _Rows:
    edges = profile.steps
    reps = []
    for i, upper in enumerate(edges):
        lower = edges[i - 1] if i else 0
        reps.append((lower + 1 + upper) / 2)
    reps.append(edges[-1])  # beyond the policy's bound: the bound is all any choice keeps
    return _Rows(tuple(reps), tuple(max(u, 0.0) for u in profile.rows))


@dataclass(frozen=True)
class _Values:
    mids: tuple[float, ...]
    mass: tuple[float, ...]
    edges: tuple[float, ...] = ()  # the bins' lower edge, then each one's upper edge

    def quantile(self, p: float) -> float:
        """Where the values' cumulative mass reaches p of the whole (linear within a bin)."""
        return _quantile(self.edges, self.mass, p)

    def top_of(self, p: float) -> float:
        """The upper edge of the bin where the values' cumulative mass reaches p of the whole."""
        q = self.quantile(p)
        return next((e for e in self.edges[1:] if e >= q), self.edges[-1] if self.edges else q)

    def mean(self, clamp: float) -> float:
        return self.moment(clamp, 1)

    def moment(self, clamp: float, k: int) -> float:
        """E[min(x, clamp)^k] over the profile's weighted rows."""
        return _moment(self.mids, self.mass, clamp, k)


@functools.lru_cache(maxsize=4096)
def _quantile(edges: tuple[float, ...], mass: tuple[float, ...], p: float) -> float:
    total = sum(mass)
    if total <= 0 or not edges:
        return edges[-1] if edges else 0.0
    target, running = p * total, 0.0
    for i, m in enumerate(mass):
        if m > 0 and running + m >= target:
            return edges[i] + (edges[i + 1] - edges[i]) * min(max((target - running) / m, 0.0), 1.0)
        running += m
    return edges[-1]


@functools.lru_cache(maxsize=4096)
def _kept(reps: tuple[float, ...], units: tuple[float, ...], c: float) -> float:
    return sum(u * min(r, c) for r, u in zip(reps, units))


@functools.lru_cache(maxsize=65536)
def _clipped(
    counts: tuple[float, ...],
    units: tuple[float, ...],
    mids: tuple[float, ...],
    mass: tuple[float, ...],
    u: float,
    k: float,
) -> float:
    weight = sum(mass)
    if weight <= 0:
        return 0.0
    mean = _moment(mids, mass, u, 1)
    sd = math.sqrt(max(_moment(mids, mass, u, 2) - mean * mean, 0.0))
    out = 0.0
    for n, count in zip(counts, units):
        if count <= 0:
            continue
        if n <= 1:
            excess = sum(m * max(min(x, u) - k, 0.0) for x, m in zip(mids, mass)) / weight
        else:
            excess = _normal_excess(n * mean, math.sqrt(n) * sd, k)
        out += count * excess
    return out


def _normal_excess(mean: float, sd: float, k: float) -> float:
    """E[max(T - k, 0)] for T normal with this mean and standard deviation."""
    if sd <= 0:
        return max(mean - k, 0.0)
    d = (mean - k) / sd
    return (mean - k) * 0.5 * math.erfc(-d / math.sqrt(2)) + sd * math.exp(-d * d / 2) / math.sqrt(2 * math.pi)


@functools.lru_cache(maxsize=4096)
def _moment(mids: tuple[float, ...], mass: tuple[float, ...], clamp: float, k: int) -> float:
    total = sum(mass)
    return sum(m * min(v, clamp) ** k for v, m in zip(mids, mass)) / total if total > 0 else 0.0


@dataclass(frozen=True)
class _Term:
    """One aggregate of the plan as the model sees it: its family, the summed column's SQL (None:
    rows only), its quantile's bins, its per-row bound at the policy's bounds."""

    func: str
    expr: str | None
    bins: int
    bound: float
    quantile: float = 0.5  # a quantile's fraction p (0 for MIN, 1 for MAX)


def _terms(plan: Plan) -> tuple[_Term, ...]:
    out = []
    for est in plan.estimates:
        m = plan.measures[est.total] if est.total is not None else None
        if est.func in QUANTILES:
            m = plan.measures[est.count]
        expr = m.value.sql(dialect="postgres") if isinstance(m, (Sum, Histogram)) and m.value is not None else None
        bins = plan.measures[est.count].width if est.func in QUANTILES else 0
        bound = 1.0 if est.func == "count" else max(abs(est.upper - est.centre), abs(est.lower - est.centre), 1.0)
        p = est.quantile if est.quantile is not None else 0.5
        out.append(_Term(est.func, expr, bins, bound, p))
    return tuple(out)


def _values(col: Column, mass: Sequence[float]) -> _Values:
    edges = (col.lower,) + col.edges
    mids = tuple((edges[i] + edges[i + 1]) / 2 for i in range(VALUE_BINS))
    return _Values(mids, tuple(max(m, 0.0) for m in mass), edges)


def choose(
    plan: Plan,
    profile: Profile,
    cols: Sequence[Column],
    top: int,
    epsilon: Fraction,
    groups: int,
    correct: Sequence[Fraction] = (),
) -> Choice:
    """The total bound and clamps that minimise the model's error at the release's epsilon
    (`epsilon` minus the profile's share, and the correction's shares `correct`), over every
    candidate (the policy's own among them). `groups`: the groups the query releases (its
    declared domain's size; public), of which the profile's group masses give the effective
    number (`effective_groups`). Under a correction, what truncation cuts counts for
    RESIDUAL of itself, and the correction's own noise (its excess's scale over the rows) is
    added to each count."""
    release = float(release_epsilon(epsilon, correct))
    per_measure = release / max(len(plan.measures), 1)
    groups = effective_groups(profile.groups, groups)
    rows = _rows(profile)
    terms = _terms(plan)
    values = {c.expr: _values(c, m) for c, m in zip(cols, profile.values)}
    by_expr = {c.expr: c for c in cols}
    candidates = steps(top) if top > 1 else (top,)

    def fix(c: float, far: int) -> _Fix:
        if not correct:
            return _Fix()
        # Rows beyond the reach stay cut: those between it and the policy's bound (from the
        # profile), and, below the bound, those of units beyond it (the model: as many again).
        beyond = (rows.kept(top) - rows.kept(far) + rows.units[-1] * top) if far < reach_of(top) else 0.0
        return _Fix(float(RESIDUAL), (far - c) / float(epsilon * correct[1]) / max(rows.kept(top), 1.0), beyond)

    best: tuple[float, int, int, dict[str, float]] | None = None
    for c in candidates:
        for far in reaches(top, c) if correct else (reach_of(top),):
            clamps = {
                e: _best_clamp(terms, by_expr[e], values[e], rows, c, top, groups, per_measure, fix(c, far))
                for e in by_expr
            }
            err = _error(terms, by_expr, values, rows, c, top, clamps, groups, per_measure, fix(c, far))
            if best is None or err < best[0]:
                best = (err, c, far, clamps)
    assert best is not None
    err, c, far, clamps = best
    policy = _error(
        terms,
        by_expr,
        values,
        rows,
        top,
        top,
        {e: by_expr[e].upper for e in by_expr},
        groups,
        per_measure,
        fix(top, reach_of(top)),
    )
    # The same model without noise: what the chosen limits cut (a correction's residual included).
    bias = _error(terms, by_expr, values, rows, c, top, clamps, groups, math.inf, replace(fix(c, far), noise=0.0))
    clips = tuple(
        (e, by_expr[e].lower, u)
        for e, u in sorted(clamps.items())
        if u < by_expr[e].declared[1] or by_expr[e].lower > by_expr[e].declared[0]
    )
    # Each aggregate's share of both (the model's relative error is a sum over them).
    by_aggregate, scales = [], []
    for est, t in zip(plan.estimates, terms):
        scales.append(_scale(t, by_expr, values, rows, top, groups))
        whole = _error((t,), by_expr, values, rows, c, top, clamps, groups, per_measure, fix(c, far))
        cut = _error((t,), by_expr, values, rows, c, top, clamps, groups, math.inf, replace(fix(c, far), noise=0.0))
        by_aggregate.append((est.text, min(cut, whole), max(whole - cut, 0.0)))
    return Choice(
        c if top > 1 else None,
        clips,
        err,
        policy,
        epsilon * SHARE,
        far if correct else None,
        min(bias, err),
        tuple(by_aggregate),
        tuple(scales),
    )


def _scale(t: _Term, cols: dict, values: dict, rows: _Rows, top: int, groups: float) -> float:
    """An aggregate's value in a group as `_error` divides by it: a count's rows; a sum's rows
    times the mean of its column at the policy's bounds (without a chosen clamp, times the
    largest value allowed: at least the sum); a ratio's or a quantile's column mean."""
    rows_in = max(rows.kept(top) / groups, 1.0)
    if t.func == "count":
        return rows_in
    if t.expr not in cols:
        return rows_in * t.bound
    mean = max(values[t.expr].mean(cols[t.expr].upper), 1e-9)
    if t.func in ("sum", "whole_sum"):
        return max(rows.total_rows(top) * mean / groups, 1e-9)
    return mean


def reaches(top: int, c: int) -> tuple[int, ...]:
    """The correction's candidate reaches for a total bound c: the candidate bounds above c, and
    REACH times the policy's bound. A lower reach lowers the excess's sensitivity (reach - c)
    when the profile shows few units with more rows than it."""
    return tuple(r for r in steps(top) if r > c) + (reach_of(top),)


def effective_groups(masses: Sequence[float], groups: int) -> float:
    """How many groups the rows are spread over, from the groups' noisy masses (those below 0 as
    empty): (Σ m)² / Σ m², which is the number of groups when they are equal and 1 when one
    holds all; `groups` (the domain's size) without masses. Never above `groups`, nor below 1."""
    m = [max(x, 0.0) for x in masses]
    squares = sum(x * x for x in m)
    if not m or squares <= 0:
        return float(max(groups, 1))
    return min(max(sum(m) ** 2 / squares, 1.0), float(max(groups, 1)))


@dataclass(frozen=True)
class _Fix:
    """How a correction changes the model: the share of truncation's cut left, the correction's
    relative noise."""

    residual: float = 1.0
    noise: float = 0.0
    beyond: float = 0.0  # rows the correction does not see (beyond its reach)


def _best_clamp(terms, col, values, rows, c, top, groups, per_measure, fix) -> float:
    scored = [
        (
            _error(
                terms,
                {col.expr: col},
                {col.expr: values},
                rows,
                c,
                top,
                {col.expr: u},
                groups,
                per_measure,
                fix,
                only=col.expr,
            ),
            u,
        )
        for u in col.edges
    ]
    return min(scored)[1]


def _error(
    terms: Sequence[_Term],
    cols: dict,
    values: dict,
    rows: _Rows,
    c: float,
    top: int,
    clamps: dict[str, float],
    groups: int,
    per_measure: float,
    fix: _Fix = _Fix(),
    only: str | None = None,
) -> float:
    """The model's relative error summed over the plan's aggregates (those over column `only`,
    if given): a group's expected |Laplace noise| (its scale) plus what truncation to c rows and
    clamping at U cut, over the group's expected value; the units' rows spread evenly over the
    groups. Under a correction (`fix`), counts keep `fix.residual` of truncation's cut and gain
    the correction's noise."""
    full = max(rows.kept(top), 1.0)
    kept = max(rows.kept(c), 1.0)
    lost = full - kept
    total = 0.0
    for t in terms:
        if only is not None and t.expr != only:
            continue
        if t.func in QUANTILES:
            # A noisy histogram's quantile: wrong by about its bins' noise over the group's rows. A
            # total bound reweighs a unit's rows without changing their spread: no truncation term.
            rank = math.sqrt(t.bins) * c / per_measure / max(kept / groups, 1.0)
            if t.expr in cols:
                total += _quantile_error(cols[t.expr], values[t.expr], clamps[t.expr], t, rank)
            else:
                total += rank
            continue
        if t.expr not in cols:  # a count, or a sum whose clamp is not chosen here: rows only
            fixed = fix if t.func in CORRECTED else _Fix()
            total += ((fixed.residual * lost + fixed.beyond) / groups + c * t.bound / per_measure) / max(
                full / groups, 1.0
            ) + fixed.noise
            continue
        col, v, u = cols[t.expr], values[t.expr], clamps[t.expr]
        mean, clamped = max(v.mean(col.upper), 1e-9), v.mean(u)
        if t.func in ("sum", "whole_sum"):
            # TotalCap clips a unit's own total of clamped values at K = c * u (`own_weight`), so
            # the bias is what the clamp cuts from rows plus what the clip cuts from totals.
            whole = rows.total_rows(top) * mean
            bias = rows.total_rows(top) * (mean - clamped) + rows.clipped(v, u, c * max(u, abs(col.lower)), top)
            total += (bias / groups + c * max(u, abs(col.lower)) / per_measure) / max(whole / groups, 1e-9)
        elif t.func in SPREADS:
            total += _spread_error(col, v, u, c, kept / groups, per_measure, t.func.startswith("stddev"))
        else:  # a mean: centred sum over count
            n = kept / groups
            centre = (col.lower + u) / 2
            noise = (c * (u - col.lower) / 2 + abs(clamped - centre) * c) / per_measure
            total += ((mean - clamped) + noise / max(n, 1.0)) / mean
    return total


def _quantile_error(col: Column, v: _Values, u: float, t: _Term, rank: float) -> float:
    """A quantile from a histogram of `t.bins` equal bins over [lower, u], relative to its value
    (from the profile's values, in no group): its rank error `rank` (a fraction of the group's
    rows) made a value by the values' spread around it, half a bin's width, and what the clamp
    may cut: the histogram's last bin holds every value above u, so a clamp below the top of the
    profile's bin where the quantile (plus its rank error) falls is taken to cut down to u (the
    profile's bins are octaves: where in one the quantile lies it cannot tell)."""
    q = v.quantile(t.quantile)
    spread = (v.quantile(min(t.quantile + rank, 1.0)) - v.quantile(max(t.quantile - rank, 0.0))) / 2
    width = (u - col.lower) / max(t.bins, 1)
    cut = max(v.top_of(min(t.quantile + rank, 1.0)) - u, 0.0)
    return (spread + width / 2 + cut) / max(q, width, 1e-9)


def _spread_error(col: Column, v: _Values, u: float, c: float, n: float, per_measure: float, root: bool) -> float:
    """A variance from a count, a centred sum and a sum of squares centred at half their range:
    what the clamp cuts from the spread, plus the squares' noise and the centred sum's (times
    twice the mean's distance from the centre), over the group's rows; half that for a root."""
    full = max(v.moment(col.upper, 2) - v.mean(col.upper) ** 2, 1e-9)
    clamped = v.moment(u, 2) - v.mean(u) ** 2
    half = (u - col.lower) / 2
    centre = col.lower + half
    noise = c * (half * half / 2 + 2 * abs(v.mean(u) - centre) * half) / per_measure / max(n, 1.0)
    error = (abs(full - clamped) + noise) / full
    return error / 2 if root else error


def release_epsilon(epsilon: Fraction, correct: Sequence[Fraction] = ()) -> Fraction:
    """What the release gets of a query's epsilon: the rest after the profile and the
    correction's shares `correct`."""
    return epsilon * (1 - SHARE - sum(correct, Fraction(0)))

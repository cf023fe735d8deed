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

import math
from dataclasses import dataclass, field, replace
from fractions import Fraction
from types import MappingProxyType
from typing import Sequence

from sqlglot import exp

from .accounting.cost import Part
from .answer_record import ChosenBounds, ChosenLimits, ExpectedError, TargetChoice
from .auto_correction import unit_count_value, with_filtered
from .auto_denoise import FLOOR, TRUST, population
from .guarantee.bounding import PartitionSelection, PerGroupCap, SelectedTotalCap, TotalCap
from .guarantee.families import QUANTILES
from .guarantee.measures import Histogram, Sum, sum_measure
from .guarantee.mechanisms import Noise, add_noise, laplace_scale
from .guarantee.plan import Plan
from .sql import build as b
from .sql.bounds import Interval
from .sql.options import QueryOptions
from .sql.ranges import narrowed
from .sql.reads import filtered_column
from .sql.scope import text_as_written

SHARE = Fraction(1, 10)  # of the query's epsilon spent on the profile
# Counts: the truncation a total bound C makes is corrected with the rows it cut, released as two
# numbers over the profile's units (`auto_correction.Correction`), the kept rows Σ min(n, C) and the excess
# Σ min(n, reach) - min(n, C); their shares of epsilon and the release's are chosen per query by
# `adapted` after the profile (at most `split`'s, from the policy and the query only), or none.
KEPT_WEIGHT = Fraction(1, 2)  # the model's excess / kept, by which the kept rows' noise moves the factor
REACH = 4  # the correction sees a unit's rows up to REACH times the policy's total bound
RESIDUAL = Fraction(1, 10)  # of what truncation cuts, the model's bias left after the correction
CORRECTED = ("count",)  # sums clip each unit's total (bounding.TotalCap), which keeps nearly all of it
# COUNT(DISTINCT unit) by group: max_groups cuts the groups of a unit in more; corrected with the
# groups it keeps and those it cuts up to the domain's size, each with this share of epsilon.
UNITS_SHARE = Fraction(1, 10)
MASS = 1024  # what one unit adds to each profile histogram
# Over undeclared keys (partition selection) no domain is public: the profile releases the
# largest this many groups' masses, sorted (padded with empty ones), as it does a domain's.
UNDECLARED_GROUPS = 32
# A histogram kept from a profile released before (per analyst, data version, rows and histogram)
# is released again and combined with it until its effective epsilon reaches ENOUGH times what it
# would get in a fresh profile; then it is reused, free (`fresh`).
ENOUGH = 2
# A small population (fewer than TRUST noise scales of its value histograms, by the profile's noisy
# count of units) re-releases its value histograms at up to EXTRA of the query's epsilon, taken from
# the release's one part (`rest_part`), where every filter charged is basic (`extra`).
EXTRA = Fraction(1, 5)
VALUE_BINS = 16  # octaves of a column's range: candidate clamps from range / 2^15 to the whole range
ROW_STEPS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)
SUMMED = ("sum", "whole_sum", "avg", "var_pop", "var_samp", "stddev_pop", "stddev_samp")
SPREADS = ("var_pop", "var_samp", "stddev_pop", "stddev_samp")


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
    # a per-unit count (`unit_count`): profiled as w{j}, the unit's rows up to the reach (`upper`),
    # so that the model sees what the cap at R (`declared[1]`, the most any clamp keeps) cuts
    unit_count: bool = False

    @property
    def name(self) -> str:
        """The column of `filtered` the profile bins: a sum's v{j}, or for a quantile's histogram
        (whose v{j} is a bin index) q{j}, the value in a sum's fixed point (`quantile_value`); a
        per-unit count's w{j}, its rows up to the reach in fixed point (`unit_count_value`)."""
        return f"w{self.j}" if self.unit_count else f"q{self.j}" if self.quantile else f"v{self.j}"

    @property
    def clamps(self) -> tuple[float, ...]:
        """The candidate clamps: the bins' upper edges within the column's declared bounds (a
        per-unit count's bins go past them, up to the reach)."""
        if not self.unit_count:
            return self.edges
        return tuple(e for e in self.edges if e <= self.declared[1] * (1 + 1e-12))

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
    noise: tuple[float, ...] = ()  # each histogram's Laplace scale in rows (rows, values..., groups)


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
    # chosen from a profile with histograms released (and charged) before: `epsilon` is what this
    # query spent on its own (0 when all were reused; auto_bounds.fresh)
    reused: bool = False
    # a corrected count's (kept, excess) shares of the query's epsilon, chosen with the limits
    # (`adapted`); () when the count is not corrected (the release gets the whole rest)
    shares: tuple[Fraction, ...] = ()
    # each centred mean's column and the centre of its sum, from the profile (auto_mean)
    centres: tuple[tuple[str, float], ...] = ()
    # the share of the query's epsilon a small population's profile spent again on its value
    # histograms (`extra`), taken from the release's part
    # (not in its repr, which tests/fixtures/auto_choice.txt pins: 0 wherever the profile is not
    # released again, as in every choice made from a profile already released)
    extra: Fraction = field(default=Fraction(0), repr=False)

    @property
    def after(self) -> tuple[Fraction, ...]:
        """The shares of the query's epsilon chosen after the profile besides the release's: a
        corrected count's (kept, excess) and a small population's profile again (`extra`)."""
        return self.shares + ((self.extra,) if self.extra else ())

    def absolute_bias(self, i: int) -> float:
        """What the chosen limits cut from the plan's i-th aggregate in a group, in the
        aggregate's own units (its relative bias times the model's value of it)."""
        return self.by_aggregate[i][1] * self.scales[i]

    def options(self, base: QueryOptions) -> QueryOptions:
        return replace(base, max_contributions=self.max_contributions, clips=self.clips, centres=self.centres)

    def describe(self) -> ChosenLimits:
        return ChosenLimits(
            self.max_contributions,
            MappingProxyType(as_written({expr: (lo, hi) for expr, lo, hi in self.clips})),
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
            MappingProxyType(as_written(dict(self.centres))),
        )


def as_written(by_column: dict) -> dict:
    """Keys that name columns as the analyst wrote them (t0.cost -> cost), for what an answer
    shows (cursor.dp, EXPLAIN, the notice); the planned names where two would read alike."""
    written = {text_as_written(expr): v for expr, v in by_column.items()}
    return written if len(written) == len(by_column) else by_column


def told(bounds: ChosenBounds) -> str:
    """The chosen limits of an answer (its dp.bounds) in words, for a client's notice."""
    parts = []
    chosen = bounds.limits
    if chosen is not None and chosen.max_contributions is not None:
        parts.append(f"at most {chosen.max_contributions} row(s) per unit in all")
    if bounds.max_groups is not None:
        parts.append(f"at most {bounds.max_groups} group(s) per unit")
    if chosen is not None:
        parts += [f"{text_as_written(expr)} clamped to [{lo:g}, {hi:g}]" for expr, (lo, hi) in chosen.clamps.items()]
        parts += [f"the mean of {text_as_written(expr)} centred at {c:g}" for expr, c in chosen.centres.items()]
        if chosen.profile_reused and not chosen.profile_epsilon:
            parts.append("chosen from this query's profile released before (reused, free: nothing charged for it)")
        elif chosen.profile_reused:
            parts.append(
                "chosen from a profile that combines this query's release with histograms of the same rows "
                "released to you before (more precise, charged no more)"
            )
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
    """The prior (kept, excess) shares of the query's epsilon (`split`) for plans whose
    truncation may be corrected (`auto_correction.Correction`), () for the others: counts of rows only, over units
    that may have more rows than one. A total bound cuts a heavy unit's rows to C; a sum clips
    its total to C times the clamp, which keeps far more; a mean, a spread or a quantile is a
    ratio, which the cut barely moves. `groups`: the size of the released domain (public).
    The shares spent are chosen after the profile (`adapted`, in auto_choice.choose): at most
    these in all (the release gets at least the rest), or none. What is charged for the
    correction and the release together is one part, `rest_part`."""
    if ceiling(plan) > 1 and all(e.func in CORRECTED for e in plan.estimates):
        return split(ceiling(plan), reach(plan), groups)
    if (unit := unit_count(plan)) is not None:  # a per-unit count's cap at R, corrected up to the reach
        cap = _derived_counts(plan)[unit]
        return _shares(float(cap), float(REACH * cap), groups, float(KEPT_WEIGHT))
    return ()


def released_groups(plan: Plan, domain: int | None) -> int | None:
    """The groups a query's profile and model count (public): its declared domain's size
    (`domain`), or, over undeclared keys (partition selection), the number of largest groups'
    masses its profile releases (UNDECLARED_GROUPS); None for a query without keys."""
    return UNDECLARED_GROUPS if plan.needs_selection else domain


def split_after_profile(plan: Plan, additive: bool) -> bool:
    """Whether a corrected count's split is chosen after the profile within one Laplace part
    (`rest_part`): where every filter charged is basic (`additive`), and not under partition
    selection, whose delta that pure-epsilon part would not carry (the correction is then
    charged the prior split's parts, the release its own, selection included)."""
    return additive and not plan.needs_selection


def split(top: int, far: int, groups: int) -> tuple[Fraction, Fraction]:
    """The prior (kept, excess) shares of a corrected count's epsilon, the release getting the rest
    after the profile's SHARE: those that minimise the model's standard deviation of a group's
    relative error, Σ_i (a_i / ε_i)² under Σ_i ε_i fixed, whose minimum is at ε_i ∝ a_i^(2/3).
    All three noises are over the same rows (N, the query's kept rows), so N cancels and the
    choice depends on the policy and the query only: a group holds N / groups rows and its noise
    has scale C / ε_release, so a_release = C * groups; the factor (kept + excess) / kept moves
    by the excess's noise over N, a_excess = reach - C, and by the kept rows' times excess /
    kept, a_kept = C * KEPT_WEIGHT. C is not known before the profile: the model takes the
    candidates' middle on a log scale, sqrt(top). The release's share here is the floor of the
    share chosen after the profile (`adapted`): what EXPLAIN's bound on the noise assumes."""
    return _shares(math.sqrt(top), far, groups, float(KEPT_WEIGHT))


def _shares(c: float, far: float, groups: float, weight: float) -> tuple[Fraction, Fraction]:
    """(kept, excess) shares of the query's epsilon at ε_i ∝ a_i^(2/3) over the rest after the
    profile (`split`'s model at a total bound c, a reach far, `groups` groups (times the
    release's measures) and the kept rows' weight excess / kept)."""
    weights = [(c * max(groups, 1)) ** (2 / 3), (c * weight) ** (2 / 3), max(far - c, 1.0) ** (2 / 3)]
    rest = 1 - SHARE
    kept = rest * Fraction(weights[1] / sum(weights)).limit_denominator(1000)
    excess = rest * Fraction(weights[2] / sum(weights)).limit_denominator(1000)
    return kept, excess


def adapted(prior: Sequence[Fraction], c: int, far: int, groups: float, weight: float) -> tuple[Fraction, Fraction]:
    """The (kept, excess) shares of a corrected count's epsilon once the profile has chosen the
    total bound c and the reach far: `split`'s minimum at these (post-processing of the
    profile; `groups` the effective groups times the release's measures, `weight` the model's
    excess / kept rows), the kept rows' share never below the prior split's `prior` (the factor
    divides by them) and the release's never below its share under it (the excess's share is cut
    first): at most the prior's in all, so the rest after the profile, charged as one part
    (`rest_part`), covers them and the release."""
    kept, excess = _shares(float(c), float(far), groups, weight)
    kept = max(kept, prior[0])  # the factor divides by the kept rows: their noise no larger than the prior's
    return kept, min(excess, sum(prior, Fraction(0)) - kept)


def rest_part(epsilon: Fraction) -> Part:
    """What a corrected count is charged for its correction and its release together (and a plan
    with value histograms for its release and a small population's profile again, `extra`), fixed
    before the data is read: one Laplace part of the rest after the profile, ε (1 - SHARE). The
    shares chosen after the profile (`adapted`, `extra`, or none) sum to at most it, so under every
    filter's statistic (Σ ε, Σ ε², Σ ε (e^ε - 1) / 2, Σ ε² / 2, a Rényi divergence, μ(ε)²:
    each f with f(a) + f(b) <= f(a + b)) they cost at most this part (tests/test_auto_bounds.py
    checks each), and the filters hold under adaptively chosen parts (DESIGN §4). Only where
    every filter charged adds up ε (`Settings.additive`): elsewhere the prior split's parts,
    fixed before, cost less than this one part."""
    return laplace_part(epsilon * (1 - SHARE))


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
    return groups if groups > 1 and not (corrected(plan) and unit_count(plan) is None) else 0


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
    query (per-group caps or a total bound, over declared keys or undeclared ones, released by
    partition selection; not rows as units or L2 clipping; a per-unit subquery qualifies, with
    one row per unit), no sampling, only aggregates the error model knows."""
    return (
        mechanism == "laplace"
        and not sampled
        and plan.sample_rate is None
        and type(plan.bounding) in (PerGroupCap, TotalCap, PartitionSelection, SelectedTotalCap)
        and plan.unit is not None
        and all(e.func in SUMMED + QUANTILES + ("count",) for e in plan.estimates)
    )


def columns(plan: Plan) -> tuple[Column, ...]:
    """The summed columns whose clamp can be chosen: a lower bound of at least 0 (a clamp of the
    upper side only), a range, and each column once. Their bounds are the policy's narrowed by
    what the query's WHERE says of the column (sql/ranges.py: from the query's text only), so
    that `WHERE cost > 2000` centres a mean of cost in [2000, U] and bins its values there; an
    aggregate's own FILTER (WHERE cost > 2000) narrows its column alike."""
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
        value, where = m.value, list(plan.relation.where)
        filtered = filtered_column(value)
        if filtered is not None:  # AGG(x) FILTER (WHERE c): x where c holds (sql/reads.py)
            value, where = filtered[0], where + [filtered[1]]
        if isinstance(value, exp.Column):
            narrow = narrowed(value, Interval(m.lower, m.upper), where)
            lo, hi = narrow.lo, narrow.hi
        if isinstance(m, Sum):
            col = Column(j, expr, lo, hi, m.centre, m.bits, declared=(m.lower, m.upper))
        else:
            bits = quantile_value(m).bits
            col = Column(j, expr, lo, hi, 0.0, bits, declared=(m.lower, m.upper), quantile=True)
        if expr not in out or (out[expr].quantile and not col.quantile):  # a sum's v{j} when there is one
            out[expr] = col
    for counted, cap in lifted_counts(plan).items():  # profiled up to the reach: the model sees the cap's cut
        if counted in out:
            col = out[counted]
            out[counted] = Column(
                col.j,
                col.expr,
                0.0,
                float(REACH * cap),
                0.0,
                UNIT_COUNT_BITS,
                declared=(0.0, col.upper),
                unit_count=True,
            )
    return tuple(out.values())


# Per-unit counts --------------------------------------------------------------------------
UNIT_COUNT_BITS = 10  # a per-unit count's fixed point in the profile (w{j}), exact for whole rows


def _derived_counts(plan: Plan) -> dict[str, int]:
    """The outer plan's columns (postgres SQL, `t1.n`) that are a derived table's bare count of a
    unit's rows, each with the cap R its derived table puts on it."""
    out = {}
    for s in plan.relation.private_sources:
        if s.derived is not None:
            for name in s.derived.counts:
                out[exp.column(name, table=s.alias).sql(dialect="postgres")] = s.derived.cap
    return out


def lifted_counts(plan: Plan) -> dict[str, int]:
    """The per-unit counts (column SQL -> cap R) that the outer query sums or averages and its
    profile bins lifted to the reach (`unit_count_value`), so that the model sees what the cap
    cuts, whether or not it is corrected (`unit_count`): neither a group key nor in the outer
    WHERE (which read it capped), one row a unit, no partition selection, and one cap for all."""
    counts = _derived_counts(plan)
    if not counts or plan.needs_selection or ceiling(plan) > 1 or len(set(counts.values())) > 1:
        return {}
    summed = set()
    for est in plan.estimates:
        if est.func in ("sum", "whole_sum", "avg") and est.total is not None:
            m = plan.measures[est.total]
            if isinstance(m, Sum) and isinstance(m.value, exp.Column) and m.lower == 0.0:
                summed.add(m.value.sql(dialect="postgres"))
    read = {c.sql(dialect="postgres") for w in plan.relation.where for c in w.find_all(exp.Column)}
    read |= {c.sql(dialect="postgres") for k in plan.keys for c in k.expr.find_all(exp.Column)}
    return {e: cap for e, cap in counts.items() if e in summed and e not in read}


def lift_of(plan: Plan) -> tuple[int, int] | None:
    """(R, R') for the profile's copy of `filtered` when it lifts a per-unit count (`lifted_counts`)."""
    caps = set(lifted_counts(plan).values())
    if not caps:
        return None
    (cap,) = caps
    return cap, REACH * cap


def unit_count(plan: Plan) -> str | None:
    """The column (its postgres SQL) of a per-unit count that the outer query sums or averages
    (`SELECT AVG(n) FROM (SELECT unit, COUNT(*) AS n ... GROUP BY unit) t`), whose cap at the
    policy's R = max_rows x max_groups (sql/derived.py) cuts the rows of heavy units: profiled up
    to the reach (`lifted_counts`) and corrected for that cut (`auto_correction.unit_count_query`).
    Only where every estimate is a SUM or AVG of that one column or a count of rows. None otherwise."""
    lifted = lifted_counts(plan)
    found: set[str] = set()
    for i, est in enumerate(plan.estimates):
        if est.func == "count":
            continue
        if (expr := summed(plan, i)) not in lifted:
            return None
        found.add(expr)
    return found.pop() if len(found) == 1 else None


def summed(plan: Plan, i: int) -> str | None:
    """The value (its postgres SQL) the plan's i-th estimate sums or averages; None for any other."""
    est = plan.estimates[i]
    if est.func not in ("sum", "whole_sum", "avg") or est.total is None:
        return None
    value = plan.measures[est.total].value
    return None if value is None else value.sql(dialect="postgres")


def unit_cap(plan: Plan) -> int:
    """R, the cap on the per-unit count `unit_count` (the derived table's, from the policy)."""
    expr = unit_count(plan)
    assert expr is not None
    return _derived_counts(plan)[expr]


def unit_reach(plan: Plan) -> int:
    """How far a per-unit count is profiled and corrected: REACH times its cap."""
    return REACH * unit_cap(plan)


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
    lift = lift_of(plan) if any(c.unit_count for c in cols) else None
    query = with_filtered(plan, b.select([exp.Star()], b.subquery(union, "profile")), lift)
    return _with_quantile_values(plan, cols, query)


def rows_query(plan: Plan) -> exp.Select:
    """What names the rows a profile is of (`session/auto.piece_keys`): the profile's CTEs up to
    `filtered` and its units, without the measures' columns (v{j}), so that queries over the same
    FROM, JOIN, WHERE and group keys give the same text whatever they aggregate."""
    query = with_filtered(plan, b.select([b.col("unit"), b.col("n")], b.table("prof_units")))
    (cte,) = [t for t in query.args["with_"].expressions if t.alias == "filtered"]
    for alias in list(cte.this.find_all(exp.Alias)):
        if alias.alias.startswith("v") and alias.alias[1:].isdigit():
            alias.pop()
    return query


def _with_quantile_values(plan: Plan, cols: Sequence[Column], query: exp.Select) -> exp.Select:
    """`query` whose `filtered` also gives, for each quantile's column, its value in a sum's fixed
    point as q{j}, beside the histogram's bin index v{j} (in the same select, so from the same row)."""
    for c in cols:
        if not (c.quantile or c.unit_count):
            continue
        m = plan.measures[c.j]
        (cte,) = [t for t in query.args["with_"].expressions if t.alias == "filtered"]
        (alias,) = [a for a in cte.this.find_all(exp.Alias) if a.alias == f"v{c.j}"]
        select = alias.parent
        assert isinstance(select, exp.Select)
        if c.unit_count:  # the unit's rows up to the reach (its count lifted there: `with_filtered`)
            assert m.value is not None
            select.append("expressions", b.named(unit_count_value(m.value.copy(), int(c.upper), c.bits), c.name))
            continue
        assert isinstance(m, Histogram)
        select.append("expressions", b.named(quantile_value(m).row_value(), c.name))
    return query


def _bin(value: exp.Expression, uppers: Sequence[int]) -> exp.Expression:
    """The index of the first upper edge a value is at most (len(uppers) above them all)."""
    ifs = [(exp.LTE(this=value.copy(), expression=b.node(u)), b.node(i)) for i, u in enumerate(uppers)]
    return b.case(*ifs, default=b.node(len(uppers)))


def pieces(cols: Sequence[Column], top: int, by_group: bool = False) -> tuple[int, ...]:
    """The histograms a profile releases, by index (0 the row-count histogram, only when there is
    a total bound to choose; 1 + i column i's; 1 + len(cols) the groups' masses when `by_group`)."""
    return ((0,) if top > 1 else ()) + tuple(range(1, 1 + len(cols))) + ((1 + len(cols),) if by_group else ())


@dataclass(frozen=True)
class Piece:
    """One released histogram of a profile, kept per analyst (`session/auto.piece_keys`): its
    noisy bins (in rows, MASS divided out) and its effective epsilon, sqrt(Σ ε_i²) over the
    releases combined in it (the inverse-variance weighted mean of independent Laplace
    histograms of one exact histogram has the variance of one at that epsilon)."""

    bins: tuple[float, ...]
    epsilon: float


def combined(kept: Piece | None, bins: Sequence[float], e: float) -> Piece:
    """A fresh release `bins` at epsilon `e` combined with the piece kept of the same histogram:
    weights ε² (inverse variance); post-processing of the two releases."""
    if kept is None or len(kept.bins) != len(bins):
        return Piece(tuple(bins), e)
    w, v = kept.epsilon**2, e * e
    return Piece(tuple((w * a + v * x) / (w + v) for a, x in zip(kept.bins, bins)), math.sqrt(w + v))


def fresh(kept: Sequence[Piece | None], epsilon: Fraction) -> tuple[bool, ...]:
    """Which of a profile's histograms the query releases (again): those not kept, and those kept
    at an effective epsilon below ENOUGH times the one each would get were all released, which
    are then combined with the new release (`combined`); the others are reused, free. From what
    this analyst was released before and the query's epsilon only: decided before the charge."""
    alone = float(epsilon * SHARE) / max(len(kept), 1)
    return tuple(k is None or k.epsilon < ENOUGH * alone * (1 - 1e-9) for k in kept)


def epsilons(
    epsilon: Fraction, cols: Sequence[Column], top: int, by_group: bool = False, new: Sequence[bool] | None = None
) -> tuple[Fraction, ...]:
    """The epsilon of each histogram the query releases (`new`: which of `pieces` it does; all by
    default): the profile's share of `epsilon`, split equally over them. A histogram reused
    (kept precise enough: `fresh`) leaves its part to the others."""
    count = len(pieces(cols, top, by_group))
    released = sum(new) if new is not None else count
    return tuple([epsilon * SHARE / released] * released) if released else ()


def laplace_part(e: Fraction) -> Part:
    return Part("laplace", e, rho=e * e / 2, noise_multiplier=float(1 / e))


def parts(
    epsilon: Fraction,
    cols: Sequence[Column],
    top: int,
    correct: Sequence[Fraction] = (),
    by_group: bool = False,
    new: Sequence[bool] | None = None,
    adaptive: bool = True,
) -> tuple[Part, ...]:
    """The profile's parts of the query's cost: one Laplace mechanism per histogram it releases
    (`new`, as in `epsilons`; none when every one is reused), and, when the count may be
    corrected (`correct`: `corrected`'s prior split) or the plan has value histograms (`cols`: a
    small population's are released again, `extra`), the one part of the rest (`rest_part`), whose
    split is chosen after the profile (`lumped`); not `adaptive` (a filter
    that does not add up ε, where splitting a part after the data costs more than parts fixed
    before it), the correction's two parts at the prior split, the release's charged apart."""
    profile = tuple(laplace_part(e) for e in epsilons(epsilon, cols, top, by_group, new))
    if adaptive and (correct or cols):
        return profile + (rest_part(epsilon),)
    if not correct:
        return profile
    return profile + tuple(laplace_part(epsilon * share) for share in correct)


def lumped(plan: Plan, cols: Sequence[Column], correct: Sequence[Fraction], additive: bool) -> bool:
    """Whether the release (and a count's correction) is charged as one part, `rest_part`, split
    after the profile: where `split_after_profile` allows it, for a count that may be corrected
    (its correction's shares) and for a plan with value histograms (a small population's profile
    again, `extra`). From the plan and the filters only: fixed before the data is read."""
    return split_after_profile(plan, additive) and (bool(correct) or bool(cols))


def again_share(plan: Plan, cols: Sequence[Column], correct: Sequence[Fraction], additive: bool) -> Fraction:
    """The most of a query's epsilon (a share of it) a small population's profile may spend again
    (`extra`) out of the release's part: EXTRA where the rest is one part split after the profile
    and the plan has value histograms, else 0. From the plan and the filters only, so that what
    EXPLAIN and dpsql.target_error say before the profile holds whatever it spends."""
    return EXTRA if cols and lumped(plan, cols, correct, additive) else Fraction(0)


def extra(profile: Profile, cols: Sequence[Column], epsilon: Fraction) -> tuple[tuple[int, Fraction], ...]:
    """Which value histograms (by index in `pieces`) a small population's profile releases again and
    at what epsilon (post-processing of the released profile and its public noise scales; () for
    none): where the profile's noisy
    count of units N (`auto_denoise.population`) is below TRUST of the value histograms' scale b,
    each is released again at the epsilon that, combined with the first by inverse variance
    (`combined`), makes N TRUST scales (N taken at least FLOOR b), all of them together at most
    EXTRA of the query's epsilon. Spent from the release's part (`rest_part`), which is charged
    before the profile whatever is chosen here (`lumped`)."""
    if not cols:
        return ()
    scales = profile.noise[1 : 1 + len(cols)]
    if len(scales) != len(cols) or any(b <= 0 for b in scales):
        return ()
    units = population((profile.rows, *profile.values, profile.groups), profile.noise)
    b = max(scales)
    if units is None or units >= TRUST * b:
        return ()
    wanted = TRUST / max(units, FLOOR * b)  # the combined epsilon of a histogram of scale N / TRUST
    need = sum(math.sqrt(max(wanted * wanted - 1 / (s * s), 0.0)) for s in scales)
    share = min(Fraction(need / float(epsilon)).limit_denominator(1000), EXTRA)
    if share <= 0:
        return ()
    return tuple((1 + i, epsilon * share / len(cols)) for i in range(len(cols)))


def histograms(rows: Sequence[tuple], cols: Sequence[Column], top: int, groups: int = 0) -> list[list[int]]:
    """The profile's exact histograms from its rows (profile_query's result), by index as in
    `pieces` (the row-count histogram always first). With `groups` (the size of the released
    domain, public), the groups' largest masses sorted from the largest down and padded with
    empty ones to that many."""
    sizes = [len(steps(top)) + 1] + [VALUE_BINS] * len(cols)
    exact = [[0] * n for n in sizes]
    present = []
    for kind, _, bin_, mass in rows:
        if int(kind) == 1 + len(cols):
            present.append(int(mass))
        else:
            exact[int(kind)][int(bin_)] += int(mass)
    if groups:
        # Largest first, then the zeros: the whole padded vector sorted, which is 1-Lipschitz in L1.
        # (Ascending with the zeros after it was not: a unit in a group of its own shifted every
        # mass by one place, an L1 change up to the largest group's mass.)
        exact.append(sorted(present, reverse=True)[:groups] + [0] * max(groups - len(present), 0))
    return exact


def noisy(hist: Sequence[int], e: Fraction) -> tuple[float, ...]:
    """One histogram, every bin noised (empty ones included, so which bins hold data is not told
    by their presence) for L1 sensitivity MASS at `e`, in rows."""
    return tuple(v / MASS for v in add_noise(list(hist), Noise("laplace", laplace_scale(MASS, e))))


def assembled(released: Sequence[Piece], cols: Sequence[Column], top: int, by_group: bool = False) -> Profile:
    """The Profile of a query from its histograms (released now or before), in `pieces` order.
    The groups' masses are kept in no order (a multiset of a noisy vector: post-processing)."""
    out = [p.bins for p in released]
    noise = [1 / p.epsilon if p.epsilon > 0 else 0.0 for p in released]
    groups = tuple(sorted(out.pop())) if by_group else ()
    if top <= 1:  # one row a unit: the units are the released values' (or groups') total mass
        own = out[0] if cols else groups
        out.insert(0, (max(sum(own), 0.0),) + (0.0,) * len(steps(top)))
        noise.insert(0, 0.0)
    return Profile(steps(top), out[0], tuple(out[1:]), groups, tuple(noise))


# The choice: a model of the error, minimised -----------------------------------------------
def release_epsilon(epsilon: Fraction, correct: Sequence[Fraction] = ()) -> Fraction:
    """What the release gets of a query's epsilon: the rest after the profile and the shares
    chosen after it `correct` (a correction's, a small population's profile again: `Choice.after`)."""
    return epsilon * (1 - SHARE - sum(correct, Fraction(0)))

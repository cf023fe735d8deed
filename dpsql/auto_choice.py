"""The choice of auto bounds' limits from a released profile: the error model (what noise, truncation
and clipping cost at each candidate total bound C and clamp U) and its minimum. Pure
post-processing of the profile (auto_bounds.py builds, noises and releases it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from fractions import Fraction
from functools import partial
from typing import Sequence

from . import auto_mean
from .auto_bounds import (
    CORRECTED,
    KEPT_WEIGHT,
    QUANTILES,
    RESIDUAL,
    SHARE,
    SPREADS,
    VALUE_BINS,
    Choice,
    Column,
    Profile,
    adapted,
    reach_of,
    release_epsilon,
    split_after_profile,
    steps,
    unit_count,
)
from .auto_denoise import blended, geometric_fit, octave_fit, plausible, population, small, trust
from .guarantee.measures import Histogram, Sum
from .guarantee.plan import Plan


@dataclass(frozen=True)
class _Rows:
    """Units by row count, from the profile: rows kept under a total bound C. What the search
    asks of it again and again is computed once per choice (`memo`: by the same arithmetic, so
    the numbers are those of computing it afresh)."""

    reps: tuple[float, ...]
    units: tuple[float, ...]
    memo: dict = field(default_factory=dict, compare=False, repr=False)

    def kept(self, c: float) -> float:
        key = ("kept", c)
        if key not in self.memo:
            self.memo[key] = sum(u * min(r, c) for r, u in zip(self.reps, self.units))
        return self.memo[key]

    def counts(self, top: int) -> tuple[float, ...]:
        """Each bin's rows per unit, the units beyond the policy's bound taken at twice it (the
        correction's model: as many rows again as the bound)."""
        return self.reps[:-1] + (2.0 * top,)

    def total_rows(self, top: int) -> float:
        key = ("total", top)
        if key not in self.memo:
            self.memo[key] = sum(u * n for u, n in zip(self.units, self.counts(top)))
        return self.memo[key]

    def clipped(self, v: _Values, u: float, k: float, top: int) -> float:
        """What clipping each unit's total of values clamped at u to k cuts, summed over units:
        a unit of one row cuts its value's excess over k (from the value histogram), one of n
        rows that of a normal total of mean n * mean and variance n * variance (the values'
        clamped moments, a unit's rows taken as independent draws)."""
        key = ("clipped", id(v), u, k, top)
        if key not in self.memo:
            self.memo[key] = _clipped(self._bins(top), v, u, k)
        return self.memo[key]

    def _bins(self, top: int) -> tuple[tuple[float, float, float], ...]:
        """(rows per unit, units, the rows' square root) of each bin that holds units."""
        key = ("bins", top)
        if key not in self.memo:
            self.memo[key] = tuple(
                (n, count, math.sqrt(n)) for n, count in zip(self.counts(top), self.units) if count > 0
            )
        return self.memo[key]


def _rows(profile: Profile, units: float | None = None) -> _Rows:
    """The row-count histogram as the model reads it: its bins blended with their geometric fit
    by how many noise scales the population `units` is (`auto_denoise.trust`)."""
    edges = profile.steps
    reps = []
    for i, upper in enumerate(edges):
        lower = edges[i - 1] if i else 0
        reps.append((lower + 1 + upper) / 2)
    reps.append(edges[-1])  # beyond the policy's bound: the bound is all any choice keeps
    scale = profile.noise[0] if profile.noise else 0.0
    fit = partial(geometric_fit, uppers=edges)
    tail = scale if small(units, scale) else 0.0  # its last bin's noise read as heavy units
    return _Rows(tuple(reps), blended(profile.rows, trust(units, scale), fit, tail))


@dataclass(frozen=True)
class _Values:
    mids: tuple[float, ...]
    mass: tuple[float, ...]
    edges: tuple[float, ...] = ()  # the bins' lower edge, then each one's upper edge
    memo: dict = field(default_factory=dict, compare=False, repr=False)  # moments, once per choice

    def quantile(self, p: float) -> float:
        """Where the values' cumulative mass reaches p of the whole (linear within a bin)."""
        key = ("quantile", p)
        if key not in self.memo:
            self.memo[key] = _quantile(self.edges, self.mass, p)
        return self.memo[key]

    def top_of(self, p: float) -> float:
        """The upper edge of the bin where the values' cumulative mass reaches p of the whole."""
        key = ("top", p)
        if key not in self.memo:
            q = self.quantile(p)
            self.memo[key] = next((e for e in self.edges[1:] if e >= q), self.edges[-1] if self.edges else q)
        return self.memo[key]

    def mean(self, clamp: float) -> float:
        return self.moment(clamp, 1)

    def moment(self, clamp: float, k: int) -> float:
        """E[min(x, clamp)^k] over the profile's weighted rows."""
        key = (clamp, k)
        if key not in self.memo:
            total = self.weight()
            self.memo[key] = (
                sum(m * min(v, clamp) ** k for v, m in zip(self.mids, self.mass)) / total if total > 0 else 0.0
            )
        return self.memo[key]

    def weight(self) -> float:
        if "weight" not in self.memo:
            self.memo["weight"] = sum(self.mass)
        return self.memo["weight"]


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


_ROOT_2 = math.sqrt(2)
_ROOT_2PI = math.sqrt(2 * math.pi)


def _clipped(bins: tuple[tuple[float, float, float], ...], v: _Values, u: float, k: float) -> float:
    """`_Rows.clipped` over its bins that hold units. A one-row unit's value, clamped at u, exceeds
    k only when k < u (k is a multiple of the clamp or more, so that term is mostly zero); a unit
    of more rows cuts `normal_excess` of its normal total."""
    weight = v.weight()
    if weight <= 0:
        return 0.0
    mean = v.moment(u, 1)
    sd = math.sqrt(max(v.moment(u, 2) - mean * mean, 0.0))
    out = 0.0
    for n, count, root in bins:
        if n <= 1:
            if k >= u:  # min(x, u) - k <= 0 for every value: each term is max(..., 0.0) = 0.0
                excess = 0.0
            else:
                excess = sum(m * max(min(x, u) - k, 0.0) for x, m in zip(v.mids, v.mass)) / weight
        else:
            excess = normal_excess(n * mean, root * sd, k)
        out += count * excess
    return out


def normal_excess(mean: float, sd: float, k: float) -> float:
    """E[max(T - k, 0)] for T normal with this mean and standard deviation."""
    if sd <= 0:
        return max(mean - k, 0.0)
    d = (mean - k) / sd
    return (mean - k) * 0.5 * math.erfc(-d / _ROOT_2) + sd * math.exp(-d * d / 2) / _ROOT_2PI


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


def _values(col: Column, mass: Sequence[float], weight: float = 1.0) -> _Values:
    """A value histogram as the model reads it: its bins blended with their fit over the octaves
    at `weight` (`auto_denoise.trust`)."""
    edges = (col.lower,) + col.edges
    mids = tuple((edges[i] + edges[i + 1]) / 2 for i in range(VALUE_BINS))
    return _Values(mids, blended(mass, weight, octave_fit), edges)


def choose(
    plan: Plan,
    profile: Profile,
    cols: Sequence[Column],
    top: int,
    epsilon: Fraction,
    groups: int,
    correct: Sequence[Fraction] = (),
    adaptive: bool = True,
    extra: Fraction = Fraction(0),
) -> Choice:
    """The total bound and clamps that minimise the model's error at the release's epsilon
    (`epsilon` minus the profile's share, and the correction's shares), over every candidate
    (the policy's own among them). `groups`: the groups the query releases (its declared
    domain's size; public), of which the profile's group masses give the effective number
    (`effective_groups`). `correct`: a count that may be corrected for truncation
    (`auto_bounds.corrected`'s prior split; () for the others). Such a count chooses with its
    total bound C whether to correct at all and, if so, the reach R and the shares of epsilon
    of the correction's kept rows and excess (`auto_bounds.adapted`, at this C and R), the
    release getting the rest: under a correction, what truncation cuts counts for RESIDUAL of
    itself and the correction's noise (the excess's scale over the rows) is added to each
    count; without one, the release gets the whole rest after the profile and truncation's cut
    counts whole. Not `adaptive` (the charge's parts were fixed before the profile: a filter that
    does not add up ε), a count that may be corrected is, at the prior shares `correct`. `extra`:
    the share of epsilon a small population's profile spent again (`auto_bounds.extra`; never with
    a correction), which the release does not get."""
    rest = float(epsilon * (1 - SHARE - extra))
    # the release's measures share it, and partition selection one share more (calibrate)
    measures = max(len(plan.measures), 1) + (1 if plan.needs_selection else 0)
    scales = profile.noise or (0.0,) * (2 + len(cols))
    units = population((profile.rows, *profile.values, profile.groups), scales)
    # the groups' masses read with their noise only where the population is (trust below 1)
    spread = scales[-1] if profile.groups and trust(units, scales[-1]) < 1 else 0.0
    groups = effective_groups(profile.groups, groups, spread)
    rows = _rows(profile, units)
    centred = auto_mean.centred_means(plan, [c.expr for c in cols]) if adaptive else {}
    split_after = split_after_profile(plan, adaptive)
    terms = _terms(plan)
    values = {c.expr: _values(c, m, trust(units, b)) for c, m, b in zip(cols, profile.values, scales[1:])}
    # a spread's own column: its clamp judged on histograms as plausible as the released one
    draws = {
        c.expr: tuple(_values(c, d, trust(units, b)) for d in plausible(m, b))
        for c, m, b in zip(cols, profile.values, scales[1:])
        if _spread_only(terms, c.expr)
    }
    by_expr = {c.expr: c for c in cols}
    candidates = steps(top) if top > 1 else (top,)
    full = max(rows.kept(top), 1.0)
    # a per-unit count's cap at R corrected up to a reach (its profile's bins above R)
    unit = found if correct and (found := unit_count(plan)) in by_expr else None

    def option(c: int, far: int | tuple[int, int] | None) -> tuple[tuple[Fraction, ...], float, _Fix] | None:
        """The correction's shares, the release's epsilon per measure and the model's fix at a
        total bound c and a reach far (None: no correction); None when a share would be 0."""
        if far is None:  # uncorrected, a count also loses the rows of units beyond the policy's bound
            return (), rest / measures, _Fix(beyond=rows.units[-1] * top if correct and unit is None else 0.0)
        if isinstance(far, tuple):
            return _unit_option(far)
        shares = adapted(correct, c, far, groups * measures, float(KEPT_WEIGHT)) if split_after else tuple(correct)
        if not all(shares):
            return None
        # Rows beyond the reach stay cut: those between it and the policy's bound (from the
        # profile), and, below the bound, those of units beyond it (the model: as many again).
        beyond = (rows.kept(top) - rows.kept(far) + rows.units[-1] * top) if far < reach_of(top) else 0.0
        noise = (far - c) / float(epsilon * shares[1]) / full
        return shares, float(release_epsilon(epsilon, shares)) / measures, _Fix(float(RESIDUAL), noise, beyond)

    def _unit_option(at: tuple[int, int]) -> tuple[tuple[Fraction, ...], float, _Fix] | None:
        """`option` for a per-unit count clamped at u (a whole number of rows, at most its cap R)
        and corrected up to `far`: the factor (K + E) / K moves by E's noise, (far - u) / ε_E,
        and by K's, u / ε_K, times E / K, over K, the units' counts up to u (all from the
        profile's bins up to the reach); the split weighs K's noise by that E / K."""
        assert unit is not None
        u, far = at
        v = values[unit]
        kept = max(full * v.mean(u), 1.0)
        ratio = max(v.mean(far) - v.mean(u), 0.0) / max(v.mean(u), 1e-9)
        shares = adapted(correct, u, far, groups * measures, ratio) if split_after else tuple(correct)
        if not all(shares):
            return None
        noise = ((far - u) / float(epsilon * shares[1]) + u / float(epsilon * shares[0]) * ratio) / kept
        return (
            shares,
            float(release_epsilon(epsilon, shares)) / measures,
            _Fix(float(RESIDUAL), noise, unit=unit, far=far, clamp=u),
        )

    best: tuple[float, int, int | tuple[int, int] | None, dict[str, float], tuple] | None = None
    for c in candidates:
        fars = reaches(top, c) if unit is None else unit_reaches(by_expr[unit], groups)
        for far in ((None,) if split_after else ()) + fars if correct else (None,):
            opt = option(c, far)
            if opt is None:
                continue
            _, per_measure, fix = opt
            clamps = {
                e: _best_clamp(terms, by_expr[e], values[e], rows, c, top, groups, per_measure, fix, draws.get(e, ()))
                for e in by_expr
                if e != fix.unit
            }
            if fix.unit is not None:
                clamps[fix.unit] = fix.clamp  # the correction scales what the clamp keeps
            err = _error(terms, by_expr, values, rows, c, top, clamps, groups, per_measure, fix)
            if best is None or err < best[0]:
                best = (err, c, far, clamps, opt)
    assert best is not None
    err, c, far, clamps, (shares, per_measure, chosen_fix) = best
    if isinstance(far, tuple):  # a per-unit count's (clamp, reach): the clamp is in `clamps`
        far = far[1]
    policy = _error(
        terms,
        by_expr,
        values,
        rows,
        top,
        top,
        {e: by_expr[e].declared[1] if by_expr[e].unit_count else by_expr[e].upper for e in by_expr},
        groups,
        rest / measures,
    )
    # The same model without noise: what the chosen limits cut (a correction's residual included).
    bias = _error(terms, by_expr, values, rows, c, top, clamps, groups, math.inf, replace(chosen_fix, noise=0.0))
    clips = tuple(
        (e, by_expr[e].lower, u)
        for e, u in sorted(clamps.items())
        if u < by_expr[e].declared[1] or by_expr[e].lower > by_expr[e].declared[0]
    )
    # Each aggregate's share of both (the model's relative error is a sum over them).
    by_aggregate, scales = [], []
    for est, t in zip(plan.estimates, terms):
        scales.append(_scale(t, by_expr, values, rows, top, groups))
        whole = _error((t,), by_expr, values, rows, c, top, clamps, groups, per_measure, chosen_fix)
        cut = _error((t,), by_expr, values, rows, c, top, clamps, groups, math.inf, replace(chosen_fix, noise=0.0))
        by_aggregate.append((est.text, min(cut, whole), max(whole - cut, 0.0)))
    means = {e: auto_mean.centre(values[e].mean(clamps[e]), by_expr[e].lower, clamps[e]) for e in centred.values()}
    return Choice(
        c if top > 1 else None,
        clips,
        err,
        policy,
        epsilon * SHARE,
        far,
        min(bias, err),
        tuple(by_aggregate),
        tuple(scales),
        shares=shares,
        centres=tuple(sorted(means.items())),
        extra=extra,
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


def unit_reaches(col: Column, groups: float = 1.0) -> tuple[tuple[int, int], ...]:
    """A per-unit count's candidate (clamp, reach) pairs when corrected: each bin edge of the
    profile above the clamp up to the reach (REACH x the cap), and as the clamp the cap R or,
    over two effective groups or more, any candidate clamp that is a whole number of rows (the
    kept rows K = Σ min(n, u) an integer). A clamp below R halves the release's noise in each
    group but adds to E's sensitivity (far - u) and takes K down: for one group the release's
    noise is a small part of the error and the model's choice between them a near tie that the
    profile's noise in its top bins decides (measured worse: DESIGN §4)."""
    cap = col.declared[1]
    whole = [int(u) for u in col.clamps if u >= 1 and u == int(u) and (groups >= 2 or u == cap)]
    return tuple((u, int(far)) for u in whole for far in col.edges if far > u and far == int(far))


def effective_groups(masses: Sequence[float], groups: int, scale: float = 0.0) -> float:
    """How many groups the rows are spread over, from the groups' noisy masses: (Σ m)² / Σ m², which
    is the number of groups when they are equal and 1 when one holds all; `groups` (the domain's
    size) without masses. With the masses' Laplace scale b, of the signed masses, each square less
    its noise's 2 b² (both sums then unbiased; clamping each mass at 0 instead adds to Σ m² about
    b² for every empty group, and a population in one group reads as spread over several); without
    it, those below 0 as empty. Never above `groups`, nor below 1."""
    if scale > 0:
        total = sum(masses)
        squares = sum(x * x for x in masses) - len(masses) * 2 * scale * scale
    else:
        m = [max(x, 0.0) for x in masses]
        total, squares = sum(m), sum(x * x for x in m)
    if not masses or squares <= 0 or total <= 0:
        return float(max(groups, 1))
    return min(max(total**2 / squares, 1.0), float(max(groups, 1)))


@dataclass(frozen=True)
class _Fix:
    """How a correction changes the model: the share of truncation's cut left, the correction's
    relative noise."""

    residual: float = 1.0
    noise: float = 0.0
    beyond: float = 0.0  # rows the correction does not see (beyond its reach)
    unit: str | None = None  # a per-unit count's column, clamped at `clamp`, corrected up to `far` (noise in `noise`)
    far: float = 0.0
    clamp: float = 0.0


def _spread_only(terms: Sequence[_Term], expr: str) -> bool:
    """Whether every aggregate over column `expr` is a spread (VAR/STDDEV), so that its clamp
    serves spreads alone."""
    funcs = [t.func for t in terms if t.expr == expr]
    return bool(funcs) and all(f in SPREADS for f in funcs)


def _best_clamp(terms, col, values, rows, c, top, groups, per_measure, fix, draws=()) -> float:
    """The clamp of least model error at the profile as released; with `draws` (a spread's own
    column: `auto_denoise.plausible`), the clamp whose largest error over those histograms is
    least. A spread's cut is read from the few units in the top octaves, whose bins are mostly
    the profile's noise (about 300 units a bin at the sample's ε against a tail of 1 %), so at the
    released bins alone the clamp flipped from run to run between the octaves' extremes (DESIGN.md
    §4 'A spread's clamp over its profile's noise')."""

    def error(v: _Values, u: float) -> float:
        return _error(
            terms, {col.expr: col}, {col.expr: v}, rows, c, top, {col.expr: u}, groups, per_measure, fix, only=col.expr
        )

    if draws:
        return min((max(error(d, u) for d in draws), u) for u in col.clamps)[1]
    return min((error(values, u), u) for u in col.clamps)[1]


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
            fixed = fix if t.func in CORRECTED and fix.unit is None else _Fix()
            total += ((fixed.residual * lost + fixed.beyond) / groups + c * t.bound / per_measure) / max(
                full / groups, 1.0
            ) + fixed.noise
            continue
        col, v, u = cols[t.expr], values[t.expr], clamps[t.expr]
        mean, clamped = max(v.mean(col.upper), 1e-9), v.mean(u)
        if fix.unit == t.expr:  # a per-unit count at its clamp, corrected up to the reach
            cut = fix.residual * max(v.mean(fix.far) - clamped, 0.0) + max(mean - v.mean(fix.far), 0.0)
            if t.func in ("sum", "whole_sum"):
                whole = rows.total_rows(top) * mean
                total += (rows.total_rows(top) * cut / groups + c * u / per_measure) / max(whole / groups, 1e-9)
            else:
                centre = (col.lower + u) / 2
                noise = (c * (u - col.lower) / 2 + abs(clamped - centre) * c) / per_measure
                total += (cut + noise / max(kept / groups, 1.0)) / mean
            total += fix.noise
            continue
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

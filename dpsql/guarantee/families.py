"""Aggregate families: how each aggregate the analyst wrote is estimated from noisy measures,
with its interval and its result type. All the dispatch on an estimate's kind is here.

A family's `estimate` runs after the noise (post-processing: it reads only noisy measures and
the policy's bounds). Families:
- COUNT (COUNT(*), COUNT(x), COUNT(DISTINCT unit)): a noisy count, rounded, clamped at 0;
- SUM: a noisy fixed-point sum;
- AVG: a centred noisy sum over a noisy count, clamped to the bounds;
- VARIANCE (VAR/STDDEV, POP/SAMP): count, centred sum and centred sum of squares;
- QUANTILE (PERCENTILE_CONT, MEDIAN, MIN, MAX): a noisy histogram, made monotone;
- DISTINCT (COUNT(DISTINCT column) over declared keys): keys whose noisy count clears the noise.
Under TABLESAMPLE (rate q) COUNT, SUM and AVG are Horvitz-Thompson estimates whose intervals add
the sampling error (the others are refused at analysis).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import TYPE_CHECKING, Any, Sequence

from sqlglot import exp

from . import shrinkage
from .measures import FINE_COUNT_BITS, Count, Histogram, Measure, Units, squares_measure, sum_measure
from .mechanisms import Noise

if TYPE_CHECKING:
    from .plan import Estimate, Plan

Interval = tuple[float, float]
Values = tuple[Sequence[float | None], Sequence[Interval | None]]  # an estimate per group, its interval
# Per measure, its noisy integers: one per group, or for a histogram one list per bin; which of
# the two is the measure's kind (Histogram or not), so the items are not typed here.
Noisy = Sequence[Sequence[Any]]
Roles = dict[str, Measure]  # the measures an estimate reads: count, total, squares
QUANTILE_BINS = 64  # equal-width bins of a quantile's histogram over the column's bounds
QUANTILES = ("quantile", "min", "max")  # the families read from a histogram of many cells per group


def _z(alpha: float) -> float:
    """Two-sided normal quantile: P(|N(0,1)| > z) = alpha."""
    return NormalDist().inv_cdf(1 - alpha / 2)


@dataclass(frozen=True)
class Operand:
    """What an aggregate's measures are built from: its row expression (None: every row), the
    bounds it is clamped to, a count's fractional bits, whether units are sampled (TABLESAMPLE)
    and COUNT(DISTINCT column)'s declared keys."""

    value: exp.Expression | None
    lower: float
    upper: float
    bits: int
    sampled: bool
    categories: tuple[Any, ...] | None
    centre: float | None = None  # an AVG's centre chosen per query (auto_mean); None: its family's

    @property
    def summed(self) -> exp.Expression:
        """The row expression a sum reads (SUM, AVG and VARIANCE always have one)."""
        if self.value is None:
            raise TypeError("a sum of no row expression")
        return self.value

    @property
    def keys(self) -> tuple[Any, ...]:
        """COUNT(DISTINCT column)'s declared keys (the analysis refuses a column without them)."""
        if self.categories is None:
            raise TypeError("COUNT(DISTINCT ...) without declared keys")
        return self.categories


class Family:
    """One aggregate family: the measures it needs, its estimate and interval from their noisy
    values, its result type."""

    result_type = "DOUBLE"
    targetable = False  # dpsql.target_error sizes epsilon for its COUNT and SUM estimates
    centred_sum = False  # its sum is centred in the bounds (an AVG), so a plain SUM of the same column can serve
    shrunk = False  # its groups' estimates are moved toward their median (shrinkage.py), when there are enough

    def measures(self, of: Operand) -> Roles:
        """The measures an aggregate of `of.value` (bounded to [of.lower, of.upper]) is estimated from."""
        raise NotImplementedError

    def centre(self, lower: float, upper: float) -> float:
        return 0.0

    def centred(self, of: Operand) -> float:
        """The centre of its sum: one chosen for the query within the bounds (an auto-bounded
        mean's, auto_mean.py), else the family's own."""
        if of.centre is None:
            return self.centre(of.lower, of.upper)
        return min(max(of.centre, of.lower), of.upper)

    def estimate(self, plan: Plan, est: Estimate, noisy: Noisy, noises: Sequence[Noise], confidence: float) -> Values:
        if plan.sample_rate:
            return _sampled(plan, est, noisy, noises, plan.sample_rate, 1 - confidence)
        return self.exact(plan, est, noisy, noises, confidence)

    def exact(self, plan: Plan, est: Estimate, noisy: Noisy, noises: Sequence[Noise], confidence: float) -> Values:
        raise NotImplementedError


class _Count(Family):
    result_type = "BIGINT"
    targetable = True

    def measures(self, of: Operand) -> Roles:
        return {"count": Count(of.value, bits=of.bits)}

    def exact(self, plan: Plan, est: Estimate, noisy: Noisy, noises: Sequence[Noise], confidence: float) -> Values:
        scale = plan.measures[_of(est.count)].unit_scale
        col, h = [c * scale for c in noisy[_of(est.count)]], noises[_of(est.count)].half_width(confidence) * scale
        vals = [max(0, round(c)) for c in col]
        # Counts are whole numbers: widen the interval outward to integers (still valid).
        return vals, [(float(max(0, math.floor(c - h))), float(max(0, math.ceil(c + h)))) for c in col]


class _UnitCount(_Count):
    """COUNT(DISTINCT unit): one per unit and group."""

    def measures(self, of: Operand) -> Roles:
        return {"count": Units(None, bits=of.bits)}


class _Sum(Family):
    targetable = True

    def measures(self, of: Operand) -> Roles:
        # A sampled SUM's interval needs a count to bound the sampling variance.
        total: Roles = {"total": sum_measure(of.summed, of.lower, of.upper, 0.0, own_norm=True)}
        return {**total, "count": Count(of.value, bits=of.bits)} if of.sampled else total

    def exact(self, plan: Plan, est: Estimate, noisy: Noisy, noises: Sequence[Noise], confidence: float) -> Values:
        unit = plan.measures[_of(est.total)].unit_scale
        h = noises[_of(est.total)].half_width(confidence) * unit
        vals = [s * unit for s in noisy[_of(est.total)]]
        return vals, [(v - h, v + h) for v in vals]

    def estimate(self, plan: Plan, est: Estimate, noisy: Noisy, noises: Sequence[Noise], confidence: float) -> Values:
        """A sum of values that are never negative (or never positive) keeps that sign: a noisy
        total below zero is moved to zero, with its interval (post-processing, and closer)."""
        vals, cis = super().estimate(plan, est, noisy, noises, confidence)
        if est.lower >= 0:
            return (
                [None if v is None else max(0.0, v) for v in vals],
                [None if ci is None else (max(0.0, ci[0]), max(0.0, ci[1])) for ci in cis],
            )
        if est.upper <= 0:
            return (
                [None if v is None else min(0.0, v) for v in vals],
                [None if ci is None else (min(0.0, ci[0]), min(0.0, ci[1])) for ci in cis],
            )
        return vals, cis


class _WholeSum(_Sum):
    """SUM of an integer expression (SUM(1), SUM(CASE WHEN c THEN 1 ELSE 0 END), SUM(visits)):
    PostgreSQL answers a whole number, and BI tools expect one (Tableau's Number of Records).
    Rounding the noisy sum, and its interval outward, is post-processing."""

    result_type = "BIGINT"

    def estimate(self, plan: Plan, est: Estimate, noisy: Noisy, noises: Sequence[Noise], confidence: float) -> Values:
        vals, cis = super().estimate(plan, est, noisy, noises, confidence)
        return (
            [None if v is None else math.floor(v + 0.5) for v in vals],
            [None if ci is None else (float(math.floor(ci[0])), float(math.ceil(ci[1]))) for ci in cis],
        )


class _Average(Family):
    """A sum centred in the bounds (half the sensitivity of a plain one) over a count."""

    centred_sum = True

    def measures(self, of: Operand) -> Roles:
        return {
            "total": sum_measure(of.summed, of.lower, of.upper, self.centred(of)),
            "count": Count(of.value, bits=of.bits),
        }

    def centre(self, lower: float, upper: float) -> float:
        return (lower + upper) / 2

    def exact(self, plan: Plan, est: Estimate, noisy: Noisy, noises: Sequence[Noise], confidence: float) -> Values:
        # The interval holds at `confidence`: its two parts at (1 + confidence) / 2 each.
        unit = plan.measures[_of(est.total)].unit_scale
        count_scale = plan.measures[_of(est.count)].unit_scale
        counts, sums = [c * count_scale for c in noisy[_of(est.count)]], noisy[_of(est.total)]
        hc = noises[_of(est.count)].half_width((1 + confidence) / 2) * count_scale
        hs = noises[_of(est.total)].half_width((1 + confidence) / 2) * unit
        vals, cis = [], []
        for c, s in zip(counts, sums):
            s = s * unit
            vals.append(min(est.upper, max(est.lower, est.centre + s / max(c, 1))))
            cis.append(_ratio_interval(est, c, hc, s, hs))
        return vals, cis


class _Variance(Family):
    """Variance = E[(v-c)^2] - E[v-c]^2 from the noisy count, centred sum and centred sum of
    squares (c the middle of the bounds; the count at FINE_COUNT_BITS where shares are scaled,
    so that adding the squares' centring back times it is unbiased), clamped to what is
    possible ([0, half^2]); the interval takes each part at
    1 - alpha/3 and the extremes over them (union bound). `sample`: VAR_SAMP/STDDEV_SAMP's
    n/(n-1); `root`: STDDEV. Over enough groups each is moved toward their median (shrinkage.py)."""

    shrunk = True

    def __init__(self, sample: bool, root: bool) -> None:
        self.sample, self.root = sample, root

    def measures(self, of: Operand) -> Roles:
        centre = self.centre(of.lower, of.upper)
        return {
            "total": sum_measure(of.summed, of.lower, of.upper, centre),
            # fixed point as fine as the squares' where a unit's shares are scaled (FINE_COUNT_BITS)
            "count": Count(of.value, bits=FINE_COUNT_BITS if of.bits else 0),
            "squares": squares_measure(of.summed, of.lower, of.upper),
        }

    def centre(self, lower: float, upper: float) -> float:
        return (lower + upper) / 2

    def exact(self, plan: Plan, est: Estimate, noisy: Noisy, noises: Sequence[Noise], confidence: float) -> Values:
        cm, tm, qm = (plan.measures[_of(i)] for i in (est.count, est.total, est.squares))
        q_centre = qm.centre
        conf = 1 - (1 - confidence) / 3
        hc = noises[_of(est.count)].half_width(conf) * cm.unit_scale
        hs = noises[_of(est.total)].half_width(conf) * tm.unit_scale
        hq = noises[_of(est.squares)].half_width(conf) * qm.unit_scale
        half = (est.upper - est.lower) / 2
        top = half * half
        sample, root = self.sample, self.root
        vals, cis = [], []
        for c, s, sq in zip(noisy[_of(est.count)], noisy[_of(est.total)], noisy[_of(est.squares)]):
            n = c * cm.unit_scale
            s1 = s * tm.unit_scale
            s2 = sq * qm.unit_scale + q_centre * n  # undo the squares' own centring
            vals.append(_finish(_variance(n, s1, s2, top, sample), root))
            lo_n, hi_n = n - hc, n + hc
            if lo_n <= (1 if sample else 0):
                cis.append((0.0, _finish(top * (2 if sample else 1), root)))
                continue
            means = [sv / nv for sv in (s1 - hs, s1 + hs) for nv in (lo_n, hi_n)]
            mean_sq_hi = max(m * m for m in means)
            mean_sq_lo = 0.0 if min(means) <= 0 <= max(means) else min(m * m for m in means)
            e2 = [(s2v) / nv for s2v in (s2 - hq - q_centre * hc, s2 + hq + q_centre * hc) for nv in (lo_n, hi_n)]
            lo_v = max(0.0, min(e2) - mean_sq_hi)
            hi_v = min(top, max(e2) - mean_sq_lo)
            if sample:
                lo_v, hi_v = lo_v * lo_n / (lo_n - 1), min(top * 2, hi_v * hi_n / (hi_n - 1) if hi_n > 1 else top * 2)
            cis.append((_finish(lo_v, root), _finish(max(lo_v, hi_v), root)))
        return shrinkage.toward_median(vals, cis), cis


class _Distinct(Family):
    """Declared keys whose noisy row count clears the noise level (one count's half-width, and
    at least 1/2). Interval: with every key's noise within h' (the half-width at 1 - alpha / K,
    a union bound), a key whose noisy count exceeds max(h', 1/2) is present (an absent key's is
    at most h') and a present key's noisy count exceeds -h' (it is at least 1 - h'); so
    [#(count > max(h', 1/2)), #(count > -h')] holds at the confidence level."""

    result_type = "BIGINT"

    def measures(self, of: Operand) -> Roles:
        return {
            "count": Histogram(of.value, 0.0, float(len(of.keys)), bits=of.bits, bins=len(of.keys), categories=of.keys)
        }

    def exact(self, plan: Plan, est: Estimate, noisy: Noisy, noises: Sequence[Noise], confidence: float) -> Values:
        m = plan.measures[_of(est.count)]
        scale = m.unit_scale
        # A present key has a count of at least 1, an absent one 0: a key counts when its noisy
        # count is above the noise level and above 1/2 (with little noise the half-width is 0,
        # and every absent key's count of exactly 0 would have reached it).
        h = max(noises[_of(est.count)].half_width(confidence) * scale, 0.5)
        h_all = noises[_of(est.count)].half_width(1 - (1 - confidence) / m.bins) * scale
        vals, cis = [], []
        for g in range(len(noisy[_of(est.count)][0]) if noisy[_of(est.count)] else 0):
            counts = [b[g] * scale for b in noisy[_of(est.count)]]
            vals.append(sum(c > h for c in counts))
            cis.append((float(sum(c > max(h_all, 0.5) for c in counts)), float(sum(c > -h_all for c in counts))))
        return vals, cis


class _Quantile(Family):
    """A quantile per group from its noisy histogram. The noisy cumulative counts at the bin
    edges are made non-decreasing by isotonic regression (pool adjacent violators): unlike
    clamping each bin at 0, this adds no mass to empty bins, which would pull every quantile
    toward the middle of the range. The quantile is where the fitted cumulative count reaches
    p times the total (linear within a bin). MIN and MAX (`extreme` -1 and 1) are the points
    where it first clears one bin's noise level from either end, so that noise in empty bins
    is not taken for data; a group whose noisy total is within the noise of a total (z *
    sqrt(bins) standard deviations) gets NULL, as an empty group would. A quantile of integer
    values (`est.integral`) is the integer nearest that point, its interval rounded outward.
    The interval is the range of points whose rank is within z * sqrt(bins) noise standard
    deviations: a normal approximation of a cumulative count's noise, so approximate, unlike
    the other intervals."""

    def __init__(self, extreme: int = 0) -> None:
        self.extreme = extreme

    def measures(self, of: Operand) -> Roles:
        return {"count": Histogram(of.value, of.lower, of.upper, bits=of.bits, bins=QUANTILE_BINS)}

    def exact(self, plan: Plan, est: Estimate, noisy: Noisy, noises: Sequence[Noise], confidence: float) -> Values:
        m = plan.measures[_of(est.count)]
        noise = noises[_of(est.count)]
        scale = m.unit_scale
        bins = noisy[_of(est.count)]
        width = (est.upper - est.lower) / m.bins
        floor = noise.half_width(confidence) * scale
        spread = _z(1 - confidence) * noise.std * scale * math.sqrt(m.bins)
        vals: list[float | None] = []
        cis: list[Interval | None] = []
        for g in range(len(bins[0]) if bins else 0):
            edges = cumulative([b[g] * scale for b in bins])
            n = edges[-1]
            if n <= spread:  # indistinguishable from an empty group
                vals.append(None)
                cis.append((est.lower, est.upper))
                continue
            if self.extreme < 0:
                target = min(floor, n / 2)
            elif self.extreme > 0:
                target = max(n - floor, n / 2)
            elif est.quantile is not None:
                target = est.quantile * n
            else:
                raise TypeError("a quantile estimate without its fraction")
            value = _point(edges, target, est.lower, width)
            lo, hi = _point(edges, target - spread, est.lower, width), _point(edges, target + spread, est.lower, width)
            if est.integral:  # integer values: the integer the point is nearest, within the bounds
                value, lo, hi = float(round(value)), float(math.floor(lo)), float(math.ceil(hi))
                value, lo, hi = (min(max(x, est.lower), est.upper) for x in (value, lo, hi))
            vals.append(value)
            cis.append((lo, hi))
        return vals, cis


FAMILIES: dict[str, Family] = {
    "count": _Count(),
    "units": _UnitCount(),
    "sum": _Sum(),
    "whole_sum": _WholeSum(),
    "avg": _Average(),
    "distinct": _Distinct(),
    "var_pop": _Variance(sample=False, root=False),
    "var_samp": _Variance(sample=True, root=False),
    "stddev_pop": _Variance(sample=False, root=True),
    "stddev_samp": _Variance(sample=True, root=True),
    "quantile": _Quantile(),
    "min": _Quantile(extreme=-1),
    "max": _Quantile(extreme=1),
}


SPREAD_FUNCTIONS: dict[type[exp.Expression], str] = {
    exp.VariancePop: "var_pop",
    exp.Variance: "var_samp",
    exp.StddevPop: "stddev_pop",
    exp.Stddev: "stddev_samp",
    exp.StddevSamp: "stddev_samp",
}


def _of(measure: int | None) -> int:
    """The index of a measure the estimate's family reads (the analysis set it for the family)."""
    if measure is None:
        raise TypeError("the estimate has no measure in a role its family reads")
    return measure


def family(est: Estimate) -> Family:
    """The family of an estimate (Estimate.func names it when analysis builds the estimate)."""
    return FAMILIES[est.func]


def _ratio_interval(est: Estimate, c: float, hc: float, s: float, hs: float) -> tuple[float, float]:
    if c - hc <= 0:
        return (est.lower, est.upper)
    corners = [est.centre + sv / cv for sv in (s - hs, s + hs) for cv in (c - hc, c + hc)]
    return (max(est.lower, min(corners)), min(est.upper, max(corners)))


def _sampled(plan: Plan, est: Estimate, noisy: Noisy, noises: Sequence[Noise], q: float, alpha: float) -> Values:
    """COUNT, SUM and AVG on a Poisson sample of units at rate q: Horvitz-Thompson estimates
    (divided by q) whose intervals add the sampling error. Each unit's share in a group obeys
    |s_u| <= B c_u and c_u <= max_rows, so the variance sum_u s_u^2 (1-q)/q is at most
    max_rows B^2 C (1-q)/q, with C the noisy count's upper end. Noise and sampling each get half
    of the miss probability."""
    m_rows = plan.max_rows
    cm = plan.measures[_of(est.count)]
    counts = [c * cm.unit_scale / q for c in noisy[_of(est.count)]]
    is_count = isinstance(family(est), _Count)
    if family(est).centred_sum:
        # AVG is a ratio of two HT estimates: noise (alpha/4) and sampling (alpha/4) for each part.
        hc_noise = noises[_of(est.count)].half_width(1 - alpha / 4) * cm.unit_scale / q
        tm = plan.measures[_of(est.total)]
        hs_noise = noises[_of(est.total)].half_width(1 - alpha / 4) * tm.unit_scale / q
        spread = max(abs(est.lower - est.centre), abs(est.upper - est.centre))
        z = _z(alpha / 4)
        vals, cis = [], []
        for c, s in zip(counts, noisy[_of(est.total)]):
            s = s * tm.unit_scale / q
            c_up = max(0.0, c + hc_noise)
            samp = z * math.sqrt(m_rows * c_up * (1 - q) / q)
            vals.append(min(est.upper, max(est.lower, est.centre + s / max(c, 1))))
            cis.append(_ratio_interval(est, c, hc_noise + samp, s, hs_noise + spread * samp))
        return vals, cis
    # COUNT or SUM: the value's noise at alpha/2, its sampling error at alpha/2 (whose count
    # bound itself takes alpha/4 of the noise).
    z = _z(alpha / 2)
    hc_noise = noises[_of(est.count)].half_width(1 - alpha / 4) * cm.unit_scale / q
    if is_count:
        bound, values, h_noise = 1.0, counts, noises[_of(est.count)].half_width(1 - alpha / 2) * cm.unit_scale / q
    else:
        tm = plan.measures[_of(est.total)]
        bound = max(abs(est.lower), abs(est.upper))
        values = [s * tm.unit_scale / q for s in noisy[_of(est.total)]]
        h_noise = noises[_of(est.total)].half_width(1 - alpha / 2) * tm.unit_scale / q
    vals, cis = [], []
    for c, v in zip(counts, values):
        c_up = max(0.0, c + hc_noise)
        h = h_noise + z * bound * math.sqrt(m_rows * c_up * (1 - q) / q)
        vals.append(max(0, round(v)) if is_count else v)
        lo, hi = v - h, v + h
        cis.append((max(0.0, lo), max(0.0, hi)) if is_count else (lo, hi))
    return vals, cis


def _variance(n: float, s1: float, s2: float, top: float, sample: bool) -> float:
    if n <= (1 if sample else 0):
        return 0.0
    var = min(top, max(0.0, s2 / n - (s1 / n) ** 2))
    return var * n / (n - 1) if sample else var


def _finish(var: float, root: bool) -> float:
    return math.sqrt(var) if root else var


def cumulative(bins: list[float]) -> list[float]:
    """Cumulative counts at the edges 0..B of noisy bins: 0 at the first edge, the noisy total
    at the last, non-decreasing in between (isotonic least squares, clipped to [0, total])."""
    total = sum(bins)
    inner, running = [], 0.0
    for b in bins[:-1]:
        running += b
        inner.append(running)
    blocks: list[list[float]] = []  # [sum, size] of pooled runs
    for v in inner:
        blocks.append([v, 1])
        while len(blocks) > 1 and blocks[-2][0] * blocks[-1][1] > blocks[-1][0] * blocks[-2][1]:
            s, c = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += c
    fitted = [min(max(s / c, 0.0), max(total, 0.0)) for s, c in blocks for _ in range(int(c))]
    return [0.0] + fitted + [total]


def _point(edges: list[float], target: float, lower: float, width: float) -> float:
    """Where the cumulative counts `edges` (bins of `width` from `lower`) first reach target."""
    target = min(max(target, 0.0), edges[-1])
    for k in range(len(edges) - 1):
        a, b = edges[k], edges[k + 1]
        if b >= target and b > a:
            return lower + width * (k + min(1.0, max(0.0, (target - a) / (b - a))))
    return lower + width * (len(edges) - 1)

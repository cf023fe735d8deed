"""A mean under auto bounds: its sum centred at the profile's mean, and most of its epsilon on
the sum (issue 32, item 2).

An AVG is a noisy sum of clamp(v) - c over a noisy count, read as c + S / n. Its error in a
group of n (weighted) rows is about (C max(U - c, c - L) / eps_S + |mean - c| C / eps_N) / n:
the sum's noise, and the count's noise times the group mean's distance from the centre. At the
policy's limits c is the middle of [L, U] (half a plain sum's sensitivity) and eps_S = eps_N;
but values like costs sit far below the middle of their clamp (the sample's costs: mean about
1,000 under a clamp of 12,500), so the count's term is nearly as large as the sum's. Centred at
the mean instead, the count's term is near zero and most of the ratio's epsilon is better spent
on the sum: by the arithmetic above, with a + b = U - L - (mean - L) fixed, (a^(2/3) + b^(2/3))^(3/2)
is least at an end, c = mean. Simulated on the sample's exact per-group totals at epsilon 0.09
(clamp 12,500, C = 1, 300 runs): AVG(cost) by ward 10.3 % -> 7.3 %, by diagnosis 8.2 % -> 6.8 %,
by month 14.2 % -> 10.6 %, AVG(length_of_stay) by ward (clamp 16) 7.1 % -> 6.0 %, and no worse
with the centre 30 % off the mean either way (DESIGN.md §4).

The model that chooses C and U (`auto_choice._error`) keeps the midpoint's noise for a mean: the
centred estimator is then less noisy at whatever clamp it chooses. Modelling its lower noise
made the choice take wider clamps (25,000 for cost), where the profile's noise in the top
octaves reads as a tail: AVG(cost) by ward 13.2 % against 12.3 % before, over 40 runs; with the
model unchanged, 8.4 %.

- The centre is the profile's clamped mean (post-processing of the released profile), put
  within [L, U] and snapped to a coarse grid (GRID: 1, 1.5, 2, 3, 5, 7 times a power of ten),
  so that a query profiled afresh finds its plan in the cache: with the centre to 3 significant
  digits, every run with the cache off planned anew (17.5 ms against 2.2 ms for an AVG(age) over
  the sample's patients), and the estimate moves within a point for a centre 30 % off the mean
  (DESIGN.md §4), the most the grid's steps put it. Any centre is sound: the sum's measure
  states its per-row bound as max(U - c, c - L) (`measures.sum_measure`), which the calibration
  reads, so one unit moves the centred sum by at most the sensitivity charged.
- The split is fixed by the plan's shape alone, never by the data: an AVG whose sum and count
  serve it alone, over a column whose clamp the choice makes, takes SUM_WEIGHT of its pair's two
  equal shares for the sum and the rest for the count; the other measures keep theirs. Only
  where every filter charged is basic (`Settings.additive`): there a release's Laplace parts cost
  their sum however it is split; under zCDP or Rényi filters an unequal split of one epsilon
  costs more than an equal one, and the equal split stays.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from math import floor, log, log10

from .guarantee.plan import Plan

SUM_WEIGHT = Fraction(9, 5)  # of an AVG's two equal shares: 90 % of its epsilon on the sum
COUNT_WEIGHT = 2 - SUM_WEIGHT


def centred_means(plan: Plan, columns: Sequence[str]) -> dict[int, str]:
    """The AVG estimates whose sum and count serve them alone, over one of `columns` (the
    expressions whose clamp is chosen): estimate index -> the column's expression. From the
    plan's shape only (public)."""
    users: dict[int, int] = {}
    for est in plan.estimates:
        for m in (est.count, est.total, est.squares):
            if m is not None:
                users[m] = users.get(m, 0) + 1
    out = {}
    for i, est in enumerate(plan.estimates):
        if est.func != "avg" or est.total is None or est.count is None:
            continue
        if users[est.total] != 1 or users[est.count] != 1:
            continue  # an AVG that shares a SUM's plain sum, or a count, is left as it is
        value = plan.measures[est.total].value
        if value is not None and (expr := value.sql(dialect="postgres")) in columns:
            out[i] = expr
    return out


def weights(plan: Plan, base: Sequence[Fraction], columns: Sequence[str]) -> list[Fraction]:
    """The measures' weights with each centred mean's pair split SUM_WEIGHT : COUNT_WEIGHT of
    what the pair had (the analyst's weight of the AVG, the same on both)."""
    out = list(base)
    for i in centred_means(plan, columns):
        est = plan.estimates[i]
        pair = (out[est.total] + out[est.count]) / 2
        out[est.total], out[est.count] = pair * SUM_WEIGHT, pair * COUNT_WEIGHT
    return out


GRID = (1.0, 1.5, 2.0, 3.0, 5.0, 7.0, 10.0)
"""A centre's steps within a power of ten: neighbours at most 5/3 apart, so the snapped centre is
within 29 % of the profile's mean (a factor of at most sqrt(5/3))."""


def centre(mean: float, lower: float, upper: float) -> float:
    """The centre of a mean's sum: the profile's clamped mean within [lower, upper], snapped to
    the nearest GRID step on a log scale (a plan key that takes few values; any centre is
    sound), then kept within the clamp."""
    c = min(max(mean, lower), upper)
    if c <= 0:
        return max(lower, 0.0)
    scale = 10.0 ** floor(log10(c))
    step = min(GRID, key=lambda g: abs(log(c / (g * scale))))
    return min(max(float(f"{step * scale:.2g}"), lower), upper)  # 0.015, not 0.015000000000000001

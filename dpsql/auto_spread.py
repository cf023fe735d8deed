"""A spread under auto bounds: its squares and its sum centred at the profile's mean, and most
of its epsilon on the squares (issue 32, item 2; as auto_mean.py does for a mean).

A VAR/STDDEV is E[(v - c)^2] - E[v - c]^2 from a noisy count n, a noisy sum S1 of clamp(v) - c
and a noisy sum S2 of (clamp(v) - c)^2. With R = max(U - c, c - L) the squares lie in [0, R^2]
and are summed centred at R^2 / 2 (per-row bound R^2 / 2), the sum's per-row bound is R, the
count's 1. To first order a group's variance moves by

    dS2 / n  +  2 |mean - c| dS1 / n  +  |2 (mean - c)^2 - E[(v - c)^2]| dn / n,

each d a Laplace noise of scale (its per-row bound) C / eps_i. At the policy's limits c is the
middle of [L, U] (R = (U - L) / 2) and each part gets a third: for values far below the middle of
their clamp (the sample's costs: mean about 1,300 under clamps of 12,500 to 25,000; stays: 2.3
under 15) |mean - c| is nearly R, so the sum's term, 2 R^2 / eps_S, is four times the squares'
R^2 / (2 eps_Q), and the count's, about R^2 / eps_N, twice. Centred at the mean, the sum's and
the count's factors shrink to |mean_g - c| (a group's distance from the pooled mean) and the
group's variance, while the squares' bound grows to at most (U - L)^2 / 2: with the weights
a_i^(2/3) that minimise sum (a_i / eps_i)^2 at the sample's numbers (squares 73-74 %, sum
15-21 %, count 5-13 %), SQUARES_WEIGHT : SUM_WEIGHT : COUNT_WEIGHT = 7 : 2 : 1 of the
estimate's three equal shares. Simulated on the sample's exact per-group rows at epsilon 0.09
(C = 1, 200 runs, with the groups' shrinkage, guarantee/shrinkage.py) it took STDDEV(length_of_stay)
by ward at a clamp of 15 from 29 % to 12 %, STDDEV(cost) by ward at 12,500 from 16 % to 13 %
and by diagnosis at 25,000 from 26 % to 21 % (DESIGN.md §4 'Spreads across groups').

The variance's estimator is unchanged (guarantee/families._Variance reads any centre), so is
its interval; the centre is the mean's (`auto_mean.centre`: the profile's clamped mean on a
coarse grid, post-processing of the released profile). Any centre is sound: the squares'
measure states its range [0, R^2] and clamps each row's square to it, and the calibration reads
its per-row bound from there. The split is fixed by the plan's shape alone (never the data),
only where every filter charged is basic, as a mean's (auto_mean.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

from .auto_bounds import SPREADS
from .auto_mean import served_alone
from .guarantee.plan import Plan

SQUARES_WEIGHT = Fraction(21, 10)  # of a spread's three equal shares: 70 % of its epsilon on the squares
SUM_WEIGHT = Fraction(6, 10)
COUNT_WEIGHT = 3 - SQUARES_WEIGHT - SUM_WEIGHT


def centred_spreads(plan: Plan, columns: Sequence[str]) -> dict[int, str]:
    """The VAR/STDDEV estimates whose count, sum and squares serve them alone, over one of
    `columns` (the expressions whose clamp is chosen): estimate index -> the column's
    expression. From the plan's shape only (public)."""
    return served_alone(plan, SPREADS, columns)


def weights(plan: Plan, base: Sequence[Fraction], columns: Sequence[str]) -> list[Fraction]:
    """The measures' weights with each centred spread's three split SQUARES_WEIGHT : SUM_WEIGHT :
    COUNT_WEIGHT of what they had (the analyst's weight of the aggregate, the same on all three)."""
    out = list(base)
    for i in centred_spreads(plan, columns):
        est = plan.estimates[i]
        assert est.count is not None and est.total is not None and est.squares is not None
        share = (out[est.count] + out[est.total] + out[est.squares]) / 3
        out[est.squares], out[est.total], out[est.count] = (
            share * SQUARES_WEIGHT,
            share * SUM_WEIGHT,
            share * COUNT_WEIGHT,
        )
    return out

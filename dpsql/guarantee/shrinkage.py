"""Limited-translation shrinkage of a grouped spread's estimates (post-processing).

Each group's VAR/STDDEV is moved toward the median of the groups' estimates, by at most REACH of
its own interval's half-width (Efron and Morris's limited translation: a group that is really
apart from the others, Intensive Care's long stays, is moved at most that far, while groups whose
estimates differ mostly by noise are pulled together). Post-processing of the released values and
their intervals: no privacy cost. The moved value stays inside the group's interval (it moves by at
most half its half-width), so the interval, which covers the value at the limits used at its
confidence, is kept as it is (a value is never moved out of it).
"""

from __future__ import annotations

import statistics
from typing import Sequence

REACH = 0.5  # of a group's half-width; simulated on the sample (DESIGN.md §4 'Spreads')
MIN_GROUPS = 3  # with fewer there is no median that the others do not define


def toward_median(values: Sequence[float], intervals: Sequence[tuple[float, float]]) -> list[float]:
    """The values moved toward their median, each by at most REACH × its interval's half-width."""
    if len(values) < MIN_GROUPS:
        return list(values)
    centre = statistics.median(values)
    moved = []
    for v, (lo, hi) in zip(values, intervals):
        cap = REACH * max(hi - lo, 0.0) / 2
        shifted = v + max(-cap, min(cap, centre - v))
        moved.append(min(max(hi, v), max(min(lo, v), shifted)))  # never out of the interval
    return moved

"""The profile's histograms as the choice's model reads them, given each one's noise (post-processing
of the released profile; auto_choice.py calls it). A bin of a small population's histogram is mostly
noise: the released masses are unbiased, but the model needs masses that are not negative, and each
bin clamped at 0 turns an empty bin's zero-mean noise into a positive mass of about half its scale,
which in a value histogram's top octaves (times their values) looks like a heavy tail and in the
row-count histogram's last bin (times twice the policy's bound) like heavy units. So where the
population is within TRUST noise scales, each histogram is blended with a smooth fit of its own
bins (a shape of a few parameters, whose noise averages over all the bins): values as a normal
curve over the octaves (log-normal values), row counts as a geometric distribution. And a small
population's row counts (below FLOOR scales too) are first read with each bin above their median
weighed by the posterior probability that it holds data at all (`tested`): the last bin's noise,
times twice the policy's bound, read as heavy units and pulled a sum's total bound up.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Sequence

TRUST = 30  # populations of at least TRUST noise scales use their bins as released (clamped at 0)
FLOOR = 5  # below FLOOR noise scales no shape can be placed either: the bins as released
PRIOR = 0.1  # the prior probability that a bin above a small population's median holds data


def population(hists: Sequence[Sequence[float]], scales: Sequence[float]) -> float | None:
    """The number of units, from the signed totals of the histograms whose noise is known (each
    sums to about one per unit), weighted by the inverse of their noise's variance (2 b² a bin);
    None when no histogram's noise is known."""
    known = [(sum(h), 2 * b * b * len(h)) for h, b in zip(hists, scales) if b > 0 and h]
    if not known:
        return None
    weight = sum(1 / var for _, var in known)
    return max(sum(total / var for total, var in known) / weight, 0.0)


def trust(units: float | None, scale: float) -> float:
    """The weight of the released bins against the fit: 1 (the bins alone) when the noise is
    unknown, the population is at least TRUST scales, or below FLOOR scales (too few units to
    place a shape: the clamped bins' noise then keeps the choice on the side of high clamps, which
    costs noise, not the bias of a clamp far too low); units / (TRUST × scale) between."""
    if units is None or scale <= 0 or units < FLOOR * scale:
        return 1.0
    return min(units / (TRUST * scale), 1.0)


def small(units: float | None, scale: float) -> bool:
    """Whether a histogram of noise `scale` is of a population within TRUST scales (its row counts
    then read with their noise: `tested`)."""
    return units is not None and scale > 0 and units < TRUST * scale


def tested(mass: Sequence[float], scale: float) -> tuple[float, ...]:
    """Each bin clamped at 0; those above the bin where the clamped mass reaches half its total
    (the tail, where an empty bin's noise, about scale / 2 once clamped, times the bin's value or
    rows, reads as heavy values or units) times the posterior probability that the bin holds data:
    prior odds PRIOR : 1 − PRIOR that it does, and the likelihood of its mass y under "empty"
    (Laplace noise alone, e^(−y/b) / 2b) against that under "holds about y" (1 / 2b), so
    P = PRIOR e^(y/b) / (1 − PRIOR + PRIOR e^(y/b)). A bin of several scales is kept nearly whole
    (0.69 of it at 3 b, 0.94 at 5 b); one of half a scale, what an empty bin's clamped noise is on
    average, is weighed at 0.15. Post-processing of the released bins and their public scale; the
    bins at and below the median are as released (clamped), so the bulk is never thinned."""
    clamped = tuple(max(m, 0.0) for m in mass)
    if scale <= 0 or not clamped:
        return clamped
    half, running, start = sum(clamped) / 2, 0.0, len(clamped)
    for i, c in enumerate(clamped):
        running += c
        if running >= half:
            start = i + 1
            break
    out = list(clamped)
    for i in range(start, len(clamped)):
        odds = PRIOR * math.exp(min(clamped[i] / scale, 50.0))
        out[i] = clamped[i] * odds / (1 - PRIOR + odds)
    return tuple(out)


def blended(mass: Sequence[float], weight: float, fit, scale: float = 0.0) -> tuple[float, ...]:
    """weight × each bin clamped at 0 plus (1 − weight) × the fit `fit(mass)` (not computed when
    weight is 1). With the bins' noise `scale` (a small population's: `small`), the bins above the
    median are weighed by the odds that they hold data (`tested`) rather than clamped alone."""
    clamped = tested(mass, scale)
    if weight >= 1.0:
        return clamped
    return tuple(weight * c + (1 - weight) * f for c, f in zip(clamped, fit(mass)))


def octave_fit(mass: Sequence[float]) -> tuple[float, ...]:
    """The least-squares fit of w × exp(−(i − μ)² / 2s²) over the bins i (w ≥ 0; μ and s on a grid):
    a value histogram's octaves of a log-normal column."""
    return _fit(mass, _octave_shapes(len(mass)))


def geometric_fit(mass: Sequence[float], uppers: Sequence[int]) -> tuple[float, ...]:
    """The least-squares fit of w × P(n in a bin) for n geometric from 1 (its mean on a grid) over
    the row-count histogram's bins: upper edges `uppers`, then one bin for more."""
    return _fit(mass, _geometric_shapes(tuple(uppers)))


def _fit(mass: Sequence[float], shapes) -> tuple[float, ...]:
    best, best_res = None, math.inf
    squares = sum(m * m for m in mass)
    for shape, norm in shapes:
        dot = sum(x * m for x, m in zip(shape, mass))
        w = max(dot / norm, 0.0)
        res = squares - 2 * w * dot + w * w * norm
        if res < best_res:
            best, best_res = (w, shape), res
    w, shape = best
    return tuple(w * x for x in shape)


@lru_cache(maxsize=8)
def _octave_shapes(n: int) -> tuple[tuple[tuple[float, ...], float], ...]:
    out = []
    for mu in (k / 2 for k in range(-4, 2 * n + 4)):
        for s in (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0):
            shape = tuple(math.exp(-((i - mu) ** 2) / (2 * s * s)) for i in range(n))
            out.append((shape, sum(x * x for x in shape)))
    return tuple(out)


@lru_cache(maxsize=8)
def _geometric_shapes(uppers: tuple[int, ...]) -> tuple[tuple[tuple[float, ...], float], ...]:
    lowers = (0,) + uppers
    out = []
    for k in range(48):
        mean = 1.05 * 1.1**k  # 1.05 to about 95 rows a unit
        q = 1 - 1 / mean
        shape = tuple(q**lo - q**up for lo, up in zip(lowers, uppers)) + (q ** uppers[-1],)
        out.append((shape, sum(x * x for x in shape)))
    return tuple(out)

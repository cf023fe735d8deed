"""The exact (ε, δ) curve of the discrete Gaussian mechanism on one integer coordinate.

Going through zCDP (ρ = Δ²/2σ², then the optimal ρ -> (ε, δ) conversion) is a bound; the
mechanism's own privacy profile is the hockey-stick divergence between N_Z(0, σ²) and
N_Z(Δ, σ²), which Canonne, Kamath and Steinke (2020, Thm. 7) write as

    δ(ε) = P[Y > εσ²/Δ - Δ/2] - e^ε P[Y > εσ²/Δ + Δ/2],   Y ~ N_Z(0, σ²),

and which covers every shift |x - x'| <= Δ. At equal (ε, δ) it needs about 7-10 % less noise
than the zCDP route. Filters that compose releases as (ε, δ) pairs (basic, advanced,
whitehouse) therefore calibrate a one-coordinate Gaussian release by this curve
(`guarantee/calibration.py`); filters that add up ρ or μ keep the zCDP calibration, which is what
they charge.

Every value here is an upper bound on the true δ: small σ by summing the distribution
(positive terms only, so no cancellation), large σ by an integral bound on that sum, and
both with a relative margin for floating-point rounding.
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache

import numpy

SUMMED_SIGMA = 2000.0  # up to here δ is a sum over the lattice (at most ~150,000 points)
MARGIN = 1e-6  # relative slack for rounding in the float sums and erfc


def _sum_delta(epsilon: float, sigma: float, sensitivity: int) -> float:
    """Σ_y max(0, p(y) - e^ε p(y - Δ)) over the lattice, term by term where the loss exceeds ε."""
    reach = math.ceil(38.0 * sigma) + sensitivity  # e^{-y²/2σ²} underflows beyond ~37.2σ
    y = numpy.arange(-reach, reach + 1, dtype=numpy.float64)
    weights = numpy.exp(-(y * y) / (2.0 * sigma * sigma))
    norm = float(weights.sum())
    loss = (sensitivity * sensitivity - 2.0 * sensitivity * y) / (2.0 * sigma * sigma)
    over = loss > epsilon
    terms = weights[over] * -numpy.expm1(epsilon - loss[over])
    return float(terms.sum()) / norm


def _integral_delta(epsilon: float, sigma: float, sensitivity: int) -> float:
    """An upper bound on the lattice sum for large σ. The positive part g(y) = f(y) - e^ε f(y-Δ)
    (f the unnormalised density) is log-concave on y < y* = Δ/2 - εσ²/Δ, where the loss exceeds
    ε, so Σ g <= ∫ g + max g; ∫ g over that half-line is √(2π)σ times the continuous
    mechanism's δ, and max g <= f(y*) Δ / (e |y*|) (for y* < 0, with 1 - e^{-x} <= x). The
    normaliser is at least √(2π)σ (Poisson summation)."""
    y_star = sensitivity / 2.0 - epsilon * sigma * sigma / sensitivity
    if y_star >= 0:  # the loss exceeds ε on most of the mass: no useful bound here
        return 1.0
    root2 = math.sqrt(2.0)
    continuous = 0.5 * math.erfc(-y_star / (sigma * root2)) - math.exp(epsilon) * 0.5 * math.erfc(
        (sensitivity - y_star) / (sigma * root2)
    )
    peak = math.exp(-y_star * y_star / (2.0 * sigma * sigma)) * sensitivity / (math.e * -y_star)
    return max(0.0, continuous) + peak / (math.sqrt(2.0 * math.pi) * sigma)


@lru_cache(maxsize=4096)
def discrete_gaussian_delta(epsilon: float, sigma: float, sensitivity: int) -> float:
    """An upper bound on the smallest δ for which adding N_Z(0, σ²) to an integer of
    sensitivity Δ is (ε, δ)-DP. Memoised: the release guard checks the same σ on every
    release of a query (a lattice sum of up to ~150,000 terms)."""
    if sensitivity <= 0:
        return 0.0
    if sigma <= SUMMED_SIGMA:
        exact = _sum_delta(epsilon, sigma, sensitivity)
    else:
        exact = _integral_delta(epsilon, sigma, sensitivity)
    return min(1.0, max(0.0, exact) * (1.0 + MARGIN) + 1e-300)


@lru_cache(maxsize=1024)
def sigma_for(epsilon: Fraction, delta: Fraction, sensitivity: int, start: float) -> float:
    """The smallest σ (to bisection precision, on the safe side) whose curve gives δ(ε) <= δ,
    searched below `start`, a σ already known to be private enough (the zCDP calibration).
    Returns `start` when the curve cannot do better."""
    eps, target = float(epsilon), float(delta)
    if discrete_gaussian_delta(eps, start, sensitivity) > target:
        return start
    lo, hi = start / 2.0, start
    while discrete_gaussian_delta(eps, lo, sensitivity) <= target:
        lo, hi = lo / 2.0, lo
    for _ in range(48):
        mid = (lo + hi) / 2.0
        if discrete_gaussian_delta(eps, mid, sensitivity) <= target:
            hi = mid
        else:
            lo = mid
    return hi

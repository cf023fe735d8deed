"""What a synopsis measures, and how its epsilon is split: pure functions of the dimensions'
sizes (public), in the spirit of HDMM (McKenna et al., VLDB 2018).

The strategy is a set of marginals of the full cube (the total, the 1-way marginals, ..., the
cube itself), each a bitmask of the dimensions it keeps, measured with Laplace noise. With
weighted least squares over them (reconstruct.py), the Gram matrix A^T W A of a set of
marginals over a cube of sizes n_1..n_k is diagonal in the basis of "constant / mean-free"
vectors per dimension: on the subspace T (mean-free along the dimensions in T, constant along
the others) its eigenvalue is

    lambda_T = sum over measured m containing T of  w_m * prod_{i not in m} n_i

(w_m the precision 1/variance of marginal m's cells). So the variance of any query that sums,
per dimension i, a_i of its n_i cells (a_i = n_i: the dimension is summed out) is exact and
cheap:

    Var = sum_T prod_{i in T} a_i (1 - a_i/n_i) * prod_{i not in T} a_i^2/n_i  /  lambda_T.

The split minimises the expected error of the dashboard-like workload, every marginal of the
dimensions with equality filters: the mean variance of a cell of each marginal, every marginal
alike (a chart is one query whatever its number of groups), by exponentiated gradient on the
simplex. On the sample's patients dashboard this gave a median relative error of 2.1 % against
2.9 % for weighting every cell of every marginal alike (which puts nearly all of the epsilon on
the full cube) and 2.3-3.0 % for the total, the 1-way marginals and the cube measured alike
(simulated on the sample's cube, 15 runs each).
The full cube always keeps a share, so every marginal is estimable.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

MIN_SHARE = 0.01  # a marginal below this share of the epsilon is not measured (not the full cube)
STEPS = 400


def masks(k: int) -> range:
    return range(1 << k)


def members(mask: int, k: int) -> list[int]:
    return [i for i in range(k) if mask >> i & 1]


def eigenvalues(precision: dict[int, float], sizes: tuple[int, ...]) -> np.ndarray:
    """lambda_T for every subspace T (indexed by mask) of the measured marginals' Gram matrix."""
    k = len(sizes)
    lam = np.zeros(1 << k)
    for m, w in precision.items():
        outside = math.prod(n for i, n in enumerate(sizes) if not m >> i & 1)
        for t in masks(k):
            if t & ~m == 0:
                lam[t] += w * outside
    return lam


def coefficients(sizes: tuple[int, ...], selected: tuple[int, ...]) -> np.ndarray:
    """||P_T q||^2 for every T, q summing `selected[i]` cells of dimension i (n_i: all)."""
    k = len(sizes)
    out = np.ones(1 << k)
    for t in masks(k):
        c = 1.0
        for i, (n, a) in enumerate(zip(sizes, selected)):
            c *= a * (1 - a / n) if t >> i & 1 else a * a / n
        out[t] = c
    return out


def variance(lam: np.ndarray, sizes: tuple[int, ...], selected: tuple[int, ...]) -> float:
    """The least-squares estimate's variance for a query summing `selected` cells per dimension."""
    c = coefficients(sizes, selected)
    live = c > 0
    if np.any(lam[live] <= 0):
        return math.inf
    return float(np.sum(c[live] / lam[live]))


@dataclass(frozen=True)
class Strategy:
    """The marginals measured (masks) and each one's share of the measure's epsilon."""

    marginals: tuple[int, ...]
    shares: tuple[Fraction, ...]  # exact, summing to 1

    def epsilons(self, epsilon: Fraction) -> list[Fraction]:
        return [epsilon * s for s in self.shares]


POWER = 0.0  # 0: each marginal's mean cell variance alike; 1: every cell of every marginal alike


def workload_weights(sizes: tuple[int, ...], power: float | None = None) -> np.ndarray:
    """g_T: the workload's error is sum_T g_T / lambda_T. The workload is one cell of every
    marginal S (its mean per-cell variance), each marginal weighted alike."""
    k = len(sizes)
    g = np.zeros(1 << k)
    p = POWER if power is None else power
    for s in masks(k):
        cells = math.prod(n for i, n in enumerate(sizes) if s >> i & 1)
        g += cells ** p * coefficients(sizes, tuple(1 if s >> i & 1 else n for i, n in enumerate(sizes)))
    return g


def expected_error(strategy: "Strategy", sizes: tuple[int, ...]) -> float:
    """The workload's summed variance under `strategy` (sensitivity 1, epsilon 1, Laplace)."""
    lam = eigenvalues({m: float(s) ** 2 / 2 for m, s in zip(strategy.marginals, strategy.shares)}, sizes)
    g = workload_weights(sizes)
    live = g > 0
    return float(np.sum(g[live] / lam[live])) if np.all(lam[live] > 0) else math.inf


def choose(sizes: tuple[int, ...]) -> Strategy:
    """The split of a measure's epsilon among marginals that minimises the workload's error."""
    k = len(sizes)
    full = (1 << k) - 1
    g = workload_weights(sizes)
    outside = np.array([math.prod(n for i, n in enumerate(sizes) if not m >> i & 1) for m in masks(k)], dtype=float)
    contains = np.array([[1.0 if t & ~m == 0 else 0.0 for t in masks(k)] for m in masks(k)])  # [m, T]
    share = np.full(1 << k, 1.0 / (1 << k))
    step = 0.5
    best, best_error = share.copy(), math.inf
    for _ in range(STEPS):
        lam = contains.T @ (share * share / 2 * outside)
        error = float(np.sum(g[g > 0] / lam[g > 0]))
        if error < best_error:
            best, best_error = share.copy(), error
        # d error / d share_m = - sum_{T in m} g_T / lam_T^2 * outside_m * share_m
        grad = -(contains @ np.where(g > 0, g / np.maximum(lam, 1e-300) ** 2, 0.0)) * outside * share
        scaled = grad / (np.max(np.abs(grad)) or 1.0)
        share = share * np.exp(-step * scaled)
        share /= share.sum()
    kept = [m for m in masks(k) if best[m] >= MIN_SHARE or m == full]
    total = sum(best[m] for m in kept)
    exact = [Fraction(best[m] / total).limit_denominator(10_000) for m in kept[:-1]]
    exact.append(1 - sum(exact, Fraction(0)))
    if exact[-1] <= 0:  # cannot happen with shares of at least MIN_SHARE, but never charge a share <= 0
        exact = [Fraction(1, len(kept))] * len(kept)
    return Strategy(tuple(kept), tuple(exact))

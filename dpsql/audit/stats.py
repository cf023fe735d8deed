"""The statistics of the audit: how a few thousand observed releases bound epsilon from below.

For any event S, an (epsilon, delta)-DP mechanism on neighbours D, D' must satisfy
P[S | D] <= e^epsilon P[S | D'] + delta. With one-sided Clopper-Pearson bounds (each at
confidence 1 - alpha/2, so both hold together with probability at least 1 - alpha),
epsilon >= ln((p_low - delta) / p'_high) is a lower bound that a correct mechanism violates
with probability at most alpha. The event is a threshold test on the released value, chosen
on a first split of the runs and evaluated on the rest, so the choice costs no confidence.

Pure Python and numpy only (scipy is a test dependency, not a dependency of dpsql).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Sequence

import numpy as np

_TINY = 1e-300


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    """Lentz's continued fraction for the incomplete beta function (Numerical Recipes' betacf)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, 100_000):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + aa / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
        if abs(d * c - 1.0) < 1e-16:
            return h
    raise ArithmeticError(f"incomplete beta did not converge for a={a}, b={b}, x={x}")


def beta_cdf(x: float, a: float, b: float) -> float:
    """The regularized incomplete beta function I_x(a, b): the Beta(a, b) CDF at x."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_continued_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_continued_fraction(b, a, 1.0 - x) / b


def beta_quantile(q: float, a: float, b: float) -> float:
    """The x with I_x(a, b) = q, by bisection (the CDF is increasing; 200 halvings reach the
    resolution of a double for any x above 1e-60)."""
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if mid in (lo, hi):
            break
        if beta_cdf(mid, a, b) < q:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


def clopper_pearson_lower(k: int, n: int, confidence: float) -> float:
    """One-sided lower bound on a binomial proportion from k successes in n trials:
    P[p >= bound] >= confidence."""
    _check(k, n, confidence)
    if k == 0:
        return 0.0
    if k == n:
        return (1.0 - confidence) ** (1.0 / n)
    return beta_quantile(1.0 - confidence, k, n - k + 1)


def clopper_pearson_upper(k: int, n: int, confidence: float) -> float:
    """One-sided upper bound on a binomial proportion: P[p <= bound] >= confidence."""
    _check(k, n, confidence)
    if k == n:
        return 1.0
    if k == 0:
        return -math.expm1(math.log(1.0 - confidence) / n)  # 1 - (1 - c)^(1/n), exactly
    return beta_quantile(confidence, k + 1, n - k)


def _check(k: int, n: int, confidence: float) -> None:
    if not (0 <= k <= n and n > 0):
        raise ValueError(f"need 0 <= k <= n and n > 0, got k={k}, n={n}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


def epsilon_lower_bound(k: int, n: int, k_prime: int, n_prime: int, delta: float = 0.0, alpha: float = 0.05) -> float:
    """ln((p_low - delta) / p'_high) for an event seen k times in n runs on one dataset and
    k' times in n' runs on its neighbour; -inf when p_low <= delta (no evidence at all).
    Holds with probability >= 1 - alpha for a fixed event."""
    confidence = 1.0 - alpha / 2.0
    low = clopper_pearson_lower(k, n, confidence) - delta
    if low <= 0.0:
        return -math.inf
    return math.log(low / clopper_pearson_upper(k_prime, n_prime, confidence))


@dataclass(frozen=True)
class Audit:
    """The lower bound on epsilon and the test that gave it, counted on the held-out runs:
    the event happened k times in n runs on the numerator dataset, k' in n' on the other."""

    epsilon: float
    event: str
    k: int
    n: int
    k_prime: int
    n_prime: int


def _wilson(k: np.ndarray, n: int, z: float, upper: bool) -> np.ndarray:
    """Wilson score bounds, vectorised: a cheap stand-in for Clopper-Pearson when ranking tests."""
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre + half if upper else centre - half


def audit(
    released: Sequence[float],
    released_prime: Sequence[float],
    delta: float = 0.0,
    alpha: float = 0.05,
    select: float = 0.5,
) -> Audit:
    """Lower-bound epsilon from the values released on D (`released`) and on D' (`released_prime`).

    The first `select` fraction of each sample chooses the test: a threshold t, the event
    (value >= t or value < t) and which dataset is the numerator, the one whose bound predicted
    for the held-out size is highest. Only that test is then counted on the remaining runs,
    so the bound keeps its 1 - alpha confidence however many tests were compared. Values must
    be ordered (map a missing release to -inf, a boolean to 0/1); NaN is not allowed."""
    x, y = np.asarray(released, dtype=float), np.asarray(released_prime, dtype=float)
    if np.isnan(x).any() or np.isnan(y).any():
        raise ValueError("released values must not be NaN: map a missing value to -inf")
    sx, sy = int(len(x) * select), int(len(y) * select)
    if min(sx, sy, len(x) - sx, len(y) - sy) < 1:
        raise ValueError("too few runs to split into a selection and an evaluation part")
    pick_x, pick_y = np.sort(x[:sx]), np.sort(y[:sy])
    eval_x, eval_y = x[sx:], y[sy:]
    nx, ny = len(eval_x), len(eval_y)
    thresholds = np.unique(np.concatenate([pick_x, pick_y]))
    # P[value >= t] on each selection sample, for every candidate t
    ge_x = (sx - np.searchsorted(pick_x, thresholds, "left")) / sx
    ge_y = (sy - np.searchsorted(pick_y, thresholds, "left")) / sy
    # Rank with bounds twice as wide as the final ones: a tail test that looks best on a few
    # events is mostly luck, and would give a poor bound on the held-out runs.
    z = 2.0 * NormalDist().inv_cdf(1.0 - alpha / 2.0)
    # (event name, numerator is D?, selection frequencies on numerator and denominator)
    candidates = [
        (">=", True, ge_x, ge_y),
        ("<", True, 1 - ge_x, 1 - ge_y),
        (">=", False, ge_y, ge_x),
        ("<", False, 1 - ge_y, 1 - ge_x),
    ]
    best = (-math.inf, 0, 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        for c, (_, numerator_d, p_num, p_den) in enumerate(candidates):
            n_num, n_den = (nx, ny) if numerator_d else (ny, nx)
            low = _wilson(p_num * n_num, n_num, z, upper=False) - delta
            high = _wilson(p_den * n_den, n_den, z, upper=True)
            score = np.where(low > 0, np.log(np.maximum(low, _TINY) / high), -np.inf)
            i = int(np.argmax(score))
            if score[i] > best[0]:
                best = (float(score[i]), c, i)
    _, c, i = best
    op, numerator_d, _, _ = candidates[c]
    t = float(thresholds[i])

    def count(values: np.ndarray) -> int:
        return int(np.sum(values >= t)) if op == ">=" else int(np.sum(values < t))

    num, den = (eval_x, eval_y) if numerator_d else (eval_y, eval_x)
    k, k_prime = count(num), count(den)
    names = ("D", "D'") if numerator_d else ("D'", "D")
    event = f"value {op} {t:.6g}, {names[0]} over {names[1]}"
    eps = epsilon_lower_bound(k, len(num), k_prime, len(den), delta, alpha)
    return Audit(eps, event, k, len(num), k_prime, len(den))

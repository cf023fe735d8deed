"""Noise, partition selection and accuracy: the only place randomness enters an answer.

Every sample comes from OpenDP's discrete Laplace and discrete Gaussian samplers, which draw
from the operating system's cryptographic source and are exact on integers (no floating-point
attacks). Measures are integers (counts, fixed-point sums), so integer noise is exactly the
calibrated mechanism. Calibration takes exact rationals and rounds every scale *up*.
"""

from __future__ import annotations

import math
import os
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any, Callable, Sequence, TypeVar

import numpy
import opendp.prelude as dp

from ..accounting.zcdp import rho_from_epsilon

dp.enable_features("contrib")
T = TypeVar("T")

MAX_SCALE = float(2**52)
# OpenDP draws 60,000-100,000 exact discrete Laplace values a second on one core and releases the
# GIL while it draws, so a vector of twice this or more is drawn in parts, one per core (12,800
# undeclared keys: 0.55 s with one part, 0.32-0.37 s with two).
PARALLEL_DRAWS = 4096
_CORES = os.cpu_count() or 1
_DRAWERS = ThreadPoolExecutor(max_workers=_CORES, thread_name_prefix="dpsql-noise")
# Each call into OpenDP costs ~0.2 ms before its first draw (~0.02 ms each after), so for a
# scale seen before, small requests are served from a pool of iid draws made POOL_BATCH at a
# time: consuming an iid sequence in order is still iid, and the draws are still OpenDP's.
POOL_BATCH = 64
_POOLS: OrderedDict[tuple[object, ...], list[Any]] = OrderedDict()
_SEEN: OrderedDict[tuple[object, ...], None] = OrderedDict()
_POOL_LOCK = threading.Lock()
_POOLS_KEPT = 256


@dataclass(frozen=True)
class Noise:
    """Integer noise: kind 'laplace' (scale b) or 'gaussian' (sigma), or none (scale 0)."""

    kind: str
    scale: float

    def half_width(self, confidence: float) -> float:
        """Half-width t with P(|noise| > t) <= 1 - confidence."""
        alpha = 1.0 - confidence
        if self.scale == 0:
            return 0.0
        if self.kind == "laplace":
            b = self.scale
            # Discrete Laplace: P(|Z| >= j) = 2 e^{-j/b} / (1 + e^{-1/b}) for j >= 1.
            j = math.ceil(b * math.log(2.0 / (alpha * (1.0 + math.exp(-1.0 / b))))) - 1
            return float(max(0, j))
        # Discrete Gaussian is sigma-subgaussian (Canonne et al. 2020): P(|Z| >= t) <= 2 e^{-t^2/2sigma^2}.
        return self.scale * math.sqrt(2.0 * math.log(2.0 / alpha))

    @property
    def std(self) -> float:
        return self.scale * math.sqrt(2.0) if self.kind == "laplace" else self.scale


def _round_up(x: Fraction | float) -> float:
    """The smallest float >= x; infinity beyond the floats (a scale no query can use: refused)."""
    try:
        f = float(x)
    except OverflowError:
        return math.inf
    return f if Fraction(f) >= Fraction(x) else math.nextafter(f, math.inf)


def laplace_scale(l1_sensitivity: int, epsilon: Fraction) -> float:
    """b = Δ1/ε, rounded up so the mechanism is at least as private as charged."""
    if l1_sensitivity == 0:
        return 0.0
    return _round_up(Fraction(l1_sensitivity) / epsilon)


def gaussian_sigma(l2_sensitivity_squared: int, rho: Fraction) -> float:
    """σ with Δ2²/(2σ²) <= ρ, rounded up."""
    if l2_sensitivity_squared == 0:
        return 0.0
    sigma = math.sqrt(Fraction(l2_sensitivity_squared) / (2 * rho))
    sigma = math.nextafter(sigma, math.inf)
    while Fraction(l2_sensitivity_squared) / (2 * Fraction(sigma) ** 2) > rho:
        sigma = math.nextafter(sigma, math.inf)
    return sigma


@lru_cache(maxsize=1024)
def rho_for(epsilon: Fraction, delta: Fraction) -> Fraction:
    """ρ that satisfies (ε, δ) under the optimal conversion, as an exact rational (rounded down).
    Memoised: a bisection over the conversion costs ~25 ms, and calibration and the release
    guard ask it for the same few (ε, δ) again and again."""
    rho = rho_from_epsilon(float(epsilon), float(delta))
    return Fraction(rho) if rho > 0 else Fraction(0)


@lru_cache(maxsize=512)
def _sampler(kind: str, scale: float) -> dp.Measurement:
    space = dp.vector_domain(dp.atom_domain(T="i64"))
    if kind == "laplace":
        return dp.m.make_laplace(space, dp.l1_distance(T="i64"), scale=scale)
    return dp.m.make_gaussian(space, dp.l2_distance(T="i64"), scale=scale)


def sample(noise: Noise, n: int) -> list[int]:
    """n independent integer noise draws from OpenDP's cryptographically seeded samplers."""
    if n == 0 or noise.scale == 0:
        return [0] * n
    if noise.scale > MAX_SCALE:
        raise ValueError("noise scale too large for 64-bit sampling")
    return pooled((noise.kind, noise.scale), n, lambda k: _draw(noise, k))


def drawn_whole(n: int) -> bool:
    """Whether a request for n values is drawn in one call rather than served from a pool: from
    POOL_BATCH values on, a call's fixed cost is small beside its draws. Every pooled draw
    (pooled, and selection's bits, which keep a large request as one array) asks here."""
    return n >= POOL_BATCH


def pooled(key: tuple[object, ...], n: int, draw: Callable[[int], list[T]]) -> list[T]:
    """n of `draw`'s iid values: fresh for a large request or a key used once, else from the
    key's pool (refilled with POOL_BATCH more than a request needs), each value used once."""
    if drawn_whole(n):
        return draw(n)
    with _POOL_LOCK:
        pool = _POOLS.get(key)
        if pool is not None and len(pool) >= n:
            _POOLS.move_to_end(key)
            out = pool[-n:]
            del pool[-n:]
            return out
        seen = key in _SEEN
        _SEEN[key] = None
        if len(_SEEN) > 4 * _POOLS_KEPT:
            _SEEN.popitem(last=False)
    if not seen:  # a key used once draws only what it needs
        return draw(n)
    drawn = draw(n + POOL_BATCH)
    with _POOL_LOCK:
        _POOLS.setdefault(key, []).extend(drawn[n:])
        _POOLS.move_to_end(key)
        if len(_POOLS) > _POOLS_KEPT:
            _POOLS.popitem(last=False)
    return drawn[:n]


def in_parts(draw: Callable[[int], T], n: int) -> list[T]:
    """draw(k) for sizes k summing to n, in order: one part, or one per core (each at least
    PARALLEL_DRAWS) drawn at once, as OpenDP releases the GIL while it draws."""
    parts = min(_CORES, n // PARALLEL_DRAWS)
    if parts <= 1:
        return [draw(n)]
    return list(_DRAWERS.map(draw, [n // parts + (i < n % parts) for i in range(parts)]))


def _draw(noise: Noise, n: int) -> list[int]:
    # A zero vector as a NumPy array: OpenDP takes it without a per-element check (a third of
    # the time for 100,000 draws); the draws themselves are OpenDP's, from the OS's source.
    sampler = _sampler(noise.kind, noise.scale)
    drawn = in_parts(lambda k: sampler(numpy.zeros(k, dtype=numpy.int64)), n)
    return [d for part in drawn for d in part]


def add_noise(values: Sequence[int], noise: Noise) -> list[int]:
    """values + noise, in Python integers (no overflow whatever the magnitude)."""
    draws = sample(noise, len(values))
    return [int(v) + d for v, d in zip(values, draws)]


def selection_threshold(scale: float, delta_per_group: Fraction) -> int:
    """Smallest integer τ such that a group held by one unit (count 1) is released with
    probability <= delta_per_group when released iff 1 + Z >= τ, Z discrete Laplace(scale).
    Computed in log space from the exact rational, so that no delta or scale the settings admit
    overflows a float or leaves the correction loop without an end."""
    if delta_per_group <= 0:
        raise ValueError("partition selection needs delta > 0")
    if not (math.isfinite(scale) and 0 < scale <= MAX_SCALE):
        raise ValueError(f"partition selection's noise scale {scale!r} is beyond what can be drawn")
    b = scale
    # P(Z >= j) = e^{-j/b} / (1 + e^{-1/b}) for j >= 1, so j >= b (ln(1/δ) - ln(1 + e^{-1/b})).
    log_inverse = math.log(delta_per_group.denominator) - math.log(delta_per_group.numerator)
    tail = math.log1p(math.exp(-1.0 / b))
    margin = 1e-12 * max(1.0, log_inverse)  # the float arithmetic's error, on the safe side

    def releases_rarely(j: int) -> bool:
        return -j / b - tail <= -log_inverse - margin

    j = max(math.ceil(b * (log_inverse - tail)), 1)
    step = 1
    for _ in range(128):
        if releases_rarely(j):
            return 1 + j
        j, step = j + step, step * 2
    raise ValueError("partition selection's threshold could not be computed")

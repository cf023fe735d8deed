"""Partition selection by release odds: which groups with undeclared keys are shown.

A group held by c distinct units is released with probability q_c, independently of every
other group: q_0 = 0 (a group absent from the data is never shown), q_c = 1 from `certain`
units on, and in between the largest probabilities that keep each group's decision
(epsilon_g, delta_g)-DP when its unit count moves by one (the optimal partition selection of
Desfontaines, Voss, Gipson and Mandayam, PoPETs 2022):

    q_c = min(e^epsilon_g q_{c-1} + delta_g,  1 - e^-epsilon_g (1 - q_{c-1} - delta_g),  1).

A unit is in at most g groups and moves each one's count by one, so with epsilon_g = epsilon/g
and delta_g = delta/g the selection is (epsilon, delta)-DP by composition: the same charge as
a discrete Laplace threshold at scale g/epsilon, which releases no group more often than this.

Each q_c is realised exactly: a float p that OpenDP's randomized response flips a bit with
(`make_randomized_response_bitvec`, f = 2p, an exact Bernoulli(p) per bit from the OS's
cryptographic source), on a bit of 0 (q = p) or of 1 (q = 1 - p). The table is built with every
rounding on the private side and then checked in exact rationals against all four inequalities
of each step, with a lower bound of e^epsilon_g; the release guard checks the same table.
One OpenDP call draws the bits of every group with the same unit count (100,000 groups in about
0.15 s, against about 1 s for as many discrete Laplace draws).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Sequence

import numpy
import opendp.prelude as dp

from .mechanisms import drawn_whole, in_parts, pooled

dp.enable_features("contrib")

# Counts released with a probability strictly between 0 and 1. Beyond it (epsilon_g below about
# 2 ln(1/delta_g) / ODDS_LIMIT) the table would cost more to build than it saves, and selection
# falls back to the discrete Laplace threshold (calibration.py).
ODDS_LIMIT = 4096
_TINY = 2.0**-1000  # smallest flip probability used (2p stays a normal float, p = f/2 exactly)
_MAX_WEIGHT = 2**31  # the bit-vector domain's bound; it enters only OpenDP's own privacy map


@dataclass(frozen=True)
class ReleaseOdds:
    """Per-group release probabilities: a group of c units, 1 <= c < certain, is released with
    probability flips[c-1] (ones[c-1] False) or 1 - flips[c-1] (True); from `certain` on, always."""

    epsilon: Fraction  # per group
    delta: Fraction  # per group
    flips: tuple[float, ...]
    ones: tuple[bool, ...]

    @property
    def certain(self) -> int:
        return len(self.flips) + 1

    @property
    def even(self) -> int:
        """The fewest units released with probability at least 1/2."""
        return next((c for c in range(1, self.certain) if self.probability(c) >= Fraction(1, 2)), self.certain)

    def probability(self, units: int) -> Fraction:
        """The exact probability that a group of `units` units is released."""
        if units <= 0:
            return Fraction(0)
        if units >= self.certain:
            return Fraction(1)
        p = Fraction(self.flips[units - 1])
        return 1 - p if self.ones[units - 1] else p


def _exp_below(epsilon: Fraction) -> Fraction:
    """A rational E <= e^epsilon: exp of a float at most epsilon (capped where exp overflows),
    less a margin far wider than libm's error (under one unit in the last place)."""
    x = min(float(epsilon), 700.0)
    if Fraction(x) > epsilon:
        x = math.nextafter(x, -math.inf)
    return Fraction(math.exp(x)) * (1 - Fraction(1, 2**40))


_UNIT = 2**1074  # every float probability used is a whole multiple of 2^-1074


def _in_units(p: float) -> int:
    n, d = p.as_integer_ratio()
    return n * (_UNIT // d)


class _Steps:
    """Exact checks of one step q -> q' of the odds, in whole units of 2^-1074 (integers only:
    Fractions of these sizes cost a hundred times more), against e <= e^epsilon and delta."""

    def __init__(self, e: Fraction, delta: Fraction):
        self.en, self.ed = e.numerator, e.denominator
        self.dd = delta.denominator
        self.slack = delta.numerator * self.ed * _UNIT

    def _within(self, x: int, y: int) -> bool:  # y <= e x + delta
        return y * self.ed * self.dd <= self.en * x * self.dd + self.slack

    def private(self, a: int, b: int) -> bool:
        """Released and not, both directions, within (ln e, delta)."""
        return (
            self._within(a, b)
            and self._within(b, a)
            and self._within(_UNIT - b, _UNIT - a)
            and self._within(_UNIT - a, _UNIT - b)
        )


def _units_of(odds: ReleaseOdds, c: int) -> int:
    p = _in_units(odds.flips[c - 1])
    return _UNIT - p if odds.ones[c - 1] else p


@lru_cache(maxsize=256)
def odds_private(odds: ReleaseOdds) -> bool:
    """Whether `odds` is (epsilon, delta)-DP per group, checked exactly: q_0 = 0, q_certain = 1,
    every flip probability one OpenDP can take, and every step within bounds."""
    if odds.epsilon <= 0 or odds.delta <= 0 or len(odds.flips) != len(odds.ones) or not odds.flips:
        return False
    if not all(_TINY <= p <= 0.5 for p in odds.flips):
        return False
    steps = _Steps(_exp_below(odds.epsilon), odds.delta)
    q = [0] + [_units_of(odds, c) for c in range(1, odds.certain)] + [_UNIT]
    return all(steps.private(a, b) for a, b in zip(q, q[1:]))


_MARGIN = 1 - 2.0**-30  # floats' error in a step's target, on the private side


@lru_cache(maxsize=256)
def release_odds(epsilon: Fraction, delta: Fraction) -> ReleaseOdds | None:
    """The optimal per-group odds at (epsilon, delta) per group, each probability rounded down
    and checked exactly; None when more than ODDS_LIMIT counts would be uncertain or a
    probability is too small to draw (then the discrete Laplace threshold is used)."""
    if epsilon <= 0 or delta <= 0 or delta >= Fraction(1, 2):
        return None
    e_exact = _exp_below(epsilon)
    steps = _Steps(e_exact, delta)
    e, d = float(e_exact), float(delta)
    flips: list[float] = []
    ones: list[bool] = []
    q, r, at = 0.0, 1.0, 0  # q, 1 - q (each exact in its branch), q in units
    while True:
        if at and steps.private(at, _UNIT):
            break  # certain from here on
        if len(flips) == ODDS_LIMIT:
            return None
        low = min(e * q + d, 1 - (r - d) / e)
        if low <= 0.5:  # a bit of 0, flipped with p a little below the target
            p, one = low * _MARGIN, False
            q, r = p, 1 - p
            nxt = _in_units(p) if p >= _TINY else 0
        else:  # a bit of 1, kept with 1 - p a little below the target
            p = max(r * e - (e - 1) - d, (r - d) / e) / _MARGIN
            p = max(min(p, 0.5), _TINY)
            one, q, r = True, 1 - p, p
            nxt = _UNIT - _in_units(p)
        if p < _TINY or nxt < at or not steps.private(at, nxt):
            return None
        flips.append(p)
        ones.append(one)
        at = nxt
    odds = ReleaseOdds(epsilon, delta, tuple(flips), tuple(ones))
    if not odds_private(odds):
        raise AssertionError("partition selection's release odds failed their exact check")
    return odds


@lru_cache(maxsize=ODDS_LIMIT)
def _flipper(p: float) -> dp.Measurement:
    return dp.m.make_randomized_response_bitvec(
        dp.bitvector_domain(max_weight=_MAX_WEIGHT), dp.discrete_distance(), f=2 * p
    )


def _bits(p: float, one: bool, n: int) -> numpy.ndarray:
    """n independent bits, each 1 with probability 1 - p (one) or p (not one), from OpenDP; a
    few at a time from a pool of such bits (mechanisms.pooled): one call costs ~0.1 ms."""
    flipper = _flipper(p)
    fill = b"\xff" if one else b"\x00"

    def draw(k: int) -> numpy.ndarray:
        out = numpy.frombuffer(flipper(fill * ((k + 7) // 8)), dtype=numpy.uint8)
        bits = numpy.unpackbits(out, bitorder="little")
        if len(bits) < k:
            raise RuntimeError(f"OpenDP returned {len(bits)} bits for {k}")
        return bits[:k]

    def fresh(k: int) -> numpy.ndarray:
        return numpy.concatenate(in_parts(draw, k)).astype(bool)

    if drawn_whole(n):
        return fresh(n)
    return numpy.array(pooled(("bits", p, one), n, lambda k: fresh(k).tolist()), dtype=bool)


def select(units: Sequence[int], odds: ReleaseOdds) -> numpy.ndarray:
    """Which groups to release, one decision per entry of `units` (their unit counts), in order:
    certain counts are kept, each uncertain one by its own bit, drawn per count in one call."""
    counts = numpy.fromiter(map(int, units), dtype=numpy.int64, count=len(units))
    keep = counts >= odds.certain
    uncertain = numpy.flatnonzero((counts >= 1) & ~keep)
    if uncertain.size:
        order = uncertain[numpy.argsort(counts[uncertain], kind="stable")]
        values, starts = numpy.unique(counts[order], return_index=True)
        for c, at, end in zip(values.tolist(), starts.tolist(), [*starts.tolist()[1:], order.size]):
            keep[order[at:end]] = _bits(odds.flips[c - 1], odds.ones[c - 1], end - at)
    return keep

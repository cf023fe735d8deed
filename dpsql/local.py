"""Randomized response: a release of one randomized row per person, which analysts may then read
row by row (a public table), with debiased frequency estimates.

What one person contributes is one value of the released columns (their tuple, over the cross
product of the columns' declared keys; a value outside them, or NULL, is the category NULL, or
with null_category off a uniformly random declared tuple), chosen by a documented rule: the
person's most frequent declared tuple in the table, ties broken by the declared key order. Each
person's value goes through one local randomizer at ε_rr:

- k-ary randomized response (k-RR): the true category with probability p = e^ε/(e^ε + k - 1),
  else one of the other k - 1 uniformly (q = 1/(e^ε + k - 1) each);
- optimized unary encoding (OUE, Wang et al. 2017) where it has the smaller variance (k - 2 >
  3 e^ε): one bit per category, the person's own set with probability 1/2, every other bit
  with probability 1/(e^ε + 1).

Under add/remove neighbours the number of rows would tell whether a person is in the table, so
it is released noisily: N = max(0, n + Z), Z discrete Laplace at ε_size (a tenth of ε). If N > n
the table gets N - n dummy rows, each the randomizer applied to a uniformly random category; if
N < n it keeps a uniformly random N of the persons' rows; rows are shuffled. Given N, removing a
person swaps their row for a dummy (or for another person's row), and any two outputs of an
ε_rr-LDP randomizer are within e^ε_rr of each other: the release is (ε_size + ε_rr)-DP, and it is
charged that ε before any row is written. Randomness comes from OpenDP's samplers and the
operating system's (secrets.SystemRandom) for the choices of dummies, subsets and order.

Estimates are post-processing: ĉ_v = (o_v - q N) / (p - q) for o_v rows reporting v, unbiased
given that every row is a person's (dummies add at most |N - n| / k in expectation), with
variance (N q (1 - q) + c_v (p (1 - p) - q (1 - q))) / (p - q)^2.
"""

from __future__ import annotations

import itertools
import math
import secrets
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property, lru_cache
from statistics import NormalDist
from typing import Any, Sequence

import opendp.prelude as dp

from .errors import ProgrammingError, unsupported
from .guarantee.mechanisms import Noise, laplace_scale, sample

dp.enable_features("contrib")

MAX_CATEGORIES = 4096  # the cross product of the columns' keys, NULL included
SIZE_SHARE = Fraction(1, 10)  # of epsilon, by default, for the noisy number of rows
_random = secrets.SystemRandom()


@dataclass(frozen=True)
class LocalSpec:
    """What a release randomizes and at which epsilon: a pure function of the policy."""

    table: str
    columns: tuple[str, ...]
    categories: tuple[tuple[Any, ...], ...]  # the cross product of the declared keys (then the NULL category)
    epsilon: Fraction
    method: str  # "krr" or "oue"
    epsilon_size: Fraction = Fraction(0)  # of epsilon, for the noisy number of rows
    null_category: bool = True  # else a value outside the keys becomes a uniformly random declared tuple

    @property
    def epsilon_rr(self) -> Fraction:
        return self.epsilon - self.epsilon_size

    @property
    def k(self) -> int:
        return len(self.categories)

    @cached_property
    def p_q(self) -> tuple[float, float]:
        """P(a row reports v | the person's category is v) and P(... | it is another)."""
        e = math.exp(float(self.epsilon_rr))
        if self.method == "oue":
            return 0.5, 1 / (e + 1)
        return e / (e + self.k - 1), 1 / (e + self.k - 1)

    def variance(self, n: float, count: float) -> float:
        """Variance of one category's debiased count over n rows, `count` of them truly in it."""
        p, q = self.p_q
        return (n * q * (1 - q) + count * (p * (1 - p) - q * (1 - q))) / (p - q) ** 2


def spec(
    table: str,
    columns: Sequence[str],
    keys: Sequence[Sequence[Any]],
    epsilon: Fraction,
    method: str = "auto",
    epsilon_size: Fraction | None = None,
    null_category: bool = True,
) -> LocalSpec:
    """The release's categories and method (auto: whichever of k-RR and OUE has the smaller
    variance at this epsilon and domain size); epsilon_size defaults to a tenth of epsilon."""
    if method not in ("auto", "krr", "oue"):
        raise ProgrammingError(f"unknown method {method!r}", sqlstate="22023", hint="use auto, krr or oue")
    size_eps = epsilon * SIZE_SHARE if epsilon_size is None else epsilon_size
    if epsilon <= 0 or not 0 < size_eps < epsilon:
        raise ProgrammingError(
            "epsilon must be positive, and the size's share of it between 0 and epsilon",
            sqlstate="22023",
            hint="for example --epsilon 1 (the size takes a tenth by default)",
        )
    size = math.prod(len(k) for k in keys) + (1 if null_category else 0)
    if size > MAX_CATEGORIES:
        raise unsupported(
            f"{size} categories (the cross product of the columns' keys); at most {MAX_CATEGORIES}",
            hint="release fewer columns together, or columns with fewer keys",
        )
    categories = tuple(itertools.product(*keys)) + (((None,) * len(columns),) if null_category else ())
    if method == "auto":
        e = math.exp(float(epsilon - size_eps))
        method = "oue" if size - 2 > 3 * e else "krr"
    return LocalSpec(table, tuple(columns), categories, epsilon, method, size_eps, null_category)


def person_category(rows: Sequence[tuple[tuple[Any, ...], int]], s: LocalSpec) -> int:
    """One person's category index from their (tuple, rows) counts: the most frequent declared
    tuple, ties broken by the declared key order; anything else is the NULL category."""
    declared = s.categories[:-1] if s.null_category else s.categories
    index = {c: i for i, c in enumerate(declared)}
    other = s.k - 1 if s.null_category else None  # without a NULL category: a random declared tuple
    best = None
    for values, n in rows:
        i = index.get(tuple(values))
        if i is not None and (best is None or (n, -i) > (best[0], -best[1])):
            best = (n, i)
    if best is None:
        return other if other is not None else _random.randrange(s.k)
    return best[1]


def randomize(categories: Sequence[int], s: LocalSpec) -> list[Any]:
    """The released rows: persons' randomized categories, plus dummies or minus a random subset
    so that their number is the noisy N, shuffled. k-RR rows are category indexes, OUE rows
    tuples of k bits."""
    n = len(categories)
    z = sample(Noise("laplace", laplace_scale(1, s.epsilon_size)), 1)[0]
    total = max(0, n + z)
    inputs = list(categories)
    if total > n:
        inputs += [_random.randrange(s.k) for _ in range(total - n)]
    elif total < n:
        inputs = _random.sample(inputs, total)
    rows = [_one(i, s) for i in inputs]
    _random.shuffle(rows)
    return rows


def _one(category: int, s: LocalSpec) -> Any:
    if s.method == "krr":
        return _krr(s.k, s.p_q[0])(category)
    keep, flip = _oue(s.p_q[1])
    return tuple(keep(True) if b == category else flip(False) for b in range(s.k))


@lru_cache(maxsize=64)
def _krr(k: int, p: float):
    return dp.m.make_randomized_response(list(range(k)), p)


@lru_cache(maxsize=64)
def _oue(q: float):
    """The true bit reported 1 with probability 1/2, a false one with probability q."""
    return dp.m.make_randomized_response_bool(0.5), dp.m.make_randomized_response_bool(1 - q)


def observed(rows: Sequence[Any], s: LocalSpec) -> list[int]:
    """How many released rows report each category."""
    if s.method == "krr":
        counts = Counter(rows)
        return [counts.get(i, 0) for i in range(s.k)]
    return [sum(1 for r in rows if r[i]) for i in range(s.k)]


def estimates(rows: Sequence[Any], s: LocalSpec, confidence: float = 0.95) -> list[dict[str, Any]]:
    """Debiased counts per category with normal-approximation intervals (post-processing of
    the released rows only)."""
    p, q = s.p_q
    n = len(rows)
    z = NormalDist().inv_cdf(1 - (1 - confidence) / 2)
    out = []
    for values, o in zip(s.categories, observed(rows, s)):
        est = (o - q * n) / (p - q)
        half = z * math.sqrt(max(s.variance(n, min(max(est, 0.0), n)), 0.0))
        out.append(
            {
                **dict(zip(s.columns, values)),
                "estimate": est,
                "ci_low": est - half,
                "ci_high": est + half,
                "observed": o,
            }
        )
    return out

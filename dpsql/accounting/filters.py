"""Privacy filters: given an analyst's running totals, may this release go ahead?

A filter is pure. The ledger keeps exact running totals (rationals) of every quantity any
filter needs, `usage(cost)` says what one release adds to them, and `admits(totals)` says
CONTINUE or HALT (DESIGN §5). Quantities that are irrational for a rational ε (ε(e^ε - 1)/2,
Laplace Rényi divergences) are computed with 60 digits and rounded *up* to a rational before
they are added, so sums never drift and can only err on the safe side.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import Decimal, localcontext
from fractions import Fraction
from functools import lru_cache
from statistics import NormalDist
from typing import Callable, ClassVar, Mapping, Sequence

from .cost import Cost, Part, show
from .zcdp import rho_from_epsilon

FILTERS = ("basic", "advanced", "whitehouse", "zcdp", "rdp", "gdp")
# Filters that compose each release as its (ε, δ) pair: for them a Gaussian release is best
# calibrated by its exact (ε, δ) curve; the others add up ρ or μ, which that would raise.
PAIR_FILTERS = frozenset({"basic", "advanced", "whitehouse"})
ZERO = Fraction(0)


def _upper(x: Decimal) -> Fraction:
    """A rational >= x (x computed with 60 digits; the margin covers their rounding)."""
    return Fraction(x) + Fraction(1, 10**50)


def _dec(x: Fraction) -> Decimal:
    return Decimal(x.numerator) / Decimal(x.denominator)


@lru_cache(maxsize=1024)
def expm1_term(eps: Fraction) -> Fraction:
    """Upper bound on eps (e^eps - 1) / 2."""
    with localcontext() as ctx:
        ctx.prec = 60
        e = _dec(eps)
        return _upper(e * (e.exp() - 1) / 2)


def amplified_epsilon(eps: Fraction, rate: Fraction) -> Fraction:
    """Upper bound on ln(1 + q(e^ε - 1)): an ε-DP mechanism run on a Poisson sample of the
    privacy units at rate q (amplification by subsampling, add/remove neighbours)."""
    with localcontext() as ctx:
        ctx.prec = 60
        return min(eps, _upper((1 + _dec(rate) * (_dec(eps).exp() - 1)).ln()))


@lru_cache(maxsize=1024)
def gdp_mu(eps: Fraction) -> Fraction:
    """Upper bound on the μ of the Gaussian DP that every ε-DP mechanism satisfies (Dong, Roth,
    Su 2022, Corollary 2.13): μ = -2 Φ^-1(1/(1+e^ε)), i.e. erf(μ / 2√2) = tanh(ε/2). Found by
    bisection on floats, compared with a relative margin of 1e-12 (far above erf's and tanh's
    rounding), in the complementary form erfc(μ / 2√2) = 2 / (1 + e^ε) where ε is large."""
    e = float(eps)
    if e <= 0:
        return ZERO
    small = e < 1
    target = math.tanh(e / 2) * (1 + 1e-12) if small else 2 / (1 + math.exp(min(e, 700.0))) * (1 - 1e-12)

    def reached(mu: float) -> bool:
        if small:
            return math.erf(mu / (2 * math.sqrt(2))) >= target
        return math.erfc(mu / (2 * math.sqrt(2))) <= target

    lo, hi = 0.0, 1.0
    while not reached(hi):
        lo, hi = hi, hi * 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if mid in (lo, hi):
            break
        if reached(mid):
            hi = mid
        else:
            lo = mid
    return Fraction(hi)


def laplace_rdp(eps: Fraction, order: Fraction) -> Fraction:
    """Upper bound on the Rényi divergence of order α of a discrete Laplace release that is
    ε-DP (scale b, L1 sensitivity Δ, ε = Δ/b): that of randomized response at ε,
    1/(α-1) ln((e^{αε} + e^{(1-α)ε}) / (1 + e^ε)), which dominates every ε-DP mechanism (Kairouz,
    Oh, Viswanath 2015) and is the discrete Laplace at shift 1. The continuous Laplace's formula
    (Mironov 2017) under-states the discrete sampler by up to 19 % at order 2."""
    with localcontext() as ctx:
        ctx.prec = 60
        e, a = _dec(eps), _dec(order)
        inner = ((a * e).exp() + ((1 - a) * e).exp()) / (1 + e.exp())
        return min(eps, _upper(inner.ln() / (a - 1)))


def laplace_rdp_float(eps: float, order: float) -> float:
    """`laplace_rdp` in floating point (an approximation, for searching: never charged), its
    exponentials added as logarithms so that no α ε overflows."""
    return min(eps, (_log_add(order * eps, (1 - order) * eps) - _log_add(0.0, eps)) / (order - 1))


def _log_add(a: float, b: float) -> float:
    """ln(e^a + e^b)."""
    hi, lo = max(a, b), min(a, b)
    return hi + math.log1p(math.exp(lo - hi))


def _bisect(admits: Callable[[float], bool], hi: float, steps: int = 48) -> float:
    """The largest x in [0, hi] that `admits` (monotone: admitted below some point), to within
    hi / 2^steps, from below; an x whose arithmetic overflows is not admitted."""
    lo = 0.0
    for _ in range(steps):
        mid = (lo + hi) / 2
        try:
            ok = admits(mid)
        except OverflowError:
            ok = False
        if ok:
            lo = mid
        else:
            hi = mid
    return lo


@dataclass(frozen=True)
class Totals:
    """Exact running sums over an analyst's releases."""

    sums: Mapping[str, Fraction] = field(default_factory=dict)
    queries: int = 0

    def get(self, key: str) -> Fraction:
        return self.sums.get(key, ZERO)

    @property
    def epsilon(self) -> Fraction:
        return self.get("epsilon")

    @property
    def delta(self) -> Fraction:
        return self.get("delta")

    def plus(self, increments: Mapping[str, Fraction]) -> "Totals":
        sums = dict(self.sums)
        for k, v in increments.items():
            if v:
                sums[k] = sums.get(k, ZERO) + v
            elif k not in sums:
                sums[k] = ZERO
        return Totals(sums, self.queries + 1)


def _rho(p: Part) -> Fraction:
    return p.rho if p.rho is not None else p.epsilon * p.epsilon / 2


def _mu_sq(p: Part, order: Fraction | None) -> Fraction:
    if p.kind == "gaussian":
        return 2 * _rho(p)
    if p.delta == 0:  # a pure ε-DP part is μ(ε)-GDP
        return gdp_mu(p.epsilon) ** 2
    return ZERO  # (ε, δ) with δ > 0 has no GDP guarantee: counted in non_gaussian


def _rdp(p: Part, order: Fraction | None) -> Fraction:
    if order is None:
        return ZERO
    if p.kind == "gaussian":
        return order * _rho(p)
    if p.kind == "laplace":
        return laplace_rdp(p.epsilon, order)
    return min(p.epsilon, order * _rho(p))


# What one part of a release adds to each running total (given the filter's RDP order).
_INCREMENTS: dict[str, Callable[[Part, Fraction | None], Fraction]] = {
    "epsilon": lambda p, order: p.epsilon,
    "delta": lambda p, order: p.delta,
    "eps_sq": lambda p, order: p.epsilon * p.epsilon,
    "eps_expm1": lambda p, order: expm1_term(p.epsilon) if p.epsilon else ZERO,
    "rho": lambda p, order: _rho(p),
    "approx_delta": lambda p, order: ZERO if p.kind == "gaussian" else p.delta,
    "mu_sq": _mu_sq,
    # the key's name predates pure parts: a part with a δ of its own, not Gaussian
    "non_gaussian": lambda p, order: ZERO if p.kind == "gaussian" or p.delta == 0 else Fraction(1),
    "rdp": _rdp,
}
USAGE_KEYS = tuple(_INCREMENTS)


def usage(cost: Cost, rdp_order: Fraction | None = None) -> dict[str, Fraction]:
    """What one release adds to every running total (a dashboard's queries cost the same every
    time: computed once per cost, in exact arithmetic either way)."""
    return dict(_usage(cost, rdp_order, USAGE_KEYS))


@lru_cache(maxsize=1024)
def _usage(cost: Cost, rdp_order: Fraction | None, keys: tuple[str, ...]) -> tuple[tuple[str, Fraction], ...]:
    """`usage` of the running totals `keys` only (a filter's `reads`)."""
    return tuple((k, sum((_INCREMENTS[k](p, rdp_order) for p in cost.parts), ZERO)) for k in keys)


@dataclass(frozen=True)
class Filter:
    """Base: budget (ε_g, δ_g), and the part of δ_g set aside for releases' own δ (reserve)."""

    epsilon: Fraction
    delta: Fraction
    reserve: Fraction = ZERO
    name = "filter"
    # The running totals `admits` reads (no other): `admits_cost`, which `remaining` asks some
    # fifty times per answer, adds up only these.
    reads: ClassVar[tuple[str, ...]] = USAGE_KEYS

    rdp_order: Fraction | None = None

    def admits(self, totals: Totals) -> bool:
        raise NotImplementedError

    def usage(self, cost: Cost) -> dict[str, Fraction]:
        return usage(cost, self.rdp_order)

    def admits_cost(self, totals: Totals, cost: Cost) -> bool:
        """`admits(totals.plus(usage(cost)))`, from the totals this filter reads alone."""
        return self.admits(totals.plus(dict(_usage(cost, self.rdp_order, self.reads))))

    def delta_left(self, totals: Totals) -> Fraction:
        return max(ZERO, self.reserve - totals.get("approx_delta"))

    def remaining(self, totals: Totals) -> dict[str, Fraction]:
        """What is left: epsilon = the largest ε of one more Laplace release the filter admits
        (to 2^-48 of the budget's ε, by bisection). Bisected on floats where the filter has a
        float form of its admission (`_probe`: the exact one costs 20-70 µs, 49 of them 1-3.5 ms
        an answer), then checked exactly, a hair lower (1e-12, 1e-9) where floats' rounding or
        the exact form's upward margins put it past the boundary: what is told is always
        admitted; should all three fail, bisected exactly as before."""
        if not self.admits_cost(totals, Cost.pure(Fraction(1, 10**12))):
            return {"epsilon": ZERO, "delta": self.delta_left(totals)}
        probe = self._probe(totals)
        if probe is not None:
            try:
                found = _bisect(probe, float(self.epsilon))
            except (ArithmeticError, ValueError):  # a float form out of its domain: the exact search
                found = 0.0
            for lo in (found * (1 - margin) for margin in (0.0, 1e-12, 1e-9)):
                if lo > 0 and self.admits_cost(totals, Cost.pure(Fraction(lo))):
                    return {"epsilon": Fraction(lo), "delta": self.delta_left(totals)}
        lo = _bisect(lambda x: self.admits_cost(totals, Cost.pure(Fraction(x))), float(self.epsilon))
        return {"epsilon": Fraction(lo), "delta": self.delta_left(totals)}

    def _probe(self, totals: Totals) -> Callable[[float], bool] | None:
        """`admits_cost(totals, Cost.pure(x))` in floating point, approximately (None: no such
        form); `remaining` checks its answer exactly."""
        return None

    def spent_text(self, totals: Totals) -> str:
        raise NotImplementedError

    def describe(self, totals: Totals) -> str:
        left = self.remaining(totals)
        return (
            f"{self.name} filter over (epsilon={show(self.epsilon)}, delta={show(self.delta)}): "
            f"{self.spent_text(totals)}; remaining epsilon={show(left['epsilon'])}, delta={show(left['delta'])}"
        )


@dataclass(frozen=True)
class BasicFilter(Filter):
    """Basic composition: HALT if Σε_i > ε_g or Σδ_i > δ_g."""

    name = "basic"
    reads = ("epsilon", "delta")

    def admits(self, totals: Totals) -> bool:
        return totals.epsilon <= self.epsilon and totals.delta <= self.delta

    def delta_left(self, totals: Totals) -> Fraction:
        return max(ZERO, self.delta - totals.delta)  # all of δ_g is for the releases' own δ

    def remaining(self, totals: Totals) -> dict[str, Fraction]:
        return {"epsilon": max(ZERO, self.epsilon - totals.epsilon), "delta": self.delta_left(totals)}

    def spent_text(self, totals: Totals) -> str:
        return (
            f"spent epsilon={show(totals.epsilon)} of {show(self.epsilon)}, "
            f"delta={show(totals.delta)} of {show(self.delta)}"
        )


@dataclass(frozen=True)
class AdvancedFilter(Filter):
    """Rogers, Roth, Ullman, Vadhan (2016): with H = ε_g² / (28.04 ln(1/δ_g)),
    K = Σ ε_j(e^ε_j - 1)/2 + sqrt((Σε_i² + H)(2 + ln(Σε_i²/H + 1)) ln(2/δ_g));
    HALT if Σδ_i > δ_g/2 or K > ε_g. Valid for δ_g in (0, 1/e)."""

    name = "advanced"
    reads = ("delta", "eps_sq", "eps_expm1")

    def __post_init__(self) -> None:
        if not 0 < self.delta < Fraction(1, 3):
            raise ValueError("the advanced filter needs 0 < delta < 1/e")

    def statistic(self, totals: Totals) -> Decimal:
        with localcontext() as ctx:
            ctx.prec = 60
            h, log_2_dg = _advanced_constants(self.epsilon, self.delta)
            s2 = _dec(totals.get("eps_sq"))
            root = ((s2 + h) * (2 + (s2 / h + 1).ln()) * log_2_dg).sqrt()
            return _dec(totals.get("eps_expm1")) + root

    def admits(self, totals: Totals) -> bool:
        return totals.delta <= self.delta / 2 and self.statistic(totals) <= _dec(self.epsilon)

    def delta_left(self, totals: Totals) -> Fraction:
        return max(ZERO, self.delta / 2 - totals.delta)

    def _probe(self, totals: Totals) -> Callable[[float], bool]:
        h, log_2_dg = (float(c) for c in _advanced_constants(self.epsilon, self.delta))
        s2, e1, eg = float(totals.get("eps_sq")), float(totals.get("eps_expm1")), float(self.epsilon)

        def admits(x: float) -> bool:
            s = s2 + x * x
            return e1 + x * math.expm1(x) / 2 + math.sqrt((s + h) * (2 + math.log1p(s / h)) * log_2_dg) <= eg

        return admits

    def spent_text(self, totals: Totals) -> str:
        return (
            f"K={float(self.statistic(totals)):.6g} of {show(self.epsilon)}, "
            f"delta={show(totals.delta)} of {show(self.delta / 2)}"
        )


@dataclass(frozen=True)
class WhitehouseFilter(Filter):
    """Whitehouse, Ramdas, Rogers, Wu (2023): δ_g = δ' + δ'' (δ'' = reserve for the
    releases' own δ); HALT if sqrt(2 ln(1/δ') Σε_i²) + Σε_i²/2 > ε_g or Σδ_i > δ''."""

    name = "whitehouse"
    reads = ("delta", "eps_sq")

    def __post_init__(self) -> None:
        if not 0 <= self.reserve < self.delta:
            raise ValueError("the whitehouse filter needs 0 <= delta_reserve < delta")

    def statistic(self, totals: Totals) -> Decimal:
        with localcontext() as ctx:
            ctx.prec = 60
            s2 = _dec(totals.get("eps_sq"))
            return (2 * _log_inverse(self.delta - self.reserve) * s2).sqrt() + s2 / 2

    def admits(self, totals: Totals) -> bool:
        return totals.delta <= self.reserve and self.statistic(totals) <= _dec(self.epsilon)

    def _probe(self, totals: Totals) -> Callable[[float], bool]:
        log_inv = float(_log_inverse(self.delta - self.reserve))
        s2, eg = float(totals.get("eps_sq")), float(self.epsilon)
        return lambda x: math.sqrt(2 * log_inv * (s2 + x * x)) + (s2 + x * x) / 2 <= eg

    def spent_text(self, totals: Totals) -> str:
        return f"bound={float(self.statistic(totals)):.6g} of {show(self.epsilon)}"


@dataclass(frozen=True)
class ZcdpFilter(Filter):
    """zCDP: HALT if Σρ_i > ρ_g, ρ_g the largest ρ whose optimal conversion at δ_g - reserve is
    at most ε_g; parts with a δ of their own (partition selection) spend the reserve."""

    name = "zcdp"
    reads = ("rho", "approx_delta")

    def __post_init__(self) -> None:
        if not 0 <= self.reserve < self.delta:
            raise ValueError("the zcdp filter needs 0 <= delta_reserve < delta")

    @property
    def rho(self) -> Fraction:
        return _zcdp_rho(self.epsilon, self.delta - self.reserve)

    def admits(self, totals: Totals) -> bool:
        return totals.get("rho") <= self.rho and totals.get("approx_delta") <= self.reserve

    def _probe(self, totals: Totals) -> Callable[[float], bool]:
        spent, rho = float(totals.get("rho")), float(self.rho)
        return lambda x: spent + x * x / 2 <= rho

    def spent_text(self, totals: Totals) -> str:
        return f"spent rho={float(totals.get('rho')):.6g} of {float(self.rho):.6g}"


@dataclass(frozen=True)
class RdpFilter(Filter):
    """Rényi filter at one order α fixed with the budget (Feldman & Zrnic 2021): HALT if
    Σ ε_α(i) > ε_g - ln(1/(δ_g - reserve))/(α - 1)."""

    name = "rdp"
    reads = ("rdp", "approx_delta")

    def __post_init__(self) -> None:
        if self.rdp_order is None or self.rdp_order <= 1:
            raise ValueError("the rdp filter needs an order above 1")
        if not 0 <= self.reserve < self.delta:
            raise ValueError("the rdp filter needs 0 <= delta_reserve < delta")

    @property
    def order(self) -> Fraction:
        """α, set (and above 1) for this filter."""
        assert self.rdp_order is not None  # __post_init__
        return self.rdp_order

    @property
    def bound(self) -> Fraction:
        return _rdp_bound(self.epsilon, self.delta - self.reserve, self.order)

    def admits(self, totals: Totals) -> bool:
        return totals.get("rdp") <= self.bound and totals.get("approx_delta") <= self.reserve

    def _probe(self, totals: Totals) -> Callable[[float], bool]:
        spent, bound, a = float(totals.get("rdp")), float(self.bound), float(self.order)
        return lambda x: spent + laplace_rdp_float(x, a) <= bound

    def spent_text(self, totals: Totals) -> str:
        return (
            f"spent RDP epsilon at order {show(self.order)}={float(totals.get('rdp')):.6g} of {float(self.bound):.6g}"
        )


def _gdp_delta(eps: float, mu: float) -> float:
    def phi(x: float) -> float:
        return 0.5 * math.erfc(-x / math.sqrt(2))

    return phi(-eps / mu + mu / 2) - math.exp(eps) * phi(-eps / mu - mu / 2)


@dataclass(frozen=True)
class GdpFilter(Filter):
    """Gaussian DP: HALT if Σμ_i² > μ_g², μ_g the largest μ with δ(ε_g; μ) <= δ_g (fully
    adaptive: Smith and Thakurta 2022). Gaussian releases count μ = Δ2/σ, pure ε-DP releases
    (Laplace) the μ(ε) of gdp_mu; releases with δ > 0 (partition selection, PLD-planned
    batches) have no GDP guarantee and are refused."""

    name = "gdp"
    reads = ("non_gaussian", "mu_sq")

    @property
    def mu(self) -> float:
        return _gdp_mu_bound(self.epsilon, self.delta)

    def admits(self, totals: Totals) -> bool:
        return totals.get("non_gaussian") == 0 and totals.get("mu_sq") <= _square(self.mu)

    def _probe(self, totals: Totals) -> Callable[[float], bool] | None:
        if self.epsilon > 700:  # 1 / (1 + e^x) of a larger x underflows
            return None
        spent, cap, normal = float(totals.get("mu_sq")), self.mu**2, NormalDist()
        return lambda x: spent + (2 * normal.inv_cdf(1 / (1 + math.exp(x)))) ** 2 <= cap

    def spent_text(self, totals: Totals) -> str:
        return (
            f"spent mu^2={float(totals.get('mu_sq')):.6g} of {self.mu**2:.6g} (Gaussian and pure epsilon-DP "
            "releases; none with delta > 0)"
        )


# A filter's constants, computed once per budget: every admission (some fifty per answer, in
# `remaining`) asks for them.


@lru_cache(maxsize=256)
def _advanced_constants(epsilon: Fraction, delta: Fraction) -> tuple[Decimal, Decimal]:
    """H = ε_g² / (28.04 ln(1/δ_g)) and ln(2/δ_g), with 60 digits."""
    with localcontext() as ctx:
        ctx.prec = 60
        eg, dg = _dec(epsilon), _dec(delta)
        return eg * eg / (Decimal("28.04") * _log_inverse(delta)), (2 / dg).ln()


@lru_cache(maxsize=256)
def _log_inverse(delta: Fraction) -> Decimal:
    """ln(1/δ), with 60 digits."""
    with localcontext() as ctx:
        ctx.prec = 60
        return (1 / _dec(delta)).ln()


@lru_cache(maxsize=256)
def _zcdp_rho(epsilon: Fraction, delta: Fraction) -> Fraction:
    return Fraction(rho_from_epsilon(float(epsilon), float(delta)))


@lru_cache(maxsize=256)
def _rdp_bound(epsilon: Fraction, delta: Fraction, order: Fraction) -> Fraction:
    return Fraction(float(epsilon) - math.log(1 / float(delta)) / (float(order) - 1))


@lru_cache(maxsize=256)
def _gdp_mu_bound(epsilon: Fraction, delta: Fraction) -> float:
    """The largest μ with δ(ε_g; μ) <= δ_g (bisection on floats)."""
    lo, hi = 0.0, 1.0
    while _gdp_delta(float(epsilon), hi) <= float(delta):
        hi *= 2
    for _ in range(100):
        mid = (lo + hi) / 2
        if _gdp_delta(float(epsilon), mid) <= float(delta):
            lo = mid
        else:
            hi = mid
    return lo


@lru_cache(maxsize=256)
def _square(x: float) -> Fraction:
    return Fraction(x) ** 2


_KINDS = {
    "basic": BasicFilter,
    "advanced": AdvancedFilter,
    "whitehouse": WhitehouseFilter,
    "zcdp": ZcdpFilter,
    "rdp": RdpFilter,
    "gdp": GdpFilter,
}


def default_rdp_order(epsilon: Fraction, delta: Fraction) -> Fraction:
    """The integer order α that admits the most small releases: for small ε an order-α Rényi
    cost is about α ε²/2, so maximise (ε_g - ln(1/δ)/(α - 1)) / α."""
    eg, log_inv = float(epsilon), math.log(1 / float(delta))
    best = max(range(2, 100_000), key=lambda a: (eg - log_inv / (a - 1)) / a)
    return Fraction(best)


def make_filter(
    kind: str, epsilon: Fraction, delta: Fraction, *, reserve: Fraction = ZERO, rdp_order: Fraction | None = None
) -> Filter:
    try:
        cls = _KINDS[kind]
    except KeyError:
        raise ValueError(f"unknown filter {kind!r}; choose one of {', '.join(FILTERS)}") from None
    if kind == "rdp" and rdp_order is None:
        rdp_order = default_rdp_order(epsilon, delta - reserve)
    return cls(epsilon, delta, reserve, rdp_order)


def simulate(f: Filter, cost: Cost | Sequence[Cost], limit: int = 10_000_000, start: Totals | None = None) -> int:
    """How many releases the filter admits in a row (after `start`, what is spent already): of
    one cost, or of several in turn (a mixed workload). Exact: doubling + bisection over the
    closed-form totals of n releases."""
    cycle = [cost] if isinstance(cost, Cost) else list(cost)
    incs = [f.usage(c) for c in cycle]
    keys = set(incs[0]) | set(start.sums if start is not None else ())
    whole = {k: sum((i.get(k, ZERO) for i in incs), ZERO) for k in keys}
    base = start or Totals()

    def totals(n: int) -> Totals:
        rounds, rest = divmod(n, len(cycle))
        return Totals(
            {k: base.get(k) + whole[k] * rounds + sum((i.get(k, ZERO) for i in incs[:rest]), ZERO) for k in keys},
            base.queries + n,
        )

    if not f.admits(totals(1)):
        return 0
    lo, hi = 1, 2
    while hi <= limit and f.admits(totals(hi)):
        lo, hi = hi, hi * 2
    if hi > limit:
        return limit
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if f.admits(totals(mid)):
            lo = mid
        else:
            hi = mid
    return lo


__all__ = ["FILTERS", "Filter", "Totals", "usage", "make_filter", "simulate", "Part"]

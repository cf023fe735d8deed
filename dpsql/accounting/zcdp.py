"""zero-Concentrated DP: the conversion between rho and (epsilon, delta).

eps(rho, delta) = inf_{a>1} [a rho + ln(1 - 1/a) - ln(delta a) / (a - 1)]   (Canonne, Kamath,
Steinke 2020, Prop. 12; DESIGN §5). Any single `a` gives a valid upper bound on the infimum, so
a numerical minimiser can only err on the safe side: it may overstate eps, never understate it.
"""

from __future__ import annotations

import math


def _objective(a: float, rho: float, log_delta: float) -> float:
    return a * rho + math.log1p(-1.0 / a) - (log_delta + math.log(a)) / (a - 1.0)


def epsilon_from_rho(rho: float, delta: float) -> float:
    """Smallest eps (up to minimiser tolerance, rounded up) such that rho-zCDP implies (eps, delta)-DP."""
    if rho <= 0:
        return 0.0
    if delta <= 0:
        return math.inf
    log_delta = math.log(delta)
    lo, hi = math.log(1.0 + 1e-9), math.log(1e8)

    def f(t: float) -> float:
        return _objective(max(math.exp(t), 1.0 + 1e-12), rho, log_delta)

    # The objective is quasi-convex in log(a): golden-section search.
    g = (math.sqrt(5) - 1) / 2
    x1, x2 = hi - g * (hi - lo), lo + g * (hi - lo)
    f1, f2 = f(x1), f(x2)
    for _ in range(200):
        if f1 < f2:
            hi, x2, f2 = x2, x1, f1
            x1 = hi - g * (hi - lo)
            f1 = f(x1)
        else:
            lo, x1, f1 = x1, x2, f2
            x2 = lo + g * (hi - lo)
            f2 = f(x2)
    best = min(f1, f2, rho + 2 * math.sqrt(rho * math.log(1 / delta)))
    return max(0.0, best)


def rho_from_epsilon(epsilon: float, delta: float) -> float:
    """Largest rho (rounded down) whose optimal conversion gives at most (epsilon, delta)."""
    if epsilon <= 0 or delta <= 0:
        return 0.0
    lo, hi = 0.0, max(1.0, epsilon)
    while epsilon_from_rho(hi, delta) <= epsilon:
        hi *= 2
    for _ in range(100):
        mid = (lo + hi) / 2
        if epsilon_from_rho(mid, delta) <= epsilon:
            lo = mid
        else:
            hi = mid
    return lo

"""What a synopsis measures, and how its epsilon is split: pure functions of the dimensions'
sizes and the charts the synopsis is for (both public), in the spirit of HDMM (McKenna et al.,
VLDB 2018).

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

The workload is a class of charts: a chart groups by some dimensions G, unfiltered or under an
equality filter on one value of each dimension in F; one of its groups is a cell of the
marginal G u F. By default every chart of at most two dimensions, unfiltered (a filter on a
charted dimension selects that chart's own cells); a synopsis may declare its own (`charts`,
`filters`: spec.py). The split minimises the mean over the class of each chart's expected
standard deviation divided by what the full cube alone would give it: for any data, a chart's
relative error scales with its standard deviation, so this is the class's mean relative error
measured against the plain noisy cube's, and the full cube itself scores exactly 1 (the chosen
strategy is never worse on the class). A mean of variances (HDMM's total squared error, every
cell alike) is dominated by the charts with the most cells and puts the whole epsilon on the
full cube, which serves 1-2-way charts badly; a mean of log variances (the geometric mean)
tolerates a few charts made far worse than the cube (filtered 2-way charts), which the median of
a mixed dashboard then reads (simulated on the sample, DESIGN 8d). Minimised by exponentiated
gradient on the simplex of shares over all 2^k marginals from two starts, then compared with
the candidates (the full cube alone, and every marginal of the class measured alike): the least
expected error wins. The full cube always keeps a share (FULL_SHARE at least), so every query
over the dimensions is estimable, whatever the declared charts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from . import axes as ax
from .axes import Axis, flat, internal, measured

MIN_SHARE = 0.01  # a marginal below this share of the epsilon is not measured (not the full cube)
FULL_SHARE = 0.02  # the full cube's share at least: every query over the dimensions estimable
STEPS = 1000
DENOMINATOR = 10_000  # shares are exact multiples of 1/10,000
POWER = 1.0  # the mean of (std ratio) ** POWER over the charts; 0: of its log
TINY = 1e-9  # no share reaches 0 while optimising (every lambda stays finite)


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
    """The marginals measured (masks), the hierarchies (a bucketed dimension and its chain of
    block sizes, axes.py), and each one's share of the measure's epsilon: the marginals' first."""

    marginals: tuple[int, ...]
    shares: tuple[Fraction, ...]  # exact, summing to 1: one per marginal, then one per tree
    trees: tuple[tuple[int, Axis], ...] = ()

    def epsilons(self, epsilon: Fraction) -> list[Fraction]:
        return [epsilon * s for s in self.shares]

    def axes(self, sizes: tuple[int, ...]) -> tuple[Axis, ...]:
        chain = dict(self.trees)
        return tuple(chain.get(i, flat(n)) for i, n in enumerate(sizes))

    def measurements(self, sizes: tuple[int, ...]) -> list[tuple[tuple[int, ...], ...]]:
        """Each measurement's levels per dimension (axes.py), in the order of the shares."""
        axes = self.axes(sizes)
        out = [tuple(measured(a, bool(m >> i & 1)) for i, a in enumerate(axes)) for m in self.marginals]
        for dim, _ in self.trees:
            out.append(tuple(internal(a) if i == dim else measured(a, False) for i, a in enumerate(axes)))
        return out

    def describe(self, names: list[str]) -> str:
        """What is measured, for EXPLAIN and the list: marginals, and any hierarchy."""
        text = f"{len(self.marginals)} marginal{'s' if len(self.marginals) != 1 else ''}"
        for dim, axis in self.trees:
            text += f" + a hierarchy over {names[dim]} (blocks of {', '.join(str(b) for b in axis.blocks[1:-1])})"
        return text


@dataclass(frozen=True)
class Charts:
    """A class of charts: each groups by one of `groupings` (masks), unfiltered or under an
    equality filter on one value of one dimension in `filters` (a mask) outside its grouping."""

    groupings: tuple[int, ...]
    filters: int


def default_charts(k: int) -> Charts:
    """Every chart of at most two dimensions (filters on the dimensions it groups by select its
    own cells); declared `filters` add a filter on another dimension."""
    return Charts(tuple(m for m in masks(k) if bin(m).count("1") <= 2), 0)


def chart_marginals(charts: Charts, k: int) -> dict[int, int]:
    """The marginal a group of each chart of the class is a cell of -> how many charts."""
    out: dict[int, int] = {}
    for g in charts.groupings:
        for f in [0] + [1 << i for i in members(charts.filters & ~g, k)]:
            out[g | f] = out.get(g | f, 0) + 1
    return out


def _workload(sizes: tuple[int, ...], charts: Charts) -> tuple[np.ndarray, np.ndarray]:
    """(C, counts): C[c, T] the coefficients of one cell of chart marginal c; counts its charts."""
    k = len(sizes)
    weights = chart_marginals(charts, k)
    rows = [coefficients(sizes, tuple(1 if m >> i & 1 else n for i, n in enumerate(sizes))) for m in weights]
    return np.array(rows), np.array(list(weights.values()), dtype=float)


def _outside(sizes: tuple[int, ...]) -> np.ndarray:
    return np.array(
        [math.prod(n for i, n in enumerate(sizes) if not m >> i & 1) for m in masks(len(sizes))], dtype=float
    )


def _contains(k: int) -> np.ndarray:
    return np.array([[1.0 if t & ~m == 0 else 0.0 for t in masks(k)] for m in masks(k)])  # [m, T]


def _cube_variances(sizes: tuple[int, ...], c: np.ndarray) -> np.ndarray:
    """Each chart's group variance under the full cube alone (epsilon 1, Laplace): the baseline
    a chart's error is measured against (a scale, so the objective is the same for any data)."""
    lam = eigenvalues({(1 << len(sizes)) - 1: 0.5}, sizes)
    return np.sum(np.where(c > 0, c / lam, 0.0), axis=1)


def _weight(share: np.ndarray, gaussian: bool) -> tuple[np.ndarray, np.ndarray]:
    """A measurement's precision at sensitivity 1 from its share of the budget, and its
    derivative: Laplace at epsilon = share has variance 2 / share^2; a Gaussian at rho = share / 2
    (zCDP composes linearly in rho) has variance 1 / share."""
    if gaussian:
        return share, np.ones_like(share)
    return share * share / 2, share


def _score(v: np.ndarray, base: np.ndarray, counts: np.ndarray) -> tuple[float, np.ndarray]:
    """The class's error from its charts' variances v, and its derivative in each v: the mean
    over charts of (std / the full cube's std) ** POWER, its log when POWER is 0."""
    ratio = v / base
    if POWER == 0:
        return float(np.sum(counts * np.log(ratio))), counts / v
    return float(np.sum(counts * ratio ** (POWER / 2)) / POWER), counts * ratio ** (POWER / 2) / v / 2


def expected_error(shares: np.ndarray, sizes: tuple[int, ...], charts: Charts, gaussian: bool = False) -> float:
    """The class's error under shares (one per marginal mask, summing to 1), at sensitivity 1 and
    epsilon 1 (Laplace) or rho 1/2 (Gaussian), per chart: inf if one is not estimable."""
    c, counts = _workload(sizes, charts)
    lam = _contains(len(sizes)).T @ (_weight(np.asarray(shares, dtype=float), gaussian)[0] * _outside(sizes))
    live = c > 0
    if np.any(live & (lam <= 0)):
        return math.inf
    v = np.sum(np.where(live, c / np.where(lam > 0, lam, 1.0), 0.0), axis=1)
    return _score(v, _cube_variances(sizes, c), counts)[0] / float(np.sum(counts))


def _starts(k: int) -> list[np.ndarray]:
    """Where the descent starts: every marginal alike, and mostly the full cube (the problem is
    not convex in the shares: a start near each of the two usual optima)."""
    alike = np.full(1 << k, 1.0 / (1 << k))
    cube = np.full(1 << k, 0.1 / max(1, (1 << k) - 1))
    cube[-1] = 0.9
    return [alike, cube]


def _optimised(sizes: tuple[int, ...], charts: Charts, gaussian: bool = False) -> np.ndarray:
    """Shares minimising expected_error by exponentiated gradient, the best of a few starts."""
    k = len(sizes)
    c, counts = _workload(sizes, charts)
    live = c > 0
    outside, contains = _outside(sizes), _contains(k)
    base = _cube_variances(sizes, c)
    best, best_error = np.full(1 << k, 1.0 / (1 << k)), math.inf
    for start in _starts(k):
        share = start / start.sum()
        for _ in range(STEPS):
            weight, slope = _weight(share, gaussian)
            lam = contains.T @ (weight * outside)
            inverse = np.where(lam > 0, 1 / np.where(lam > 0, lam, 1.0), 0.0)
            v = np.sum(np.where(live, c * inverse, 0.0), axis=1)
            error, dv = _score(v, base, counts)
            if error < best_error:
                best, best_error = share.copy(), error
            g = dv @ c  # d error / d (1/lambda_T)
            # d error / d share_m = - sum_{T in m} g_T / lambda_T^2 * outside_m * d weight / d share_m
            grad = -(contains @ (g * inverse * inverse)) * outside * slope
            share = np.maximum(share * np.exp(-0.5 * grad / (np.max(np.abs(grad)) or 1.0)), TINY)
            share /= share.sum()
    return best


def _exact(shares: dict[int, float]) -> Strategy:
    """Shares as exact multiples of 1/DENOMINATOR summing to 1 (every one > 0), in mask order."""
    kept = sorted(shares)
    total = sum(shares[m] for m in kept)
    units = [max(1, round(shares[m] / total * DENOMINATOR)) for m in kept[:-1]]
    units.append(DENOMINATOR - sum(units))
    if units[-1] <= 0:  # cannot happen with shares of at least MIN_SHARE, but never charge a share <= 0
        units = [1] * len(kept)
    return Strategy(tuple(kept), tuple(Fraction(u, sum(units)) for u in units))


def _kept(shares: np.ndarray, full: int) -> dict[int, float]:
    """Marginals of at least MIN_SHARE, the full cube with FULL_SHARE at least (of the total)."""
    kept = {m: float(s) for m, s in enumerate(shares) if s >= MIN_SHARE and m != full}
    rest = sum(kept.values())
    cube = float(shares[full])
    if rest > 0 and cube < FULL_SHARE / (1 - FULL_SHARE) * rest:
        cube = FULL_SHARE / (1 - FULL_SHARE) * rest
    kept[full] = cube
    return kept


def _dense(strategy: Strategy, k: int) -> np.ndarray:
    out = np.zeros(1 << k)
    for m, s in zip(strategy.marginals, strategy.shares):
        out[m] = float(s)
    return out


def candidates(sizes: tuple[int, ...], charts: Charts, gaussian: bool = False) -> list[Strategy]:
    """The optimised split, the full cube alone, and the class's marginals (and the full cube)
    measured alike."""
    k = len(sizes)
    full = (1 << k) - 1
    alike = {m: 1.0 for m in chart_marginals(charts, k)}
    alike[full] = max(alike.get(full, 0.0), FULL_SHARE * len(alike))
    return [
        _exact(_kept(_optimised(sizes, charts, gaussian), full)),
        Strategy((full,), (Fraction(1),)),
        _exact(alike),
    ]


def choose(sizes: tuple[int, ...], charts: Charts | None = None, gaussian: bool = False) -> Strategy:
    """The candidate with the least expected error on the class of charts (default_charts)."""
    charts = default_charts(len(sizes)) if charts is None else charts
    scored = [
        (expected_error(_dense(s, len(sizes)), sizes, charts, gaussian), i, s)
        for i, s in enumerate(candidates(sizes, charts, gaussian))
    ]
    return min(scored, key=lambda x: x[:2])[2]


# Hierarchies over bucketed dimensions -----------------------------------------------------------

TREE_SHARES = (Fraction(1, 10), Fraction(1, 5), Fraction(3, 10), Fraction(2, 5), Fraction(1, 2))
MAX_RANGES = 400  # range queries weighed per bucketed dimension (evenly spaced when more)


def _precisions(strategy: Strategy, sizes: tuple[int, ...], gaussian: bool = False) -> dict:
    """Each measurement's precision at sensitivity 1 per partition: Laplace at epsilon = its
    share (variance 2 b^2, b = its partitions P over its epsilon), Gaussian at rho = share / 2
    (its L2 sensitivity sqrt(P): variance P / share)."""
    out: dict = {}
    for levels, share in zip(strategy.measurements(sizes), strategy.shares):
        p = ax.partitions(levels)
        w = float(share) / p if gaussian else float(share) ** 2 / (2 * p * p)
        out[levels] = out.get(levels, 0.0) + w
    return out


def ranges(n: int) -> list[tuple[int, int]]:
    """Bucket-aligned ranges [a, b) of a dimension of n buckets, neither one bucket nor all."""
    every = [(a, b) for a in range(n) for b in range(a + 2, n + 1) if b - a < n]
    step = max(1, len(every) // MAX_RANGES)
    return every[::step]


def general_error(
    strategy: Strategy, sizes: tuple[int, ...], charts: Charts, ranged: tuple[int, ...], gaussian: bool = False
) -> float:
    """The class's error as expected_error gives it (each chart's standard deviation over the full
    cube's alone), with one more item per dimension in `ranged`: the mean, over its bucket-aligned
    ranges (the other dimensions summed), of the same ratio. Any strategy, hierarchies included."""
    axes = strategy.axes(sizes)
    lam = ax.eigenvalues(_precisions(strategy, sizes, gaussian), axes)
    plain = tuple(flat(n) for n in sizes)
    base = ax.eigenvalues({tuple(measured(a, True) for a in plain): 1.0 if gaussian else 0.5}, plain)

    def ratio(queries: list[np.ndarray]) -> float:
        return math.sqrt(ax.variance(lam, axes, queries) / ax.variance(base, plain, queries))

    every = [np.ones(n) for n in sizes]
    total, weight = 0.0, 0.0
    for mask, count in chart_marginals(charts, len(sizes)).items():
        one = [ax.picks(a, [0]) if mask >> i & 1 else every[i] for i, a in enumerate(axes)]
        total += count * ratio(one)
        weight += count
    for i in ranged:
        spans = ranges(sizes[i])
        if spans:
            total += sum(ratio(every[:i] + [ax.picks(axes[i], range(a, b))] + every[i + 1 :]) for a, b in spans) / len(
                spans
            )
            weight += 1
    return total / weight


def flat_alternatives(strategy: Strategy, k: int) -> list[Strategy]:
    """The marginal strategy with more of the epsilon on the full cube (each share of
    TREE_SHARES moved to it): range queries read its cells, so these are what a hierarchy must
    beat."""
    full = (1 << k) - 1
    out = []
    for h in TREE_SHARES:
        shares = [s * (1 - h) + (h if m == full else 0) for m, s in zip(strategy.marginals, strategy.shares)]
        out.append(Strategy(strategy.marginals, tuple(shares)))
    return out


def with_trees(
    strategy: Strategy, sizes: tuple[int, ...], charts: Charts, bucketed: tuple[int, ...], gaussian: bool = False
) -> Strategy:
    """The strategy with a hierarchy over a bucketed dimension wherever one lowers the class's
    error, range queries over the bucketed dimensions included (general_error): first the flat
    alternatives (more on the full cube), then for each bucketed dimension in turn every chain of
    block sizes its bucket count allows (axes.chains) at each share of TREE_SHARES, the
    marginals scaled down to make room; the least error wins (a hierarchy only when it beats
    every flat strategy tried)."""
    ranged = tuple(i for i in bucketed if ax.chains(sizes[i]))
    best, best_error = strategy, general_error(strategy, sizes, charts, ranged, gaussian)
    if not ranged:
        return best
    for flat_candidate in flat_alternatives(strategy, len(sizes)):  # ranges met without a hierarchy
        error = general_error(flat_candidate, sizes, charts, ranged, gaussian)
        if error < best_error:
            best, best_error = flat_candidate, error
    for i in ranged:
        current = best
        for axis in ax.chains(sizes[i]):
            for h in TREE_SHARES:
                tried = Strategy(
                    current.marginals,
                    tuple(s * (1 - h) for s in current.shares) + (h,),
                    current.trees + ((i, axis),),
                )
                error = general_error(tried, sizes, charts, ranged, gaussian)
                if error < best_error:
                    best, best_error = tried, error
    return best

"""The noise has the calibrated distribution, in the sampler and through real queries.

Each test rejects at p < 1e-6. Kolmogorov-Smirnov against a discrete distribution's exact CDF
is conservative (its p-values are too large, never too small), so each test's false-positive
rate is at most 1e-6. Each also checks its power: the same draws against a 15 % wrong scale
must be rejected, so a test that cannot fail would show up.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from dpsql.guarantee.calibration import calibrate
from dpsql.guarantee.mechanisms import PARALLEL_DRAWS, Noise, sample, selection_threshold
from dpsql.sql.classify import classify
from dpsql.sql.rewrite import rewrite

ALPHA = 1e-6


def discrete_laplace_cdf(scale: float):
    """P(Z <= x) for P(Z = z) proportional to exp(-|z| / scale), z integer."""
    q = math.exp(-1.0 / scale)

    def cdf(x):
        x = np.floor(np.asarray(x, dtype=float))
        return np.where(x < 0, q ** np.abs(x) / (1 + q), 1 - q ** (x + 1) / (1 + q))

    return cdf


def discrete_gaussian_cdf(sigma: float):
    span = int(sigma * 12) + 10
    support = np.arange(-span, span + 1)
    weights = np.exp(-(support.astype(float) ** 2) / (2 * sigma**2))
    cum = np.cumsum(weights) / weights.sum()

    def cdf(x):
        idx = np.floor(np.asarray(x, dtype=float)).astype(int) + span
        return np.where(idx < 0, 0.0, cum[np.clip(idx, 0, len(support) - 1)])

    return cdf


def ks_p(draws, cdf) -> float:
    """Kolmogorov-Smirnov for integer data: D = sup |F_n - F| over the support (both right-
    continuous), p from the continuous Kolmogorov distribution, which is conservative here."""
    x = np.sort(np.asarray(draws, dtype=float))
    values, counts = np.unique(x, return_counts=True)
    empirical = np.cumsum(counts) / len(x)
    d = np.max(np.abs(empirical - cdf(values)))
    # Between support points both CDFs are flat, and below the smallest draw F_n = 0.
    d = max(d, float(cdf(values[0] - 1)))
    return float(stats.kstwo.sf(d, len(x)))


@pytest.mark.parametrize("scale", [0.8, 3.0, 250.0])
def test_laplace_sampler_has_calibrated_scale(scale):
    draws = sample(Noise("laplace", scale), 20_000)
    assert ks_p(draws, discrete_laplace_cdf(scale)) > ALPHA
    assert ks_p(draws, discrete_laplace_cdf(scale * 1.15)) < ALPHA  # power


@pytest.mark.parametrize("sigma", [1.5, 40.0])
def test_gaussian_sampler_has_calibrated_scale(sigma):
    draws = sample(Noise("gaussian", sigma), 20_000)
    assert ks_p(draws, discrete_gaussian_cdf(sigma)) > ALPHA
    assert ks_p(draws, discrete_gaussian_cdf(sigma * 1.15)) < ALPHA


def test_long_vectors_drawn_in_parts_keep_the_distribution():
    """A vector long enough to be drawn in parallel parts: each half has the calibrated
    distribution (and not a 15 % wrong one), and the halves are uncorrelated (|r| below 5.5
    standard errors: p < 4e-8), so no part repeats or mirrors another. Halves of 20,000 draws at
    least, for the power to tell the wrong scale apart."""
    n = 2 * max(PARALLEL_DRAWS, 20_000) + 3
    assert n // PARALLEL_DRAWS >= 2  # drawn in parts on any machine with two cores or more
    draws = sample(Noise("laplace", 3.0), n)
    assert len(draws) == n
    half = n // 2
    first, second = np.asarray(draws[:half], dtype=float), np.asarray(draws[half : 2 * half], dtype=float)
    for part in (first, second):
        assert ks_p(part, discrete_laplace_cdf(3.0)) > ALPHA
        assert ks_p(part, discrete_laplace_cdf(3.0 * 1.15)) < ALPHA
    assert abs(np.corrcoef(first, second)[0, 1]) < 5.5 / math.sqrt(half)


def test_small_requests_served_from_the_pool_keep_the_distribution():
    """Queries drawing one or a few values at a scale seen before are served from a pool of
    iid draws: 20,000 single draws have the calibrated distribution (and not a 15 % wrong
    one), and consecutive draws are uncorrelated (|r| below 5.5 standard errors)."""
    draws = np.asarray([sample(Noise("laplace", 2.5), 1)[0] for _ in range(20_000)], dtype=float)
    assert ks_p(draws, discrete_laplace_cdf(2.5)) > ALPHA
    assert ks_p(draws, discrete_laplace_cdf(2.5 * 1.15)) < ALPHA
    assert abs(np.corrcoef(draws[:-1], draws[1:])[0, 1]) < 5.5 / math.sqrt(len(draws))
    pairs = [sample(Noise("gaussian", 3.0), 2) for _ in range(5_000)]
    assert ks_p([x for p in pairs for x in p], discrete_gaussian_cdf(3.0)) > ALPHA


def test_laplace_interval_half_width_is_exact():
    """P(|Z| > half_width) <= alpha, and half_width is the smallest such integer."""
    for b in (0.5, 2.0, 37.5):
        noise = Noise("laplace", b)
        q = math.exp(-1 / b)

        def tail(j: float, q: float = q) -> float:
            return 2 * q ** (j + 1) / (1 + q)  # P(|Z| > j) = P(|Z| >= j + 1)

        h = noise.half_width(0.95)
        assert tail(h) <= 0.05 + 1e-12
        assert h == 0 or tail(h - 1) > 0.05


def test_selection_threshold_bounds_the_release_probability():
    for b, d in ((1.0, 1e-6), (4.0, 1e-9), (20.0, 1e-5)):
        tau = selection_threshold(b, Fraction(d))
        q = math.exp(-1 / b)
        p_release = q ** (tau - 1) / (1 + q)  # P(1 + Z >= tau) = P(Z >= tau - 1)
        assert p_release <= d
        assert q ** (tau - 2) / (1 + q) > d  # and tau is the smallest such threshold


def test_selection_threshold_at_extreme_scales_and_deltas_ends_and_stays_safe():
    """Large scales and deltas below a float's range: log space, a bounded correction loop."""
    for b, d in ((2.0**52, Fraction(1, 10**330)), (1e12, Fraction(1, 10**8)), (0.5, Fraction(1, 3))):
        tau = selection_threshold(b, d)
        # P(Z >= tau - 1) = e^{-(tau-1)/b} / (1 + e^{-1/b}) <= d, compared in log space
        assert -(tau - 1) / b - math.log1p(math.exp(-1 / b)) <= math.log(d.numerator) - math.log(d.denominator)
    for b in (2.0**53, math.inf, math.nan, 0.0):
        with pytest.raises(ValueError):
            selection_threshold(b, Fraction(1, 10**6))


def _noise_through_queries(session, sql: str, runs: int):
    """Released value minus the exact pre-noise value, in the measure's integer units (at the
    policy's limits: the noise of limits chosen per query is tested in test_auto_bounds)."""
    session.execute("SET dpsql.cache = off")
    session.execute("SET dpsql.bounds = policy")
    tree = classify(sql).tree
    plan, cal = session._prepare(tree)
    truth = session.engine.execute(session.engine.sql_of(rewrite(plan, plan.literal_domain_size())))
    exact = int(truth.columns[1][0])
    unit = plan.measures[0].unit_scale
    out = []
    for _ in range(runs):
        value = session.execute(sql).rows[0][0]
        out.append(round(value / unit) - exact)
    return out, cal.measures[0].noise


def test_count_query_noise_is_laplace_with_scale_l1_over_epsilon(session):
    draws, noise = _noise_through_queries(session, "SELECT COUNT(*) FROM people", 400)
    assert noise.scale == 1.0  # max_groups * max_rows / epsilon = 1 * 1 / 1
    assert ks_p(draws, discrete_laplace_cdf(1.0)) > ALPHA


def test_sum_query_noise_is_laplace_with_scale_l1_over_epsilon(session):
    session.execute("SET dpsql.epsilon = 0.5")
    draws, noise = _noise_through_queries(session, "SELECT SUM(age) FROM people", 400)
    bits = 24 - math.ceil(math.log2(100))
    assert noise.scale == pytest.approx((math.floor(100 * 2**bits) + 1) / 0.5)
    assert ks_p(draws, discrete_laplace_cdf(noise.scale)) > ALPHA
    assert ks_p(draws, discrete_laplace_cdf(noise.scale * 4)) < ALPHA  # power: expected D ~ 0.24


def test_gaussian_query_noise(session):
    session.execute("SET dpsql.mechanism = gaussian")
    session.execute("SET dpsql.delta = 1e-9")
    draws, noise = _noise_through_queries(session, "SELECT COUNT(*) FROM people", 400)
    assert noise.kind == "gaussian"
    assert ks_p(draws, discrete_gaussian_cdf(noise.scale)) > ALPHA


def test_intervals_cover_the_truth(session):
    """95 % intervals of COUNT and AVG contain the exact value in at least 95 % of runs
    (binomial test at 1e-6 against coverage 0.95), at the policy's limits: an interval covers
    the value at the limits the answer used, and limits chosen per query may clamp tighter
    (DESIGN §10)."""
    session.execute("SET dpsql.cache = off")
    session.execute("SET dpsql.bounds = policy")
    session.execute("SET dpsql.epsilon = 0.3")
    exact = session.engine.execute("SELECT COUNT(*), AVG(LEAST(GREATEST(age, 0), 100)) FROM people").columns
    true_count, true_avg = exact[0][0], exact[1][0]
    runs, hits_c, hits_a = 300, 0, 0
    for _ in range(runs):
        r = session.execute("SELECT COUNT(*), AVG(age) FROM people")
        lo, hi = r.dp["ci"]["count"][0]
        hits_c += lo <= true_count <= hi
        lo, hi = r.dp["ci"]["avg"][0]
        hits_a += lo <= true_avg <= hi
    for hits in (hits_c, hits_a):
        assert stats.binomtest(hits, runs, 0.95, alternative="less").pvalue > ALPHA


def test_calibration_splits_epsilon_across_measures(session):
    plan, cal = session._prepare(classify("SELECT COUNT(*), SUM(age), AVG(age) FROM people").tree)
    # COUNT(*), SUM(age) (shared by AVG) and COUNT(age) for AVG: three measures.
    assert len(plan.measures) == 3
    assert all(m.epsilon == Fraction(1, 3) for m in cal.measures)
    plan2, cal2 = session._prepare(classify("SELECT COUNT(age), AVG(age) FROM people").tree)
    assert len(plan2.measures) == 2  # COUNT(age) is shared with AVG's count
    assert calibrate(plan2, Fraction(1), Fraction(0), "laplace").cost.epsilon == 1


@given(
    st.lists(st.tuples(st.one_of(st.integers(-5, 5), st.none()), st.sampled_from(["a", "b", "B", ""])), max_size=40),
    st.booleans(),
)
@settings(max_examples=200, deadline=None)
def test_released_rows_sort_by_key_values_alone_in_the_one_order(rows, mixed):
    """The fast path (one type per key column) sorts exactly as key_order does; mixed columns
    (None among integers, or integers among strings) take key_order itself."""
    from dpsql.guarantee.release import _sort_by_keys, key_order

    if mixed and rows:
        rows = rows + [("x", 1.5)]
    rows = [r + (i,) for i, r in enumerate(rows)]  # a measure after the keys
    got = list(rows)
    _sort_by_keys(got, 2)
    assert got == sorted(rows, key=lambda r: key_order(r[:2]))

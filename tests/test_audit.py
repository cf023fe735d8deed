"""The empirical privacy audit (dpsql.audit): it must not flag dpsql's own mechanisms, and its
statistics must be right: exact Clopper-Pearson bounds, and enough power to flag a mechanism
that spends more than it claims (simulated here with numpy, for the statistic only)."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from dpsql import auto_bounds
from dpsql.audit import _Analyst, markdown, run_audit, write_dataset
from dpsql.audit.cases import CASES, HOSPITAL, Case
from dpsql.audit.stats import (
    audit,
    clopper_pearson_lower,
    clopper_pearson_upper,
    epsilon_lower_bound,
)


@pytest.fixture
def made_dirs(monkeypatch) -> list[Path]:
    """Records the temporary directories the audit creates."""
    made: list[Path] = []
    real = tempfile.mkdtemp

    def mkdtemp(*args, **kwargs):
        made.append(Path(real(*args, **kwargs)))
        return str(made[-1])

    monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp)
    return made


QUICK = [c for c in CASES if c.quick_runs is not None]
FALSE_POSITIVE_RATE = 1e-6  # of the whole quick audit


def test_the_quick_audit_has_the_tight_cases():
    assert {c.name for c in QUICK} >= {"count", "join_limit", "gaussian_count", "partition_selection"}


@pytest.mark.slow
@pytest.mark.parametrize("case", QUICK, ids=lambda c: c.name)
def test_quick_audit_does_not_flag_dpsql(made_dirs, case):
    # Some of dpsql's mechanisms are exactly tight for the test the audit picks (a Laplace COUNT
    # at its optimal threshold), so at alpha = 0.05 a correct dpsql is flagged now and then
    # (about 0.4 % of runs per such case, by simulation). A correct mechanism is flagged with
    # probability at most alpha (the Clopper-Pearson bounds hold with 1 - alpha), so the quick
    # audit runs at alpha = 1e-6 in all: the suite's false-positive rate. Its power against a
    # broken mechanism is tested apart (test_bound_flags_*). One test per case (xdist spreads
    # them over its workers), each at the alpha the whole quick audit gives a case.
    (r,) = run_audit([case], quick=True, alpha=FALSE_POSITIVE_RATE / len(QUICK))
    report = markdown([r])
    assert r.alpha == pytest.approx(FALSE_POSITIVE_RATE / len(QUICK))
    assert r.runs >= 500
    assert r.bound.n + r.bound.n_prime == r.runs  # half of each sample was held out
    assert r.bound.epsilon <= r.epsilon, report
    assert r.ok
    assert made_dirs and not [d for d in made_dirs if d.exists()]
    if case.name == "count":  # the audit sees the target: a Laplace COUNT at epsilon 1 bounds clearly above 0
        assert r.epsilon == 1 and r.bound.epsilon > 0.3, report


# The audit's populations are a few noise scales: each query also releases its value histogram
# again with up to EXTRA of its epsilon (1 here), from its release's part (auto_bounds.extra):
# profile_epsilon counts it. How much depends on the profile's noisy population, so `own` is the
# most the query's profile may spend, and at least `own` - EXTRA is its own profile's share.
@pytest.mark.parametrize("name, charged, own", [("auto_reuse", 2.9, 0.2), ("auto_reuse_combined", 2.0, 0.3)])
def test_a_reuse_case_starts_each_run_afresh_and_charges_the_whole_run(tmp_path, name, charged, own):
    """A case with queries `before` its own: each run starts from no kept profile and no cached
    answer (so runs are independent draws), its query reuses the profile they released (free, or
    combined with its own release), and the run's charge is every query's, whatever the profile
    spent again (it comes from the release's part, charged in full)."""
    case = next(c for c in CASES if c.name == name)
    analyst = _Analyst(write_dataset(case.world, tmp_path, name, True), case.settings, case.publish, case.before)
    try:
        for _ in range(3):
            result = analyst.run(case.sql)
            limits = result.dp.bounds.limits
            assert limits.profile_reused
            assert own - float(auto_bounds.EXTRA) - 1e-9 <= limits.profile_epsilon <= own + 1e-9
            assert result.dp.cost.epsilon == pytest.approx(charged) and not result.dp.cached
    finally:
        analyst.close()


def test_temporary_directory_is_removed_on_error(made_dirs):
    def fail(rows):
        raise RuntimeError("boom")

    case = Case("failing", HOSPITAL, "SELECT COUNT(*) FROM people", fail, {"dpsql.epsilon": "1"})
    with pytest.raises(RuntimeError, match="boom"):
        run_audit([case], runs=4)
    assert made_dirs and not [d for d in made_dirs if d.exists()]


# The statistic ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "k, n",
    [
        (0, 1),
        (1, 1),
        (0, 10),
        (3, 10),
        (10, 10),
        (1, 1000),
        (500, 1000),
        (999, 1000),
        (0, 5000),
        (4990, 5000),
        (37, 100_000),
        (99_000, 100_000),
    ],
)
@pytest.mark.parametrize("confidence", [0.9, 0.975, 0.999])
def test_clopper_pearson_matches_scipy(k, n, confidence):
    lower = stats.beta.ppf(1 - confidence, k, n - k + 1) if k > 0 else 0.0
    upper = stats.beta.ppf(confidence, k + 1, n - k) if k < n else 1.0
    assert clopper_pearson_lower(k, n, confidence) == pytest.approx(lower, rel=1e-9, abs=1e-15)
    assert clopper_pearson_upper(k, n, confidence) == pytest.approx(upper, rel=1e-9, abs=1e-15)
    # and they are what they claim: the binomial tail beyond each bound is 1 - confidence
    tail = pytest.approx(1 - confidence, rel=1e-6)
    if 0 < k:
        assert stats.binom.sf(k - 1, n, clopper_pearson_lower(k, n, confidence)) == tail
    if k < n:
        assert stats.binom.cdf(k, n, clopper_pearson_upper(k, n, confidence)) == tail


def test_epsilon_lower_bound_is_the_log_ratio_of_the_bounds():
    k, n, k2, n2, delta, alpha = 700, 1000, 300, 1000, 0.01, 0.05
    p_low = stats.beta.ppf(alpha / 2, k, n - k + 1)
    p_high = stats.beta.ppf(1 - alpha / 2, k2 + 1, n2 - k2)
    expected = math.log((p_low - delta) / p_high)
    assert epsilon_lower_bound(k, n, k2, n2, delta, alpha) == pytest.approx(expected, rel=1e-9)
    assert epsilon_lower_bound(10, 1000, 0, 1000, delta=0.05) == -math.inf  # p_low below delta: no evidence


def _laplace_pair(rng: np.random.Generator, scale: float, n: int) -> tuple[np.ndarray, np.ndarray]:
    """A COUNT of sensitivity 1: D's true value is one more than D''s."""
    return 21 + rng.laplace(0, scale, n), 20 + rng.laplace(0, scale, n)


def test_bound_flags_a_laplace_with_half_its_claimed_scale():
    rng = np.random.default_rng(20240601)
    claimed = 1.0  # scale 1 claimed for sensitivity 1, so epsilon 1; the scale used is 0.5: epsilon 2
    broken = audit(*_laplace_pair(rng, 0.5, 20_000))
    assert broken.epsilon > claimed, broken
    honest = audit(*_laplace_pair(rng, 1.0, 20_000))
    assert 0.5 < honest.epsilon <= claimed, honest
    # the test is found whichever of the two datasets holds the larger value
    swapped = audit(*reversed(_laplace_pair(rng, 0.5, 20_000)))
    assert swapped.epsilon > claimed, swapped


def test_bound_flags_a_partition_selection_laxer_than_its_delta():
    rng = np.random.default_rng(7)
    n, claimed_epsilon, claimed_delta = 4000, 1.0, 0.05
    never = np.zeros(n)  # D': the target's group does not exist, so it is never released
    lax = audit((rng.random(n) < 2 * claimed_delta).astype(float), never, delta=claimed_delta)
    assert lax.epsilon > claimed_epsilon, lax
    assert lax.event.startswith("value >= 1")
    honest = audit((rng.random(n) < claimed_delta).astype(float), never, delta=claimed_delta)
    assert honest.epsilon <= claimed_epsilon, honest


def test_audit_refuses_nan_and_tiny_samples():
    with pytest.raises(ValueError, match="NaN"):
        audit([1.0, math.nan, 2.0, 3.0], [1.0, 2.0, 3.0, 4.0])
    with pytest.raises(ValueError, match="too few"):
        audit([1.0], [2.0])

"""Gaussian releases calibrated by the discrete Gaussian's exact (ε, δ) curve (issue 18).

The curve's δ is checked against an independent 50-digit evaluation of the hockey-stick
divergence between N_Z(0, σ²) and N_Z(Δ, σ²), summed over the lattice; the σ that
calibration picks is checked the same way, so a wrong formula cannot pass by agreeing
with itself.
"""

from __future__ import annotations

from decimal import Decimal, localcontext
from fractions import Fraction

import pytest

from dpsql.accounting.gaussian_curve import SUMMED_SIGMA, _sum_delta, discrete_gaussian_delta, sigma_for
from dpsql.config import load_policy
from dpsql.guarantee.mechanisms import gaussian_sigma, rho_for
from dpsql.session import Session
from dpsql.sql.classify import classify

from .conftest import default_events, default_people, make_db, write_policy


def hockey_stick(epsilon: float, sigma: float, shift: int) -> Decimal:
    """max over events of P(E) - e^ε Q(E), P = N_Z(0, σ²), Q = N_Z(shift, σ²): the sum of the
    positive parts, in 50-digit decimals over the whole relevant lattice."""
    with localcontext() as ctx:
        ctx.prec = 50
        two_var = 2 * Decimal(sigma) ** 2
        reach = int(60 * sigma) + shift + 5
        weight = {y: (-(Decimal(y) ** 2) / two_var).exp() for y in range(-reach - shift, reach + 1)}
        norm = sum(weight[y] for y in range(-reach, reach + 1))
        e = Decimal(epsilon).exp()
        total = Decimal(0)
        for y in range(-reach, reach + 1):
            diff = weight[y] - e * weight[y - shift]
            if diff > 0:
                total += diff
        return total / norm


@pytest.mark.parametrize(
    "epsilon,sigma,shift",
    [
        (1.0, 3.7405, 1),
        (4.0, 1.0576, 1),
        (0.5, 2.0, 1),
        (1.0, 7.3, 3),
        (0.3, 25.5, 2),
        (2.0, 0.8, 1),
        (1.0, 10.0, 10),
        (0.1, 45.9, 1),
    ],
)
def test_curve_is_the_hockey_stick_divergence(epsilon, sigma, shift):
    truth = hockey_stick(epsilon, sigma, shift)
    ours = Decimal(discrete_gaussian_delta(epsilon, sigma, shift))
    assert ours >= truth  # never below the true δ
    assert ours <= truth * Decimal("1.00001") + Decimal("1e-300")  # and tight


@pytest.mark.parametrize(
    "epsilon,sigma,shift",
    [(0.002, 2500.0, 1), (1.0, 5000.0, 1300), (0.001, 3000.0, 1), (0.2, 4000.0, 900), (0.1, 2200.0, 50)],
)
def test_large_sigma_bound_is_above_the_lattice_sum(epsilon, sigma, shift):
    """Beyond SUMMED_SIGMA the curve comes from an integral bound: above the exact sum, within 0.2 %."""
    assert sigma > SUMMED_SIGMA
    exact = _sum_delta(epsilon, sigma, shift)
    bound = discrete_gaussian_delta(epsilon, sigma, shift)
    assert bound >= exact
    assert bound <= exact * 1.002


@pytest.mark.parametrize(
    "epsilon,delta",
    [
        (Fraction(1), Fraction(1, 10**5)),
        (Fraction(1, 10), Fraction(1, 10**8)),
        (Fraction(1, 100), Fraction(1, 10**8)),
        (Fraction(4), Fraction(1, 10**5)),
    ],
)
def test_sigma_from_the_curve_is_private_and_smaller(epsilon, delta):
    """The σ chosen meets (ε, δ) by the independent evaluation, is the smallest that does (to
    1e-6), and is 5-15 % below the zCDP route's."""
    via_zcdp = gaussian_sigma(1, rho_for(epsilon, delta))
    sigma = sigma_for(epsilon, delta, 1, via_zcdp)
    assert hockey_stick(float(epsilon), sigma, 1) <= Decimal(float(delta))
    assert hockey_stick(float(epsilon), sigma * (1 - 1e-6), 1) > Decimal(float(delta)) * Decimal("0.99999")
    assert 0.85 * via_zcdp <= sigma <= 0.95 * via_zcdp


def _session(tmp_path, filter_kind: str, extra: str = "") -> Session:
    make_db(tmp_path / "db.duckdb", default_people(), default_events())
    path = write_policy(tmp_path, extra=extra)
    path.write_text(path.read_text().replace('filter = "basic"', f'filter = "{filter_kind}"'))
    return Session(load_policy(path), "alice")


def _gaussian_noise(session: Session, sql: str) -> list[float]:
    session.execute("SET dpsql.mechanism = gaussian")
    session.execute("SET dpsql.delta = 1e-7")
    session.execute("SET dpsql.epsilon = 0.5")
    _, cal = session._prepare(classify(sql).tree)
    return [m.noise.scale for m in cal.measures], cal


def test_pair_filters_calibrate_by_the_curve_others_by_rho(tmp_path):
    """Under basic composition a one-coordinate Gaussian COUNT gets the curve's σ and is charged
    the same (ε, δ); under zCDP it keeps the σ whose ρ the filter adds up."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    basic, zcdp = _session(tmp_path / "a", "basic"), _session(tmp_path / "b", "zcdp")
    try:
        (sigma_basic,), cal_basic = _gaussian_noise(basic, "SELECT COUNT(*) FROM people")
        (sigma_zcdp,), cal_zcdp = _gaussian_noise(zcdp, "SELECT COUNT(*) FROM people")
        assert sigma_basic < 0.95 * sigma_zcdp
        assert sigma_zcdp == gaussian_sigma(1, rho_for(Fraction(1, 2), Fraction(1, 10**7)))
        assert (cal_basic.cost.epsilon, cal_basic.cost.delta) == (Fraction(1, 2), Fraction(1, 10**7))
        # the part's ρ is the true Δ²/2σ², larger than the conversion's
        assert cal_basic.cost.rho == Fraction(1) / (2 * Fraction(sigma_basic) ** 2) > cal_zcdp.cost.rho
        # one unit in one of several groups is still one coordinate (people: max_groups = 1)
        _, cal_grouped = _gaussian_noise(basic, "SELECT sex, COUNT(*) FROM people GROUP BY sex")
        multiplier = cal_grouped.measures[0].noise.scale / cal_grouped.measures[0].l1
        assert multiplier == pytest.approx(sigma_basic, rel=1e-3)  # the lattice matters a little at Δ = 1
        # AVG releases two measures, events reach two groups: vectors keep the zCDP route
        avg_basic, _ = _gaussian_noise(basic, "SELECT AVG(age) FROM people")
        avg_zcdp, _ = _gaussian_noise(zcdp, "SELECT AVG(age) FROM people")
        assert avg_basic == avg_zcdp
        many_basic, _ = _gaussian_noise(basic, "SELECT kind, COUNT(*) FROM events GROUP BY kind")
        many_zcdp, _ = _gaussian_noise(zcdp, "SELECT kind, COUNT(*) FROM events GROUP BY kind")
        assert many_basic == many_zcdp
    finally:
        basic.close()
        zcdp.close()


def test_a_global_rho_budget_keeps_the_zcdp_route(tmp_path):
    """Every filter charged must compose pairs: a zCDP global budget would pay more ρ."""
    s = _session(tmp_path, "basic", '\n[privacy.global]\nfilter = "zcdp"\nepsilon = 100.0\ndelta = 1e-5\n')
    try:
        (sigma,), _ = _gaussian_noise(s, "SELECT COUNT(*) FROM people")
        assert sigma == gaussian_sigma(1, rho_for(Fraction(1, 2), Fraction(1, 10**7)))
    finally:
        s.close()


def test_charged_run_is_charged_the_pair_with_the_curves_noise(tmp_path):
    s = _session(tmp_path, "basic")
    try:
        (sigma,), _ = _gaussian_noise(s, "SELECT COUNT(*) FROM people")
        r = s.execute("SELECT COUNT(*) FROM people")
        assert r.dp["noise"][0]["kind"] == "gaussian" and r.dp["noise"][0]["scale"] == pytest.approx(sigma)
        budget = dict(zip(*(lambda b: (b.names, b.rows[0]))(s.execute("SHOW dpsql.budget"))))
        assert budget["epsilon_spent"] == 0.5 and budget["delta_spent"] == pytest.approx(1e-7)
    finally:
        s.close()

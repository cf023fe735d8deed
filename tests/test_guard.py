"""The release guard refuses what was not charged for: mutated plans, calibrations, results and
receipts are each refused before any noise is drawn, and a cached answer needs its receipt."""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import pytest

from dpsql.accounting.cost import Cost
from dpsql.engines.base import ResultSet
from dpsql.guarantee.guard import ReleaseRefused, check
from dpsql.guarantee.mechanisms import Noise, laplace_scale, selection_threshold
from dpsql.guarantee.release import release
from dpsql.guarantee.selection import release_odds
from dpsql.session import answer_cache
from dpsql.sql.classify import classify

GROUPED = "SELECT kind, COUNT(*), SUM(amount) FROM events GROUP BY kind"


def _parts(session, sql, mechanism="laplace"):
    session.execute(f"SET dpsql.mechanism = '{mechanism}'")
    if mechanism == "gaussian":
        session.execute("SET dpsql.delta = 1e-8")
    plan, cal = session._prepare(classify(sql).tree)
    rs = session.bounded_result(plan)
    charge = session.ledger.charge(session.user.name, session.budget_policy, cal.cost, sql, {})
    return plan, cal, rs, charge


def _noise(cal, j, scale):
    measures = list(cal.measures)
    measures[j] = dataclasses.replace(measures[j], noise=Noise(measures[j].noise.kind, scale))
    return dataclasses.replace(cal, measures=measures)


@pytest.mark.parametrize("mechanism", ["laplace", "gaussian"])
def test_a_faithful_release_passes(session, mechanism):
    plan, cal, rs, charge = _parts(session, GROUPED, mechanism)
    check(plan, cal, rs, charge, session.policy)
    assert release(plan, cal, rs, 0.95, charge, session.policy).n_rows == 3


def test_missing_or_short_receipt_is_refused(session):
    plan, cal, rs, charge = _parts(session, GROUPED)
    with pytest.raises(ReleaseRefused, match="receipt"):
        release(plan, cal, rs, 0.95, None, session.policy)
    short = dataclasses.replace(charge, cost=Cost.pure(cal.cost.epsilon / 2))
    with pytest.raises(ReleaseRefused, match="does not cover"):
        check(plan, cal, rs, short, session.policy)


def test_duplicated_key_is_refused(session):
    plan, cal, rs, charge = _parts(session, GROUPED)
    doubled = ResultSet(rs.names, rs.types, [c + c[:1] for c in rs.columns])
    with pytest.raises(ReleaseRefused, match="more than once|groups from a declared domain"):
        check(plan, cal, doubled, charge, session.policy)
    plan2, cal2, rs2, charge2 = _parts(session, "SELECT city, COUNT(*) FROM people GROUP BY city")  # undeclared keys
    doubled = ResultSet(rs2.names, rs2.types, [c + c[:1] for c in rs2.columns])
    with pytest.raises(ReleaseRefused, match="more than once"):
        check(plan2, cal2, doubled, charge2, session.policy)


@pytest.mark.parametrize("mechanism", ["laplace", "gaussian"])
def test_halved_or_broken_scale_is_refused(session, mechanism):
    plan, cal, rs, charge = _parts(session, GROUPED, mechanism)
    for scale in (cal.measures[1].noise.scale / 2, float("inf"), float("nan"), 0.0):
        with pytest.raises(ReleaseRefused):
            check(plan, _noise(cal, 1, scale), rs, charge, session.policy)


def test_shares_above_the_charge_are_refused(session):
    plan, cal, rs, charge = _parts(session, GROUPED)
    measures = [
        dataclasses.replace(mn, epsilon=mn.epsilon * 2, noise=Noise("laplace", mn.noise.scale)) for mn in cal.measures
    ]
    with pytest.raises(ReleaseRefused):
        check(plan, dataclasses.replace(cal, measures=measures), rs, charge, session.policy)


def test_limits_above_the_policy_and_missing_cells_are_refused(session):
    plan, cal, rs, charge = _parts(session, GROUPED)
    with pytest.raises(ReleaseRefused, match="above the policy"):
        check(dataclasses.replace(plan, max_rows=plan.max_rows + 1), cal, rs, charge, session.policy)
    with pytest.raises(ReleaseRefused, match="calibrated"):
        check(plan, dataclasses.replace(cal, measures=cal.measures[:1]), rs, charge, session.policy)
    fewer = ResultSet(rs.names[:-1], rs.types[:-1], rs.columns[:-1])
    with pytest.raises(ReleaseRefused, match="result columns"):
        check(plan, cal, fewer, charge, session.policy)
    plan3, cal3, rs3, charge3 = _parts(session, "SELECT city, COUNT(*) FROM people GROUP BY city")
    with pytest.raises(ReleaseRefused, match="partition selection"):
        check(plan3, dataclasses.replace(cal3, selection=None), rs3, charge3, session.policy)


def test_a_cached_answer_needs_its_receipt(session):
    """A cache entry whose receipt is missing or forged is not an answer: the query runs and is
    charged again."""
    session.execute("SET dpsql.cache = on")
    first = session.execute("SELECT COUNT(*) FROM people")
    assert session.execute("SELECT COUNT(*) FROM people").dp["cached"]
    key = answer_cache.cache_key(session, classify("SELECT COUNT(*) FROM people").tree, classify("SELECT 1").options)
    entry = session.ledger.cache_get(session.user.name, key)
    assert entry["dp"]["receipt"] == first.dp["receipt"]
    for forged in (None, first.dp["receipt"] + 1000):
        entry["dp"]["receipt"] = forged
        session.ledger.cache_put(session.user.name, key, entry)
        before = session.budget()["epsilon"]["spent"]
        again = session.execute("SELECT COUNT(*) FROM people")
        assert not again.dp["cached"] and session.budget()["epsilon"]["spent"] > before


def test_every_measure_kind_passes_on_the_sample(hospital):
    """Every aggregate family, partition selection, sampling, a batch and the PLD planner go
    through the guard without a refusal (the guard is on every path)."""
    cur = hospital
    cur.execute("SET dpsql.delta = 1e-8")
    for sql in [
        "SELECT sex, COUNT(*), SUM(income), AVG(age), STDDEV(age) FROM patients GROUP BY sex",
        "SELECT ward, MEDIAN(cost), COUNT(DISTINCT patient_id) FROM visits GROUP BY ward",
        "SELECT insurance, COUNT(*) FROM patients GROUP BY insurance",
        "SELECT COUNT(*), SUM(cost) FROM visits TABLESAMPLE BERNOULLI (20)",
        "SELECT COUNT(DISTINCT diagnosis) FROM visits",
        "SELECT AVG(t) FROM (SELECT patient_id, SUM(cost) AS t FROM visits GROUP BY patient_id) s",
    ]:
        cur.execute(sql)
    cur.execute("SET dpsql.planner = 'pld'")
    cur.execute("SELECT region, COUNT(*), SUM(income) FROM patients GROUP BY region")
    cur.execute("SET dpsql.planner = 'filter'")
    cur.execute("SET dpsql.mechanism = 'gaussian'")
    cur.execute("SELECT ward, COUNT(*), AVG(cost) FROM visits GROUP BY ward")
    cur.execute_batch(
        ["SELECT COUNT(*) FROM patients", "SELECT diagnosis, SUM(cost) FROM visits GROUP BY diagnosis"],
        epsilon=1,
        delta=1e-8,
        weights=[2, 1],
    )
    assert Fraction(cur.connection.session.budget()["queries"]) == 9  # the batch is one charge


def test_a_gaussian_pair_its_noise_does_not_cover_is_refused(session):
    """Under basic composition a Gaussian COUNT is calibrated by the exact curve; shrinking its σ
    (and raising its ρ to match, so the ρ check alone would pass) must still be refused: the
    charged (ε, δ) no longer follows from the noise by either route."""
    plan, cal, rs, charge = _parts(session, "SELECT COUNT(*) FROM people", "gaussian")
    check(plan, cal, rs, charge, session.policy)
    (mn,) = cal.measures
    sigma = mn.noise.scale * 0.9
    rho = Fraction(mn.l2_squared) / (2 * Fraction(sigma) ** 2)
    shrunk = dataclasses.replace(cal, measures=[dataclasses.replace(mn, noise=Noise("gaussian", sigma), rho=rho)])
    parts = tuple(dataclasses.replace(p, rho=rho) if p.kind == "gaussian" else p for p in cal.cost.parts)
    cost = Cost.of(parts)
    with pytest.raises(ReleaseRefused, match="charged less"):
        check(plan, dataclasses.replace(shrunk, cost=cost), rs, dataclasses.replace(charge, cost=cost), session.policy)


def test_partition_selection_laxer_than_its_share_is_refused(session):
    """Odds for a larger epsilon or delta than the selection's share, odds edited after their
    check, or a Laplace fallback below g/epsilon or its threshold: each refused."""
    plan, cal, rs, charge = _parts(session, "SELECT city, COUNT(*) FROM people GROUP BY city")
    sel = cal.selection
    assert sel is not None and sel.odds is not None
    check(plan, cal, rs, charge, session.policy)

    def with_selection(**changes):
        return dataclasses.replace(cal, selection=dataclasses.replace(sel, **changes))

    g = plan.groups_per_unit(plan.literal_domain_size())
    lax = release_odds(2 * sel.epsilon / g, sel.delta / g)
    with pytest.raises(ReleaseRefused, match="laxer"):
        check(plan, with_selection(odds=lax, threshold=lax.certain), rs, charge, session.policy)
    lax = release_odds(sel.epsilon / g, 2 * sel.delta / g)
    with pytest.raises(ReleaseRefused, match="laxer"):
        check(plan, with_selection(odds=lax, threshold=lax.certain), rs, charge, session.policy)
    flips = list(sel.odds.flips)
    flips[1] *= 1.5  # a two-unit group released half as often again
    edited = dataclasses.replace(sel.odds, flips=tuple(flips))
    with pytest.raises(ReleaseRefused, match="exact privacy check"):
        check(plan, with_selection(odds=edited), rs, charge, session.policy)
    with pytest.raises(ReleaseRefused, match="laxer"):
        check(plan, with_selection(threshold=sel.threshold - 1), rs, charge, session.policy)
    scale = laplace_scale(g, sel.epsilon)
    tau = selection_threshold(scale, sel.delta / g)

    def laplace(b, threshold):
        return with_selection(odds=None, noise=Noise("laplace", b), threshold=threshold)

    check(plan, laplace(scale, tau), rs, charge, session.policy)
    with pytest.raises(ReleaseRefused, match="scale"):
        check(plan, laplace(scale / 2, tau), rs, charge, session.policy)
    with pytest.raises(ReleaseRefused, match="threshold"):
        check(plan, laplace(scale, tau - 1), rs, charge, session.policy)


def test_a_split_chosen_after_the_charge_is_refused_beyond_its_part():
    """A corrected count's correction and release, split after its profile, pass only within the
    one part charged for them (guard.check_split): a tampered split that spends more, a share of
    zero or below, a part the charge does not hold, or a release with other than Laplace parts
    is refused."""
    from dpsql import auto_bounds
    from dpsql.accounting.cost import Part
    from dpsql.guarantee.guard import check_split

    epsilon = Fraction(1)
    part = auto_bounds.rest_part(epsilon)
    profile = auto_bounds.laplace_part(epsilon * auto_bounds.SHARE)
    cost = Cost.of([profile, part])
    release = Cost.of([auto_bounds.laplace_part(Fraction(1, 2))])
    check_split(cost, part, [Fraction(1, 5), Fraction(1, 5)], release)  # 0.2 + 0.2 + 0.5 = 0.9: passes
    check_split(cost, part, [], Cost.of([auto_bounds.laplace_part(Fraction(9, 10))]))  # no correction
    tampered = [
        (cost, part, [Fraction(1, 5), Fraction(1, 5) + Fraction(1, 1000)], release),  # 0.901 > 0.9
        (cost, part, [Fraction(0), Fraction(2, 5)], release),
        (cost, part, [Fraction(-1, 10), Fraction(1, 2)], release),
        (cost, part, [], Cost.of([auto_bounds.laplace_part(Fraction(91, 100))])),
        (Cost.of([profile]), part, [Fraction(1, 5), Fraction(1, 5)], release),  # the part not charged
        (cost, dataclasses.replace(part, epsilon=Fraction(2)), [Fraction(1, 2), Fraction(1, 2)], release),
        (cost, part, [Fraction(1, 5), Fraction(1, 5)], Cost.of([Part("gaussian", Fraction(1, 2), rho=Fraction(1))])),
    ]
    for args in tampered:
        with pytest.raises(ReleaseRefused):
            check_split(*args)

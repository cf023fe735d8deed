"""A mean under auto bounds (auto_mean.py): its sum centred at a chosen centre moves by at most
the sensitivity charged on neighbouring databases, the 9:1 split is fixed by the plan's shape and
used only where every filter is basic, and the answer is one exact charge."""

from __future__ import annotations

import contextlib
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dpsql
from dpsql import auto_bounds, auto_mean
from dpsql.config import load_policy
from dpsql.guarantee import guard
from dpsql.guarantee.calibration import calibrate
from dpsql.prepare import plan_query
from dpsql.session import Session
from dpsql.session import auto as session_auto
from dpsql.sql.classify import classify
from dpsql.sql.options import QueryOptions

from .test_sensitivity import _neighbours, neighbouring_sessions, release_moves_within_l1

MEANS = [
    "SELECT AVG(amount) FROM events",
    "SELECT kind, AVG(amount) FROM events GROUP BY kind",
    "SELECT kind, place, AVG(amount) FROM events GROUP BY kind, place",
    "SELECT kind, AVG(amount) FROM events WHERE amount < 20 AND 5 <= amount GROUP BY kind",
    "SELECT sex, AVG(age) FROM people GROUP BY sex",
]


def _plan(session: Session, sql: str, options: QueryOptions | None = None):
    return plan_query(classify(sql).tree, session.policy, session.engine.schema(), "laplace", options)


@pytest.mark.slow
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    **_neighbours,
    total=st.sampled_from([1, 2, 5, 10**6]),
    halvings=st.integers(0, 15),
    at=st.floats(-0.5, 1.5),
)
def test_one_unit_moves_a_centred_mean_by_at_most_its_sensitivity(units, target, rows, drop_row, total, halvings, at):
    """Any centre (within the clamp, as the choice makes it, or beyond it, where the measure puts
    it back) with any total bound and clamp: the pre-noise values move by at most the L1
    charged for."""
    with neighbouring_sessions(units, target, rows) as (a, b):
        for q in MEANS:
            base = _plan(a, q)
            cols = auto_bounds.columns(base)
            clips = tuple((c.expr, c.lower, c.edges[-1 - halvings]) for c in cols)
            centres = tuple((c.expr, c.lower + at * (c.edges[-1 - halvings] - c.lower)) for c in cols)
            plan = _plan(a, q, QueryOptions(max_contributions=total, clips=clips, centres=centres))
            avg = next(e for e in plan.estimates if e.func == "avg")
            assert avg.centre == min(max(dict(centres)[cols[0].expr], avg.lower), avg.upper)  # the centre is used
            assert plan.measures[avg.total].centre == avg.centre
            release_moves_within_l1(a, b, plan, q)


def test_the_centre_widens_the_sums_bound_to_its_farther_end(session):
    q = "SELECT kind, AVG(amount) FROM events GROUP BY kind"
    plan = _plan(session, q, QueryOptions(clips=(("t0.amount", 0.0, 20.0),), centres=(("t0.amount", 4.0),)))
    avg = plan.estimates[0] if plan.estimates[0].func == "avg" else plan.estimates[1]
    m = plan.measures[avg.total]
    assert (avg.centre, m.lower, m.upper) == (4.0, 0.0, 20.0)
    cal = calibrate(plan, Fraction(1), Fraction(0), "laplace", plan.literal_domain_size())
    at_middle = calibrate(_plan(session, q, QueryOptions(clips=(("t0.amount", 0.0, 20.0),))), Fraction(1), 0, "laplace")
    assert cal.measures[avg.total].l1 == pytest.approx(at_middle.measures[avg.total].l1 * 16 / 10)


def test_the_split_is_the_plans_shape_only(session):
    def weights(sql):
        plan = _plan(session, sql)
        ones = [Fraction(1)] * len(plan.measures)
        return plan, auto_mean.weights(plan, ones, [c.expr for c in auto_bounds.columns(plan)])

    plan, w = weights("SELECT kind, AVG(amount), COUNT(*) FROM events GROUP BY kind")
    avg = next(e for e in plan.estimates if e.func == "avg")
    count = next(e for e in plan.estimates if e.func == "count")
    if count.count != avg.count:  # COUNT(*) keeps its share; the mean's pair is split 9:1
        assert (w[avg.total], w[avg.count], w[count.count]) == (Fraction(9, 5), Fraction(1, 5), 1)
        assert sum(w) == len(plan.measures)
    else:
        assert w == [1] * len(plan.measures)
    _, w = weights("SELECT kind, SUM(amount), AVG(amount) FROM events GROUP BY kind")
    assert w == [1] * len(w)  # the mean reads SUM's plain sum: not centred, not split
    _, w = weights("SELECT kind, COUNT(*) FROM events GROUP BY kind")
    assert w == [1] * len(w)


@pytest.mark.parametrize(
    ("centre", "lower", "upper", "want"),
    [
        (1234.5, 0, 12500, 1500),
        (1100, 0, 12500, 1000),
        (0.0123, 0, 1, 0.015),
        (-3, 0, 10, 0),
        (80, 0, 50, 50),
        (7, 5, 20, 7),
        (43.3, 30, 110, 50),
        (5.5, 5, 20, 5),
    ],
)
def test_a_centre_is_rounded_within_the_clamp(centre, lower, upper, want):
    assert auto_mean.centre(centre, lower, upper) == pytest.approx(want)


def test_a_centre_takes_few_values_near_the_mean():
    """Snapped to the grid: within sqrt(5/3) of the clamped mean, and few distinct values for
    means that differ only by the profile's noise (each a plan of its own)."""
    means = [900 + i for i in range(0, 400, 3)]
    centres = {auto_mean.centre(m, 0, 12500) for m in means}
    assert centres == {1000.0, 1500.0}
    for m in [0.37, 2.9, 41.0, 999.0, 1234.5, 7777.0]:
        c = auto_mean.centre(m, 0, 50000)
        assert 1 / (5 / 3) ** 0.5 <= c / m <= (5 / 3) ** 0.5


@pytest.mark.parametrize("kind", ["basic", "zcdp"])
def test_an_auto_mean_is_one_exact_charge_split_only_under_basic(small_policy, kind):
    """Under basic filters the release's parts are the mean's sum at 9/10 and its count at 1/10
    of the release's epsilon; under zCDP (where an unequal split costs more ρ) they stay equal.
    Either way the query is charged its epsilon once."""
    small_policy.write_text(small_policy.read_text().replace('filter = "basic"', f'filter = "{kind}"'))
    with contextlib.closing(dpsql.connect(small_policy, user="alice")) as conn:
        cur = conn.cursor()
        cur.execute("SET dpsql.cache = off")
        assert len(cur.execute("SELECT kind, AVG(amount) FROM events GROUP BY kind").fetchall()) == 3
        parts = conn.session.ledger.history("alice")[0]["cost"].parts
        centres = cur.dp["bounds"].get("centres", {})
    assert (set(centres) == {"amount"}) == (kind == "basic")  # shown where the mean is centred
    assert sum((p.epsilon for p in parts), Fraction(0)) == 1
    rest = auto_bounds.release_epsilon(Fraction(1))
    if kind == "basic":  # the rest charged as one part, split after the profile (auto_bounds.lumped)
        assert auto_bounds.rest_part(Fraction(1)) in parts
        with contextlib.closing(Session(load_policy(small_policy), "alice")) as session:
            plan = _plan(session, "SELECT kind, AVG(amount) FROM events GROUP BY kind")
            parts = session_auto.calibrated_at(session, plan, rest, QueryOptions()).cost.parts
    release = sorted(p.epsilon for p in parts if p.epsilon > (1 - rest) / 2)  # not the profile's
    assert release == ([rest / 10, rest * 9 / 10] if kind == "basic" else [rest / 2, rest / 2])


def test_the_guard_refuses_a_centred_mean_noised_for_the_middles_bound(session):
    """The guard recomputes each measure's L1 from its per-row bound, which reads the centre: a
    centred sum noised as if it were centred in the middle (a smaller bound) is refused."""
    q = "SELECT kind, AVG(amount) FROM events GROUP BY kind"
    clips = (("t0.amount", 0.0, 20.0),)
    centred = _plan(session, q, QueryOptions(clips=clips, centres=(("t0.amount", 4.0),)))
    middle = _plan(session, q, QueryOptions(clips=clips))
    cal = calibrate(middle, Fraction(1), Fraction(0), "laplace", middle.literal_domain_size())
    guard._scales(middle, cal, cal.cost)  # its own plan passes
    with pytest.raises(guard.ReleaseRefused):
        guard._scales(centred, cal, cal.cost)
    own = calibrate(centred, Fraction(1), Fraction(0), "laplace", centred.literal_domain_size())
    guard._scales(centred, own, own.cost)


def test_explain_bounds_a_centred_means_noise_by_twice_the_middles(session, small_policy, tmp_path):
    """EXPLAIN shows the noise at the policy's limits, centred in the middle; a mean centred at
    the profile's mean may have a per-row bound up to twice that (the farther end of a clamp no
    wider than the policy's), and EXPLAIN says so for a mean, not for a plain sum."""
    q = "SELECT kind, AVG(amount) FROM events GROUP BY kind"
    policy = _plan(session, q)
    avg = next(e for e in policy.estimates if e.func == "avg")
    lower, upper = policy.measures[avg.total].lower, policy.measures[avg.total].upper
    at_policy = calibrate(policy, Fraction(1), Fraction(0), "laplace").measures[avg.total].l1
    for clamp in (upper, upper / 2):
        for c in (lower, (lower + clamp) / 2, clamp):
            plan = _plan(session, q, QueryOptions(clips=(("t0.amount", lower, clamp),), centres=(("t0.amount", c),)))
            l1 = calibrate(plan, Fraction(1), Fraction(0), "laplace").measures[avg.total].l1
            assert l1 <= 2 * at_policy
    conn = dpsql.connect(small_policy, user="alice", ledger=tmp_path / "ledger.sqlite")
    try:
        cur = conn.cursor()
        cur.execute("EXPLAIN " + q)
        text = "\n".join(r[0] for r in cur.fetchall())
        assert "a mean's sum, centred at the profile's mean when the query runs, at most" in text
        cur.execute("EXPLAIN SELECT kind, SUM(amount) FROM events GROUP BY kind")
        assert "centred at the profile's mean" not in "\n".join(r[0] for r in cur.fetchall())
    finally:
        conn.close()

"""Limits chosen per query (auto_bounds.py): the profile's sensitivity, the chosen limits'
sensitivity, the choice within the policy, and the whole path through a session."""

from __future__ import annotations

import tempfile
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dpsql
from dpsql import auto_bounds
from dpsql.calibration import calibrate
from dpsql.config import load_policy
from dpsql.prepare import plan_query
from dpsql.session import Session
from dpsql.sql.bounding import TotalCap
from dpsql.sql.classify import classify
from dpsql.sql.options import QueryOptions

from .test_sensitivity import QUERIES, _build, _by_group, _neighbours


def _plan(session: Session, sql: str, options: QueryOptions | None = None):
    return plan_query(classify(sql).tree, session.policy, session.engine.schema(), "laplace", options)


def _eligible(session: Session) -> list[str]:
    return [q for q in QUERIES if auto_bounds.eligible(_plan(session, q), "laplace")]


def _profile(session: Session, plan, cols, top) -> list[list[int]]:
    rows = session._rows_of(auto_bounds.profile_query(plan, cols, top))
    hists = [[0] * (len(auto_bounds.steps(top)) + 1)] + [[0] * auto_bounds.VALUE_BINS for _ in cols]
    for kind, _, bin_, mass in rows:
        hists[int(kind)][int(bin_)] += int(mass)
    return hists


@pytest.mark.slow
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(**_neighbours)
def test_one_unit_moves_each_profile_histogram_by_at_most_its_mass(units, target, rows, drop_row):
    """The profile is noised as if each histogram had L1 sensitivity MASS: check it on
    neighbouring databases (the target unit may be heavy, spread, out of bounds or NULL)."""
    with tempfile.TemporaryDirectory() as d1, tempfile.TemporaryDirectory() as d2:
        a = Session(load_policy(_build(Path(d1), units, target, True, rows)), "alice")
        b = Session(load_policy(_build(Path(d2), units, target, False, rows)), "alice")
        try:
            queries = _eligible(a)
            assert len(queries) >= 10
            for q in queries:
                plan = _plan(a, q)
                cols, top = auto_bounds.columns(plan), auto_bounds.ceiling(plan)
                for ha, hb in zip(_profile(a, plan, cols, top), _profile(b, plan, cols, top)):
                    assert sum(abs(x - y) for x, y in zip(ha, hb)) <= auto_bounds.MASS, q
        finally:
            a.close()
            b.close()


@pytest.mark.slow
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(**_neighbours, total=st.sampled_from([1, 2, 3, 5, 12, 10**6]), halvings=st.integers(0, 15))
def test_one_unit_moves_a_release_with_chosen_limits_by_at_most_its_sensitivity(units, target, rows, drop_row,
                                                                                 total, halvings):
    """Any limits the choice may produce (a total bound, clamps of the summed columns) give a
    plan whose pre-noise values move by at most the L1 its calibration charges for."""
    with tempfile.TemporaryDirectory() as d1, tempfile.TemporaryDirectory() as d2:
        a = Session(load_policy(_build(Path(d1), units, target, True, rows)), "alice")
        b = Session(load_policy(_build(Path(d2), units, target, False, rows)), "alice")
        try:
            for q in _eligible(a):
                base = _plan(a, q)
                clips = tuple((c.expr, c.lower, c.edges[-1 - halvings]) for c in auto_bounds.columns(base))
                plan = _plan(a, q, QueryOptions(max_contributions=total, clips=clips))
                assert isinstance(plan.bounding, TotalCap)
                assert plan.total_rows <= auto_bounds.ceiling(base)  # never above the policy's
                cal = calibrate(plan, Fraction(1), Fraction(0), "laplace", plan.literal_domain_size())
                n = len(plan.keys)
                ra, rb = _by_group(a.bounded_result(plan), n), _by_group(b.bounded_result(plan), n)
                zero = (0,) * (1 + sum(m.width for m in plan.measures))
                at = 1
                for j, mn in enumerate(cal.measures):
                    width = plan.measures[j].width
                    diff = sum(abs(int(ra.get(g, zero)[c] or 0) - int(rb.get(g, zero)[c] or 0))
                               for g in set(ra) | set(rb) for c in range(at, at + width))
                    at += width
                    assert diff <= mn.l1, (q, plan.measures[j].describe(), diff, mn.l1)
        finally:
            a.close()
            b.close()


profiles = st.tuples(st.lists(st.floats(-500, 5000), min_size=12, max_size=12),
                     st.lists(st.floats(-500, 5000), min_size=16, max_size=16))


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(profile=profiles, epsilon=st.sampled_from([Fraction(1, 100), Fraction(1, 10), Fraction(1), Fraction(10)]),
       groups=st.integers(1, 50))
def test_the_choice_never_exceeds_the_policy(session, profile, epsilon, groups):
    """Whatever the noisy profile says (negative bins included), the chosen total bound is
    within the policy's and every clamp inside the column's declared bounds."""
    plan = _plan(session, "SELECT kind, SUM(amount), AVG(amount), COUNT(*) FROM events GROUP BY kind")
    cols, top = auto_bounds.columns(plan), auto_bounds.ceiling(plan)
    rows, values = profile
    p = auto_bounds.Profile(auto_bounds.steps(top), tuple(rows[:len(auto_bounds.steps(top)) + 1]), (tuple(values),))
    choice = auto_bounds.choose(plan, p, cols, top, epsilon, groups)
    assert 1 <= choice.max_contributions <= top
    for expr, lo, hi in choice.clips:
        col = next(c for c in cols if c.expr == expr)
        assert col.lower == lo < hi < col.upper
    assert choice.epsilon == epsilon * auto_bounds.SHARE


def test_a_chosen_bound_is_clamped_to_the_policy(session):
    plan = _plan(session, "SELECT COUNT(*) FROM events", QueryOptions(max_contributions=10**9))
    assert plan.total_rows == auto_bounds.ceiling(_plan(session, "SELECT COUNT(*) FROM events"))


def test_the_profile_and_release_are_one_exact_charge(small_policy):
    conn = dpsql.connect(small_policy, user="alice")
    try:
        cur = conn.cursor()
        cur.execute("SET dpsql.cache = off")
        cur.execute("SELECT kind, AVG(amount), SUM(amount) FROM events GROUP BY kind")
        assert len(cur.fetchall()) == 3
        bounds = cur.dp["bounds"]
        assert 1 <= bounds["max_contributions"] <= 6 and bounds["profile_epsilon"] == pytest.approx(0.1)
        assert cur.dp["cost"] == {"epsilon": 1.0, "delta": 0.0}
        assert conn.session.budget()["epsilon"]["spent"] == Fraction(1)
        cur.execute("SET dpsql.bounds = policy")
        cur.execute("SELECT kind, AVG(amount), SUM(amount) FROM events GROUP BY kind")
        assert "bounds" not in cur.dp and conn.session.budget()["epsilon"]["spent"] == Fraction(2)
        cur.execute("SHOW dpsql.bounds")
        assert cur.fetchall() == [("policy",)]
    finally:
        conn.close()


def test_a_bad_bounds_setting_is_refused_free(conn):
    cur = conn.cursor()
    with pytest.raises(dpsql.Error) as info:
        cur.execute("SET dpsql.bounds = 'loose'")
    assert info.value.sqlstate == "22023" and "auto" in (info.value.hint or "")
    assert conn.session.budget()["queries"] == 0


def test_the_policy_can_turn_choosing_off(tmp_path, small_policy):
    text = small_policy.read_text().replace("[privacy]", '[privacy]\nbounds = "policy"', 1)
    small_policy.write_text(text)
    conn = dpsql.connect(small_policy, user="alice")
    try:
        cur = conn.cursor()
        cur.execute("SELECT SUM(amount) FROM events")
        assert "bounds" not in cur.dp
    finally:
        conn.close()

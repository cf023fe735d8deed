"""Limits chosen per query (auto_bounds.py): the profile's sensitivity, the chosen limits'
sensitivity, the choice within the policy, and the whole path through a session."""

from __future__ import annotations

import contextlib
import math
import tempfile
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dpsql
from dpsql import auto_bounds, auto_choice, auto_correction
from dpsql.accounting.cost import Cost
from dpsql.accounting.filters import usage
from dpsql.config import load_policy
from dpsql.guarantee.bounding import SelectedTotalCap, TotalCap
from dpsql.guarantee.calibration import calibrate
from dpsql.guarantee.guard import check_split
from dpsql.prepare import plan_query
from dpsql.session import Session
from dpsql.session import auto as session_auto
from dpsql.session.auto import correction_of, rows_of
from dpsql.sql.classify import classify
from dpsql.sql.options import QueryOptions
from dpsql.targets import epsilon_for_target, round_up

from .test_sensitivity import QUERIES, _build, _neighbours, neighbouring_sessions, release_moves_within_l1


def _plan(session: Session, sql: str, options: QueryOptions | None = None):
    return plan_query(classify(sql).tree, session.policy, session.engine.schema(), "laplace", options)


def _eligible(session: Session) -> list[str]:
    return [q for q in QUERIES if auto_bounds.eligible(_plan(session, q), "laplace")]


def _profile(session: Session, plan, cols, top) -> list[list[int]]:
    rows = rows_of(session, auto_bounds.profile_query(plan, cols, top))
    hists = [[0] * (len(auto_bounds.steps(top)) + 1)] + [[0] * auto_bounds.VALUE_BINS for _ in cols]
    for kind, _, bin_, mass in rows:
        hists[int(kind)][int(bin_)] += int(mass)
    return hists


@pytest.mark.slow
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(**_neighbours)
def test_one_unit_moves_each_profile_histogram_by_at_most_its_mass(units, target, rows, drop_row):
    """The profile is noised as if each histogram had L1 sensitivity MASS: check it on
    neighbouring databases (the target unit may be heavy, spread, out of bounds or NULL), for
    every eligible query's profile query, and for the exact histograms the session computes
    from the rows its profile ran on (`profile_rows`, with the groups' masses where it has
    them), which a small population's value histograms are noised again from
    (`session.auto.released_again`)."""
    with neighbouring_sessions(units, target, rows) as (a, b):
        queries = _eligible(a)
        assert len(queries) >= 10
        assert any(auto_bounds.columns(_plan(a, q)) for q in queries)
        for q in queries:
            plan = _plan(a, q)
            cols, top = auto_bounds.columns(plan), auto_bounds.ceiling(plan)
            for ha, hb in zip(_profile(a, plan, cols, top), _profile(b, plan, cols, top)):
                assert sum(abs(x - y) for x, y in zip(ha, hb)) <= auto_bounds.MASS, q
            if not cols:
                continue
            size = session_auto.released_size(a, plan)
            groups = auto_bounds.profiled_groups(plan, size or 0)
            exact = [
                auto_bounds.histograms(session_auto.profile_rows(s, plan, cols, top, bool(groups)), cols, top, groups)
                for s in (a, b)
            ]
            for i in auto_bounds.pieces(cols, top, bool(groups)):
                ha, hb = exact[0][i], exact[1][i]
                assert sum(abs(x - y) for x, y in zip(ha, hb)) <= auto_bounds.MASS, (q, i)


@pytest.mark.slow
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(**_neighbours, total=st.sampled_from([1, 2, 3, 5, 12, 10**6]), halvings=st.integers(0, 15))
def test_one_unit_moves_a_release_with_chosen_limits_by_at_most_its_sensitivity(
    units, target, rows, drop_row, total, halvings
):
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
                release_moves_within_l1(a, b, plan, q)
        finally:
            a.close()
            b.close()


profiles = st.tuples(
    st.lists(st.floats(-500, 5000), min_size=12, max_size=12), st.lists(st.floats(-500, 5000), min_size=16, max_size=16)
)


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    profile=profiles,
    epsilon=st.sampled_from([Fraction(1, 100), Fraction(1, 10), Fraction(1), Fraction(10)]),
    groups=st.integers(1, 50),
)
def test_the_choice_never_exceeds_the_policy(session, profile, epsilon, groups):
    """Whatever the noisy profile says (negative bins included), the chosen total bound is
    within the policy's and every clamp inside the column's declared bounds."""
    plan = _plan(session, "SELECT kind, SUM(amount), AVG(amount), COUNT(*) FROM events GROUP BY kind")
    cols, top = auto_bounds.columns(plan), auto_bounds.ceiling(plan)
    rows, values = profile
    p = auto_bounds.Profile(auto_bounds.steps(top), tuple(rows[: len(auto_bounds.steps(top)) + 1]), (tuple(values),))
    choice = auto_choice.choose(plan, p, cols, top, epsilon, groups)
    assert 1 <= choice.max_contributions <= top
    for expr, lo, hi in choice.clips:
        col = next(c for c in cols if c.expr == expr)
        assert col.lower == lo < hi < col.upper
    assert choice.epsilon == epsilon * auto_bounds.SHARE


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(st.floats(-500, 5000), min_size=12, max_size=12),
    epsilon=st.sampled_from([Fraction(1, 100), Fraction(1, 10), Fraction(1), Fraction(10)]),
    groups=st.integers(1, 50),
)
def test_a_chosen_reach_is_above_the_bound_and_never_above_the_widest(session, rows, epsilon, groups):
    """Whatever the noisy profile says, a count that may be corrected is either not corrected (no
    reach, no shares: the release gets the whole rest) or corrected at one of its candidate
    reaches: above the chosen total bound (so the excess's sensitivity reach - c is positive) and
    at most REACH times the policy's bound, with positive shares that leave the release at least
    its share under the prior split (so the part charged for both covers them)."""
    plan = _plan(session, "SELECT kind, COUNT(*) FROM events GROUP BY kind")
    top = auto_bounds.ceiling(plan)
    p = auto_bounds.Profile(auto_bounds.steps(top), tuple(rows[: len(auto_bounds.steps(top)) + 1]), ())
    prior = auto_bounds.corrected(plan, groups)
    choice = auto_choice.choose(plan, p, (), top, epsilon, groups, prior)
    # What the query is charged (fixed before the profile) covers whatever was chosen from it.
    cost = Cost.of(auto_bounds.parts(epsilon, (), top, prior))
    release = calibrate(plan, auto_bounds.release_epsilon(epsilon, choice.shares), Fraction(0), "laplace")
    check_split(cost, auto_bounds.rest_part(epsilon), [epsilon * x for x in choice.shares], release.cost)
    if choice.reach is None:
        assert choice.shares == ()
        return
    assert choice.reach in auto_choice.reaches(top, choice.max_contributions)
    assert choice.max_contributions < choice.reach <= auto_bounds.reach(plan)
    assert len(choice.shares) == 2 and all(x > 0 for x in choice.shares)
    assert sum(choice.shares) <= sum(prior)
    assert auto_bounds.release_epsilon(epsilon, choice.shares) >= auto_bounds.release_epsilon(epsilon, prior)


def _units(top: int, at: dict[int, float]) -> tuple[float, ...]:
    """A row-count histogram (`auto_bounds.steps(top)` bins, then one for more) with `at`'s units."""
    edges = auto_bounds.steps(top)
    return tuple(at.get(i, 0.0) for i in range(len(edges) + 1))


def test_a_count_that_truncation_barely_cuts_gives_the_release_the_rest(session):
    """A scalar count whose units have a row or two each (the model sees nothing for a
    correction to undo at a bound of 2): no correction, and the release gets all of epsilon
    after the profile, not its prior share (about a tenth)."""
    plan = _plan(session, "SELECT COUNT(*) FROM events")
    top = auto_bounds.ceiling(plan)
    prior = auto_bounds.corrected(plan, 1)
    assert auto_bounds.release_epsilon(Fraction(1), prior) < Fraction(1, 2)
    p = auto_bounds.Profile(auto_bounds.steps(top), _units(top, {0: 5000.0, 1: 1500.0}), ())
    choice = auto_choice.choose(plan, p, (), top, Fraction(1, 10), 1, prior)
    assert choice.reach is None and choice.shares == ()
    assert auto_bounds.release_epsilon(Fraction(1, 10), choice.shares) == Fraction(9, 100)


def test_a_count_that_truncation_cuts_keeps_its_correction(session):
    """Many units past the policy's bound (without a correction their rows beyond it stay cut):
    the model keeps a correction, at the shares `adapted` gives for the chosen bound and reach."""
    plan = _plan(session, "SELECT COUNT(*) FROM events")
    top = auto_bounds.ceiling(plan)
    prior = auto_bounds.corrected(plan, 1)
    last = len(auto_bounds.steps(top))
    p = auto_bounds.Profile(auto_bounds.steps(top), _units(top, {0: 200.0, last - 1: 300.0, last: 300.0}), ())
    choice = auto_choice.choose(plan, p, (), top, Fraction(1), 1, prior)
    assert choice.reach is not None  # the units beyond the policy's bound: a third of the rows
    assert choice.shares == auto_bounds.adapted(
        prior, choice.max_contributions, choice.reach, 1, float(auto_bounds.KEPT_WEIGHT)
    )


@settings(max_examples=300, deadline=None)
@given(
    parts=st.lists(st.integers(1, 1000), min_size=1, max_size=4),
    total=st.sampled_from([Fraction(1, 100), Fraction(1, 10), Fraction(9, 10), Fraction(3), Fraction(9)]),
    order=st.sampled_from([Fraction(3, 2), Fraction(2), Fraction(8), Fraction(64)]),
)
def test_parts_split_after_the_charge_cost_at_most_the_part_charged(parts, total, order):
    """Laplace parts whose epsilons sum to at most the one part charged for them
    (auto_bounds.rest_part) add at most its increment to every running total a filter reads
    (filters.usage: ε, ε², ε (e^ε - 1) / 2, ρ, μ², Rényi at an order): a split chosen after the
    charge never costs more than the charge, in any family the ledger supports."""
    charged = auto_bounds.rest_part(total / (1 - auto_bounds.SHARE))
    assert charged.epsilon == total
    eps = [total * x / sum(parts) for x in parts]
    spent = usage(Cost.of([auto_bounds.laplace_part(e) for e in eps]), order)
    whole = usage(Cost.of([charged]), order)
    for key, value in spent.items():
        if key != "non_gaussian":
            assert value <= whole[key], key
    assert spent["non_gaussian"] == whole["non_gaussian"] == 0


@pytest.mark.parametrize(
    "sql", ["SELECT SUM(amount) FROM events", "SELECT kind, SUM(amount) FROM events GROUP BY kind"]
)
def test_a_sum_of_small_values_clips_unit_totals_where_the_values_end(session, sql):
    """A SUM clips each unit's total at C * U: when every unit has one row and every value lies
    in one low bin, the model sees no cut above that bin's upper edge and less noise below it, so
    it chooses C = 1 and U = that edge (a clip of unit totals far below the policy's bound)."""
    plan = _plan(session, sql)
    cols, top = auto_bounds.columns(plan), auto_bounds.ceiling(plan)
    (col,) = cols
    rows = (10_000.0,) + (0.0,) * len(auto_bounds.steps(top))
    values = tuple(10_000.0 if i == 10 else 0.0 for i in range(auto_bounds.VALUE_BINS))
    p = auto_bounds.Profile(auto_bounds.steps(top), rows, (values,))
    choice = auto_choice.choose(plan, p, cols, top, Fraction(1), 3)
    assert choice.max_contributions == 1
    assert choice.clips == ((col.expr, col.lower, col.edges[10]),)


@pytest.mark.parametrize("mean, sd, k", [(10.0, 3.0, 12.0), (10.0, 3.0, 4.0), (100.0, 40.0, 150.0), (5.0, 0.0, 4.0)])
def test_the_expected_excess_of_a_normal_total(mean, sd, k):
    """E[max(T - k, 0)] for a normal T, against a midpoint sum of the integral over ±10 sd."""
    if sd == 0:
        assert auto_choice.normal_excess(mean, sd, k) == max(mean - k, 0.0)
        return
    n, lo, hi = 200_000, mean - 10 * sd, mean + 10 * sd
    step = (hi - lo) / n
    xs = (lo + (i + 0.5) * step for i in range(n))
    density = lambda x: math.exp(-((x - mean) ** 2) / (2 * sd * sd)) / (sd * math.sqrt(2 * math.pi))  # noqa: E731
    numeric = sum(max(x - k, 0.0) * density(x) * step for x in xs)
    assert auto_choice.normal_excess(mean, sd, k) == pytest.approx(numeric, rel=1e-6, abs=1e-9)


def test_a_chosen_bound_is_clamped_to_the_policy(session):
    plan = _plan(session, "SELECT COUNT(*) FROM events", QueryOptions(max_contributions=10**9))
    assert plan.total_rows == auto_bounds.ceiling(_plan(session, "SELECT COUNT(*) FROM events"))


@contextlib.contextmanager
def _answered(policy, sql: str):
    """A connection whose first query, `sql` over the three kinds at epsilon 1, was answered and
    charged exactly its epsilon, once."""
    conn = dpsql.connect(policy, user="alice")
    try:
        cur = conn.cursor()
        cur.execute("SET dpsql.cache = off")
        cur.execute(sql)
        assert len(cur.fetchall()) == 3
        assert cur.dp["cost"] == {"epsilon": 1.0, "delta": 0.0}
        assert conn.session.budget()["epsilon"]["spent"] == Fraction(1)
        yield conn, cur
    finally:
        conn.close()


def test_the_profile_and_release_are_one_exact_charge(small_policy):
    with _answered(small_policy, "SELECT kind, AVG(amount), SUM(amount) FROM events GROUP BY kind") as (conn, cur):
        bounds = cur.dp["bounds"]
        assert 1 <= bounds["max_contributions"] <= 6
        # a small population (auto_bounds.extra): its value histogram released again, from the release's part
        assert 0.1 < bounds["profile_epsilon"] <= float(auto_bounds.SHARE + auto_bounds.EXTRA) + 1e-12
        model = bounds["expected"]  # the profile's model of the chosen limits' error: bias and noise
        assert model["bias"] >= 0 and model["noise"] >= 0 and model["at_policy_limits"] > 0
        assert f"{model['bias']:.1%} cut by these limits" in auto_bounds.told(cur.dp.bounds)
        cur.execute("SET dpsql.bounds = policy")
        cur.execute("SELECT kind, AVG(amount), SUM(amount) FROM events GROUP BY kind")
        assert "bounds" not in cur.dp and conn.session.budget()["epsilon"]["spent"] == Fraction(2)
        cur.execute("SHOW dpsql.bounds")
        assert cur.fetchall() == [("policy",)]


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


def _correction_row(session: Session, plan, c: int, far: int) -> tuple[int, int]:
    rows = rows_of(session, auto_correction.correction_query(plan, c, far))
    return tuple(int(v or 0) for v in rows[0]) if rows else (0, 0)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(**_neighbours, c=st.sampled_from([1, 2, 3, 8, 40]), lower=st.booleans())
def test_one_unit_moves_the_correction_by_at_most_its_sensitivities(units, target, rows, drop_row, c, lower):
    """The correction's kept rows are noised for sensitivity c and its cut rows for reach - c:
    check both on neighbouring databases, for every count the choice may correct, at the widest
    reach or (`lower`) the lowest the choice may take for c (auto_choice.reaches)."""
    with tempfile.TemporaryDirectory() as d1, tempfile.TemporaryDirectory() as d2:
        a = Session(load_policy(_build(Path(d1), units, target, True, rows)), "alice")
        b = Session(load_policy(_build(Path(d2), units, target, False, rows)), "alice")
        try:
            queries = [q for q in _eligible(a) if auto_bounds.corrected(_plan(a, q))]
            assert queries
            for q in queries:
                plan = _plan(a, q)
                cc = min(c, auto_bounds.ceiling(plan))
                far = auto_choice.reaches(auto_bounds.ceiling(plan), cc)[0] if lower else auto_bounds.reach(plan)
                (ka, ea), (kb, eb) = _correction_row(a, plan, cc, far), _correction_row(b, plan, cc, far)
                assert abs(ka - kb) <= cc, q
                assert abs(ea - eb) <= far - cc, q
        finally:
            a.close()
            b.close()


def test_the_correction_scales_counts_within_what_a_bound_can_cut():
    """The factor is (kept + cut) / kept, never below 1 nor above reach / c, whatever the noise;
    an interval is scaled by the factor's interval's ends."""
    fix = auto_correction.Correction(c=4, reach=160, kept=1000.0, excess=500.0, kept_hw=10.0, excess_hw=100.0)
    assert fix.factor == pytest.approx(1.5)
    lo, hi = fix.interval
    assert lo == pytest.approx(1 + 400 / 1010) and hi == pytest.approx(1 + 600 / 990)
    assert auto_correction.Correction(4, 160, -50.0, -20.0, 1.0, 1.0).factor == 1.0
    assert auto_correction.Correction(4, 160, 1.0, 10**9, 1.0, 1.0).factor == 40.0
    values, cis = auto_correction.scaled([100, None], [(90.0, 110.0), (-5.0, 5.0)], fix, integral=True)
    assert values == [150, None]
    assert cis[0] == pytest.approx((90 * lo, 110 * hi)) and cis[1] == pytest.approx((-5 * hi, 5 * hi))


def test_a_corrected_count_is_one_exact_charge(small_policy):
    """A grouped count under auto: the profile, the correction and the release are one charge of
    the query's epsilon, and the answer says the bound and the correction it used."""
    with _answered(small_policy, "SELECT kind, COUNT(*) FROM events GROUP BY kind") as (_, cur):
        bounds = cur.dp["bounds"]
        assert 1 <= bounds["max_contributions"] <= 6
        fix = bounds.get("correction")
        if fix is not None:  # the choice may leave the count uncorrected (auto_choice.choose)
            assert fix["reach"] in auto_choice.reaches(6, bounds["max_contributions"])
            assert 1 <= fix["factor"] <= fix["reach"] / bounds["max_contributions"]
        cur.execute("EXPLAIN SELECT kind, COUNT(*) FROM events GROUP BY kind")
        text = "\n".join(r[0] for r in cur.fetchall())
        release = 1 / float(auto_bounds.release_epsilon(Fraction(1), auto_bounds.split(6, 24, 3)))
        assert "corrected for truncation" in text and f"at most {release:.4g} times" in text


def _spread(top: int, far: int, groups: int, shares: tuple[float, float, float]) -> float:
    """The split's objective (auto_bounds.split): Σ (a_i / ε_i)² at C = sqrt(top)."""
    c = top**0.5
    a = (c * groups, c * float(auto_bounds.KEPT_WEIGHT), far - c)
    return sum((x / e) ** 2 for x, e in zip(a, shares))


@pytest.mark.parametrize("top,groups", [(2, 1), (6, 3), (40, 1), (40, 12), (40, 36), (400, 1000)])
def test_the_correction_split_minimises_its_model(top, groups):
    """The shares are the model's minimum (no split on a grid does better, beyond the shares'
    rounding), all positive, within what the profile leaves, and a larger domain gives the
    release (whose noise is per group) more."""
    far = auto_bounds.REACH * top
    kept, excess = auto_bounds.split(top, far, groups)
    rest = 1 - auto_bounds.SHARE
    assert kept > 0 and excess > 0 and kept + excess < rest
    chosen = _spread(top, far, groups, (float(rest - kept - excess), float(kept), float(excess)))
    grid = [i / 40 for i in range(1, 40)]
    for r in grid:
        for k in grid:
            if r + k < 1:
                other = tuple(float(rest) * x for x in (r, k, 1 - r - k))
                assert chosen <= _spread(top, far, groups, other) * 1.01
    wider = auto_bounds.release_epsilon(Fraction(1), auto_bounds.split(top, far, groups * 2))
    assert wider > auto_bounds.release_epsilon(Fraction(1), (kept, excess))


UNITS_QUERIES = [
    "SELECT kind, COUNT(DISTINCT pid) FROM events GROUP BY kind",
    "SELECT kind, COUNT(DISTINCT pid) FROM events WHERE amount > 10 GROUP BY kind",
    "SELECT p.city, COUNT(DISTINCT e.pid) FROM events e JOIN people p ON e.pid = p.pid GROUP BY p.city",
]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(**_neighbours)
def test_one_unit_moves_the_groups_correction_by_at_most_its_sensitivities(units, target, rows, drop_row):
    """COUNT(DISTINCT unit) by group: the groups a unit's limit keeps are noised for sensitivity
    g (max_groups) and those it cuts for far - g (the domain's size minus g)."""
    with tempfile.TemporaryDirectory() as d1, tempfile.TemporaryDirectory() as d2:
        a = Session(load_policy(_build(Path(d1), units, target, True, rows)), "alice")
        b = Session(load_policy(_build(Path(d2), units, target, False, rows)), "alice")
        try:
            for q in UNITS_QUERIES:
                plan = _plan(a, q)
                if not auto_bounds.counts_units(plan, "laplace"):
                    continue
                g, far = plan.max_groups, plan.max_groups + 5
                ka, ea = (int(v or 0) for v in rows_of(a, auto_correction.groups_query(plan, g, far))[0])
                kb, eb = (int(v or 0) for v in rows_of(b, auto_correction.groups_query(plan, g, far))[0])
                assert abs(ka - kb) <= g and abs(ea - eb) <= far - g, q
        finally:
            a.close()
            b.close()


def test_a_corrected_count_of_units_is_one_exact_charge(small_policy):
    with _answered(small_policy, UNITS_QUERIES[0]) as (conn, cur):
        assert auto_bounds.counts_units(_plan(conn.session, UNITS_QUERIES[0]), "laplace")
        assert cur.dp["bounds"]["max_groups"] == 2 and cur.dp["bounds"]["correction"]["reach"] == 3


def test_a_correction_is_counted_at_the_reach_chosen(session):
    """The exact kept and cut rows are kept per bound *and* reach: the same bound with another
    reach counts its own cut rows (at an epsilon so large the noise is below one row)."""
    plan = _plan(session, "SELECT kind, COUNT(*) FROM events GROUP BY kind")
    shares = auto_bounds.corrected(plan, 3)
    got = {}
    for far in (2, auto_bounds.reach(plan), 2):
        choice = auto_bounds.Choice(1, (), 0.0, 0.0, Fraction(0), far)
        fix = correction_of(session, plan, choice, Fraction(10**9), shares)
        assert (round(fix.kept), round(fix.excess)) == _correction_row(session, plan, 1, far)
        got.setdefault(far, round(fix.excess))
    assert got[2] < got[auto_bounds.reach(plan)]


def test_the_models_bias_is_what_remains_without_noise(session):
    """The chosen limits' bias is the model's error at an infinite epsilon: below the whole
    error, and all of it when the epsilon is so large the noise vanishes."""
    plan = _plan(session, "SELECT kind, SUM(amount), AVG(amount), COUNT(*) FROM events GROUP BY kind")
    cols, top = auto_bounds.columns(plan), auto_bounds.ceiling(plan)
    rows = tuple([50.0, 40.0, 30.0, 20.0, 10.0, 5.0][: len(auto_bounds.steps(top))] + [3.0])
    values = tuple(float(100 - 3 * i) for i in range(auto_bounds.VALUE_BINS))
    p = auto_bounds.Profile(auto_bounds.steps(top), rows, (values,))
    small = auto_choice.choose(plan, p, cols, top, Fraction(1, 10), 3)
    assert 0 <= small.bias <= small.expected
    huge = auto_choice.choose(plan, p, cols, top, Fraction(10**12), 3)
    assert huge.expected - huge.bias < 1e-6


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(profile=profiles, epsilon=st.sampled_from([Fraction(1, 100), Fraction(1, 10), Fraction(1)]))
def test_a_filter_narrows_the_columns_range_before_the_choice(session, profile, epsilon):
    """WHERE 5 <= amount < 20: the column's candidate clamps and bins are within [5, 20] (from the
    query's text alone), and the chosen clamp says so, within the policy's bounds."""
    plan = _plan(session, "SELECT kind, AVG(amount) FROM events WHERE amount >= 5 AND amount < 20 GROUP BY kind")
    (col,), top = auto_bounds.columns(plan), auto_bounds.ceiling(plan)
    assert (col.lower, col.upper) == (5.0, 20.0) and col.declared[0] <= 5.0 and 20.0 < col.declared[1]
    assert 5.0 < min(col.edges) and max(col.edges) == 20.0
    rows, values = profile
    p = auto_bounds.Profile(
        auto_bounds.steps(top),
        tuple(rows[: len(auto_bounds.steps(top)) + 1]),
        (tuple(values) + (0.0,) * (auto_bounds.VALUE_BINS - len(values)),),
    )
    ((expr, lo, hi),) = auto_choice.choose(plan, p, (col,), top, epsilon, 3).clips
    assert expr == col.expr and lo == 5.0 and 5.0 < hi <= 20.0


def test_a_corrected_count_profiles_no_group_masses(session):
    """A corrected count's profile is its row-count histogram alone (its epsilon undivided);
    other plans over a domain of several groups also release the groups' masses."""
    count = _plan(session, "SELECT kind, COUNT(*) FROM events GROUP BY kind")
    total = _plan(session, "SELECT kind, SUM(amount) FROM events GROUP BY kind")
    assert auto_bounds.corrected(count, 3) and auto_bounds.profiled_groups(count, 3) == 0
    assert auto_bounds.profiled_groups(total, 3) == 3 and auto_bounds.profiled_groups(total, 1) == 0
    top = auto_bounds.ceiling(count)
    assert auto_bounds.epsilons(Fraction(1), (), top, False) == (auto_bounds.SHARE,)


def test_explain_reads_the_model_from_the_profile_already_released(small_policy, monkeypatch):
    """Before a profile of the query is released EXPLAIN says the chosen limits' bias is unknown;
    after the query ran, EXPLAIN (free) gives the limits and the error model of that profile at
    the same epsilon: the very ones the answer came with. Another analyst, who paid for no
    profile, still sees 'unknown'."""
    # A profile released again for a small population (auto_bounds.extra) is kept combined, and EXPLAIN
    # cannot release it again: its model is then the release's at the whole rest (DESIGN §4).
    monkeypatch.setattr(auto_bounds, "EXTRA", Fraction(0))
    sql = "SELECT kind, AVG(amount), SUM(amount) FROM events GROUP BY kind"

    def explained(conn) -> tuple[str, dict]:
        cur = conn.cursor()
        cur.execute(f"EXPLAIN {sql}")
        return "\n".join(r[0] for r in cur.fetchall()), conn.session.explain_plan(classify(sql).tree)

    conn = dpsql.connect(small_policy, user="alice")
    try:
        conn.cursor().execute("SET dpsql.epsilon = 1")
        text, info = explained(conn)
        assert info["auto_expected"] is None and "unknown until a profile" in text
    finally:
        conn.close()
    with _answered(small_policy, sql) as (conn, cur):
        bounds = cur.dp["bounds"]
        text, info = explained(conn)
        assert conn.session.budget()["epsilon"]["spent"] == Fraction(1)  # EXPLAIN charged nothing
        model = dict(info["auto_expected"])
        widths = model.pop("half_widths")
        assert model == bounds
        assert f"about {bounds['expected']['bias']:.1%} cut by them" in text
        assert set(bounds["expected"]["by_aggregate"]) == {"AVG(amount)", "SUM(amount)"}
        for text_, part in bounds["expected"]["by_aggregate"].items():
            assert part["bias"] >= 0 and part["noise"] >= 0 and f"{text_}: about {part['bias']:.1%} cut" in text
        # Each measure's noise at the chosen limits: within what EXPLAIN bounds it by at the policy's.
        assert len(widths) == len(info["mechanisms"])
        for m, hw in zip(info["mechanisms"], widths.values()):
            assert 0 < hw <= m["half_width"] * info["auto_release"] * (1 + 1e-9)
        other = Session(conn.session.policy, "bob", engine=conn.session.engine)  # a server's shared engine
        try:
            other.execute("SET dpsql.epsilon = 1")
            assert other.explain_plan(classify(sql).tree)["auto_expected"] is None
        finally:
            other.close()


def test_a_quantile_is_profiled_and_its_histogram_clamped(session):
    """A column only a quantile reads is profiled from its value (q{j}, beside the histogram's
    bin index v{j}), and a chosen clamp narrows the quantile's histogram to [lower, U]; with the
    profile's values in one low bin the choice keeps that bin whole (U at least its top) and
    drops the empty range above it, where the histogram's bins would be wasted."""
    sql = "SELECT kind, MEDIAN(amount) FROM events GROUP BY kind"
    plan = _plan(session, sql)
    (col,), top = auto_bounds.columns(plan), auto_bounds.ceiling(plan)
    assert col.quantile and col.name == f"q{col.j}"
    hists = _profile(session, plan, (col,), top)
    assert sum(hists[1]) > 0  # the value histogram was filled from q{j}
    clipped = _plan(session, sql, QueryOptions(clips=((col.expr, col.lower, col.edges[-3]),)))
    (est,) = clipped.estimates
    assert est.upper == col.edges[-3] == clipped.measures[est.count].upper
    rows = (1000.0,) + (0.0,) * len(auto_bounds.steps(top))
    values = tuple(1000.0 if i == 5 else 0.0 for i in range(auto_bounds.VALUE_BINS))
    choice = auto_choice.choose(
        plan, auto_bounds.Profile(auto_bounds.steps(top), rows, (values,)), (col,), top, Fraction(1), 3
    )
    ((expr, lo, hi),) = choice.clips
    assert expr == col.expr and lo == col.lower and col.edges[5] <= hi < col.upper


TARGETED = "SELECT kind, SUM(amount), COUNT(*) FROM events GROUP BY kind"


def _explained(conn, sql: str = TARGETED) -> tuple[str, dict]:
    cur = conn.cursor()
    cur.execute(f"EXPLAIN {sql}")
    return "\n".join(r[0] for r in cur.fetchall()), conn.session.explain_plan(classify(sql).tree)


def _lookups(conn, sql: str = TARGETED) -> int:
    """How many kept histograms one EXPLAIN of `sql` looks up in the plan cache."""
    plans, keys = conn.session._plans, []
    real = plans.profile
    plans.profile = lambda key: keys.append(key) or real(key)
    try:
        conn.session.explain_plan(classify(sql).tree)
    finally:
        del plans.profile
    return len(keys)


def test_a_target_without_a_profile_is_met_at_the_policys_limits_and_says_so(small_policy):
    """Before any profile of the query is released, dpsql.target_error's epsilon is the one
    meeting it at the policy's limits (public) divided by the release's least share (a small
    population's profile may take EXTRA of it again), and EXPLAIN, the answer's detail and its
    notice say so; the charge is that epsilon."""
    conn = dpsql.connect(small_policy, user="alice")
    try:
        cur = conn.cursor()
        cur.execute("SET dpsql.target_error = 50")
        plan = _plan(conn.session, TARGETED)
        at_policy = epsilon_for_target(plan, 50, Fraction(0), "laplace", 3, None, 0.95)
        want = round_up(float(at_policy / (1 - auto_bounds.SHARE - auto_bounds.EXTRA)))
        text, info = _explained(conn)
        assert info["target"] == {"error": 50.0, "from": "policy", "epsilon": float(want)}
        assert info["cost"]["epsilon"] == float(want) and "no profile of this query released yet" in text
        cur.execute(TARGETED)
        target = cur.dp["bounds"]["target"]
        assert target["from"] == "policy" and cur.dp["cost"]["epsilon"] == float(want)
        assert conn.session.budget()["epsilon"]["spent"] == want
        assert "no profile of this query released yet" in auto_bounds.told(cur.dp.bounds)
    finally:
        conn.close()


def test_a_target_is_met_by_the_models_own_prediction(small_policy):
    """Once a profile of the query is released, EXPLAIN (free) chooses the epsilon by its model:
    each COUNT's and SUM's noise half-width at the limits the model chooses plus the bias they
    cut (its relative bias times its value in the model) is within the target, as EXPLAIN's own
    description of those limits at that epsilon shows; the query then charges that epsilon."""
    conn = dpsql.connect(small_policy, user="alice")
    try:
        cur = conn.cursor()
        # a profile precise enough that its model's choice meets the target whatever its noise
        cur.execute("SET dpsql.epsilon = 10")
        cur.execute(TARGETED)  # releases (and pays for) the profile
        spent = conn.session.budget()["epsilon"]["spent"]
        cur.execute("SET dpsql.target_error = 60")
        cur.execute("SET dpsql.cache = off")
        text, info = _explained(conn)
        assert conn.session.budget()["epsilon"]["spent"] == spent  # EXPLAIN charged nothing
        target = info["target"]
        assert target["from"] == "profile" and info["cost"]["epsilon"] == target["epsilon"]
        assert "by the model of this query's profile already released" in text
        model = info["auto_expected"]
        assert _lookups(conn) == 3  # rows, amount, groups: each once, for the target and the choice shown
        parts = model["expected"]["by_aggregate"]
        widths = list(model["half_widths"].values())  # SUM's measure, then COUNT's
        errors = [hw + parts[a]["bias"] * parts[a]["value"] for hw, a in zip(widths, ("SUM(amount)", "COUNT(*)"))]
        assert max(errors) == pytest.approx(target["expected"]) and target["expected"] <= 60
        cur.execute(TARGETED)
        assert cur.dp["bounds"]["target"]["from"] == "profile"
        assert conn.session.budget()["epsilon"]["spent"] == spent + Fraction(target["epsilon"]).limit_denominator(1000)
    finally:
        conn.close()


def test_a_target_the_cap_cannot_meet_is_refused_free(small_policy):
    """A target no epsilon within max_query_epsilon meets is refused (22023, saying what to do)
    before any charge: at the policy's limits before a profile is released, by the profile's
    model after."""
    text = small_policy.read_text().replace("query_epsilon = 1.0\n", "query_epsilon = 1.0\nmax_query_epsilon = 2\n")
    small_policy.write_text(text)
    conn = dpsql.connect(small_policy, user="alice")
    try:
        cur = conn.cursor()
        cur.execute("SET dpsql.target_error = 200")
        with pytest.raises(dpsql.ProgrammingError, match="at most epsilon=2") as info:
            cur.execute(TARGETED)
        assert info.value.sqlstate == "22023" and "raise dpsql.target_error" in info.value.hint
        assert conn.session.budget()["queries"] == 0
        cur.execute("RESET dpsql.target_error")
        cur.execute(TARGETED)  # releases the profile
        spent = conn.session.budget()["epsilon"]["spent"]
        # At epsilon 2, a SUM's noise within ±20 needs a clamp near 6 for amounts of mean about 25.
        cur.execute("SET dpsql.target_error = 20")
        with pytest.raises(dpsql.ProgrammingError, match="by the model of this query's profile") as info:
            cur.execute(TARGETED)
        assert info.value.sqlstate == "22023" and "raise dpsql.target_error" in info.value.hint
        assert conn.session.budget()["epsilon"]["spent"] == spent and conn.session.budget()["queries"] == 1
    finally:
        conn.close()


def test_a_later_query_reuses_the_released_profile_and_is_charged_less(small_policy, monkeypatch):
    """A query whose profile's histograms (same analyst, data and rows) were released before
    chooses its limits from them: a kept histogram less precise than ENOUGH fresh ones is
    released again and combined with it (the charge is the query's epsilon, the profile more
    precise), and once every one is precise enough the query is charged for its release only,
    smaller by the profile's share, as the ledger records and EXPLAIN (free) says beforehand.
    With dpsql.cache = off each run profiles (and pays) afresh."""
    monkeypatch.setattr(auto_bounds, "EXTRA", Fraction(0))  # a profile released once per query (no `extra`)
    with _answered(small_policy, TARGETED) as (conn, cur):
        assert cur.dp["bounds"]["profile_reused"] is False
        cur.execute("SET dpsql.cache = on")
        spent, repeats = Fraction(1), 0
        while True:  # the same query at epsilon 1 (another answer each time: ORDER BY changes the text)
            text, info = _explained(conn)
            if info["auto_reused"]:
                break
            assert info["auto_kept"] == (3, 3) and "combined with them" in text  # rows, amount, groups
            repeats += 1
            cur.execute(TARGETED + " ORDER BY kind" + " DESC" * (repeats % 2) + ", 2" * repeats)
            bounds = cur.dp["bounds"]
            assert bounds["profile_reused"] is True and bounds["profile_epsilon"] == float(auto_bounds.SHARE)
            assert cur.dp["cost"]["epsilon"] == 1.0
            assert "combines this query's release" in auto_bounds.told(cur.dp.bounds)
            spent += 1
            assert conn.session.budget()["epsilon"]["spent"] == spent
        # Effective epsilon sqrt(k) times a fresh histogram's after k releases: ENOUGH² of them.
        assert repeats + 1 == auto_bounds.ENOUGH**2
        saved = auto_bounds.SHARE
        assert info["cost"]["epsilon"] == float(1 - saved) and "reused free" in text
        assert conn.session.budget()["epsilon"]["spent"] == spent  # EXPLAIN charged nothing
        cur.execute(TARGETED + " ORDER BY 1")
        bounds = cur.dp["bounds"]
        assert bounds["profile_reused"] is True and bounds["profile_epsilon"] == 0
        assert "reused, free" in auto_bounds.told(cur.dp.bounds)
        assert cur.dp["cost"]["epsilon"] == float(1 - saved)
        assert conn.session.budget()["epsilon"]["spent"] == spent + 1 - saved
        last = conn.session.ledger.history("alice")[-1]
        assert last["cost"].epsilon == 1 - saved and last["cost"].parts == (auto_bounds.rest_part(Fraction(1)),)
        assert last["released"]["bounds"]["profile_reused"] is True
        cur.execute("SET dpsql.cache = off")
        cur.execute("SET dpsql.epsilon = 3")
        cur.execute(TARGETED)
        assert cur.dp["bounds"]["profile_reused"] is False and cur.dp["cost"]["epsilon"] == 3.0
        assert conn.session.budget()["epsilon"]["spent"] == spent + 1 - saved + 3


def test_a_profile_is_reused_per_histogram_over_the_same_rows_only(small_policy, monkeypatch):
    """Histograms are kept per rows (FROM, JOIN, WHERE, group keys) and what they count: another
    aggregate of the same column over the same rows finds them all; another WHERE or other
    group keys find none (a profile of other rows is not one of these)."""
    monkeypatch.setattr(auto_bounds, "EXTRA", Fraction(0))  # a profile released once per query (no `extra`)
    conn = dpsql.connect(small_policy, user="alice")
    try:
        cur = conn.cursor()
        cur.execute("SET dpsql.epsilon = 1")
        cur.execute("SELECT kind, SUM(amount) FROM events GROUP BY kind")
        assert cur.dp["bounds"]["profile_reused"] is False
        sql = "SELECT kind, AVG(amount) FROM events GROUP BY kind"
        assert _explained(conn, sql)[1]["auto_kept"] == (3, 3)
        filtered = "SELECT kind, AVG(amount) FROM events WHERE amount > 0 GROUP BY kind"
        assert _explained(conn, filtered)[1]["auto_kept"] == (0, 3)
        assert _explained(conn, "SELECT AVG(amount) FROM events")[1]["auto_kept"][0] == 0  # no keys: other rows
        session = conn.session
        plan = _plan(session, sql)
        cols, top = auto_bounds.columns(plan), auto_bounds.ceiling(plan)
        keys = session_auto.piece_keys(session, plan, cols, top, True)
        other = _plan(session, filtered)
        assert not set(keys) & set(session_auto.piece_keys(session, other, auto_bounds.columns(other), top, True))
        cur.execute(sql)
        assert cur.dp["bounds"]["profile_reused"] is True and cur.dp["cost"]["epsilon"] == 1.0
        kept = [session._plans.profile(k) for k in keys]
        # Each of the three was released at SHARE / 3 twice: combined at sqrt(2) times that.
        assert all(math.isclose(k.epsilon, math.sqrt(2) * float(auto_bounds.SHARE) / 3) for k in kept)
    finally:
        conn.close()


def test_a_kept_histogram_is_combined_by_inverse_variance_and_its_epsilon_grows():
    """Two releases of one histogram at epsilons e1, e2 combine with weights e1², e2² (the
    inverse of Laplace's variance) into one at sqrt(e1² + e2²); a histogram is released again
    while its kept epsilon is below ENOUGH times a fresh one's, and the new ones share the
    profile's epsilon."""
    a = auto_bounds.combined(None, (1.0, 3.0), 0.1)
    assert a == auto_bounds.Piece((1.0, 3.0), 0.1)
    b = auto_bounds.combined(a, (4.0, 0.0), 0.2)
    assert math.isclose(b.epsilon, math.sqrt(0.05))
    assert all(math.isclose(x, y) for x, y in zip(b.bins, ((0.01 + 0.16) / 0.05, 0.03 / 0.05)))
    alone = float(auto_bounds.SHARE) / 2
    enough = auto_bounds.Piece((0.0,), auto_bounds.ENOUGH * alone)
    short = auto_bounds.Piece((0.0,), auto_bounds.ENOUGH * alone * 0.99)
    assert auto_bounds.fresh([None, enough], Fraction(1)) == (True, False)
    assert auto_bounds.fresh([short, enough], Fraction(1)) == (True, False)
    assert auto_bounds.fresh([enough, enough], Fraction(1)) == (False, False)
    assert auto_bounds.epsilons(Fraction(1), (), 4, True, (True, False)) == (auto_bounds.SHARE,)
    assert auto_bounds.epsilons(Fraction(1), (), 4, True, (False, False)) == ()


def test_a_quantile_under_a_small_total_bound_keeps_every_units_rows(session):
    """A quantile's histogram under a total bound C weighs each of a unit's n > C rows C / n in
    fixed point: floored to whole rows, a unit whose rows fall in several bins added nothing
    (under C = 1 a scalar MEDIAN read only units with all rows in one bin, and answered near
    the clamp's top). Each unit with rows adds about one in all, and the query has one row."""
    plan = _plan(session, "SELECT MEDIAN(amount) FROM events", QueryOptions(max_contributions=1))
    rs = session.bounded_result(plan)
    assert rs.row_count == 1
    (row,) = zip(*rs.columns)
    m = plan.measures[0]
    units = session.engine.execute("SELECT COUNT(DISTINCT pid) FROM events WHERE amount IS NOT NULL").columns[0][0]
    total = sum(int(x or 0) for x in row[1:]) * m.unit_scale
    assert units - m.bins * m.unit_scale <= total <= units


@pytest.mark.parametrize("kind", ["basic", "zcdp", "rdp"])
def test_a_corrected_count_is_split_after_the_profile_only_where_that_costs_nothing(small_policy, kind):
    """A part split after the data costs what the whole did only under a filter that adds up ε
    (basic). Under zCDP (ρ = ε²/2) one part of ε_rest costs more than the three parts of the prior
    split, so there the correction's and the release's parts stay fixed before the profile, and
    the count is charged (in ρ) exactly the sum of its fixed parts."""
    text = small_policy.read_text().replace('filter = "basic"', f'filter = "{kind}"')
    small_policy.write_text(text)
    conn = dpsql.connect(small_policy, user="alice")
    try:
        cur = conn.cursor()
        cur.execute("SET dpsql.cache = off")
        cur.execute("SELECT kind, COUNT(*) FROM events GROUP BY kind")
        assert len(cur.fetchall()) == 3
        cost = conn.session.ledger.history("alice")[0]["cost"]
        parts = cost.parts
        assert sum((p.epsilon for p in parts), Fraction(0)) == 1
        prior = auto_bounds.split(6, 24, 3)
        rest = auto_bounds.release_epsilon(Fraction(1))
        if kind == "basic":
            assert any(p.epsilon == rest for p in parts)  # the one part of correction and release
        else:
            assert not any(p.epsilon == rest for p in parts)
            for share in prior:
                assert any(p.epsilon == share for p in parts)
            fixed = [p for p in parts if p.epsilon in (*prior, rest - sum(prior, Fraction(0)))]
            assert len(fixed) == 3 and sum((p.rho for p in fixed), Fraction(0)) < rest * rest / 2
            fix = cur.dp["bounds"].get("correction")
            assert fix is not None  # fixed parts are spent: the count is corrected
    finally:
        conn.close()


def test_undeclared_keys_choose_a_total_bound_under_partition_selection(small_policy):
    """Grouped by a key without a declared domain (partition selection), the limits are chosen
    too: one charge of the query's epsilon and delta, a total bound C whose units keep at most
    min(C, max_groups) groups by the keyed hash, and the selection counted in the model."""
    q = "SELECT p.city, SUM(e.amount) FROM events e JOIN people p ON e.pid = p.pid GROUP BY p.city"
    conn = dpsql.connect(small_policy, user="alice")
    try:
        cur = conn.cursor()
        for setting in ("dpsql.cache = off", "dpsql.delta = 1e-6"):
            cur.execute(f"SET {setting}")
        cur.execute(q)
        cur.fetchall()
        c = cur.dp["bounds"]["max_contributions"]
        assert cur.dp["cost"] == {"epsilon": 1.0, "delta": 1e-6}
        budget = conn.session.budget()
        assert budget["epsilon"]["spent"] == Fraction(1) and budget["delta"]["spent"] == Fraction(1, 10**6)
        policy_plan = _plan(conn.session, q)
        assert not policy_plan.declared and auto_bounds.eligible(policy_plan, "laplace")
        plan = _plan(conn.session, q, QueryOptions(max_contributions=c))
        assert isinstance(plan.bounding, SelectedTotalCap)
        assert plan.groups_per_unit(None) == max(1, min(c, policy_plan.max_groups))
        cur.execute(f"EXPLAIN {q}")
        text = "\n".join(r[0] for r in cur.fetchall())
        assert "partition selection" in text and "dpsql.bounds = auto" in text
    finally:
        conn.close()


@pytest.mark.parametrize("kind", ["basic", "zcdp"])
def test_a_small_population_is_profiled_again_within_one_exact_charge(small_policy, kind):
    """Under basic filters a plan with value histograms is charged its profile's parts and one part
    for the rest (`auto_bounds.rest_part`), fixed before the data is read; a small population
    (the sample's events: a few noise scales at epsilon 1) spends part of it on its value
    histogram again, chosen after the profile, and the release gets what is left. Under zCDP the
    release's parts stay fixed and nothing is spent again. Either way the query is charged its
    epsilon once, exactly."""
    small_policy.write_text(small_policy.read_text().replace('filter = "basic"', f'filter = "{kind}"'))
    conn = dpsql.connect(small_policy, user="alice")
    try:
        cur = conn.cursor()
        cur.execute("SET dpsql.cache = off")
        assert len(cur.execute("SELECT kind, AVG(amount) FROM events GROUP BY kind").fetchall()) == 3
        (record,) = conn.session.ledger.history("alice")
        parts = record["cost"].parts
        assert sum((p.epsilon for p in parts), Fraction(0)) == 1 and cur.dp["cost"]["epsilon"] == 1.0
        spent = Fraction(cur.dp["bounds"]["profile_epsilon"]).limit_denominator(10**6)
        rest = auto_bounds.rest_part(Fraction(1))
        if kind == "basic":
            assert rest in parts and len(parts) == 4  # three histograms, then the rest as one part
            assert auto_bounds.SHARE < spent <= auto_bounds.SHARE + auto_bounds.EXTRA
        else:
            # three histograms, then the mean's sum and count at half the rest each, fixed before the profile
            assert rest not in parts and len(parts) == 5 and spent == auto_bounds.SHARE
    finally:
        conn.close()


def test_a_profile_is_released_again_only_for_a_small_population_and_within_its_cap():
    """`auto_bounds.extra` (post-processing of the released profile and its public scales): nothing
    at a population of TRUST scales or more; below, each value histogram's second release makes
    the combined scale N / TRUST (N at least FLOOR scales), all of them at most EXTRA of epsilon."""
    cols = (auto_bounds.Column(0, "x", 0.0, 100.0, 0.0, 10), auto_bounds.Column(1, "y", 0.0, 100.0, 0.0, 10))
    top, epsilon = 6, Fraction(1, 10)
    b = 3 / float(epsilon * auto_bounds.SHARE)  # three histograms: rows and two columns' values

    def profile(units: float) -> auto_bounds.Profile:
        rows = (units,) + (0.0,) * len(auto_bounds.steps(top))
        values = tuple((units,) + (0.0,) * (auto_bounds.VALUE_BINS - 1) for _ in cols)
        return auto_bounds.Profile(auto_bounds.steps(top), rows, values, (), (b, b, b))

    assert auto_bounds.extra(profile(auto_bounds.TRUST * b), cols, epsilon) == ()
    assert auto_bounds.extra(profile(10**6), cols, epsilon) == ()
    again = auto_bounds.extra(profile(20 * b), cols, epsilon)
    assert [i for i, _ in again] == [1, 2]  # the value histograms, not the row counts
    for _, e in again:
        assert math.isclose(math.sqrt(float(e) ** 2 + 1 / b**2), auto_bounds.TRUST / (20 * b), rel_tol=1e-3)
    for units in (0.0, -500.0, 2 * b):  # a tiny (or noisy negative) population: the cap
        again = auto_bounds.extra(profile(units), cols, epsilon)
        assert sum((e for _, e in again), Fraction(0)) == epsilon * auto_bounds.EXTRA
    unknown = replace(profile(b), noise=())
    assert auto_bounds.extra(unknown, cols, epsilon) == ()
    assert auto_bounds.extra(profile(b), (), epsilon) == ()

"""A spread's count where a unit's shares are scaled (guarantee/measures.FINE_COUNT_BITS): as fine
as its squares' fixed point, so that the variance read from the pre-noise count, sum and squares
is the weighted rows' own; one unit still moves each measure by at most the L1 charged; the guard
checks a spread's squares against its clamp; an auto-bounded spread is one exact charge."""

from __future__ import annotations

import contextlib
from dataclasses import replace
from fractions import Fraction

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dpsql
from dpsql import auto_bounds
from dpsql.config import load_policy
from dpsql.guarantee import guard
from dpsql.guarantee.measures import COUNT_BITS, FINE_COUNT_BITS
from dpsql.prepare import plan_query
from dpsql.session import Session
from dpsql.session import auto as session_auto
from dpsql.sql.classify import classify
from dpsql.sql.options import QueryOptions

from .conftest import make_db
from .test_sensitivity import _neighbours, neighbouring_sessions, release_moves_within_l1

SPREADS = ("var_pop", "var_samp", "stddev_pop", "stddev_samp")
QUERIES = [
    "SELECT kind, STDDEV(amount) FROM events GROUP BY kind",
    "SELECT kind, place, VARIANCE(amount) FROM events GROUP BY kind, place",
    "SELECT kind, STDDEV_SAMP(amount) FROM events WHERE amount < 20 AND 5 <= amount GROUP BY kind",
    "SELECT kind, AVG(amount), STDDEV_POP(amount), COUNT(amount) FROM events GROUP BY kind",
    "SELECT VAR_POP(amount) FROM events",
]
Q = QUERIES[0]


def _plan(session: Session, sql: str, options: QueryOptions | None = None):
    return plan_query(classify(sql).tree, session.policy, session.engine.schema(), "laplace", options)


def _spread(plan):
    return next(e for e in plan.estimates if e.func in SPREADS)


def test_a_spreads_count_is_fine_where_shares_are_scaled(session):
    """Over more groups than max_groups (kind: 3 against 2) the spread's count has FINE_COUNT_BITS,
    apart from COUNT(amount)'s and the mean's, which keep COUNT_BITS; without scaled shares
    (no groups) it is whole rows, as before."""
    for options in (None, QueryOptions(max_contributions=1)):
        plan = _plan(session, QUERIES[3], options)
        spread, avg = _spread(plan), next(e for e in plan.estimates if e.func == "avg")
        count = next(e for e in plan.estimates if e.func == "count")
        assert plan.measures[spread.count].bits == FINE_COUNT_BITS
        assert plan.measures[avg.count].bits == plan.measures[count.count].bits == COUNT_BITS
        assert avg.total == spread.total  # the centred sum is still shared
    for options in (None, QueryOptions(max_contributions=1)):
        plan = _plan(session, "SELECT VAR_POP(amount) FROM events", options)
        assert plan.measures[_spread(plan).count].bits == 0


@pytest.mark.slow
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(**_neighbours, total=st.sampled_from([None, 1, 2, 5]), halvings=st.integers(0, 15))
def test_one_unit_moves_a_spreads_measures_by_at_most_their_sensitivity(units, target, rows, drop_row, total, halvings):
    """The policy's limits or any total bound, any clamp the choice can make: the fine count, the
    sum and the squares move by at most the L1 charged for each."""
    with neighbouring_sessions(units, target, rows) as (a, b):
        for q in QUERIES:
            cols = auto_bounds.columns(_plan(a, q))
            clips = tuple((c.expr, c.lower, c.edges[-1 - halvings]) for c in cols)
            plan = _plan(a, q, QueryOptions(max_contributions=total, clips=clips))
            release_moves_within_l1(a, b, plan, q)


@pytest.mark.parametrize("total", [1, 3])
@pytest.mark.parametrize("where", ["", "WHERE amount >= 0"])
def test_a_spread_under_a_total_bound_is_unbiased_before_the_noise(tmp_path, small_policy, total, where):
    """Units of 7 and 13 rows over three kinds under a total bound of 1 or 3 rows, bounded per
    query (with a WHERE) or from a weighted copy (without): the pre-noise count, sum and squares
    give the variance of the rows weighted min(1, C / n) each, to within 0.2 % (bounded per query
    with the count at COUNT_BITS, 1/13 read 78/1024, and the squares' centring at h^2 / 2 = 312.5
    moved a variance of 2 to 0.83; a weighted copy's weights are COUNT_BITS for every measure)."""
    db = tmp_path / "spread.duckdb"
    events = []
    for pid in range(60):
        n = 7 if pid % 2 else 13
        events += [(pid, "abc"[(pid + i) % 3], float(1 + (pid * 7 + i * 3) % 5), "north") for i in range(n)]
    make_db(db, [], events)
    path = tmp_path / "spread.toml"
    path.write_text(small_policy.read_text().replace('database = "db.duckdb"', f'database = "{db}"'))
    s = Session(load_policy(path), "alice")
    try:
        plan = _plan(s, Q.replace(" GROUP", f" {where} GROUP"), QueryOptions(max_contributions=total))
        assert plan.weightable() == (not where)  # a weighted copy, or bounded per query
        est = _spread(plan)
        got = {r[0]: r for r in zip(*s.bounded_result(plan).columns)}
        cm, tm, qm = (plan.measures[i] for i in (est.count, est.total, est.squares))
        with contextlib.closing(duckdb.connect(str(db), read_only=True)) as con:
            exact = con.execute(
                f"WITH w AS (SELECT kind, amount, LEAST(1.0, {total} / COUNT(*) OVER (PARTITION BY pid)) AS w "
                "FROM events) SELECT kind, SUM(w * amount * amount) / SUM(w) - POWER(SUM(w * amount) / SUM(w), 2) "
                "FROM w GROUP BY kind"
            ).fetchall()
        for kind, want in exact:
            r = got[kind]
            n = r[2 + est.count] * cm.unit_scale  # after the key and the units column
            s1 = r[2 + est.total] * tm.unit_scale
            s2 = r[2 + est.squares] * qm.unit_scale + qm.centre * n  # the family's own reading
            centred = s2 / n - (s1 / n) ** 2
            assert centred == pytest.approx(float(want), rel=2e-3)
    finally:
        s.close()


def test_the_guard_checks_a_spreads_squares_against_its_clamp(session):
    """A spread's sum centred within its clamp, its squares within the square of the clamp's
    reach from that centre, the clamp within the column's bounds: anything else is refused."""
    plan = _plan(session, Q, QueryOptions(max_contributions=1, clips=(("t0.amount", 0.0, 20.0),)))
    guard._spread_squares(plan)
    est = _spread(plan)
    for j, changed in (
        (est.squares, {"upper": 11.0**2}),
        (est.squares, {"lower": -1.0}),
        (est.total, {"lower": -10.0}),
        (est.total, {"upper": 60.0}),
        (est.total, {"centre": 25.0}),
    ):
        measures = list(plan.measures)
        measures[j] = replace(measures[j], **changed)
        with pytest.raises(guard.ReleaseRefused):
            guard._spread_squares(replace(plan, measures=tuple(measures)))


def test_an_auto_bounded_spread_is_one_exact_charge(small_policy):
    """Profile and release, charged once at the query's epsilon: under the basic filter the rest as
    one part (auto_bounds.lumped), split after the profile into the release's three equal parts
    (and what a small population's profile spends again, auto_bounds.extra)."""
    with contextlib.closing(dpsql.connect(small_policy, user="alice")) as conn:
        cur = conn.cursor()
        cur.execute("SET dpsql.cache = off")
        cur.execute("SET dpsql.bounds = auto")
        assert len(cur.execute(Q).fetchall()) == 3
        assert cur.dp["bounds"]["max_contributions"] is not None
        history = conn.session.ledger.history("alice")
    assert len(history) == 1
    parts = history[0]["cost"].parts
    assert sum((p.epsilon for p in parts), Fraction(0)) == 1
    rest = auto_bounds.release_epsilon(Fraction(1))
    assert auto_bounds.rest_part(Fraction(1)) in parts
    with contextlib.closing(Session(load_policy(small_policy), "alice")) as session:
        plan = plan_query(classify(Q).tree, session.policy, session.engine.schema(), "laplace", None)
        release = session_auto.calibrated_at(session, plan, rest, QueryOptions()).cost.parts
    assert sorted(p.epsilon for p in release) == [rest / 3] * 3


def test_explain_says_a_spreads_count_is_fine(conn):
    cur = conn.cursor()
    cur.execute("EXPLAIN " + Q)
    text = "\n".join(r[0] for r in cur.fetchall())
    assert f"STDDEV(amount): its count is kept to 2^-{FINE_COUNT_BITS} of a row" in text
    cur.execute("EXPLAIN SELECT VAR_POP(amount) FROM events")
    assert "its count is kept" not in "\n".join(r[0] for r in cur.fetchall())

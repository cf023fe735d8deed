"""dpsql/postprocess.py: the outer expressions over a query's noisy, released values."""

from __future__ import annotations

import pytest

from dpsql.errors import OperationalError


def test_a_zero_noisy_divisor_gives_null_not_an_error(session):
    """A noisy divisor of 0 (a small group's noisy COUNT) is NULL, as the rewrite's expressions
    that cannot fail give, and the answer arrives for what was charged. Here the divisor is 0
    whatever the noise, which the describe before the charge (over NULLs) cannot see."""
    before = session.budget()["queries"]
    result = session.execute("SELECT COUNT(*) / 0 AS a, COUNT(*) / (COUNT(*) - COUNT(*)) AS b FROM people")
    assert result.rows == [(None, None)]
    assert session.budget()["queries"] == before + 1


def test_an_outer_expression_that_fails_on_the_values_says_the_cost_stays(session):
    """An outer expression that fails only on values (a BIGINT overflow, which the describe over
    NULLs before the charge cannot see) fails after the noise was drawn: SQLSTATE 22000, charged,
    and the message says so and how to write it instead. It fails for every noisy count outside
    [-1, 1]; the table has 200 people and the noise scale is about 1, so a pass is below 1e-80."""
    before = session.budget()["queries"]
    with pytest.raises(OperationalError) as info:
        session.execute("SELECT COUNT(*) * 9223372036854775807 AS a FROM people")
    assert info.value.sqlstate == "22000"
    assert "stays charged" in str(info.value) and "CAST to a wider type" in str(info.value)
    assert session.budget()["queries"] == before + 1


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT sex, COUNT(*) AS n, AVG(age) AS a FROM people GROUP BY sex",  # only picks columns
        "SELECT sex, COUNT(*) + 1 AS n, DP_INTERVAL_LOW(COUNT(*)) AS lo FROM people GROUP BY sex ORDER BY sex DESC",
    ],
)
def test_a_plans_outer_part_is_read_once_and_gives_what_a_fresh_read_gives(session, sql):
    """run_plan keeps each plan's outline (by its own tree's identity, sql/frozen.stored): its
    output on the same noisy table is run's over a fresh copy of the outer part, every time,
    and a second plan gets its own."""
    from dpsql.guarantee.release import NoisyTable
    from dpsql.sql.options import QueryOptions

    session.execute(sql)
    stmt = session.route(sql).checked()
    plan, _ = session._plans.plan(session._plan_key(stmt.tree, stmt.options or QueryOptions(), sql))
    intervals = [[(1.0, 5.0), (2.0, 6.0)]] * 2
    noisy = NoisyTable([["F", "M"]], ["VARCHAR"], [[3, 4], [41.5, 39.0]], intervals, ["BIGINT", "DOUBLE"])
    fresh = session._post.run(plan.post, noisy)
    for _ in range(3):
        kept = session._post.run_plan(plan, noisy)
        assert (kept.names, kept.types, kept.rows, kept.ci) == (fresh.names, fresh.types, fresh.rows, fresh.ci)
    other = "SELECT sex, COUNT(*) AS c FROM people GROUP BY sex"
    session.execute(other)
    stmt = session.route(other).checked()
    plan2, _ = session._plans.plan(session._plan_key(stmt.tree, stmt.options or QueryOptions(), other))
    one = NoisyTable([["F", "M"]], ["VARCHAR"], [[3, 4]], [[(1.0, 5.0), (2.0, 6.0)]], ["BIGINT"])
    assert session._post.run_plan(plan2, one).names == ["sex", "c"]
    assert session._post.run_plan(plan, noisy).names == fresh.names

"""Window functions in a query over private rows: refused, free, with the outer query that works."""

from __future__ import annotations

import pytest

from dpsql.errors import ProgrammingError


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        (
            "SELECT sex, COUNT(*), RANK() OVER (ORDER BY COUNT(*) DESC) FROM people GROUP BY sex",
            "window functions over this query's aggregates go in an outer query over its answer: "
            "RANK() OVER (ORDER BY COUNT(*) DESC)",
        ),
        (
            "SELECT sex, AVG(age) OVER (PARTITION BY sex) FROM people",
            "window functions over private rows are not allowed: AVG(age) OVER (PARTITION BY sex)",
        ),
    ],
)
def test_a_window_function_is_refused_free_naming_what_to_write(session, sql, message):
    before = session.execute("SHOW dpsql.budget").rows
    with pytest.raises(ProgrammingError) as info:
        session.execute(sql)
    assert info.value.sqlstate == "42501" and info.value.message == message
    assert "FROM (SELECT k, COUNT(*) AS n FROM t GROUP BY k) r" in info.value.hint
    assert session.execute("SHOW dpsql.budget").rows == before


def test_the_hints_outer_query_is_answered(session):
    result = session.execute(
        "SELECT sex, n, RANK() OVER (ORDER BY n DESC) FROM (SELECT sex, COUNT(*) AS n FROM people GROUP BY sex) r"
    )
    assert len(result.rows) == 2 and result.dp.cost.epsilon > 0

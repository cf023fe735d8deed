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
    """An outer expression that fails only on values (1000 into a TINYINT) fails after the noise
    was drawn: SQLSTATE 22000, charged, and the message says so and how to write it instead."""
    before = session.budget()["queries"]
    with pytest.raises(OperationalError) as info:
        session.execute("SELECT CAST(COUNT(*) * 0 + 1000 AS TINYINT) AS a FROM people")
    assert info.value.sqlstate == "22000"
    assert "stays charged" in str(info.value) and "CAST to a wider type" in str(info.value)
    assert session.budget()["queries"] == before + 1

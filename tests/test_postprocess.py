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

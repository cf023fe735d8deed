"""Output names as PostgreSQL gives them, for the columns an analyst reads back."""

from __future__ import annotations

import pytest
import sqlglot

from dpsql.sql.scope import output_name


@pytest.mark.parametrize(
    ("item", "name"),
    [
        ("RANK() OVER (ORDER BY n DESC)", "rank"),
        ("ROW_NUMBER() OVER ()", "row_number"),
        ("SUM(n) OVER ()", "sum"),
        ("COUNT(*) OVER ()", "count"),
        ("RANK() OVER (ORDER BY n) AS r", "r"),
    ],
)
def test_a_window_function_is_named_after_its_function(item, name):
    assert output_name(sqlglot.parse_one(f"SELECT {item}", read="postgres").expressions[0]) == name


def test_a_ranking_over_released_counts_is_named_rank(session):
    result = session.execute(
        "SELECT sex, n, RANK() OVER (ORDER BY n DESC) FROM (SELECT sex, COUNT(*) AS n FROM people GROUP BY sex) r"
    )
    assert result.names == ["sex", "n", "rank"]
    assert sorted(row[2] for row in result.rows) == [1, 2] or [row[2] for row in result.rows] == [1, 1]

"""A column's bounds narrowed by the query's own WHERE (dpsql/sql/ranges.py): pure, from the
query's text and the policy only. Its soundness on neighbouring databases is checked with the
other queries in tests/test_sensitivity.py (QUERIES has filtered ones)."""

from __future__ import annotations

import pytest
import sqlglot
from sqlglot import exp

from dpsql.sql.bounds import Interval
from dpsql.sql.ranges import narrowed

POLICY = Interval(0.0, 10000.0)


def _where(sql: str) -> list[exp.Expression]:
    return [sqlglot.parse_one(f"SELECT 1 FROM t WHERE {sql}").args["where"].this]


@pytest.mark.parametrize(
    "where,expected",
    [
        ("cost < 500", (0, 500)),
        ("cost <= 500 AND cost > 100", (100, 500)),
        ("500 > cost", (0, 500)),
        ("100 <= cost", (100, 10000)),
        ("cost BETWEEN 100 AND 2 * 300", (100, 600)),
        ("(cost > -5 AND (cost < 700)) AND ward = 'A'", (0, 700)),
        ("cost >= 20000", (0, 10000)),  # nothing left: the policy's range stays
        ("cost = 5", (0, 10000)),  # a single value: the policy's range stays
        ("cost < 500 OR cost > 900", (0, 10000)),  # a disjunction implies no range
        ("other < 500", (0, 10000)),  # another column
        ("cost < other", (0, 10000)),  # not a constant
        ("NOT cost < 500", (0, 10000)),
        ("cost < '500'", (0, 10000)),  # a string: no number is read from it
    ],
)
def test_a_where_narrows_only_what_it_implies(where, expected):
    assert narrowed(exp.column("cost"), POLICY, _where(where)) == Interval(*map(float, expected))


def test_an_unbounded_column_stays_unbounded():
    unbounded = Interval(float("-inf"), float("inf"))
    assert narrowed(exp.column("cost"), unbounded, _where("cost < 5")) == unbounded

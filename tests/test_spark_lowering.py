"""Spark's lowering of the bounded query (engines/spark.py), without a Spark session: with ANSI
mode off TRY is the expression itself, and dropping it must keep what TRY grouped."""

from __future__ import annotations

import pytest
import sqlglot

from dpsql.engines.spark import _lower


@pytest.mark.parametrize(
    "where,expected",
    [
        # A weighted copy's light and heavy parts AND the analyst's condition with a row-count test: without
        # the parentheses a row matching the first disjunct fell in both parts and was counted twice.
        ("TRY(d LIKE 'c%' OR d ILIKE 'SKIN') AND n > 40", "(d LIKE 'c%' OR d ILIKE 'SKIN') AND n > 40"),
        ("TRY(a = 1 OR b = 2) AND NOT n <= 40", "(a = 1 OR b = 2) AND NOT n <= 40"),
        ("NOT TRY(a = 1 OR b = 2)", "NOT (a = 1 OR b = 2)"),
        ("TRY(x + 1) * 2 > 3", "(x + 1) * 2 > 3"),
        ("TRY(d IN ('a', 'b')) AND n > 40", "d IN ('a', 'b') AND n > 40"),
    ],
)
def test_try_keeps_its_grouping(where, expected):
    tree = sqlglot.parse_one(f"SELECT 1 FROM t WHERE {where}", read="duckdb")
    assert tree.transform(_lower).sql(dialect="spark") == f"SELECT 1 FROM t WHERE {expected}"

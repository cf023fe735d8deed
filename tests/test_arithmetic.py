"""Arithmetic means what it means in PostgreSQL, whose SQL analysts write: `/` between integers
truncates (DuckDB's `/` divides as doubles), and arithmetic that PostgreSQL refuses with an
error (division by zero, the square root or logarithm of a negative number, an overflowing
exp or power) is NULL, as dpsql documents, never NaN or an infinity (NaN compares greater
than every number, so `WHERE sqrt(x) > 1` counted every row). Checked on the exact values a
release noises, against plain DuckDB computing the same thing the PostgreSQL way."""

from __future__ import annotations

import duckdb
import pytest
import sqlglot

from dpsql.sql.classify import classify
from dpsql.sql.division import integer_division

TYPES = {"pid": "INTEGER", "n": "BIGINT", "age": "DOUBLE", "price": "DECIMAL(10,2)", "name": "VARCHAR"}


def _divided(text: str) -> str:
    tree = sqlglot.parse_one(text, read="postgres")
    return integer_division(tree, lambda c: TYPES.get(c.name)).sql(dialect="duckdb")


@pytest.mark.parametrize(
    "text, expected",
    [
        ("pid / 10", "pid // 10"),
        ("(pid + 1) / 2 / 3", "(pid + 1) // 2 // 3"),
        ("n * 2 / pid", "n * 2 // pid"),
        ("CAST(age AS INT) / 7", "CAST(age AS INT) // 7"),
        ("ABS(pid) / -2", "ABS(pid) // -2"),
        ("CASE WHEN pid > 3 THEN pid ELSE NULL END / 2", "CASE WHEN pid > 3 THEN pid ELSE NULL END // 2"),
        ("pid / 10.0", "pid / 10.0"),
        ("age / 10", "age / 10"),
        ("price / 2", "price / 2"),
        ("pid / age", "pid / age"),
        ("pid / 99999999999999999999", "pid / 99999999999999999999"),  # a NUMERIC literal in PostgreSQL
        ("1e3 / pid", "1e3 / pid"),
    ],
)
def test_integer_division_follows_postgresql_types(text, expected):
    assert _divided(text) == expected


def _pre_noise(session, sql: str) -> dict[tuple, tuple]:
    stmt = classify(sql)
    plan, _ = session._prepare(stmt.tree, stmt.options)
    rs = session.bounded_result(plan)
    n = len(plan.keys)
    return {tuple(r[:n]): tuple(r[n:]) for r in zip(*rs.columns)}


def _plain(small_policy, sql: str) -> list[tuple]:
    con = duckdb.connect(str(small_policy.parent / "db.duckdb"), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_integer_keys_and_filters_divide_as_postgresql(session, small_policy):
    """`pid / 40` buckets are the integers 0..5 with PostgreSQL's counts (one row per person,
    so the bounded count is exact), and `WHERE pid / 40 = 2` counts that bucket's rows."""
    got = _pre_noise(session, "SELECT pid / 40 AS b, COUNT(*) FROM people GROUP BY 1")
    plain = dict(_plain(small_policy, "SELECT pid // 40, COUNT(*) FROM people GROUP BY 1"))
    assert {k[0]: v[-1] for k, v in got.items()} == plain
    assert all(isinstance(k[0], int) for k in got)
    ((_, filtered),) = _pre_noise(session, "SELECT COUNT(*) FROM people WHERE pid / 40 = 2").items()
    assert filtered[-1] == plain[2] == 40


@pytest.mark.parametrize(
    "condition, rows",
    [
        ("sqrt(age - 200) > 1", 0),
        ("sqrt(age - 200) IS NULL", 200),
        ("ln(age - 200) > 1", 0),
        ("log(age - 200) > 1", 0),
        ("age / 0.0 > 1", 0),
        ("age / 0 IS NULL", 200),
        ("pid / 0 IS NULL", 200),
        ("pid % 0 IS NULL", 200),
        ("exp(age * 1000) > 1", 0),
        ("power(age - 200, 0.5) IS NULL", 200),
        ("sqrt(sqrt(sqrt(age))) > 1", 200),  # every age is at least 20: nested guards keep real values
        ("age / (pid - pid) IS NULL", 200),
    ],
)
def test_failing_arithmetic_is_null_not_nan_or_infinity(session, condition, rows):
    ((_, values),) = _pre_noise(session, f"SELECT COUNT(*) FROM people WHERE {condition}").items()
    assert values[-1] == rows


def test_nested_guards_do_not_multiply_the_expression(session):
    """Each guard refers to its value once: 30 nested square roots make a bounded query of
    linear, not exponential, size."""
    nested = "age"
    for _ in range(30):
        nested = f"sqrt({nested})"
    stmt = classify(f"SELECT COUNT(*) FROM people WHERE {nested} > 1")
    plan, _ = session._prepare(stmt.tree, stmt.options)
    sql = session.bounded_sql(plan)
    roots = sql.upper().count("SQRT(")
    assert roots in (30, 60)  # once per copy of the WHERE clause (a split weighted copy has two)
    assert len(sql) < 20_000


def test_arithmetic_on_released_integers_divides_as_postgresql(conn):
    """The outer query's `/` over released integers (COUNT, a SUM of integers, an integer key)
    truncates too, as it would over PostgreSQL's bigint results; AVG stays a double."""
    cur = conn.cursor()
    cur.execute("SELECT COUNT(*) / 1000 AS thousands, COUNT(*) / 2 AS half, AVG(age) / 2 AS a FROM people")
    ((thousands, half, a),) = cur.fetchall()
    assert thousands == 0 and isinstance(half, int) and isinstance(a, float)
    assert [d[1] for d in cur.description] == ["BIGINT", "BIGINT", "DOUBLE"]
    cur.execute("SELECT pid / 100 AS b, COUNT(*) FROM people GROUP BY 1 HAVING COUNT(*) / 1000 = 0 ORDER BY b")
    assert [r[0] for r in cur.fetchall()][:2] == [0, 1]  # (2: one person, below the selection threshold)


def test_a_measure_of_failing_arithmetic_sums_nothing(session):
    """POWER(-age, 0.5) is NaN in DuckDB; LEAST/GREATEST clamped it to 1 for every row, so the
    SUM counted 200. It is NULL as documented, and a NULL adds nothing to a sum."""
    ((_, values),) = _pre_noise(session, "SELECT SUM(LEAST(GREATEST(POWER(-age, 0.5), 0), 1)) FROM people").items()
    assert values[-1] == 0
    ((_, values),) = _pre_noise(session, "SELECT COUNT(sqrt(age - 200)) FROM people").items()
    assert values[-1] == 0


def test_public_queries_divide_as_postgresql(conn):
    """A query over public tables runs as written, with PostgreSQL's `/` too."""
    cur = conn.cursor()
    cur.execute("SELECT 5 / 2, 5 / 2.0")
    assert cur.fetchall() == [(2, 2.5)]
    cur.execute("SELECT COUNT(*) / 2 FROM places")
    assert cur.fetchall() == [(1,)]  # three places

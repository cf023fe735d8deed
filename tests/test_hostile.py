"""Hostile input gets a ProgrammingError with a SQLSTATE and a helpful message, and costs nothing."""

from __future__ import annotations

import pytest

import dpsql
from dpsql.config import load_policy
from dpsql.engines.duckdb import DuckDBEngine

HOSTILE = [
    ("SELECT * FROM people", "42501", "rows of a private table"),
    ("SELECT age FROM people", "42501", "rows of a private table"),
    ("SELECT pid, age FROM people WHERE pid = 7", "42501", "rows of a private table"),
    ("SELECT city FROM people GROUP BY city", "42501", "at least one aggregate"),  # undeclared keys
    ("SELECT * FROM read_csv('/etc/passwd')", "42501", "table functions"),
    ("SELECT COUNT(*) FROM read_csv('/etc/passwd')", "42501", "table functions"),
    ("SELECT COUNT(*) FROM read_parquet('/tmp/x.parquet')", "42501", "table functions"),
    (
        "SELECT COUNT(*) FROM people WHERE sex IN (SELECT column0 FROM read_csv('/etc/passwd'))",
        "42501",
        "table functions",
    ),
    ("COPY people TO '/tmp/out.csv'", "42501", "COPY statements are not allowed"),
    ("ATTACH '/tmp/other.duckdb' AS o", "42501", "ATTACH statements are not allowed"),
    ("PRAGMA database_list", "42501", "PRAGMA statements are not allowed"),
    ("INSTALL httpfs", "42501", "INSTALL statements are not allowed"),
    ("LOAD httpfs", "42501", "LOAD statements are not allowed"),
    ("SET enable_external_access = true", "42501", "cannot be changed"),
    ("SET threads = 1", "42501", "cannot be changed"),
    ("SELECT COUNT(*) FROM people; SELECT * FROM people", "42501", "multiple statements"),
    ("SELECT COUNT(*) FROM people; DROP TABLE people", "42501", "multiple statements"),
    ("SELECT COUNT(*), ROW_NUMBER() OVER () FROM people", "42501", "window functions"),
    ("SELECT SUM(age) OVER (PARTITION BY sex) FROM people", "42501", "window functions"),
    ("SELECT MIN(city) FROM people", "42P22", "MIN is answered as a DP quantile"),
    ("SELECT MAX(e.amount / p.age) FROM events e JOIN people p ON e.pid = p.pid", "42P22", "cannot derive bounds"),
    (
        "SELECT PERCENTILE_CONT(age / 100) WITHIN GROUP (ORDER BY age) FROM people",
        "22003",
        "number literal between 0 and 1",
    ),
    ("SELECT QUANTILE(age, 2) FROM people", "22003", "between 0 and 1"),
    ("SELECT MEDIAN(age) FROM people TABLESAMPLE BERNOULLI (10)", "0A000", ""),
    ("SELECT COUNT(*) FROM people WHERE random() < 0.5", "42501", "RANDOM() is not allowed"),
    # the names the analyst wrote, not sqlglot's (STR_TO_DATE, TIME_TO_STR, PAD)
    (
        "SELECT COUNT(*) FROM people WHERE TO_DATE(city, 'YYYY-MM-DD') > DATE '2023-01-01'",
        "42501",
        "TO_DATE() is allowed over public tables and constants",
    ),  # it fails on some values: not over private ones
    ("SELECT COUNT(*) FROM people WHERE to_char(age, '999') = '1'", "0A000", "TO_CHAR of a number is not supported"),
    ("SELECT COUNT(*) FROM people WHERE lpad(city, 3, 'x') = 'a'", "42501", "LPAD() is allowed over public tables"),
    ("SELECT COUNT(*) FROM people WHERE city ~ 'a'", "42501", "use LIKE"),
    ("SELECT COUNT(*) FROM people WHERE date_trunc(city, CURRENT_DATE) IS NOT NULL", "22023", "unit must be a literal"),
    ("SELECT date_trunc('fortnight', CURRENT_DATE) AS k, COUNT(*) FROM people GROUP BY 1", "22023", "'month'"),
    ("SELECT COUNT(*) FROM people WHERE EXISTS (SELECT 1 FROM places)", "0A000", "EXISTS (subquery) is not supported"),
    ("SELECT COUNT(*) FROM people WHERE getenv('HOME') = 'x'", "42501", "is not allowed"),
    ("SELECT SUM(city) FROM people", "42P22", "no declared bounds"),
    ("SELECT SUM(pid) FROM people", "42P22", "no declared bounds"),
    ("SELECT AVG(age / (age - 20)) FROM people", "42P22", "cannot derive bounds"),
    ("SELECT COUNT(*) FROM nosuchtable", "42P01", "does not exist"),
    ("SELECT COUNT(*) FROM main.people p JOIN information_schema.tables t ON TRUE", "42P01", "does not exist"),
    ("SELECT COUNT(*) FROM duckdb_settings()", "42501", "table functions"),
    ("SELECT COUNT(nosuchcolumn) FROM people", "42703", "does not exist"),
    ("SELEC COUNT(*) FROM people", "42501", "SELEC statements are not allowed"),
    ("SELECT COUNT(* FROM people", "42601", "syntax error"),
    ("SELECT COUNT(*) FROM people p JOIN events e ON p.age = e.amount", "42501", "joined on their privacy unit"),
    ("SELECT COUNT(*) FROM people p, events e", "42501", "joined on their privacy unit"),
    ("SELECT COUNT(*) FROM people p RIGHT JOIN events e ON p.pid = e.pid", "0A000", "RIGHT JOIN"),
    ("SELECT COUNT(*) FROM (SELECT * FROM people LIMIT 5) s", "0A000", "LIMIT in a subquery"),
    ("SELECT DISTINCT city FROM people", "0A000", "DISTINCT"),  # declared keys alone are the public domain
    ("SELECT COUNT(DISTINCT city) FROM people", "0A000", "the values of city are not declared"),
    ("SELECT city, COUNT(*) FROM people GROUP BY ROLLUP (city)", "0A000", "ROLLUP"),
    ("SELECT COUNT(*) FROM people UNION SELECT COUNT(*) FROM events", "0A000", "UNION"),
    ("SELECT COUNT(*) FROM people WHERE age > (SELECT MAX(age) FROM people)", "0A000", "private table"),
    ("WITH RECURSIVE r AS (SELECT 1) SELECT COUNT(*) FROM people", "0A000", "RECURSIVE"),
    ("SELECT COUNT(*) FROM people TABLESAMPLE BERNOULLI (10) REPEATABLE (3)", "42501", "REPEATABLE"),
    ("SELECT COUNT(*) FROM rows TABLESAMPLE BERNOULLI (10)", "0A000", "privacy unit column"),
    ("SELECT sex, age, COUNT(*) FROM people GROUP BY sex", "42803", "must appear in the GROUP BY"),
    ("SELECT COUNT(*) FROM people WHERE COUNT(*) > 1", "42803", "not allowed in WHERE"),
    (  # the same refusal in a per-unit subquery (scope.filtered)
        "SELECT AVG(n) FROM (SELECT pid, COUNT(*) AS n FROM events WHERE SUM(amount) > 1 GROUP BY pid) s",
        "42803",
        "not allowed in WHERE",
    ),
    ("DELETE FROM people", "42501", "DELETE statements are not allowed"),
    ("CREATE TABLE x AS SELECT * FROM people", "42501", "CREATE statements are not allowed"),
    ("EXPLAIN ANALYZE SELECT COUNT(*) FROM people", "0A000", "EXPLAIN ANALYZE"),
    ("CALL pragma_version()", "42501", "CALL statements are not allowed"),
    ("", "42601", "empty query"),
    # a chain of ORs nests as deep as it is long: refused by its depth, not by a RecursionError
    (
        "SELECT COUNT(*) FROM people WHERE " + " OR ".join(f"age = {i}" for i in range(2400)),
        "54001",
        "nested more than 256 deep",
    ),
    (
        "SELECT name FROM places ORDER BY (SELECT COUNT(*) FROM events WHERE events.place = places.name)",
        "0A000",
        "only in the FROM clause",
    ),
    (
        "SELECT name, (SELECT SUM(amount) FROM events WHERE place = name) FROM places",
        "0A000",
        "only in the FROM clause",
    ),
    ("SET SESSION AUTHORIZATION bob", "42501", "stays the analyst who logged in"),
    ("SET ROLE bob", "42501", "stays the analyst who logged in"),
    ("SELECT generate_series(1, 3)", "42501", "function GENERATE_SERIES() is not allowed"),  # not sqlglot's name
    ("SELECT MIN(city) FROM people GROUP BY sex", "42P22", "people.city is text"),
]


@pytest.mark.parametrize("sql,sqlstate,fragment", HOSTILE)
def test_hostile_input_is_refused_and_free(conn, sql, sqlstate, fragment):
    cur = conn.cursor()
    before = conn.session.budget()
    with pytest.raises(dpsql.ProgrammingError) as info:
        cur.execute(sql)
    err = info.value
    assert err.sqlstate == sqlstate, str(err)
    assert fragment.lower() in str(err).lower()
    assert isinstance(err, dpsql.DatabaseError)
    assert "Traceback" not in str(err)
    after = conn.session.budget()
    assert after == before  # nothing charged
    assert after["queries"] == 0


def test_unbounded_sum_says_which_bound_to_declare(conn):
    with pytest.raises(dpsql.ProgrammingError) as info:
        conn.cursor().execute("SELECT SUM(e.amount * p.pid) FROM events e JOIN people p ON e.pid = p.pid")
    text = str(info.value)
    assert "people.pid" in text and "lower" in text and "LEAST(GREATEST(" in text


def test_engine_connection_is_locked(small_policy):
    engine = DuckDBEngine(load_policy(small_policy))
    for sql in [
        "SELECT * FROM read_csv('/etc/passwd')",
        "SET enable_external_access = true",
        "ATTACH '/tmp/x.duckdb' AS x",
        "INSTALL httpfs",
        "LOAD httpfs",
        "SET lock_configuration = false",
    ]:
        with pytest.raises(dpsql.OperationalError) as info:
            engine.execute(sql)
        assert "root:" not in str(info.value)  # the engine's message never travels upward
    assert engine.execute("SELECT COUNT(*) FROM people").columns[0][0] == 200
    engine.close()


def test_engine_errors_never_quote_data(small_policy):
    engine = DuckDBEngine(load_policy(small_policy))
    with pytest.raises(dpsql.OperationalError) as info:
        engine.execute("SELECT CAST(city AS INTEGER) FROM people")
    assert "Oslo" not in str(info.value) and "Rome" not in str(info.value)
    engine.close()


def test_data_dependent_errors_become_null_not_failures(conn):
    """Casts and arithmetic that fail on some rows must not make the query fail."""
    cur = conn.cursor()
    for sql in [
        "SELECT COUNT(*) FROM people WHERE CAST(city AS INTEGER) > 3",
        "SELECT COUNT(*) FROM people WHERE city::int = 3",
        "SELECT COUNT(*) FROM people WHERE CAST(age AS BIGINT) * 9223372036854775807 > 0",
        "SELECT COUNT(*) FROM people WHERE age % (age - age) = 0",
        "SELECT SUM(LEAST(GREATEST(CAST(city AS DOUBLE), 0), 10)) FROM people",
    ]:
        cur.execute(sql)
        assert cur.rowcount == 1


def test_public_tables_can_be_read_row_by_row(conn):
    cur = conn.cursor()
    cur.execute("SELECT name FROM places ORDER BY name")
    assert cur.fetchall() == [("east",), ("north",), ("south",)]
    assert cur.dp is None
    assert conn.session.budget()["queries"] == 0


@pytest.mark.parametrize(
    "setting",
    [
        "SET dpsql.epsilon = 1e-300",
        "SET dpsql.epsilon = 1e-17",
        "SET dpsql.delta = 1e-320",
        "SET dpsql.epsilon = 1e-320",
    ],
)
def test_extreme_epsilon_or_delta_is_refused_or_answered_never_hangs(conn, setting):
    """Partition selection's threshold at a scale of 1e300 looped for ever (a float step of 1
    that changed nothing); at any epsilon or delta the settings admit, it is refused free or
    answered, and quickly."""
    cur = conn.cursor()
    cur.execute(setting)
    try:
        cur.execute("SELECT city, COUNT(*) FROM people GROUP BY city")
        assert conn.session.budget()["queries"] == 1  # answered: charged
    except dpsql.ProgrammingError as e:
        assert e.sqlstate == "22003" and "raise epsilon" in str(e), str(e)
        assert conn.session.budget()["queries"] == 0


@pytest.mark.parametrize(
    "sql, sqlstate",
    [
        ("SELECT COUNT(*) FROM people WHERE age > 30", "22003"),  # after SET dpsql.epsilon = 1e-320
        (
            "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 1e-320, privacy_unit_column = pid) "
            "COUNT(*) FROM people",
            "22003",
        ),
        (
            "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 1e308, privacy_unit_column = pid) "
            "COUNT(*) FROM people",
            "22023",
        ),
        ("/* dpsql: weights 1e300, 1e-300 */ SELECT COUNT(*), SUM(age) FROM people WHERE age > 5", "22003"),
    ],
)
def test_epsilon_beyond_the_floats_is_refused_not_an_overflow(conn, sql, sqlstate):
    """A subnormal epsilon (or a weight that makes one) needs an infinite noise scale, and an
    epsilon of 1e308 overflowed the accountants' exact arithmetic: both were internal errors
    (XX000); now refused with a SQLSTATE and a fix, free."""
    cur = conn.cursor()
    if "OPTIONS" not in sql:
        cur.execute("SET dpsql.epsilon = 1e-320" if "weights" not in sql else "SET dpsql.epsilon = 0.5")
    with pytest.raises(dpsql.ProgrammingError) as err:
        cur.execute(sql)
    assert err.value.sqlstate == sqlstate and "nothing was charged" in (err.value.hint or ""), str(err.value)
    with pytest.raises(dpsql.ProgrammingError) as err:
        cur.execute("SET dpsql.epsilon = 1e308")
    assert err.value.sqlstate == "22023" and "at most" in str(err.value)
    assert conn.session.budget()["queries"] == 0


def test_a_cast_with_precision_and_scale_is_answered(conn):
    cur = conn.cursor()
    cur.execute("SELECT SUM(CAST(age AS DECIMAL(5, 1))), COUNT(*) FROM people WHERE CAST(sex AS VARCHAR(1)) = 'F'")
    assert len(cur.fetchall()) == 1 and conn.session.budget()["queries"] == 1

"""PEP 249 behaviour of dpsql.connect and its cursors, and the SQL surface through them."""

from __future__ import annotations

import datetime

import pytest

import dpsql


def test_module_globals():
    assert dpsql.apilevel == "2.0"
    assert dpsql.threadsafety == 1
    assert dpsql.paramstyle == "pyformat"
    for name in (
        "Warning",
        "Error",
        "InterfaceError",
        "DatabaseError",
        "DataError",
        "OperationalError",
        "IntegrityError",
        "InternalError",
        "ProgrammingError",
        "NotSupportedError",
    ):
        assert issubclass(getattr(dpsql, name), Exception)
    assert issubclass(dpsql.ProgrammingError, dpsql.DatabaseError)
    assert issubclass(dpsql.DatabaseError, dpsql.Error)
    assert dpsql.Date(2024, 1, 2) == datetime.date(2024, 1, 2)
    # NUMBER is the policy's numeric types (config.NUMERIC_TYPES), every integer width included
    assert all(dpsql.NUMBER == t for t in ("UHUGEINT", "DECIMAL(18,3)", "double", "BOOLEAN"))
    assert dpsql.NUMBER != "VARCHAR"


def test_cursor_fetching_and_description(conn):
    cur = conn.cursor()
    cur.execute("SELECT sex, COUNT(*) AS n, AVG(age) FROM people GROUP BY sex ORDER BY sex")
    assert [d[0] for d in cur.description] == ["sex", "n", "avg"]
    assert cur.description[0][1] == dpsql.STRING
    assert cur.description[1][1] == dpsql.NUMBER
    assert cur.rowcount == 2
    first = cur.fetchone()
    assert first[0] == "F"
    assert cur.fetchmany(5) == [cur._result.rows[1]]
    assert cur.fetchall() == []
    assert cur.fetchone() is None


def test_dp_metadata(conn):
    cur = conn.cursor()
    cur.execute("SELECT sex, COUNT(*) AS n, AVG(age) AS mean_age FROM people GROUP BY sex")
    dp = cur.dp
    assert dp["cost"] == {"epsilon": 1.0, "delta": 0.0}
    assert dp["remaining"]["epsilon"] == 999.0
    assert dp["ci"]["sex"] is None
    for name in ("n", "mean_age"):
        assert len(dp["ci"][name]) == 2
        for (lo, hi), row in zip(dp["ci"][name], cur.fetchall()):
            assert lo <= row[1 if name == "n" else 2] <= hi


def test_parameters(conn):
    cur = conn.cursor()
    cur.execute("SELECT COUNT(*) FROM people WHERE age > %s AND sex = %s", (30, "F"))
    assert cur.rowcount == 1
    cur.execute("SELECT COUNT(*) FROM people WHERE city = %(city)s", {"city": "Oslo'; DROP TABLE people; --"})
    assert cur.fetchone()[0] >= 0  # the parameter stayed a string literal
    cur.execute("SELECT COUNT(*) FROM people WHERE age > $1", [40])
    with pytest.raises(dpsql.ProgrammingError):
        cur.execute("SELECT COUNT(*) FROM people WHERE age > %s")


def test_settings_and_budget(conn):
    cur = conn.cursor()
    cur.execute("SET dpsql.epsilon = 0.25")
    cur.execute("SHOW dpsql.epsilon")
    assert cur.fetchone() == ("0.25",)
    cur.execute("SELECT COUNT(*) FROM people")
    assert cur.dp["cost"]["epsilon"] == 0.25
    cur.execute("SHOW dpsql.budget")
    row = dict(zip([d[0] for d in cur.description], cur.fetchone()))
    assert row["epsilon_spent"] == 0.25 and row["epsilon_remaining"] == 999.75 and row["queries"] == 1
    cur.execute("RESET dpsql.epsilon")
    cur.execute("SHOW dpsql.epsilon")
    assert cur.fetchone() == ("1",)
    cur.execute("SET application_name TO 'notebook'")
    cur.execute("BEGIN")
    cur.execute("COMMIT")
    with pytest.raises(dpsql.ProgrammingError) as info:
        cur.execute("SET dpsql.epsilon = -1")
    assert info.value.sqlstate == "22023"
    with pytest.raises(dpsql.ProgrammingError) as info:
        cur.execute("SHOW dpsql.nothing")
    assert info.value.sqlstate == "42704"


def test_explain_charges_nothing(conn):
    cur = conn.cursor()
    cur.execute("EXPLAIN SELECT kind, SUM(amount) FROM events GROUP BY kind")
    text = "\n".join(r[0] for r in cur.fetchall())
    # the SQL that would run: a one-table query under Laplace reads the weighted copy
    assert "laplace noise" in text and "__dpsql_w_events" in text and "cost: epsilon=1" in text
    assert conn.session.budget()["queries"] == 0
    cur.execute("EXPLAIN SELECT kind, SUM(amount) FROM events WHERE amount > 3 GROUP BY kind")
    assert "per_unit" in "\n".join(r[0] for r in cur.fetchall())  # filtered: bounded per unit in the query


SURFACE = [
    # (query, expected number of rows)
    ("SELECT COUNT(*) FROM people", 1),
    ("SELECT COUNT(*) FROM people WHERE age BETWEEN 30 AND 50 AND sex IN ('F', 'M')", 1),
    ("SELECT kind, COUNT(*) FROM events GROUP BY kind", 3),
    ("SELECT kind, COUNT(*) FROM events WHERE kind = 'a' GROUP BY kind", 1),  # a filter on the key narrows its domain
    ("SELECT kind, COUNT(*) FROM events WHERE amount > 1e9 GROUP BY kind", 3),
    ("SELECT place, AVG(amount) FROM events GROUP BY place", 3),
    ("SELECT kind, place, COUNT(*) FROM events GROUP BY kind, place", 9),
    ("SELECT kind, COUNT(*) AS n FROM events GROUP BY 1 ORDER BY n DESC LIMIT 2", 2),
    ("SELECT kind, COUNT(*) AS n FROM events GROUP BY kind HAVING COUNT(*) > -1000000", 3),
    ("SELECT kind, ROUND(SUM(amount) / COUNT(*), 1) AS mean FROM events GROUP BY kind", 3),
    ("SELECT SUM(CASE WHEN amount > 25 THEN 1 ELSE 0 END) FROM events", 1),
    ("SELECT AVG(LEAST(GREATEST(age * 12, 0), 1200)) FROM people", 1),
    ("WITH adults AS (SELECT pid, age FROM people WHERE age >= 18) SELECT COUNT(*), AVG(age) FROM adults", 1),
    ("SELECT COUNT(*) FROM (SELECT pid, age + 1 AS a FROM people) s WHERE s.a > 40", 1),
    ("SELECT p.sex, SUM(e.amount) FROM people p JOIN events e ON p.pid = e.pid GROUP BY p.sex", 2),
    ("SELECT p.sex, COUNT(*) FROM people p JOIN events e USING (pid) GROUP BY p.sex", 2),
    ("SELECT pl.region, COUNT(*) FROM events e JOIN places pl ON e.place = pl.name GROUP BY pl.region", 2),
    ("SELECT COUNT(*) FROM events WHERE place IN (SELECT name FROM places WHERE region = 'r0')", 1),
    ("SELECT g, SUM(v) FROM rows GROUP BY g", 3),
    ("SELECT sex, COUNT(*) * 2 + 1 FROM people GROUP BY sex", 2),
    ("SELECT UPPER(sex) AS s, COUNT(*) FROM people GROUP BY sex", 2),
]


@pytest.mark.parametrize("sql,n_rows", SURFACE)
def test_sql_surface(conn, sql, n_rows):
    cur = conn.cursor()
    cur.execute(sql)
    assert cur.rowcount == n_rows
    assert cur.dp is not None and cur.dp["cost"]["epsilon"] == 1.0


def test_partition_selection_needs_delta_and_hides_rare_groups(conn):
    cur = conn.cursor()
    cur.execute("SET dpsql.delta = 0")
    with pytest.raises(dpsql.ProgrammingError) as info:
        cur.execute("SELECT city, COUNT(*) FROM people GROUP BY city")
    assert "city" in str(info.value) and "keys" in info.value.hint
    assert conn.session.budget()["queries"] == 0
    cur.execute("SET dpsql.delta = 1e-9")
    cur.execute("SELECT city, COUNT(*) FROM people GROUP BY city")
    assert {r[0] for r in cur.fetchall()} <= {"Oslo", "Rome", "Lima", "Pune"}
    assert cur.dp["cost"]["delta"] == 1e-9
    # A group held by a single unit is (almost surely) not released.
    cur.execute("SELECT age, COUNT(*) FROM people WHERE pid = 5 GROUP BY age")
    assert cur.fetchall() == []


def test_connection_close(small_policy):
    c = dpsql.connect(small_policy, user="alice")
    cur = c.cursor()
    c.close()
    with pytest.raises(dpsql.InterfaceError):
        cur.execute("SELECT COUNT(*) FROM people")


def test_count_distinct_units_is_unbiased_when_no_unit_is_truncated(conn):
    """people has one row per person: COUNT(DISTINCT pid) is the count of people (200), with
    Laplace noise of scale 1; the mean of 100 answers is within 5.5 sigma (FPR ~ 4e-8)."""
    import statistics

    cur = conn.cursor()
    cur.execute("SET dpsql.cache = off")
    answers = []
    for _ in range(100):
        cur.execute("SELECT COUNT(DISTINCT pid) FROM people")
        answers.append(cur.fetchone()[0])
    assert cur.dp["noise"][0] == {"measure": "COUNT(DISTINCT unit)", "kind": "laplace", "scale": 1.0}
    sigma_of_mean = (2**0.5) / 10
    assert abs(statistics.fmean(answers) - 200) <= 5.5 * sigma_of_mean
    cur.execute("SELECT kind, COUNT(DISTINCT pid) FROM events GROUP BY kind")
    assert cur.rowcount == 3


def test_setting_hints_list_every_dpsql_setting(conn):
    """Both hints that list the settable names (an engine setting, an unknown dpsql one) name
    every setting SHOW ALL has, from one table."""
    from dpsql.session import DP_SETTINGS, settings

    cur = conn.cursor()
    assert tuple(settings.values(conn.session.settings)) == DP_SETTINGS
    for sql in ("SET work_mem = 1", "SHOW dpsql.nosuch"):
        with pytest.raises(dpsql.Error) as info:
            cur.execute(sql)
        assert all(name in info.value.hint for name in DP_SETTINGS)


def test_fetch_first_and_a_failing_cast_of_a_noisy_value(conn):
    """FETCH FIRST [n] ROW(S) ONLY is a LIMIT (it was an internal error); a cast of a noisy value
    that fails (a sum of about a million to SMALLINT) is NULL instead of an error after the
    charge, which lost the charged answer."""
    cur = conn.cursor()
    cur.execute("SELECT sex, COUNT(*) FROM people GROUP BY sex ORDER BY sex FETCH FIRST ROW ONLY")
    assert [r[0] for r in cur.fetchall()] == ["F"]
    cur.execute("SELECT sex, COUNT(*) FROM people GROUP BY sex ORDER BY sex OFFSET 1 ROWS FETCH NEXT 5 ROWS ONLY")
    assert [r[0] for r in cur.fetchall()] == ["M"]
    with pytest.raises(dpsql.Error) as info:
        cur.execute("SELECT sex, COUNT(*) FROM people GROUP BY sex ORDER BY sex FETCH FIRST 1 ROWS WITH TIES")
    assert info.value.sqlstate == "0A000"
    cur.execute("SELECT SUM(age * 100)::smallint AS s, COUNT(*)::int AS n FROM people")
    ((s, n),) = cur.fetchall()
    assert s is None and isinstance(n, int)
    assert conn.session.budget()["queries"] == 3

"""DuckDB's PIVOT reads data while it binds: refused wherever it appears, free, on every front end.

Without an IN list, DuckDB names a PIVOT's result columns after the distinct values of the
pivoted column, so binding one (a tool's schema probe, a view's description, the describe that
precedes the charge) would list a private column's values without any query being run or
charged. dpsql refuses PIVOT, UNPIVOT and DuckDB's PIVOT_WIDER / PIVOT_LONGER spellings when the
statement is classified, before any analysis, engine or ledger is touched.
"""

from __future__ import annotations

import duckdb
import psycopg
import pytest

import dpsql

PIVOTS = [
    # top level, DuckDB's own statement forms
    "PIVOT people ON city USING COUNT(*)",
    "pivot people on city using count(*)",
    "UNPIVOT places ON name, region INTO NAME k VALUE v",
    "PIVOT_WIDER people ON city USING COUNT(*)",
    "PIVOT_LONGER places ON name, region INTO NAME k VALUE v",
    "(PIVOT people ON city USING COUNT(*))",
    # the SQL-standard form after a table
    "SELECT * FROM people PIVOT (COUNT(*) FOR city IN ('Oslo', 'Rome'))",
    "SELECT COUNT(*) FROM people PIVOT (COUNT(*) FOR city IN ('Oslo', 'Rome'))",
    "SELECT * FROM people UNPIVOT (v FOR k IN (age, pid))",
    # in a subquery, a derived table, a CTE, a join, a view, a schema probe
    "SELECT * FROM (PIVOT people ON city USING COUNT(*)) p",
    "SELECT COUNT(*) FROM (PIVOT people ON city USING COUNT(*)) p",
    "SELECT * FROM (PIVOT people ON city USING COUNT(*)) p WHERE false",
    "SELECT * FROM (PIVOT people ON city USING COUNT(*)) p LIMIT 0",
    "SELECT * FROM (SELECT * FROM (PIVOT people ON city USING SUM(age)) a) b LIMIT 0",
    "SELECT * FROM (PIVOT_WIDER people ON city USING COUNT(*)) p LIMIT 0",
    "SELECT * FROM (UNPIVOT people ON age, pid INTO NAME k VALUE v) u WHERE 1 = 0",
    "WITH p AS (PIVOT people ON city USING COUNT(*)) SELECT * FROM p WHERE 1 = 0",
    "WITH p AS (SELECT * FROM people PIVOT (COUNT(*) FOR city IN ('Oslo'))) SELECT COUNT(*) FROM p",
    "SELECT COUNT(*) FROM people p JOIN (PIVOT places ON name USING COUNT(*)) q ON TRUE",
    "SELECT e.kind, COUNT(*) FROM events e JOIN (PIVOT people ON city USING COUNT(*)) q ON TRUE GROUP BY e.kind",
    "CREATE TEMPORARY VIEW pv AS SELECT * FROM (PIVOT people ON city USING COUNT(*)) p",
    "CREATE TEMPORARY VIEW pv AS PIVOT people ON city USING COUNT(*)",
    "EXPLAIN SELECT COUNT(*) FROM (PIVOT people ON city USING COUNT(*)) p",
    # over public tables only: refused as well (one rule, no data-dependent exception)
    "SELECT * FROM (PIVOT places ON name USING COUNT(*)) p",
    "SELECT * FROM places PIVOT (COUNT(*) FOR name IN ('north'))",
    "/* a tool's comment */ PIVOT places ON region USING COUNT(*)",
]


def _refused_free(conn, sql: str) -> dpsql.ProgrammingError:
    before = conn.session.budget()
    with pytest.raises(dpsql.ProgrammingError) as info:
        conn.cursor().execute(sql)
    after = conn.session.budget()
    assert after == before and after["queries"] == 0, sql
    assert "Traceback" not in str(info.value)
    return info.value


def test_duckdb_binds_a_pivot_by_reading_the_rows(small_policy):
    """Why the refusal matters: a PIVOT's columns, from binding alone (LIMIT 0, DESCRIBE), are
    the pivoted column's values."""
    con = duckdb.connect(str(small_policy.parent / "db.duckdb"), read_only=True)
    try:
        names = [d[0] for d in con.execute("SELECT * FROM (PIVOT people ON city USING COUNT(*)) LIMIT 0").description]
    finally:
        con.close()
    assert {"Oslo", "Rome", "Lima", "Pune"} <= set(names)


@pytest.mark.parametrize("sql", PIVOTS)
def test_pivot_is_refused_wherever_it_appears_and_free(conn, sql):
    err = _refused_free(conn, sql)
    assert err.sqlstate == "42501", str(err)
    assert "PIVOT and UNPIVOT are not allowed" in err.message
    assert "GROUP BY" in err.hint


def test_a_pivot_view_is_never_stored_or_described(conn):
    cur = conn.cursor()
    _refused_free(conn, "CREATE TEMPORARY VIEW pv AS SELECT * FROM (PIVOT people ON city USING COUNT(*)) p")
    assert conn.session.view_columns() == []
    with pytest.raises(dpsql.ProgrammingError) as info:
        cur.execute("SELECT * FROM pv LIMIT 0")
    assert info.value.sqlstate == "42P01"
    assert conn.session.budget()["queries"] == 0


def test_the_word_pivot_elsewhere_is_not_a_pivot(conn):
    """A column alias or string that says pivot is not refused as one; a broken statement that
    only quotes the word is a syntax error."""
    cur = conn.cursor()
    cur.execute("SELECT COUNT(*) AS pivot FROM people WHERE city <> 'PIVOT_WIDER'")
    assert cur.description[0][0] == "pivot"
    with pytest.raises(dpsql.ProgrammingError) as info:
        cur.execute("SELECT COUNT(* FROM people WHERE city = 'pivot'")
    assert info.value.sqlstate == "42601"


def test_pivot_over_the_wire_is_refused_free_and_the_connection_stays(serve):
    with psycopg.connect(serve.dsn(), autocommit=True) as conn:
        for sql in (
            "PIVOT people ON city USING COUNT(*)",
            "SELECT * FROM (PIVOT people ON city USING COUNT(*)) p LIMIT 0",
            "SELECT * FROM people PIVOT (COUNT(*) FOR city IN ('Oslo'))",
            "SELECT * FROM (PIVOT_WIDER people ON city USING COUNT(*)) p WHERE false",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege) as info:
                conn.execute(sql)
            assert "PIVOT and UNPIVOT are not allowed" in info.value.diag.message_primary
        with conn.cursor() as cur:  # the extended protocol: Parse/Describe must not bind it either
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                cur.execute(
                    "SELECT * FROM (PIVOT people ON city USING COUNT(*)) p WHERE city = %s", ["x"], prepare=True
                )
        assert conn.execute("SELECT queries FROM dpsql_budget").fetchone()[0] == 0  # nothing charged
        assert conn.execute("SELECT COUNT(*) FROM people").fetchone()[0] >= 0
        assert conn.execute("SELECT queries FROM dpsql_budget").fetchone()[0] == 1

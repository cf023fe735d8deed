"""SQL that analysts' tools write around their questions, found by running them against dpsql
serve (dbt, postgres.js, node's pg, ibis, harlequin, jupysql): each shape is answered as
PostgreSQL would, or refused with dpsql's own reason, and nothing is charged for a refusal."""

from __future__ import annotations

import psycopg
import pytest

from dpsql.errors import Error
from dpsql.sql.classify import ViewCommand, classify, spaced_parameters


@pytest.mark.parametrize(
    "text, expected",
    [
        ("SELECT 1 FROM t WHERE a IN ($1,$2)", "SELECT 1 FROM t WHERE a IN ( $1, $2)"),  # postgres.js IN lists
        ("SELECT $1+$2", "SELECT $1+ $2"),
        ("SELECT '$1,$2', x$1 FROM t", "SELECT '$1,$2', x$1 FROM t"),  # strings and identifiers untouched
        ("SELECT $$a,$1$$, $tag$ ,$2 $tag$", "SELECT $$a,$1$$, $tag$ ,$2 $tag$"),  # dollar-quoted strings
        ("SELECT 1 -- ,$1\n,$2", "SELECT 1 -- ,$1\n, $2"),  # comments
        ("SELECT E'\\'',$1", "SELECT E'\\'', $1"),  # an escaped quote in an E'' string
        ("SELECT 'a\\',$1", "SELECT 'a\\', $1"),  # a backslash ends nothing in a standard string
    ],
)
def test_parameters_are_spaced_outside_quotes(text, expected):
    assert spaced_parameters(text) == expected


def _rows(cur, sql, params=None):
    cur.execute(sql, params)
    return cur.fetchall()


def test_three_part_names_arrays_and_views_in_process(conn):
    cur = conn.cursor()
    cur.execute("SET dpsql.epsilon = 0.01")
    spent = _spent(cur)
    # dbt's "database"."schema"."table", on private and public tables
    assert len(_rows(cur, 'SELECT sex, COUNT(*) FROM "dpsql"."public"."people" GROUP BY sex')) == 2
    assert len(_rows(cur, "SELECT name FROM dpsql.public.places")) == 3
    assert _rows(cur, 'SELECT "public"."places"."name" FROM "public"."places" ORDER BY 1 LIMIT 1') == [("east",)]
    # x = ANY(array) and x <> ALL(array): literals, text-array literals, parameters
    assert _rows(cur, "SELECT name FROM places WHERE name = ANY(ARRAY['north', 'south']) ORDER BY 1") == [
        ("north",),
        ("south",),
    ]
    assert _rows(cur, "SELECT name FROM places WHERE name <> ALL('{north,south}'::text[])") == [("east",)]
    assert _rows(cur, "SELECT name FROM places WHERE name = ANY(%s) ORDER BY 1", ['{east,"south"}']) == [
        ("east",),
        ("south",),
    ]
    assert _rows(cur, "SELECT name FROM places WHERE name = ANY('{}')") == []
    assert len(_rows(cur, "SELECT COUNT(*) FROM people WHERE age = ANY('{30,40}'::int[])")) == 1
    # a parenthesised statement and view body
    assert _rows(cur, "(SELECT name FROM places ORDER BY 1 LIMIT 1)") == [("east",)]
    cur.execute("CREATE TEMPORARY VIEW v AS (SELECT sex, COUNT(*) AS n FROM people GROUP BY sex)")
    assert len(_rows(cur, "SELECT * FROM v")) == 2
    assert _spent(cur) == pytest.approx(spent + 0.03)  # two DP queries and the view read, nothing else


def _spent(cur) -> float:
    cur.execute("SHOW dpsql.budget")
    row = cur.fetchone()
    return row[[d[0] for d in cur.description].index("epsilon_spent")]


@pytest.mark.parametrize(
    "sql, sqlstate, words",
    [
        (
            'create view "dpsql"."public"."by_sex__dbt_tmp" as (select sex, count(*) as n '
            'from "dpsql"."public"."people" group by sex)',
            "42501",
            "views live in your session",
        ),  # dbt run
        ('create temporary view "public".v7 as select 1 as a', None, None),
        ("SELECT AVG(name) FROM places", "42883", "type-check"),  # the engine's words withheld, the class told
        ("SELECT COUNT(*) FROM people WHERE sex = ANY(string_to_array('F,M', ','))", "0A000", None),
    ],
)
def test_refusals_say_why_and_charge_nothing(conn, sql, sqlstate, words):
    cur = conn.cursor()
    spent = _spent(cur)
    if sqlstate is None:
        cur.execute(sql)
        return
    with pytest.raises(Error) as e:
        cur.execute(sql)
    assert e.value.sqlstate == sqlstate
    assert words is None or words in e.value.message
    assert "Binder" not in str(e.value) and "duckdb" not in str(e.value).lower()
    assert _spent(cur) == spent


def test_view_names_as_dbt_writes_them():
    drop = classify('drop view if exists "dpsql"."public"."by_sex__dbt_tmp" cascade')
    assert isinstance(drop, ViewCommand) and drop.name == "by_sex__dbt_tmp" and drop.query is None


def test_wire_named_cursors_temp_views_in_the_catalog_and_lists(serve):
    """psycopg 3 describes a DECLAREd cursor as a portal (ibis's to_pyarrow); ibis looks up the
    columns of the temporary view it created in pg_attribute under pg_my_temp_schema(); node's
    drivers pass lists as array parameters."""
    with psycopg.connect(serve.dsn(), autocommit=True) as c:
        cur = c.cursor()
        cur.execute("SET dpsql.epsilon = 0.01")
        with c.cursor(name="c1") as named:
            named.execute("SELECT sex, COUNT(*) AS n FROM people GROUP BY sex")
            assert [d.name for d in named.description] == ["sex", "n"]
            assert len(named.fetchmany(1)) == 1 and len(named.fetchall()) == 1
        cur.execute("CREATE TEMPORARY VIEW by_sex AS SELECT sex, COUNT(*) AS n FROM people GROUP BY sex")
        cur.execute("SELECT nspname FROM pg_namespace WHERE oid = pg_my_temp_schema()")
        temp = cur.fetchone()[0]
        cur.execute(
            """SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a
                       JOIN pg_class c ON a.attrelid = c.oid JOIN pg_namespace n ON c.relnamespace = n.oid
                       WHERE a.attnum > 0 AND NOT a.attisdropped AND n.nspname = ANY(%s) AND c.relname = %s
                       ORDER BY a.attnum""",
            (["public", temp], "by_sex"),
        )
        assert cur.fetchall() == [("sex", "text"), ("n", "bigint")]
        cur.execute("SELECT table_schema, table_type FROM information_schema.tables WHERE table_name = 'by_sex'")
        assert cur.fetchall() == [(temp, "VIEW")]
        cur.execute("SELECT name FROM places WHERE name = ANY(%s) ORDER BY 1", (["north", "south"],))
        assert cur.fetchall() == [("north",), ("south",)]
        cur.execute(
            "SELECT COUNT(*) AS n FROM people WHERE city IN ($1,$2)".replace("$1", "%s").replace("$2", "%s"),
            ("Oslo", "Rome"),
        )
        assert len(cur.fetchall()) == 1
    with psycopg.connect(serve.dsn(), autocommit=True) as c:  # views are the session's own
        cur = c.cursor()
        cur.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'by_sex'")
        assert cur.fetchone()[0] == 0

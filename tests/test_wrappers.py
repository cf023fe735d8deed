"""SQL that tools wrap around the analyst's question: schema probes answered free with the
columns and no rows, and DP queries used as derived tables, whose outer query is free
post-processing of the released rows (issue: BI tools end to end)."""

from __future__ import annotations

import psycopg
import pytest

import dpsql


def _spent(cur) -> float:
    return float(cur.connection.session.budget()["epsilon"]["spent"])


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM people WHERE 1=0",
        "SELECT * FROM people WHERE false",
        "SELECT * FROM people LIMIT 0",
        "SELECT * FROM people WHERE age > 3 AND 1 = 0",
        "SELECT * FROM (SELECT * FROM people) AS virtual_table WHERE 1=0",
        "SELECT * FROM (SELECT sex, COUNT(*) AS n FROM people GROUP BY sex) AS t LIMIT 0",
    ],
)
def test_schema_probes_are_free_and_return_no_rows(conn, sql):
    cur = conn.cursor()
    cur.execute(sql)
    assert cur.fetchall() == []
    names = [d[0] for d in cur.description]
    assert names in (["pid", "age", "sex", "city"], ["sex", "n"])
    assert _spent(cur) == 0


def test_a_probe_that_is_not_constant_false_is_still_refused(conn):
    cur = conn.cursor()
    with pytest.raises(dpsql.Error, match="selecting rows"):
        cur.execute("SELECT * FROM people WHERE 1=1")
    with pytest.raises(dpsql.Error):
        cur.execute("SELECT * FROM people WHERE age = 0")
    assert _spent(cur) == 0


def test_superset_wrapper_charges_the_inner_query_only(conn):
    cur = conn.cursor()
    cur.execute("SET dpsql.cache = off")
    cur.execute(
        "SELECT * FROM (SELECT kind, COUNT(*) AS n, SUM(amount) AS s FROM events GROUP BY kind) "
        "AS virtual_table LIMIT 1000"
    )
    rows = cur.fetchall()
    assert [d[0] for d in cur.description] == ["kind", "n", "s"] and len(rows) == 3
    assert _spent(cur) == 1.0  # the policy's query epsilon, once
    assert cur.dp["cost"]["epsilon"] == 1.0


def test_outer_arithmetic_filters_and_order_over_released_rows(conn):
    cur = conn.cursor()
    cur.execute("SELECT kind, COUNT(*) AS n FROM events GROUP BY kind")
    released = dict(cur.fetchall())
    spent = _spent(cur)
    # the same inner query (answered from the cache, free), with post-processing around it
    cur.execute(
        'SELECT "source"."kind", "source"."n" * 2 AS twice FROM (SELECT kind, COUNT(*) AS n FROM events '
        'GROUP BY kind) "source" WHERE "source"."n" > -1000000 ORDER BY twice DESC, kind LIMIT 2'
    )
    got = cur.fetchall()
    expected = sorted(((k, 2 * n) for k, n in released.items()), key=lambda r: (-r[1], r[0]))[:2]
    assert got == expected
    cur.execute("SELECT SUM(n) AS total FROM (SELECT kind, COUNT(*) AS n FROM events GROUP BY kind) t")
    assert cur.fetchall() == [(sum(released.values()),)]
    assert _spent(cur) == spent


def test_the_outer_query_reads_the_released_rows_only(conn):
    cur = conn.cursor()
    with pytest.raises(dpsql.Error, match="subqueries in the outer query"):
        cur.execute("SELECT n, (SELECT COUNT(*) FROM people) FROM (SELECT COUNT(*) AS n FROM events) t")
    assert _spent(cur) == 0


def test_per_unit_subqueries_keep_their_own_path(conn):
    cur = conn.cursor()
    cur.execute("SELECT AVG(t) FROM (SELECT pid, SUM(amount) AS t FROM events GROUP BY pid) s")
    assert len(cur.fetchall()) == 1 and "ci" in cur.dp  # a DP aggregate with its own interval


@pytest.mark.slow
def test_wrappers_and_probes_over_the_wire(serve):
    with psycopg.connect(serve.dsn(), autocommit=True) as pg:
        probe = pg.execute("SELECT * FROM people WHERE 1=0")
        assert probe.fetchall() == [] and [d.name for d in probe.description] == ["pid", "age", "sex", "city"]
        rows = pg.execute(
            "SELECT * FROM (SELECT sex, COUNT(*) AS n FROM people GROUP BY sex) AS virtual_table LIMIT %s", (1000,)
        ).fetchall()
        assert [r[0] for r in sorted(rows)] == ["F", "M"]
        with pg.cursor() as cur:  # extended protocol: Describe of the wrapper, before it runs
            cur.execute(
                "SELECT sex, n + 1 AS m FROM (SELECT sex, COUNT(*) AS n FROM people GROUP BY sex) t WHERE sex = %s",
                ("F",),
                prepare=True,
            )
            assert [d.name for d in cur.description] == ["sex", "m"] and len(cur.fetchall()) == 1


def test_session_views_are_definitions_run_and_charged_when_read(conn):
    cur = conn.cursor()
    cur.execute("SET dpsql.cache = off")
    cur.execute("CREATE TEMPORARY VIEW adults AS SELECT * FROM people WHERE age >= 18")
    assert _spent(cur) == 0  # a definition only
    cur.execute("SELECT * FROM adults WHERE 1=0")  # ibis, Tableau: the view's columns, free
    assert [d[0] for d in cur.description] == ["pid", "age", "sex", "city"] and _spent(cur) == 0
    cur.execute("SELECT sex, COUNT(*) FROM adults GROUP BY sex")
    assert len(cur.fetchall()) == 2 and _spent(cur) == 1.0
    cur.execute("CREATE TEMP VIEW by_sex AS SELECT sex, COUNT(*) AS n FROM adults GROUP BY sex")
    cur.execute("SELECT SUM(n) FROM by_sex")  # a view of a DP query: post-processing over its release
    assert len(cur.fetchall()) == 1 and _spent(cur) == 2.0
    with pytest.raises(dpsql.Error, match="selecting rows"):
        cur.execute("SELECT * FROM adults")  # still no raw rows through a view
    with pytest.raises(dpsql.Error, match="views live in your session"):
        cur.execute("CREATE VIEW v AS SELECT COUNT(*) FROM people")
    with pytest.raises(dpsql.Error, match="table of the policy"):
        cur.execute("CREATE TEMP VIEW people AS SELECT 1")
    with pytest.raises(dpsql.Error, match="would read itself"):
        cur.execute("CREATE TEMP VIEW loop AS SELECT * FROM loop")
    cur.execute("DROP VIEW by_sex")
    with pytest.raises(dpsql.Error, match="does not exist"):
        cur.execute("SELECT SUM(n) FROM by_sex")
    cur.execute("CREATE OR REPLACE TEMP VIEW adults AS SELECT * FROM people WHERE age >= 1000")
    cur.execute("SELECT COUNT(*) FROM adults")  # the new definition (cached plans follow it)
    assert _spent(cur) == 3.0


def test_keys_alone_over_declared_domains_are_the_domain_free(conn):
    """A filter's values (Tableau's GROUP BY without aggregates, Superset's SELECT DISTINCT):
    over declared keys, the declared domain, whatever the data (so a WHERE matching no row
    still lists every key), free; over undeclared keys, refused."""
    cur = conn.cursor()
    cur.execute("SELECT DISTINCT sex FROM people ORDER BY sex")
    assert cur.fetchall() == [("F",), ("M",)]
    cur.execute("SELECT kind AS k, place FROM events WHERE amount > 1e9 GROUP BY 1, place ORDER BY k, place LIMIT 4")
    assert cur.fetchall() == [("a", "east"), ("a", "north"), ("a", "south"), ("b", "east")]
    assert _spent(cur) == 0
    with pytest.raises(dpsql.Error, match="DISTINCT"):
        cur.execute("SELECT DISTINCT city FROM people")
    with pytest.raises(dpsql.Error, match="at least one aggregate"):
        cur.execute("SELECT city FROM people GROUP BY city")
    assert _spent(cur) == 0

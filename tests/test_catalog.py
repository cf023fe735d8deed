"""Every catalog query recorded from real clients is answered with PostgreSQL 15's columns and
types, and the catalog reveals nothing about private rows."""

from __future__ import annotations

import pytest

from dpsql.config import load_policy
from dpsql.engines.duckdb import DuckDBEngine
from dpsql.server.catalog import Catalog, is_catalog_query

from .replay import exchanges

RECORDED = [e for e in exchanges() if is_catalog_query(e.sql)]


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    d = tmp_path_factory.mktemp("catalog")
    import duckdb

    con = duckdb.connect(str(d / "db.duckdb"))
    con.execute("CREATE TABLE people (id INTEGER, name VARCHAR, age INTEGER, city VARCHAR)")
    con.execute("INSERT INTO people SELECT range, 'n' || range, range % 90, 'c' FROM range(1000)")
    con.close()
    (d / "p.toml").write_text('[engine]\ndatabase = "db.duckdb"\n[tables.people]\nprivacy_unit = "id"\n'
                              'columns.age = { lower = 0, upper = 120 }\n[users.dp]\n')
    policy = load_policy(d / "p.toml")
    return Catalog(policy, DuckDBEngine(policy).schema())


def test_the_corpus_is_complete():
    files = {e.file for e in RECORDED}
    assert {"jdbc", "odbc", "psql_dt", "psql_l", "psql_dn", "psql_d_people", "sqla_psycopg2", "sqla_psycopg3",
            "sqla_pg8000"} <= files
    assert len(RECORDED) >= 50


@pytest.mark.parametrize("exchange", RECORDED, ids=[f"{e.file}:{e.sql[:40]}" for e in RECORDED])
def test_recorded_catalog_query(catalog, exchange):
    names, oids, rows = catalog.answer(exchange.sql, exchange.params, None, "dp")
    assert list(zip(names, oids)) == exchange.columns


def test_psql_sees_the_tables_and_columns(catalog):
    dt = next(e for e in RECORDED if e.file == "psql_dt")
    _, _, rows = catalog.answer(dt.sql, [], None, "dp")
    assert rows == [("public", "people", "table", "dpsql")]
    cols = next(e for e in RECORDED if e.file == "psql_d_people" and "format_type" in e.sql)
    _, _, rows = catalog.answer(cols.sql.replace("'16385'", "16385"), [], None, "dp")
    assert [r[0] for r in rows] == ["id", "name", "age", "city"]


def test_statistics_reveal_nothing(catalog):
    _, _, rows = catalog.answer("SELECT reltuples, relpages FROM pg_catalog.pg_class WHERE relname = 'people'", [], None, "dp")
    assert rows == [(-1.0, 0)]
    _, _, rows = catalog.answer("SELECT n_live_tup FROM pg_stat_user_tables WHERE relname = 'people'", [], None, "dp")
    assert rows == [(None,)]
    _, _, rows = catalog.answer("SELECT * FROM pg_catalog.pg_stats", [], None, "dp")
    assert rows == []
    _, _, rows = catalog.answer("SELECT obj_description(c.oid, 'pg_class') FROM pg_class c WHERE relname = 'people'",
                                [], None, "dp")
    assert "privacy unit id" in rows[0][0]


def test_datetime_precision_and_what_is_missing(catalog):
    """Npgsql reads information_schema.columns.datetime_precision; a catalog query that reaches
    what is not emulated names it (only a name the query itself spells is echoed)."""
    from dpsql.errors import Error

    _, _, rows = catalog.answer("SELECT column_name, datetime_precision FROM information_schema.columns "
                                "WHERE table_name = 'people' ORDER BY ordinal_position", [], None, "dp")
    assert rows == [("id", None), ("name", None), ("age", None), ("city", None)]
    with pytest.raises(Error) as info:
        catalog.answer("SELECT attfoo FROM pg_catalog.pg_attribute", [], None, "dp")
    assert info.value.sqlstate == "0A000" and "(attfoo)" in str(info.value)


def test_pg_get_keywords_as_dbeaver_asks(catalog):
    _, _, rows = catalog.answer("select string_agg(word,',') from pg_catalog.pg_get_keywords()", [], None, "dp")
    words = rows[0][0].split(",")
    assert {"select", "from", "where"} <= set(words)
    _, _, rows = catalog.answer("SELECT word, catcode FROM pg_get_keywords() k WHERE word = 'select'", [], None, "dp")
    assert rows == [("select", "R")]


def test_the_catalog_cannot_reach_data(catalog):
    from dpsql.errors import Error

    for sql in ["SELECT * FROM pg_catalog.pg_class c, read_csv('/etc/passwd')",
                "SELECT * FROM pg_catalog.pg_class WHERE relname IN (SELECT name FROM people)"]:
        with pytest.raises(Error):
            catalog.answer(sql, [], None, "dp")


@pytest.mark.parametrize("sql, expected", [
    ("SELECT * FROM unnest(current_schemas(true))", [("pg_catalog",), ("public",)]),  # pgcli's completions
    ("SELECT routine_name FROM information_schema.routines WHERE routine_name IN ('avg', 'least', 'nosuch') ORDER BY 1",
     [("avg",), ("least",)]),  # harlequin's: the functions queries may use
    ("SELECT pg_table_size('people'::regclass), pg_total_relation_size('people'), pg_indexes_size('people')",
     [(None, None, None)]),
    ("SELECT pg_size_pretty(pg_table_size('people'))", [(None,)]),
    ("SELECT roleid FROM pg_catalog.pg_auth_members", []),
])
def test_what_pgcli_harlequin_and_psql_ask(catalog, sql, expected):
    assert is_catalog_query(sql)
    assert catalog.answer(sql, [], None, "dp")[2] == expected


def test_sqlalchemy_table_comment_reaches_pg_description(catalog):
    """get_table_comment joins pg_description on classoid = CAST('pg_catalog.pg_class' AS REGCLASS)."""
    sql = ("SELECT pg_catalog.pg_description.description FROM pg_catalog.pg_class JOIN pg_catalog.pg_namespace ON "
           "pg_catalog.pg_namespace.oid = pg_catalog.pg_class.relnamespace LEFT OUTER JOIN pg_catalog.pg_description "
           "ON pg_catalog.pg_description.objoid = pg_catalog.pg_class.oid AND pg_catalog.pg_description.objsubid = 0 "
           "AND pg_catalog.pg_description.classoid = CAST('pg_catalog.pg_class' AS REGCLASS) "
           "WHERE pg_catalog.pg_class.relname = 'people' AND pg_catalog.pg_namespace.nspname = 'public'")
    rows = catalog.answer(sql, [], None, "dp")[2]
    assert rows and "privacy unit id" in rows[0][0]


def test_unsupported_catalog_queries_do_not_show_the_engine_text(catalog):
    from dpsql.errors import Error

    with pytest.raises(Error) as e:
        catalog.answer("SELECT pg_catalog.pg_no_such_function(1) FROM pg_catalog.pg_class", [], None, "dp")
    assert "Catalog Error" not in str(e.value) and "does not exist" not in str(e.value)


def test_current_setting_reads_dpsql_settings_and_set_config_cannot_change_them(catalog):
    from dpsql.errors import ProgrammingError
    from dpsql.session import Session

    session = Session(catalog.policy, "dp")
    try:
        session.execute("SET dpsql.epsilon = 0.25")
        assert catalog.answer("SELECT current_setting('dpsql.epsilon')", [], session, "dp")[2] == [("0.25",)]
        with pytest.raises(ProgrammingError, match="set_config") as info:
            catalog.answer("SELECT set_config('dpsql.epsilon', '0', false)", [], session, "dp")
        assert info.value.sqlstate == "55P02"
        assert session.setting("dpsql.epsilon") == "0.25"
        assert catalog.answer("SELECT set_config('search_path', 'public', false)", [], session, "dp")[2] == [("public",)]
    finally:
        session.close()

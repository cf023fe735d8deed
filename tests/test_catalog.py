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
    (d / "p.toml").write_text(
        '[engine]\ndatabase = "db.duckdb"\n[tables.people]\nprivacy_unit = "id"\n'
        "columns.age = { lower = 0, upper = 120 }\n[users.dp]\n"
    )
    policy = load_policy(d / "p.toml")
    return Catalog(policy, DuckDBEngine(policy).schema())


def test_the_corpus_is_complete():
    files = {e.file for e in RECORDED}
    assert {
        "jdbc",
        "odbc",
        "psql_dt",
        "psql_l",
        "psql_dn",
        "psql_d_people",
        "sqla_psycopg2",
        "sqla_psycopg3",
        "sqla_pg8000",
    } <= files
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
    _, _, rows = catalog.answer(
        "SELECT reltuples, relpages FROM pg_catalog.pg_class WHERE relname = 'people'", [], None, "dp"
    )
    assert rows == [(-1.0, 0)]
    _, _, rows = catalog.answer("SELECT n_live_tup FROM pg_stat_user_tables WHERE relname = 'people'", [], None, "dp")
    assert rows == [(None,)]
    _, _, rows = catalog.answer("SELECT * FROM pg_catalog.pg_stats", [], None, "dp")
    assert rows == []
    _, _, rows = catalog.answer(
        "SELECT obj_description(c.oid, 'pg_class') FROM pg_class c WHERE relname = 'people'", [], None, "dp"
    )
    assert "privacy unit id" in rows[0][0]


def test_datetime_precision_and_what_is_missing(catalog):
    """Npgsql reads information_schema.columns.datetime_precision; a catalog query that reaches
    what is not emulated names it (only a name the query itself spells is echoed)."""
    from dpsql.errors import Error

    _, _, rows = catalog.answer(
        "SELECT column_name, datetime_precision FROM information_schema.columns "
        "WHERE table_name = 'people' ORDER BY ordinal_position",
        [],
        None,
        "dp",
    )
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

    for sql in [
        "SELECT * FROM pg_catalog.pg_class c, read_csv('/etc/passwd')",
        "SELECT * FROM pg_catalog.pg_class WHERE relname IN (SELECT name FROM people)",
    ]:
        with pytest.raises(Error):
            catalog.answer(sql, [], None, "dp")


@pytest.mark.parametrize(
    "sql, expected",
    [
        ("SELECT * FROM unnest(current_schemas(true))", [("pg_catalog",), ("public",)]),  # pgcli's completions
        (
            "SELECT routine_name FROM information_schema.routines "
            "WHERE routine_name IN ('avg', 'least', 'nosuch') ORDER BY 1",
            [("avg",), ("least",)],
        ),  # harlequin's: the functions queries may use
        (
            "SELECT pg_table_size('people'::regclass), pg_total_relation_size('people'), pg_indexes_size('people')",
            [(None, None, None)],
        ),
        ("SELECT pg_size_pretty(pg_table_size('people'))", [(None,)]),
        ("SELECT roleid FROM pg_catalog.pg_auth_members", []),
    ],
)
def test_what_pgcli_harlequin_and_psql_ask(catalog, sql, expected):
    assert is_catalog_query(sql)
    assert catalog.answer(sql, [], None, "dp")[2] == expected


def test_sqlalchemy_table_comment_reaches_pg_description(catalog):
    """get_table_comment joins pg_description on classoid = CAST('pg_catalog.pg_class' AS REGCLASS)."""
    sql = (
        "SELECT pg_catalog.pg_description.description FROM pg_catalog.pg_class JOIN pg_catalog.pg_namespace ON "
        "pg_catalog.pg_namespace.oid = pg_catalog.pg_class.relnamespace LEFT OUTER JOIN pg_catalog.pg_description "
        "ON pg_catalog.pg_description.objoid = pg_catalog.pg_class.oid AND pg_catalog.pg_description.objsubid = 0 "
        "AND pg_catalog.pg_description.classoid = CAST('pg_catalog.pg_class' AS REGCLASS) "
        "WHERE pg_catalog.pg_class.relname = 'people' AND pg_catalog.pg_namespace.nspname = 'public'"
    )
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
        assert catalog.answer("SELECT set_config('search_path', 'public', false)", [], session, "dp")[2] == [
            ("public",)
        ]
    finally:
        session.close()


@pytest.mark.parametrize(
    "sql, expected",
    [
        # Django's index introspection walks arrays side by side (values here: the catalog's own are empty)
        (
            "SELECT k.key, k.option, k.arridx FROM (SELECT ARRAY[3, 1] AS a, ARRAY[0, 1, 5] AS b) s, "
            "unnest(s.a, s.b) WITH ORDINALITY AS k(key, option, arridx) ORDER BY arridx",
            [(3, 0, 1), (1, 1, 2), (None, 5, 3)],
        ),
        (
            "SELECT ARRAY(SELECT k * 10 FROM generate_subscripts(s.a, 1) AS k ORDER BY k) "
            "FROM (SELECT ARRAY[7, 8, 9] AS a) s",
            [([10, 20, 30],)],
        ),  # peewee's
        (
            "SELECT count(*) FROM pg_catalog.pg_type WHERE (typreceive != 0 OR typsend != 0) AND typtype != 'r' AND "
            "typreceive::TEXT = 'date_recv'",
            [(1,)],
        ),  # ADBC's type loader, and PostgreSQL's I/O function names
        (
            "SELECT count(*) FROM pg_type t JOIN pg_proc p ON p.oid = t.typreceive WHERE p.proname = 'array_recv' "
            "AND t.typname = '_int4'",
            [(1,)],
        ),  # Npgsql's join on a regproc
        (
            "SELECT nspname FROM pg_namespace WHERE nspname NOT LIKE E'pg\\\\_%' ORDER BY 1",
            [("information_schema",), ("public",)],
        ),
        (
            "SELECT substring('fillfactor=70,x=1' FROM 'fillfactor=([0-9]*)') FROM pg_catalog.pg_class LIMIT 1",
            [("70",)],
        ),
        ("SELECT setting FROM pg_catalog.pg_show_all_settings() WHERE name = 'bytea_output'", [("hex",)]),  # pgAdmin's
        ("SELECT count(*) FROM pg_stat_activity", [(0,)]),  # other sessions are not an analyst's business
        ("SELECT count(*) FROM pg_catalog.pg_indexes", [(0,)]),
        (
            "SELECT 'avg'::pg_catalog.regproc::pg_catalog.oid = (SELECT min(oid) FROM pg_proc WHERE proname = 'avg')",
            [(True,)],
        ),
    ],
)
def test_what_django_peewee_adbc_npgsql_and_pgadmin_ask(catalog, sql, expected):
    assert is_catalog_query(sql) or "unnest" in sql or "generate_subscripts" in sql
    assert catalog.answer(sql, [], None, "dp")[2] == expected


def test_types_follow_postgresql(catalog):
    names, oids, _ = catalog.answer(
        "SELECT CASE WHEN p.proname = 'array_recv' THEN 'a' ELSE t.typtype END AS typtype, "
        "CASE WHEN t.typlen > 0 THEN true ELSE false END AS fixed, s.* "
        "FROM pg_type t JOIN pg_proc p ON p.oid = t.typreceive, pg_db_role_setting s",
        [],
        None,
        "dp",
    )
    assert list(zip(names, oids)) == [
        ("typtype", 18),
        ("fixed", 16),
        ("setdatabase", 26),
        ("setrole", 26),
        ("setconfig", 1009),
    ]


def test_what_is_missing_is_named_by_its_table_not_its_alias(catalog):
    from dpsql.errors import Error

    with pytest.raises(Error) as info:
        catalog.answer("SELECT c.no_such_column FROM information_schema.columns AS c", [], None, "dp")
    assert "(information_schema.columns.no_such_column)" in str(info.value) and "(c)" not in str(info.value)


def test_functions_have_no_source(catalog):
    from dpsql.errors import Error

    with pytest.raises(Error, match="functions have no source here") as info:
        catalog.answer("SELECT pg_catalog.pg_get_functiondef(50000)", [], None, "dp")
    assert info.value.sqlstate == "0A000"
    with pytest.raises(Error, match='function "nosuch" does not exist') as info:
        catalog.answer("SELECT 'nosuch'::pg_catalog.regproc::pg_catalog.oid", [], None, "dp")
    assert info.value.sqlstate == "42883"


def test_a_window_function_in_a_catalog_query_is_named_after_its_function(catalog):
    sql = "SELECT nspname, ROW_NUMBER() OVER (ORDER BY nspname) FROM pg_namespace"
    names, _, _ = catalog.answer(sql, [], None, "dp")
    assert names == ["nspname", "row_number"]

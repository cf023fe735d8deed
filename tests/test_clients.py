"""More real drivers against `dpsql serve`: asyncpg, pg8000, SQLAlchemy + pandas, and TLS."""

from __future__ import annotations

import asyncio
import ssl

import pytest

from .server_fixture import PASSWORD, Serve

pytestmark = [pytest.mark.clients, pytest.mark.slow]  # asyncpg, pg8000, SQLAlchemy, pgcli against a dpsql serve each


def test_asyncpg(serve):
    asyncpg = pytest.importorskip("asyncpg")

    async def main():
        conn = await asyncpg.connect(
            host="127.0.0.1", port=serve.port, user="alice", password=PASSWORD, database="dpsql", ssl=False
        )
        try:
            rows = await conn.fetch(
                "SELECT sex, COUNT(*) AS n FROM people WHERE age > $1 GROUP BY sex ORDER BY sex", 30
            )
            assert [r["sex"] for r in rows] == ["F", "M"] and isinstance(rows[0]["n"], int)
            value = await conn.fetchval("SELECT AVG(age) FROM people WHERE city = $1", "Oslo")
            assert isinstance(value, float)
            stmt = await conn.prepare("SELECT COUNT(*) FROM events WHERE amount > $1")
            assert isinstance(await stmt.fetchval(10.0), int)
            return await conn.fetchrow("SHOW dpsql.budget")
        finally:
            await conn.close()

    budget = asyncio.run(main())
    assert budget["queries"] == 3


def test_asyncpg_after_a_refused_copy_and_show_all(serve):
    """asyncpg sends COPY FROM STDIN's data right behind the query: once dpsql refuses the COPY,
    the stray CopyData/CopyDone are ignored, as PostgreSQL does (answering them left the
    connection dead); SHOW ALL over the extended protocol has the columns its Describe gave."""
    asyncpg = pytest.importorskip("asyncpg")

    async def main():
        conn = await asyncpg.connect(
            host="127.0.0.1", port=serve.port, user="alice", password=PASSWORD, database="dpsql", ssl=False
        )
        try:
            with pytest.raises(asyncpg.PostgresError) as info:
                await conn.copy_records_to_table("places", records=[("x", "y")])
            assert info.value.sqlstate == "0A000"
            settings = await conn.fetch("SHOW ALL")
            assert any(r[0] == "dpsql.epsilon" for r in settings)
            return await conn.fetchval("SELECT COUNT(*) FROM people")
        finally:
            await conn.close()

    assert asyncio.run(main()) is not None


def test_pg8000(serve):
    pg8000 = pytest.importorskip("pg8000.native")
    conn = pg8000.Connection("alice", host="127.0.0.1", port=serve.port, database="dpsql", password=PASSWORD)
    try:
        rows = conn.run("SELECT kind, COUNT(*) FROM events WHERE amount >= :x GROUP BY kind", x=0)
        assert sorted(r[0] for r in rows) == ["a", "b", "c"]
        assert conn.run("SELECT COUNT(*) FROM people")[0][0] >= 0
    finally:
        conn.close()


@pytest.mark.parametrize("driver", ["psycopg", "psycopg2", "pg8000"])
def test_sqlalchemy_reflection_and_pandas(serve, driver):
    sqlalchemy = pytest.importorskip("sqlalchemy")
    pd = pytest.importorskip("pandas")
    if driver == "psycopg2":
        pytest.importorskip("psycopg2")
    engine = sqlalchemy.create_engine(
        f"postgresql+{driver}://alice:{PASSWORD}@127.0.0.1:{serve.port}/dpsql",
        connect_args={"sslmode": "disable"} if driver.startswith("psycopg") else {},
    )
    try:
        inspector = sqlalchemy.inspect(engine)
        assert set(inspector.get_table_names()) == {"people", "events", "places", "rows"}
        cols = {c["name"]: str(c["type"]) for c in inspector.get_columns("people")}
        assert set(cols) == {"pid", "age", "sex", "city"} and cols["age"] == "DOUBLE PRECISION"
        assert inspector.get_pk_constraint("people")["constrained_columns"] == []
        assert inspector.get_indexes("people") == []
        frame = pd.read_sql(
            sqlalchemy.text("SELECT sex, COUNT(*) AS n FROM people WHERE age > :x GROUP BY sex"),
            engine,
            params={"x": 30},
        )
        assert list(frame.columns) == ["sex", "n"] and len(frame) == 2
    finally:
        engine.dispose()


def test_tls_verify_full(small_policy, tmp_path):
    trustme = pytest.importorskip("trustme")
    import psycopg

    ca = trustme.CA()
    cert = ca.issue_cert("localhost", "127.0.0.1")
    cert_file, key_file, ca_file = tmp_path / "server.pem", tmp_path / "server.key", tmp_path / "ca.pem"
    cert.cert_chain_pems[0].write_to_path(cert_file)
    cert.private_key_pem.write_to_path(key_file)
    ca.cert_pem.write_to_path(ca_file)
    s = Serve(
        small_policy, tmp_path / "l.sqlite", "--tls-cert", str(cert_file), "--tls-key", str(key_file), "--require-tls"
    )
    try:
        dsn = s.dsn(host="localhost", sslmode="verify-full", sslrootcert=str(ca_file))
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert conn.pgconn.ssl_in_use
            assert conn.execute("SELECT COUNT(*) FROM people").fetchone()[0] >= 0
        with pytest.raises(psycopg.OperationalError) as info:
            psycopg.connect(s.dsn())  # sslmode=disable is refused
        assert "requires TLS" in str(info.value)
        other = trustme.CA()
        other.cert_pem.write_to_path(tmp_path / "other.pem")
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(s.dsn(host="localhost", sslmode="verify-full", sslrootcert=str(tmp_path / "other.pem")))
    finally:
        s.stop()


def test_ssl_module_available():
    assert ssl.OPENSSL_VERSION


def test_pgcli_completion_loaders(serve):
    """pgcli's own completion loaders (the queries it runs on connect) against dpsql serve."""
    from pgcli.pgexecute import PGExecute

    ex = PGExecute("dpsql", "alice", PASSWORD, "127.0.0.1", serve.port, "")
    try:
        assert list(ex.search_path()) == ["pg_catalog", "public"]
        assert "public" in list(ex.schemata())
        assert {t for _, t in ex.tables()} >= {"people", "events", "places"}
        assert ("public", "people", "age", "float8", False, None) in list(ex.table_columns())
        assert list(ex.databases()) == ["dpsql"]
        functions = {(f.func_name, f.is_aggregate) for f in ex.functions()}
        assert {("avg", True), ("count", True), ("least", False), ("date_trunc", False)} <= functions
        for loader in (ex.views, ex.view_columns, ex.foreignkeys, ex.datatypes):
            assert list(loader()) == []  # answered, and empty: dpsql has none of these
    finally:
        ex.conn.close()


@pytest.mark.parametrize(
    "sql,types",
    [
        # SQLAlchemy's asyncpg reflection writes every parameter with a cast; asyncpg encodes by the type described
        (
            'SELECT 1 FROM pg_catalog.pg_class WHERE oid IN ($4::OID) AND relkind = $3::CHAR AND x = $2::"char" '
            "AND relname = $1::NAME",
            [19, 18, 1042, 26],
        ),
        (
            "SELECT CAST($2::REGCLASS AS REGCLASS), $1::INTEGER, $3::SMALLINT, $4::double precision, $5::VARCHAR(3), "
            "$6::numeric(10, 2), $7::pg_catalog.regtype",
            [23, 2205, 21, 701, 1043, 1700, 2206],
        ),
        (
            "SELECT 1 WHERE oid = ANY($1::OID[]) AND n = ANY($2::name[]) AND CAST($3 AS INTEGER[]) IS NULL",
            [1028, 1003, 1007],
        ),
        ("SELECT pg_try_advisory_lock($1)", [20]),
        ("SELECT pg_advisory_lock($1, $2)", [23, 23]),
        ("SELECT COUNT(*) FROM people WHERE age > $1 LIMIT $2", [701, 20]),
        ("SELECT x$1, $1::text", [25]),  # x$1 is a name, not a parameter
    ],
)
def test_parameter_types_from_casts(sql, types):
    from dpsql.server.params import infer_parameter_types

    assert infer_parameter_types(sql, {"people": {"age": "DOUBLE"}}) == types


def test_sqlalchemy_async_reflection(serve):
    """SQLAlchemy's postgresql+asyncpg dialect reflects through asyncpg's prepared statements:
    every parameter typed by its cast ($4::OID an integer), and asyncpg's own type
    introspection answered when a result has a type it must look up."""
    sqlalchemy = pytest.importorskip("sqlalchemy")
    from sqlalchemy.ext.asyncio import create_async_engine

    def reflect(sync):
        inspector = sqlalchemy.inspect(sync)
        return {
            "tables": inspector.get_table_names(),
            "columns": {c["name"]: str(c["type"]) for c in inspector.get_columns("people")},
            "pk": inspector.get_pk_constraint("people")["constrained_columns"],
            "fks": inspector.get_foreign_keys("events"),
            "unique": inspector.get_unique_constraints("people"),
            "checks": inspector.get_check_constraints("people"),
            "views": inspector.get_view_names(),
            "schemas": inspector.get_schema_names(),
        }

    async def main():
        engine = create_async_engine(f"postgresql+asyncpg://alice:{PASSWORD}@127.0.0.1:{serve.port}/dpsql")
        try:
            async with engine.connect() as conn:
                out = await conn.run_sync(reflect)
                q = sqlalchemy.text("SELECT sex, COUNT(*) AS n FROM people WHERE age > :a GROUP BY sex ORDER BY sex")
                out["grouped"] = [tuple(r) for r in (await conn.execute(q, {"a": 30})).all()]
            return out
        finally:
            await engine.dispose()

    out = asyncio.run(main())
    assert set(out["tables"]) == {"people", "events", "places", "rows"}
    assert out["columns"] == {"pid": "INTEGER", "age": "DOUBLE PRECISION", "sex": "TEXT", "city": "TEXT"}
    assert out["pk"] == [] and out["fks"] == [] and out["unique"] == [] and out["checks"] == [] and out["views"] == []
    assert "public" in out["schemas"]
    assert [r[0] for r in out["grouped"]] == ["F", "M"]


def test_sqlalchemy_async_get_indexes(serve):
    """asyncpg decodes int2vector (pg_index.indoption) as an array of its typelem."""
    sqlalchemy = pytest.importorskip("sqlalchemy")
    from sqlalchemy.ext.asyncio import create_async_engine

    async def main():
        engine = create_async_engine(f"postgresql+asyncpg://alice:{PASSWORD}@127.0.0.1:{serve.port}/dpsql")
        try:
            async with engine.connect() as conn:
                return await conn.run_sync(lambda sync: sqlalchemy.inspect(sync).get_indexes("people"))
        finally:
            await engine.dispose()

    assert asyncio.run(main()) == []

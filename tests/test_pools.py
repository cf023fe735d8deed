"""Connection pools and what they send between borrowers: every answer a pool hands out reaches
its borrower, is charged once, and the reset that follows is the no-op it is for a proxy
(asyncpg's create_pool and Tortoise ORM on it, psycopg_pool, SQLAlchemy's pool_pre_ping,
pgbouncer in front of dpsql; HikariCP is in test_bi_drivers.py)."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import psycopg
import pytest

from .server_fixture import PASSWORD, free_port, wait_listening

ASYNCPG_RESET = "SELECT pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL;"  # asyncpg's, as it sends it


def _queries(serve) -> int:
    with psycopg.connect(serve.dsn(), autocommit=True) as conn:
        return conn.execute("SHOW dpsql.budget").fetchone()[8]


def test_reset_and_check_statements_are_no_ops(serve):
    with psycopg.connect(serve.dsn(), autocommit=True) as conn:
        conn.execute("SET dpsql.epsilon = 0.25")
        conn.execute(ASYNCPG_RESET)  # one simple query, four statements
        assert conn.execute("SHOW dpsql.epsilon").fetchone() == ("1",)  # RESET ALL: the policy's default again
        for sql, tag in [
            ("DISCARD PLANS", "DISCARD PLANS"),
            ("DISCARD SEQUENCES", "DISCARD SEQUENCES"),
            ("UNLISTEN *", "UNLISTEN"),
            ("UNLISTEN jobs", "UNLISTEN"),
            ("CLOSE ALL", "CLOSE CURSOR"),
            ("SET SESSION AUTHORIZATION DEFAULT", "SET"),
            ("RESET SESSION AUTHORIZATION", "RESET"),
            ("RESET ROLE", "RESET"),
            ("SET ROLE NONE", "SET"),
            ("RESET ALL", "RESET"),
            ("select 1", "SELECT 1"),
        ]:
            assert conn.execute(sql).statusmessage == tag, sql
        for sql, value in [
            ("SELECT pg_advisory_lock(42)", ""),
            ("SELECT pg_try_advisory_lock(42)", True),
            ("SELECT pg_advisory_unlock(42)", True),
            ("SELECT pg_advisory_xact_lock(1, 2)", ""),
            ("SELECT pg_try_advisory_lock(hashtext('migrations'))", True),
            ("SELECT pg_advisory_unlock_all()", ""),
        ]:
            assert conn.execute(sql).fetchone() == (value,), sql
        assert conn.execute("SELECT pg_try_advisory_lock(%s) AS got", (7,)).fetchone() == (True,)  # extended, typed
        with pytest.raises(psycopg.errors.FeatureNotSupported) as info:
            conn.execute("LISTEN jobs")
        assert "notifications" in info.value.diag.message_primary
        with pytest.raises(psycopg.errors.SyntaxError):
            conn.execute("DISCARD EVERYTHING")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):  # another identity is still refused
            conn.execute("SET ROLE bob")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT pg_advisory_lock(1, 2, 3)")  # not an advisory call PostgreSQL has either
    assert _queries(serve) == 0  # nothing above is a query on the data


def test_discard_all_is_what_postgresql_makes_it(serve):
    """CLOSE ALL, RESET ALL, DEALLOCATE ALL and DISCARD TEMP (pgbouncer's server_reset_query):
    settings, cursors, prepared statements and temporary views are gone; not inside a transaction."""
    with psycopg.connect(serve.dsn(), autocommit=True) as conn:
        conn.execute("SET dpsql.epsilon = 0.25")
        conn.execute("CREATE TEMPORARY VIEW adults AS SELECT * FROM people WHERE age >= 18")
        conn.execute("DECLARE c CURSOR FOR SELECT name FROM places")
        conn.pgconn.prepare(b"kept", b"SELECT name FROM places")
        conn.execute("DISCARD TEMP")  # the views only
        assert conn.execute("SHOW dpsql.epsilon").fetchone() == ("0.25",)
        with pytest.raises(psycopg.errors.UndefinedTable):
            conn.execute("SELECT COUNT(*) FROM adults")
        conn.execute("DEALLOCATE kept")
        with pytest.raises(psycopg.errors.InvalidSqlStatementName):
            conn.execute("DEALLOCATE kept")
        conn.pgconn.prepare(b"gone", b"SELECT name FROM places")
        with conn.transaction():
            with pytest.raises(psycopg.errors.ActiveSqlTransaction):
                conn.execute("DISCARD ALL")
            raise psycopg.Rollback()
        assert conn.execute("DISCARD ALL").statusmessage == "DISCARD ALL"
        assert conn.execute("SHOW dpsql.epsilon").fetchone() == ("1",)
        with pytest.raises(psycopg.errors.InvalidCursorName):
            conn.execute("FETCH ALL FROM c")
        assert conn.pgconn.exec_prepared(b"gone", []).error_field(ord("C")) == b"26000"
        assert conn.execute("DEALLOCATE ALL").statusmessage == "DEALLOCATE ALL"


def test_asyncpg_pool_delivers_every_answer_and_charges_each_once(serve):
    asyncpg = pytest.importorskip("asyncpg")

    async def main():
        answers = []
        async with asyncpg.create_pool(
            host="127.0.0.1",
            port=serve.port,
            user="alice",
            password=PASSWORD,
            database="dpsql",
            ssl=False,
            min_size=1,
            max_size=1,
        ) as pool:
            for age in (20, 30, 40):
                async with pool.acquire() as conn:  # released with asyncpg's reset
                    await conn.execute("SET dpsql.epsilon = 0.5")
                    answers.append(await conn.fetchval("SELECT COUNT(*) FROM people WHERE age > $1", age))
                    assert await conn.fetchval("SELECT pg_try_advisory_lock($1)", age) is True
                    async with conn.transaction():
                        answers.append(
                            await conn.fetchval("SELECT SUM(amount) FROM events WHERE amount > $1", float(age))
                        )
            async with pool.acquire() as conn:  # the one connection again: its settings were reset
                assert await conn.fetchval("SHOW dpsql.epsilon") == "1"
                assert await conn.fetchrow(";") is None  # SQLAlchemy's asyncpg ping: an empty statement
            answers.append(await pool.fetchval("SELECT AVG(age) FROM people WHERE city = $1", "Oslo"))
            rows = await pool.fetch("SELECT sex, COUNT(*) AS n FROM people GROUP BY sex ORDER BY sex")
            answers.append([tuple(r) for r in rows])
        return answers

    answers = asyncio.run(main())
    assert len(answers) == 8 and all(a is not None for a in answers)
    assert [r[0] for r in answers[-1]] == ["F", "M"]
    assert _queries(serve) == 8  # each answer charged once, none lost to a refused reset


def test_psycopg_pool_with_check_and_discard_all_reset(serve):
    pool_module = pytest.importorskip("psycopg_pool")
    answers = []
    with pool_module.ConnectionPool(
        serve.dsn(),
        min_size=1,
        max_size=1,
        open=True,
        check=pool_module.ConnectionPool.check_connection,
        reset=lambda conn: conn.execute("DISCARD ALL"),
    ) as pool:
        for age in (25, 35, 45):
            with pool.connection() as conn:  # checked (an empty query) on the way out, reset on the way back
                assert conn.execute("SHOW dpsql.epsilon").fetchone() == ("1",)
                conn.execute("SET dpsql.epsilon = 0.5")
                answers.append(conn.execute("SELECT COUNT(*) FROM people WHERE age > %s", (age,)).fetchone()[0])
        assert pool.get_stats().get("connections_lost", 0) == 0
    assert len(answers) == 3 and all(isinstance(a, int) for a in answers)
    assert _queries(serve) == 3


def test_sqlalchemy_pool_pre_ping_sync_and_async(serve):
    sqlalchemy = pytest.importorskip("sqlalchemy")
    from sqlalchemy.ext.asyncio import create_async_engine

    url = f"alice:{PASSWORD}@127.0.0.1:{serve.port}/dpsql"
    engine = sqlalchemy.create_engine(
        f"postgresql+psycopg://{url}",
        pool_pre_ping=True,
        pool_size=1,
        max_overflow=0,
        connect_args={"sslmode": "disable"},
    )
    try:
        for age in (30, 40):
            with engine.connect() as conn:  # pinged at each checkout, rolled back at each return
                q = sqlalchemy.text("SELECT COUNT(*) FROM people WHERE age > :a")
                assert isinstance(conn.execute(q, {"a": age}).scalar(), int)
    finally:
        engine.dispose()

    async def run_async():
        aengine = create_async_engine(f"postgresql+asyncpg://{url}", pool_pre_ping=True, pool_size=1, max_overflow=0)
        try:
            out = []
            for age in (50, 60):
                async with aengine.connect() as conn:
                    q = sqlalchemy.text("SELECT COUNT(*) FROM people WHERE age > :a")
                    out.append((await conn.execute(q, {"a": age})).scalar())
            return out
        finally:
            await aengine.dispose()

    assert all(isinstance(n, int) for n in asyncio.run(run_async()))
    assert _queries(serve) == 4


def test_tortoise_orm_on_an_asyncpg_pool(serve):
    """Tortoise ORM's asyncpg client pools its connections (and resets them on release): its
    aggregate queries are answered, each charged once."""
    tortoise = pytest.importorskip("tortoise")
    from tortoise import Tortoise, fields
    from tortoise.functions import Count
    from tortoise.models import Model

    class Person(Model):
        pid = fields.IntField(primary_key=True)
        age = fields.FloatField()
        sex = fields.CharField(max_length=1)
        city = fields.TextField()

        class Meta:
            table = "people"
            app = "dpsql"

    async def main():
        await Tortoise.init(
            config={
                "connections": {
                    "default": {
                        "engine": "tortoise.backends.asyncpg",
                        "credentials": {
                            "host": "127.0.0.1",
                            "port": serve.port,
                            "user": "alice",
                            "password": PASSWORD,
                            "database": "dpsql",
                            "ssl": False,
                            "minsize": 1,
                            "maxsize": 1,
                        },
                    }
                },
                "apps": {"dpsql": {"models": [__name__], "default_connection": "default"}},
            }
        )
        try:
            total = await Person.all().count()
            older = await Person.filter(age__gt=40).count()
            by_sex = await Person.annotate(n=Count("pid")).group_by("sex").order_by("sex").values("sex", "n")
            return total, older, by_sex
        finally:
            await Tortoise.close_connections()

    Person.__module__ = __name__
    globals()["Person"] = Person  # Tortoise discovers models by module
    try:
        total, older, by_sex = asyncio.run(main())
    finally:
        globals().pop("Person", None)
    assert isinstance(total, int) and isinstance(older, int)
    assert [r["sex"] for r in by_sex] == ["F", "M"] and all(isinstance(r["n"], int) for r in by_sex)
    assert tortoise.__version__ and _queries(serve) == 3


@pytest.mark.skipif(
    shutil.which("pgbouncer") is None and not Path("/usr/sbin/pgbouncer").exists(),
    reason="pgbouncer is installed by tests/setup.sh",
)
def test_pgbouncer_in_front_of_dpsql(serve):
    """pgbouncer in session mode with one server connection: each client after the first gets the
    connection its predecessor used, reset by `server_reset_query = DISCARD ALL` and checked by
    `server_check_query = select 1`; every answer delivered, each charged once."""
    folder = Path(tempfile.mkdtemp(prefix="dpsql-pgbouncer-"))  # readable by the unprivileged user it runs as
    port = free_port()
    (folder / "users.txt").write_text(f'"alice" "{PASSWORD}"\n')
    (folder / "pgbouncer.ini").write_text(
        f"[databases]\ndpsql = host=127.0.0.1 port={serve.port} dbname=dpsql\n"
        f"[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\nauth_type = trust\n"
        f"auth_file = {folder}/users.txt\npool_mode = session\nserver_reset_query = DISCARD ALL\n"
        "server_check_query = select 1\nserver_check_delay = 0\ndefault_pool_size = 1\nmax_client_conn = 10\n"
    )
    for path in (folder, *folder.iterdir()):
        path.chmod(0o755 if path.is_dir() else 0o644)
    command = [shutil.which("pgbouncer") or "/usr/sbin/pgbouncer", str(folder / "pgbouncer.ini")]
    if os.geteuid() == 0:
        command[1:1] = ["-u", "nobody"]  # pgbouncer refuses to run as root
    bouncer = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert wait_listening(port, lambda: bouncer.poll() is None), bouncer.stdout.read()
        dsn = f"host=127.0.0.1 port={port} dbname=dpsql user=alice sslmode=disable"
        answers = []
        for age in (20, 30, 40):
            with psycopg.connect(dsn, autocommit=True) as conn:
                assert conn.execute("SHOW dpsql.epsilon").fetchone() == ("1",)  # the predecessor's SET was discarded
                conn.execute("SET dpsql.epsilon = 0.5")
                answers.append(conn.execute("SELECT COUNT(*) FROM people WHERE age > %s", (age,)).fetchone()[0])
    finally:
        bouncer.terminate()
        log = bouncer.communicate(timeout=30)[0]
        shutil.rmtree(folder, ignore_errors=True)
    assert all(isinstance(a, int) for a in answers) and len(answers) == 3
    assert log.count("new connection to server") == 1 and "ERROR" not in log and "WARNING" not in log, log
    assert _queries(serve) == 3

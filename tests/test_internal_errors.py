"""A failure inside the server never drops the connection: the client gets XX000 with a
reference, the operator's log gets the reference, the statement and the traceback, and the
session goes on (simple protocol, extended protocol up to Sync, describe, COPY, batches)."""

from __future__ import annotations

import asyncio
import logging
import re
import threading

import psycopg
import pytest

from dpsql.config import load_policy
from dpsql.server.catalog import Catalog
from dpsql.server.listener import Server
from dpsql.server.throttle import LoginThrottle
from dpsql.server.wire import copyout
from dpsql.server.wire.scram import make_verifier
from dpsql.session import Session

from .server_fixture import PASSWORD, Serve

REFERENCE = re.compile(r"reference ([0-9a-f]{8})")


class Live:
    """A Server on its own event loop thread in this process, so a test can break a part of it."""

    def __init__(self, policy):
        self.server = Server(load_policy(policy), port=0)
        self.server.throttle = LoginThrottle(base_delay=0.0)
        self.server.ledger.set_user("alice", make_verifier(PASSWORD), "analyst")
        self.server.log_statements = True
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(30)

    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.server.port} dbname=dpsql user=alice password={PASSWORD} sslmode=disable"

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.shutdown(), self.loop).result(60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)


@pytest.fixture
def live(small_policy):
    s = Live(small_policy)
    yield s
    s.stop()


def _broken(*args, **kwargs):
    raise AttributeError("'Star' object has no attribute 'quoted'")  # a bug's exception, as the catalog once raised


def _reported(caplog, error: psycopg.Error, statement: str) -> str:
    """The reference the client was given, checked against the operator's log: the statement and
    the traceback are there, under the same reference, and nothing of them reached the client."""
    assert error.sqlstate == "XX000"
    text = error.diag.message_primary + (error.diag.message_hint or "")
    assert "Traceback" not in text and "AttributeError" not in text and "still usable" in text
    reference = REFERENCE.search(text).group(1)
    logged = [r for r in caplog.records if r.name == "dpsql.server" and reference in r.getMessage()]
    assert len(logged) == 1 and statement in logged[0].getMessage()
    assert logged[0].exc_info is not None and logged[0].exc_info[0] is AttributeError
    outcome = [r.getMessage() for r in caplog.records if r.name == "dpsql.statements" and statement in r.getMessage()]
    assert outcome and f"XX000 (reference {reference})" in outcome[-1]  # --log-statements has it too
    return reference


def test_an_internal_error_in_the_catalog_keeps_the_session(live, monkeypatch, caplog):
    caplog.set_level(logging.INFO)
    monkeypatch.setattr(Catalog, "answer", _broken)
    sql = "SELECT relname FROM pg_catalog.pg_class"
    with psycopg.connect(live.dsn(), autocommit=True) as conn:
        for prepare in (False, True):  # simple protocol, then extended (Parse, Describe, Execute, Sync)
            with pytest.raises(psycopg.errors.InternalError_) as info:
                conn.execute(sql, prepare=prepare)
            _reported(caplog, info.value, sql)
            assert conn.execute("SELECT COUNT(*) FROM people").fetchone()[0] >= 0
        with conn.transaction():  # inside a transaction: aborted, as any error leaves it, then usable again
            with pytest.raises(psycopg.errors.InternalError_):
                conn.execute(sql)
            with pytest.raises(psycopg.errors.InFailedSqlTransaction):
                conn.execute("SELECT 1")
            raise psycopg.Rollback()
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_an_internal_error_in_a_query_a_describe_and_a_copy(live, monkeypatch, caplog):
    caplog.set_level(logging.INFO)
    with psycopg.connect(live.dsn(), autocommit=True) as conn:
        monkeypatch.setattr(Session, "_execute", _broken)  # the session wraps it: XX000 with a reference too
        with pytest.raises(psycopg.errors.InternalError_) as info:
            conn.execute("SELECT COUNT(*) FROM people")
        _reported(caplog, info.value, "SELECT COUNT(*) FROM people")
        monkeypatch.undo()
        monkeypatch.setattr(Session, "describe", _broken)  # Describe alone: asyncpg's prepare (Parse, Describe, Sync)
        asyncio.run(_asyncpg_prepare(live, "SELECT COUNT(*) FROM events"))
        monkeypatch.undo()
        monkeypatch.setattr(copyout, "encode", _broken)  # while the answer is being sent
        with pytest.raises(psycopg.errors.InternalError_):
            with conn.cursor().copy("COPY (SELECT COUNT(*) FROM people) TO STDOUT") as copy:
                list(copy)
        monkeypatch.undo()
        assert conn.execute("SELECT COUNT(*) FROM people").fetchone()[0] >= 0


async def _asyncpg_prepare(live: Live, sql: str) -> None:
    """A prepare that fails inside the server is XX000, and the same connection then works."""
    import asyncpg

    conn = await asyncpg.connect(
        host="127.0.0.1", port=live.server.port, user="alice", password=PASSWORD, database="dpsql", ssl=False
    )
    try:
        with pytest.raises(asyncpg.InternalServerError) as info:
            await conn.prepare(sql)
        assert info.value.sqlstate == "XX000" and REFERENCE.search(info.value.args[0])
        assert await conn.fetchval("SELECT relname FROM pg_catalog.pg_class WHERE relname = $1", "people") == "people"
    finally:
        await conn.close()


def test_a_query_shape_the_catalog_mishandles_never_drops_the_connection(small_policy, tmp_path):
    """Django's inspectdb sent this, and the server dropped the connection (an AttributeError in
    the catalog) without logging the statement. Whether or not the catalog answers it, the
    connection survives; a failure has a reference that the server's log repeats with the
    traceback and the statement."""
    serve = Serve(small_policy, tmp_path / "ledger.sqlite", "--log-statements")
    sql = "SELECT array_agg(indisunique) FROM (SELECT i.* FROM pg_index i) s"
    try:
        with psycopg.connect(serve.dsn(), autocommit=True) as conn:
            try:
                answered = conn.execute(sql).fetchall()
                reference = None
            except psycopg.errors.InternalError_ as e:
                answered, reference = None, REFERENCE.search(e.diag.message_primary).group(1)
            assert conn.execute("SELECT COUNT(*) FROM people").fetchone()[0] >= 0
    finally:
        out = serve.stop()
    assert answered is not None or reference is not None
    if reference is not None:
        assert f"internal error, reference {reference}" in out and "Traceback" in out
        assert f"XX000 (reference {reference}): {sql}" in out
    else:
        assert f"SELECT 1: {sql}" in out


def test_malformed_binary_parameters_and_bad_utf8_are_errors_not_drops(serve):
    import struct

    with psycopg.connect(serve.dsn(), autocommit=True) as conn:
        pg = conn.pgconn
        # an int4 parameter of 2 bytes: 22P03, as PostgreSQL answers it
        result = pg.exec_params(b"SELECT COUNT(*) FROM people WHERE age > $1", [struct.pack("!h", 3)], [23], [1])
        assert result.error_field(ord("C")) == b"22P03"
        result = pg.exec_(b"SELECT '\xff\xfe'")
        assert result.error_field(ord("C")) == b"22021"
        assert conn.execute("SELECT COUNT(*) FROM people").fetchone()[0] >= 0

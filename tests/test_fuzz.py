"""Fuzzing, bounded in time: generated SQL over the supported grammar is answered or refused
with a SQLSTATE (never an internal error), and a refusal charges nothing; random and mutated
wire messages never take the server down or disturb another session."""

from __future__ import annotations

import random
import socket
import struct

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dpsql

from .server_fixture import frame

NUMERIC = {"people": ["age", "pid"], "events": ["amount", "pid"], "rows": ["v", "g"]}
TEXT = {"people": ["sex", "city"], "events": ["kind", "place"], "rows": []}


@st.composite
def expressions(draw, table: str, alias: str) -> str:
    col = f"{alias}.{draw(st.sampled_from(NUMERIC[table]))}"
    n = draw(st.integers(-5, 200))
    return draw(
        st.sampled_from(
            [
                col,
                f"{col} + {n}",
                f"{col} * {n}",
                f"{col} / {n}",
                f"LEAST(GREATEST({col}, 0), {abs(n) + 1})",
                f"CASE WHEN {col} > {n} THEN {col} ELSE {n} END",
                f"ABS({col})",
                f"COALESCE({col}, {n})",
                f"CAST({col} AS INTEGER)",
                f"ROUND({col}, 1)",
                f"{col} % {n}",
                f"-{col}",
                f"{col} - {col}",
            ]
        )
    )


@st.composite
def conditions(draw, table: str, alias: str) -> str:
    e = draw(expressions(table, alias))
    n = draw(st.integers(-5, 200))
    texts = TEXT[table]
    options = [
        f"{e} > {n}",
        f"{e} BETWEEN {n} AND {n + 10}",
        f"{e} IN ({n}, {n + 1}, {n + 2})",
        f"{e} IS NULL",
        f"NOT ({e} <= {n})",
        f"{e} > {n} OR {e} < {-n}",
    ]
    if texts:
        t = f"{alias}.{draw(st.sampled_from(texts))}"
        options += [f"{t} LIKE '%a%'", f"{t} = 'F'", f"LOWER({t}) IN ('a', 'north')", f"LENGTH({t}) > 2"]
    return draw(st.sampled_from(options))


@st.composite
def queries(draw) -> str:
    table = draw(st.sampled_from(list(NUMERIC)))
    alias = "t"
    source = f"{table} t"
    if table == "events" and draw(st.booleans()):
        source = "events t JOIN people p ON t.pid = p.pid"
    elif table == "people" and draw(st.booleans()):
        source = "(SELECT pid, SUM(amount) AS age, COUNT(*) AS sex2 FROM events GROUP BY pid) t"
        table = "people"
    e = draw(expressions(table, alias))
    agg = draw(
        st.sampled_from(
            [
                "COUNT(*)",
                f"COUNT({e})",
                f"SUM({e})",
                f"AVG({e})",
                f"MIN({e})",
                f"MAX({e})",
                f"STDDEV({e})",
                f"MEDIAN({e})",
                "COUNT(DISTINCT t.pid)",
                f"VAR_POP({e})",
                f"SUM({e}) / COUNT(*)",
            ]
        )
    )
    group = draw(st.sampled_from(["", "GROUP BY 1", "GROUP BY 1, 2"]))
    keys = {"": [], "GROUP BY 1": [1], "GROUP BY 1, 2": [1, 2]}[group]
    key_exprs = []
    for _ in keys:
        texts = TEXT[table] if "JOIN" not in source and "SELECT" not in source else []
        key_exprs.append(
            draw(
                st.sampled_from(
                    [f"t.{c}" for c in texts] + [f"CASE WHEN {e} > 10 THEN 'hi' ELSE 'lo' END", f"FLOOR({e} / 10)"]
                )
            )
        )
    select = ", ".join(key_exprs + [agg])
    where = f" WHERE {draw(conditions(table, alias))}" if draw(st.booleans()) else ""
    tail = draw(st.sampled_from(["", " ORDER BY 1", " LIMIT 3", f" HAVING {agg} > 0" if group else ""]))
    return f"SELECT {select} FROM {source}{where} {group}{tail}"


def _check(cur, sql: str) -> None:
    before = cur.connection.session.budget()["queries"]
    try:
        cur.execute(sql)
        cur.fetchall()
    except dpsql.InternalError as e:
        pytest.fail(f"internal error on {sql!r}: {e}")
    except dpsql.Error as e:
        assert e.sqlstate and len(e.sqlstate) == 5, sql
        engine_failure = isinstance(e, dpsql.OperationalError) and "stays charged" in str(e)
        if not engine_failure:
            assert cur.connection.session.budget()["queries"] == before, (sql, str(e))


@pytest.fixture(scope="module")
def fuzz_cursor(tmp_path_factory):
    from .conftest import default_events, default_people, make_db, write_policy

    d = tmp_path_factory.mktemp("fuzz")
    make_db(
        d / "db.duckdb", default_people(), default_events(), rows=[((i % 21) - 10.0, 1 + i % 3) for i in range(300)]
    )
    conn = dpsql.connect(write_policy(d, epsilon=1e9, query_epsilon=1.0), user="alice")
    cur = conn.cursor()
    cur.execute("SET dpsql.cache = off")
    cur.execute("SET dpsql.delta = 1e-9")
    yield cur
    conn.close()


@settings(max_examples=250, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(sql=queries())
def test_generated_queries_are_answered_or_refused_cleanly(fuzz_cursor, sql):
    _check(fuzz_cursor, sql)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(sql=queries(), cut=st.integers(0, 400), junk=st.text(max_size=6))
def test_mangled_queries_are_refused_cleanly(fuzz_cursor, sql, cut, junk):
    _check(fuzz_cursor, sql[:cut] + junk + sql[cut:])


VALID = [
    frame(b"P", b"s\x00SELECT COUNT(*) FROM people WHERE age > $1\x00\x00\x00"),
    frame(b"B", b"\x00s\x00\x00\x00\x00\x01\x00\x00\x00\x0230\x00\x00"),
    frame(b"D", b"P\x00"),
    frame(b"E", b"\x00\x00\x00\x00\x00"),
    frame(b"S", b""),
    frame(b"Q", b"SELECT COUNT(*) FROM people\x00"),
    frame(b"C", b"S\x00"),
    frame(b"H", b""),
]


def test_random_and_mutated_wire_messages(serve):
    """150 sessions, each sent a burst of valid, mutated and random messages (seeded, so the
    run repeats); after each the server still answers a second, untouched session."""
    rng = random.Random(20261123)
    watcher = psycopg.connect(serve.dsn("bob"), autocommit=True)
    for i in range(150):
        conn = psycopg.connect(serve.dsn(), connect_timeout=10)
        sock = socket.socket(fileno=conn.pgconn.socket)
        try:
            sock.settimeout(0.2)
            burst = b""
            for _ in range(rng.randint(1, 6)):
                msg = bytearray(rng.choice(VALID))
                mode = rng.random()
                if mode < 0.4:
                    for _ in range(rng.randint(1, 4)):
                        msg[rng.randrange(len(msg))] = rng.randrange(256)
                elif mode < 0.6:
                    msg = msg[: rng.randrange(1, len(msg) + 1)]
                elif mode < 0.8:
                    msg = bytearray(
                        bytes([rng.randrange(256)])
                        + struct.pack("!i", rng.randint(-10, 70))
                        + rng.randbytes(rng.randint(0, 60))
                    )
                burst += bytes(msg)
            try:
                sock.sendall(burst + frame(b"S", b""))
                sock.recv(65536)
            except OSError:
                pass
        finally:
            sock.detach()
            conn.close()
        if i % 15 == 0:
            assert watcher.execute("SELECT COUNT(*) FROM people").fetchone()[0] >= 0
    assert watcher.execute("SHOW dpsql.budget").fetchone() is not None
    watcher.close()

"""End-to-end: real PostgreSQL clients against a running `dpsql serve`."""

from __future__ import annotations

import shutil
import signal
import socket
import struct
import subprocess
import sys

import psycopg
import pytest

import dpsql
from dpsql.ledger import Ledger

from .server_fixture import PASSWORD, Serve, assert_cancelled_midway, frame, messages

pytestmark = pytest.mark.slow  # a dpsql serve process per test: 10-30 s each in the CI run


def test_psycopg_simple_parameters_prepared_binary(serve):
    with psycopg.connect(serve.dsn(), autocommit=True) as conn:
        rows = conn.execute("SELECT sex, COUNT(*) AS n, AVG(age) FROM people GROUP BY sex ORDER BY sex").fetchall()
        assert [r[0] for r in rows] == ["F", "M"] and isinstance(rows[0][1], int) and isinstance(rows[0][2], float)
        (n,) = conn.execute("SELECT COUNT(*) FROM people WHERE age > %s AND city <> %s", (30, "Oslo")).fetchone()
        assert isinstance(n, int)
        for _ in range(3):  # server-side prepared statement, reused
            conn.execute("SELECT COUNT(*) FROM people WHERE age > %s", (40,), prepare=True).fetchone()
        with conn.cursor(binary=True) as cur:
            cur.execute("SELECT sex, COUNT(*), SUM(age) FROM people GROUP BY sex")
            got = cur.fetchall()
            assert len(got) == 2 and isinstance(got[0][1], int) and isinstance(got[0][2], float)
        assert conn.execute("SHOW dpsql.epsilon").fetchone() == ("1",)
        budget = conn.execute("SHOW dpsql.budget").fetchone()
        assert budget[0] == "alice" and budget[8] == 4  # repeats of the prepared query came from the cache
        assert "dpsql" in conn.execute("SELECT version()").fetchone()[0]
        # the pid BackendKeyData gave, as pgAdmin's and DBeaver's session views match them
        assert conn.execute("SELECT pg_backend_pid()").fetchone() == (conn.info.backend_pid,) != (0,)
        assert conn.execute("SELECT * FROM places ORDER BY name").fetchall()[0] == ("east", "r0")


def test_a_dashboards_filter_values_through_a_prepared_statement_each_charged_once(serve):
    """New values of a prepared statement's parameters: from the third on, the query's shape has a
    template (sql/slots.py); every execution is still answered and charged once."""
    with psycopg.connect(serve.dsn(), autocommit=True) as conn:
        sql = "SELECT sex, COUNT(*), AVG(age) FROM people WHERE age >= %s AND city <> %s GROUP BY sex ORDER BY sex"
        for i, (age, city) in enumerate([(20, "Oslo"), (30, "Rome"), (40, "Lima"), (50, "it's"), (60, "Pune")]):
            with conn.cursor(binary=bool(i % 2)) as cur:
                rows = cur.execute(sql, (age, city), prepare=True).fetchall()
            assert [r[0] for r in rows] == ["F", "M"] and all(isinstance(r[1], int) for r in rows)
        assert conn.execute("SHOW dpsql.budget").fetchone()[8] == 5


def test_errors_carry_sqlstate_and_the_session_survives(serve):
    with psycopg.connect(serve.dsn(), autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege) as info:
            conn.execute("SELECT * FROM people")
        assert "aggregate" in info.value.diag.message_hint
        with pytest.raises(psycopg.errors.UndefinedTable):
            conn.execute("SELECT COUNT(*) FROM nope")
        with pytest.raises(psycopg.errors.SyntaxError):
            conn.execute("SELECT COUNT(* FROM people")
        assert conn.execute("SELECT COUNT(*) FROM people").fetchone()[0] >= 0
    with psycopg.connect(serve.dsn()) as conn:  # inside a transaction: aborted until rollback
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT * FROM people")
        with pytest.raises(psycopg.errors.InFailedSqlTransaction):
            conn.execute("SELECT COUNT(*) FROM people")
        conn.rollback()
        assert conn.execute("SELECT COUNT(*) FROM people").fetchone()[0] >= 0


def test_describe_never_charges(serve):
    with psycopg.connect(serve.dsn(), autocommit=True) as conn:
        with conn.cursor() as cur:
            # psycopg's describe of a prepared statement: Parse + Describe, no Execute
            conn.pgconn.prepare(b"q1", b"SELECT sex, COUNT(*), AVG(age) FROM people WHERE age > $1 GROUP BY sex")
            desc = conn.pgconn.describe_prepared(b"q1")
            assert desc.nfields == 3 and desc.nparams == 1
            assert [desc.fname(i) for i in range(3)] == [b"sex", b"count", b"avg"]
            assert desc.ftype(1) == 20 and desc.ftype(2) == 701
            cur.execute("SHOW dpsql.budget")
            assert cur.fetchone()[8] == 0


def test_limit_and_offset_as_clients_write_them(serve):
    """SQLAlchemy's .limit(n) sends `LIMIT $1::INTEGER`; asyncpg and node-pg prepare `LIMIT $1`
    with no parameter type; PostgreSQL also accepts LIMIT ALL and LIMIT NULL (no limit)."""
    with psycopg.connect(serve.dsn(), autocommit=True) as conn:
        cases = [
            ("SELECT city, COUNT(*) AS n FROM people GROUP BY city ORDER BY n DESC LIMIT %s::INTEGER", (2,), 2),
            (
                "SELECT city, COUNT(*) AS n FROM people GROUP BY city ORDER BY city LIMIT %s OFFSET %s::BIGINT",
                (2, 1),
                2,
            ),
            ("SELECT city, COUNT(*) FROM people GROUP BY city LIMIT ALL", None, 4),
            ("SELECT city, COUNT(*) FROM people GROUP BY city LIMIT NULL", None, 4),
            ("SELECT city, COUNT(*) FROM people GROUP BY city ORDER BY city LIMIT ((3)) OFFSET (1)", None, 3),
        ]
        for sql, params, rows in cases:
            assert len(conn.execute(sql, params).fetchall()) == rows
        conn.pgconn.prepare(b"lim", b"SELECT city, COUNT(*) FROM people GROUP BY city LIMIT $1")
        desc = conn.pgconn.describe_prepared(b"lim")
        assert desc.nfields == 2 and desc.nparams == 1 and desc.param_type(0) == 20
        with pytest.raises(psycopg.errors.InvalidRowCountInLimitClause):
            conn.execute("SELECT city, COUNT(*) FROM people GROUP BY city LIMIT -1")
        assert conn.execute("SHOW dpsql.budget").fetchone()[8] == len(cases)


def test_binary_array_parameters(serve):
    """psycopg's %b with a list (asyncpg always) sends a binary array: read as the same list the
    text form gives (the error used to quote the raw bytes)."""
    with psycopg.connect(serve.dsn(), autocommit=True) as conn:
        conn.execute("SET dpsql.cache = off")
        text = conn.execute("SELECT COUNT(*) FROM people WHERE city = ANY(%s)", (["Oslo", "Rome"],)).fetchone()[0]
        with conn.cursor(binary=True) as cur:
            cur.execute("SELECT COUNT(*) FROM people WHERE city = ANY(%b)", (["Oslo", "Rome"],))
            binary = cur.fetchone()[0]
            cur.execute("SELECT COUNT(*) FROM people WHERE pid = ANY(%b)", ([1, 2, 3, None],))
            assert cur.fetchone()[0] is not None
        assert abs(text - binary) < 60 and text > 40  # 100 of 200 people, each answer noisy
        assert conn.execute("SHOW dpsql.budget").fetchone()[8] == 3


def test_set_local_and_a_rolled_back_set_end_with_their_transaction(serve):
    """As in PostgreSQL: a transaction's SET is undone by ROLLBACK, SET LOCAL ends at COMMIT,
    a plain SET that commits stays, and SET LOCAL outside a transaction does nothing."""
    with psycopg.connect(serve.dsn(), autocommit=True) as conn:
        show = lambda: conn.execute("SHOW dpsql.epsilon").fetchone()[0]  # noqa: E731
        default = show()
        conn.execute("BEGIN")
        conn.execute("SET dpsql.epsilon = 0.07")
        conn.execute("ROLLBACK")
        assert show() == default
        conn.execute("BEGIN")
        conn.execute("SET LOCAL dpsql.epsilon = 0.5")
        assert show() == "0.5"
        conn.execute("COMMIT")
        assert show() == default
        conn.execute("SET LOCAL dpsql.epsilon = 0.5")
        assert show() == default
        conn.execute("BEGIN")
        conn.execute("SET dpsql.epsilon = 0.3")
        conn.execute("COMMIT")
        assert show() == "0.3"


def test_a_clients_transaction_status_follows_its_blocks(serve):
    """psycopg's view of the transaction status (ReadyForQuery's, server/wire/sequence.py) through
    its own blocks (BEGIN on the first statement), an error in one (refusing the rest until
    ROLLBACK), savepoints, several statements in one simple query, and the extended protocol
    (parameters) whose error skips to Sync."""
    status = psycopg.pq.TransactionStatus
    with psycopg.connect(serve.dsn()) as conn:  # not autocommit: psycopg sends BEGIN itself
        state = lambda: conn.info.transaction_status  # noqa: E731
        assert state() == status.IDLE
        conn.execute("SELECT COUNT(*) FROM people WHERE age > %s", (30,)).fetchone()  # extended
        assert state() == status.INTRANS
        with pytest.raises(psycopg.errors.UndefinedTable):
            conn.execute("SELECT COUNT(*) FROM nope WHERE age > %s", (30,))
        assert state() == status.INERROR
        with pytest.raises(psycopg.errors.InFailedSqlTransaction) as refused:
            conn.execute("SHOW dpsql.epsilon")
        assert "ROLLBACK" in refused.value.diag.message_hint and state() == status.INERROR
        conn.rollback()
        assert state() == status.IDLE
        conn.execute("SET dpsql.epsilon = 0.3")
        conn.commit()
        assert state() == status.IDLE and conn.execute("SHOW dpsql.epsilon").fetchone() == ("0.3",)
        conn.rollback()
    with psycopg.connect(serve.dsn(), autocommit=True) as conn:
        state = lambda: conn.info.transaction_status  # noqa: E731
        conn.execute("BEGIN")
        conn.execute("SAVEPOINT a")
        with pytest.raises(psycopg.errors.UndefinedTable):
            conn.execute("SELECT COUNT(*) FROM nope")  # simple protocol
        assert state() == status.INERROR
        conn.execute("ROLLBACK TO SAVEPOINT a")
        assert state() == status.INTRANS
        assert conn.execute("COMMIT").statusmessage == "COMMIT" and state() == status.IDLE
        with pytest.raises(psycopg.errors.NoActiveSqlTransaction):
            conn.execute("ROLLBACK TO SAVEPOINT a")  # was answered, and reported a block, before
        assert state() == status.IDLE
        conn.execute("BEGIN; SELECT COUNT(*) FROM people")
        assert state() == status.INTRANS
        with pytest.raises(psycopg.errors.UndefinedTable):
            conn.execute("SELECT 1; SELECT COUNT(*) FROM nope")
        assert state() == status.INERROR
        assert conn.execute("COMMIT").statusmessage == "ROLLBACK" and state() == status.IDLE


def test_a_failed_block_refuses_parse_and_bind_before_any_work(serve):
    """As PostgreSQL: in a failed block the extended protocol's Parse of a statement that does
    not end the block is refused at once (25P02), the rest skipped to Sync, nothing charged; a
    Parse of ROLLBACK is admitted and ends the block."""

    def parse_bind_execute(sql: str) -> bytes:
        return (
            frame(b"P", b"\x00" + sql.encode() + b"\x00\x00\x00")
            + frame(b"B", b"\x00\x00" + struct.pack("!hhh", 0, 0, 0))
            + frame(b"E", b"\x00" + struct.pack("!i", 0))
            + frame(b"S", b"")
        )

    conn = psycopg.connect(serve.dsn(), autocommit=True)
    before = conn.execute("SHOW dpsql.budget").fetchone()
    conn.execute("BEGIN")
    with pytest.raises(psycopg.errors.UndefinedTable):
        conn.execute("SELECT COUNT(*) FROM nope")
    sock = socket.socket(fileno=conn.pgconn.socket)
    try:
        sock.sendall(parse_bind_execute("SELECT COUNT(*) FROM people") + parse_bind_execute("ROLLBACK"))
        sock.sendall(frame(b"X", b""))
        answer = messages(sock)
    finally:
        sock.detach()
        conn.close()
    kinds = [kind for kind, _ in answer]
    assert kinds == [b"E", b"Z", b"1", b"2", b"C", b"Z"], kinds  # refused at Parse; ROLLBACK parsed and run
    assert b"C25P02" in answer[0][1] and answer[1][1] == b"E" and answer[-1][1] == b"I"
    assert answer[4][1].rstrip(b"\x00") == b"ROLLBACK"
    with psycopg.connect(serve.dsn(), autocommit=True) as other:
        assert other.execute("SHOW dpsql.budget").fetchone() == before  # nothing charged


def test_wire_budget_equals_dbapi_budget(serve, small_policy, tmp_path):
    queries = [
        "SELECT COUNT(*) FROM people",
        "SELECT kind, SUM(amount) FROM events GROUP BY kind",
        "SELECT sex, AVG(age) FROM people WHERE age > 30 GROUP BY sex",
    ]
    with psycopg.connect(serve.dsn("bob"), autocommit=True) as conn:
        conn.execute("SET dpsql.epsilon = 0.25")
        for q in queries:
            conn.execute(q).fetchall()
        wire = conn.execute("SHOW dpsql.budget").fetchone()
    local = dpsql.connect(small_policy, user="bob", ledger=tmp_path / "other.sqlite")
    cur = local.cursor()
    cur.execute("SET dpsql.epsilon = 0.25")
    for q in queries:
        cur.execute(q)
    cur.execute("SHOW dpsql.budget")
    assert cur.fetchone()[1:] == wire[1:]


def test_a_multi_statement_string_is_one_planned_batch(serve):
    with psycopg.connect(serve.dsn(), autocommit=True) as conn:
        notices = []
        conn.add_notice_handler(lambda d: notices.append(d.message_primary))
        conn.execute("SET dpsql.delta = 1e-6")
        cur = conn.execute("SELECT COUNT(*) FROM people; SELECT kind, COUNT(*) FROM events GROUP BY kind")
        first = cur.fetchall()
        assert len(first) == 1 and cur.nextset() and len(cur.fetchall()) == 3
        assert conn.execute("SHOW dpsql.budget").fetchone()[8] == 1  # charged once
        assert len(notices) == 2 and all("one charge for this batch of 2 queries" in n for n in notices), notices


def test_a_notice_tells_the_limits_chosen_for_a_query(serve):
    """Under dpsql.bounds = auto (the default) the released limits (and the correction, when the
    profile chose one: a count the bound barely cuts is not corrected, auto_choice.choose) reach
    the client as a notice, beside the cost; the correction's words are test_answer_record's."""
    with psycopg.connect(serve.dsn(), autocommit=True) as conn:
        notices = []
        conn.add_notice_handler(lambda d: notices.append(d.message_primary))
        assert len(conn.execute("SELECT kind, COUNT(*) FROM events GROUP BY kind").fetchall()) == 3
        told = [n for n in notices if "limits chosen for this query" in n]
        assert len(told) == 1 and "row(s) per unit in all" in told[0], notices
        assert "expected relative error" in told[0] or "model" in told[0], notices


def test_explain_notice_says_what_is_left_and_whether_the_query_would_run(serve):
    with psycopg.connect(serve.dsn("bob"), autocommit=True) as conn:  # bob's budget: epsilon 2
        notices = []
        conn.add_notice_handler(lambda d: notices.append(d.message_primary))
        conn.execute("EXPLAIN SELECT COUNT(*) FROM people")
        conn.execute("SET dpsql.epsilon = 5")
        conn.execute("EXPLAIN SELECT COUNT(*) FROM people")
        assert "would cost epsilon=1 " in notices[0] and "more like it" in notices[0], notices
        assert "would be refused: it costs epsilon=5 delta=0 and epsilon=2 delta=1e-06 is left" in notices[1], notices
        assert conn.execute("SHOW dpsql.budget").fetchone()[8] == 0


@pytest.mark.skipif(shutil.which("psql") is None, reason="psql is installed by tests/setup.sh")
def test_a_mixed_script_sends_the_answers_before_a_failing_statement(serve):
    """SET, then a DP query, then a row read: not a batch, so the statements run in turn, as on
    PostgreSQL; the query is charged, so its answer must reach the analyst before the error."""

    def psql(cmd: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["psql", serve.dsn(), "-X", "-c", cmd], capture_output=True, text=True, env=serve.env(), timeout=60
        )

    out = psql("SET dpsql.epsilon = 0.5; SELECT COUNT(*) AS n FROM people; SELECT * FROM people")
    assert out.returncode != 0 and "ERROR" in out.stderr
    assert out.stdout.splitlines()[:2] == ["SET", "  n  "] and "(1 row)" in out.stdout, out.stdout
    assert "e.g. SELECT COUNT(*), AVG(age) FROM people" in out.stderr  # the policy's own table in the hint
    with psycopg.connect(serve.dsn(), autocommit=True) as conn:
        assert conn.execute("SHOW dpsql.budget").fetchone()[8] == 1  # the query that ran, charged once


def test_wrong_password_and_unknown_user_fail_alike(serve):
    messages = []
    for user, password in (("alice", "wrong"), ("nobody", PASSWORD)):
        with pytest.raises(psycopg.OperationalError) as info:
            psycopg.connect(serve.dsn(user, password=password))
        messages.append(str(info.value).replace(user, "U"))
    assert messages[0] == messages[1] and "password authentication failed" in messages[0]


@pytest.mark.skipif(shutil.which("psql") is None, reason="psql is installed by tests/setup.sh")
def test_psql_meta_commands_and_a_query(serve):
    def psql(cmd: str) -> str:
        out = subprocess.run(
            ["psql", serve.dsn(), "-X", "-c", cmd], capture_output=True, text=True, env=serve.env(), timeout=60
        )
        assert out.returncode == 0, out.stderr
        return out.stdout

    assert "people" in psql("\\dt") and "events" in psql("\\dt")
    assert "dpsql" in psql("\\l")
    assert "public" in psql("\\dn")
    described = psql("\\d people")
    assert "age" in described and "double precision" in described and "city" in described
    answer = psql("SELECT sex, COUNT(*) FROM people GROUP BY sex")
    assert "(2 rows)" in answer
    sized = psql("\\dt+")  # table sizes are unknown (NULL), never the engine's error text
    assert "people" in sized and "Size" in sized
    assert "dpsql" in psql("\\du")  # roles, and their (empty) memberships


def test_hostile_startup_and_half_messages_do_not_hurt_others(serve):
    for junk in (
        b"\x00\x00\x00\x08\x04\xd2\x16\x2f",
        b"\xff" * 64,
        struct.pack("!i", 2**30),
        b"\x00\x00\x00\x10" + b"x" * 5,
    ):
        s = socket.create_connection(("127.0.0.1", serve.port))
        s.sendall(junk)
        s.close()
    with psycopg.connect(serve.dsn(), autocommit=True) as conn:
        assert conn.execute("SELECT COUNT(*) FROM people").fetchone()[0] >= 0


def test_sigterm_drains_and_exits_cleanly(small_policy, tmp_path):
    s = Serve(small_policy, tmp_path / "l.sqlite")
    with psycopg.connect(s.dsn(), autocommit=True) as conn:
        conn.execute("SELECT COUNT(*) FROM people").fetchone()
    s.proc.send_signal(signal.SIGTERM)
    s.proc.wait(30)
    assert s.proc.returncode == 0


def test_cancel_request_interrupts_a_running_query(tmp_path):
    import duckdb

    con = duckdb.connect(str(tmp_path / "db.duckdb"))
    con.execute(
        "CREATE TABLE big AS SELECT range AS uid, range % 7 AS g, (range * 7919) % 1000 AS v FROM range(30000000)"
    )
    con.close()
    policy = tmp_path / "big.toml"
    policy.write_text(
        '[engine]\ndatabase = "db.duckdb"\n[privacy]\nepsilon = 100\n[tables.big]\nprivacy_unit = "uid"\n'
        "columns.v = { lower = 0, upper = 1000 }\ncolumns.g = { keys = [0, 1, 2, 3, 4, 5, 6] }\n"
        "[users.alice]\n[users.bob]\n"
    )
    s = Serve(policy, tmp_path / "l.sqlite")
    try:
        with psycopg.connect(s.dsn(), autocommit=True) as conn:
            assert_cancelled_midway(conn, within=30)
    finally:
        s.stop()


def test_connection_limit(small_policy, tmp_path):
    s = Serve(small_policy, tmp_path / "l.sqlite", "--max-connections", "2")
    try:
        a = psycopg.connect(s.dsn())
        b = psycopg.connect(s.dsn())
        with pytest.raises(psycopg.OperationalError) as info:
            psycopg.connect(s.dsn())
        assert "too many clients" in str(info.value)
        a.close()
        b.close()
    finally:
        s.stop()


def test_leading_comments_do_not_hide_what_a_statement_is(serve):
    """dbt prefixes every statement with /* {"app": "dbt", ...} */, psql scripts with -- lines."""
    dbt = '/* {"app": "dbt", "dbt_version": "1.9.0", "node_id": "model.x"} */\n'
    with psycopg.connect(serve.dsn(), autocommit=True) as conn:
        rows = conn.execute(dbt + "select nspname from pg_catalog.pg_namespace").fetchall()
        assert ("public",) in rows
        assert conn.execute("-- tables\nSELECT table_name FROM information_schema.tables").fetchall()
        conn.execute(dbt + "BEGIN")
        assert conn.execute(dbt + "SELECT COUNT(*) FROM people").fetchone()[0] >= 0
        conn.execute(dbt + "COMMIT")


def test_log_statements_shows_each_statement_and_its_outcome_never_values(small_policy, tmp_path):
    """`dpsql serve --log-statements`: what tools send, with the command tag or SQLSTATE."""
    import psycopg

    from .server_fixture import Serve

    serve = Serve(small_policy, tmp_path / "ledger.sqlite", "--log-statements")
    try:
        with psycopg.connect(serve.dsn(), autocommit=True) as c:
            value = c.execute("SELECT COUNT(*) AS n FROM people").fetchone()[0]
            with pytest.raises(psycopg.Error):
                c.execute("SELECT * FROM people")
    finally:
        out = serve.stop()
    assert "statement alice" in out and "SELECT 1: SELECT COUNT(*) AS n FROM people" in out
    assert "42501: SELECT * FROM people" in out
    assert str(value) not in out.split("SELECT COUNT(*) AS n FROM people")[1].split("\n")[0]


def _serve_command(policy, ledger, port: int) -> list[str]:
    """`dpsql serve` on `port`, run here without the fixture (which waits for it to listen)."""
    return [sys.executable, "-m", "dpsql.cli", "serve", "-p", str(policy), f"--ledger={ledger}", f"--port={port}"]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_port_in_use_is_an_error_with_a_hint_not_a_traceback_after_a_greeting(small_policy, tmp_path, workers):
    """Nothing is announced, and the logins this start created are taken back with their
    passwords, never shown: the next start creates and shows them."""
    ledger = tmp_path / "l.sqlite"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            _serve_command(small_policy, ledger, port) + [f"--workers={workers}"],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 1
    assert f"ERROR [58000]: cannot listen on 127.0.0.1:{port}: Address already in use\n" in done.stderr
    assert f"HINT: choose another --port (e.g. --port {port + 1})" in done.stderr
    assert "Traceback" not in done.stderr and "serving" not in done.stdout and "password" not in done.stdout
    store = Ledger(ledger)
    try:
        assert store.user_credentials("alice") is None
    finally:
        store.close()


def test_port_0_announces_the_port_bound(small_policy, tmp_path):
    proc = subprocess.Popen(
        _serve_command(small_policy, tmp_path / "l.sqlite", 0),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        line = next(line for line in proc.stdout if "serving" in line)
        port = int(line.split(" on 127.0.0.1:")[1].split()[0])
        assert port > 0
        socket.create_connection(("127.0.0.1", port), timeout=10).close()
    finally:
        proc.terminate()
        proc.wait(30)

"""Resource limits: predicted and enforced before the charge where the plan and the policy allow,
and, where a limit is hit after the charge, recorded as such and told with a SQLSTATE.

- A join of private tables keeps at most max_join_rows ** (1/k) rows of each unit per table, so
  one person's joined rows stay within a public bound; a join where that falls below a table's
  max_rows is refused at analysis (54000), free.
- The engine's memory limit (53200) and statement timeout (57014), hit after the charge: the
  charge stays, the ledger's release record says the query failed for a resource limit and
  nothing was released, the client gets the SQLSTATE and no traceback, and the connection (or
  session) answers the next query.
"""

from __future__ import annotations

import signal
import textwrap

import duckdb
import psycopg
import pytest
from click.testing import CliRunner
from sqlglot import exp

import dpsql
from dpsql.cli import main as cli
from dpsql.config import load_policy
from dpsql.console.audit import Search, search
from dpsql.ledger import failure_of
from dpsql.prepare import plan_query
from dpsql.session import Session
from dpsql.sql.classify import classify
from dpsql.sql.limits import QueryLimits
from dpsql.sql.rewrite import rewrite

from .conftest import default_people, make_db, write_policy

HEAVY = 10  # units with HEAVY_ROWS events each: a self-join multiplies them to HEAVY_ROWS ** 2 rows
HEAVY_ROWS = 1500
SELF_JOIN = "SELECT COUNT(*) FROM events a JOIN events b ON a.pid = b.pid"
# 1,000 ** 2 joined rows for each heavy unit, grouped and summed: 0.4-0.8 s on one thread
SLOW = "SELECT a.kind, AVG(a.amount + b.amount) FROM events a JOIN events b ON a.pid = b.pid GROUP BY a.kind"


def _heavy_db(directory, *, engine: str = "", limits: str = "") -> object:
    make_db(directory / "db.duckdb", default_people(), [])
    con = duckdb.connect(str(directory / "db.duckdb"))  # the heavy units' events in one statement, not row by row
    con.execute(
        f"INSERT INTO events SELECT 1 + i // {HEAVY_ROWS}, ['a', 'b', 'c'][1 + i % 3], i % 50, 'north' "
        f"FROM range({HEAVY * HEAVY_ROWS}) r(i)"
    )
    con.execute(f"INSERT INTO events SELECT i, 'a', 1.0, 'south' FROM range({HEAVY + 1}, 201) r(i)")
    con.close()
    policy = write_policy(directory)
    text = policy.read_text()
    if engine:
        text = text.replace('database = "db.duckdb"\n', f'database = "db.duckdb"\n{textwrap.dedent(engine)}\n')
    if limits:
        text += f"\n[limits]\n{textwrap.dedent(limits)}\n"
    policy.write_text(text)
    return policy


def _joined_rows_per_unit(session: Session, sql: str) -> int:
    """The most rows one unit has in the bounded query's joined rows (its `filtered` stage)."""
    plan = plan_query(classify(sql).tree, session.policy, session.engine.schema(), "laplace")
    tree = rewrite(plan)
    filtered = next(c.this for c in tree.args["with_"].expressions if c.alias == "filtered")
    most = exp.select("MAX(n)").from_(
        exp.select("unit", "COUNT(*) AS n").from_(filtered.subquery("f")).group_by("unit").subquery("c")
    )
    rs = session.engine.execute(session.engine.sql_of(most))
    return rs.columns[0][0]


def test_join_limits_each_units_rows_to_a_public_bound(tmp_path):
    policy = _heavy_db(tmp_path, limits="max_join_rows = 10000")  # two tables: 100 rows of a unit each
    s = Session(load_policy(policy), "alice")
    try:
        assert _joined_rows_per_unit(s, SELF_JOIN) == 100**2  # not 1500 ** 2
        assert _joined_rows_per_unit(s, SELF_JOIN + " JOIN people p ON p.pid = a.pid") == 21**2  # 21 ** 3 <= 10000
        # a per-unit subquery over the join is bounded the same way
        derived = (
            "SELECT AVG(n) FROM (SELECT a.pid, COUNT(*) AS n FROM events a JOIN events b ON a.pid = b.pid "
            "GROUP BY a.pid) s"
        )
        sql = s.bounded_sql(plan_query(classify(derived).tree, s.policy, s.engine.schema(), "laplace"))
        assert sql.count("__dpsql_jn <= 100") == 2
        # the rows kept are a function of the data alone: the same exact result on every run
        plan = plan_query(classify(SELF_JOIN).tree, s.policy, s.engine.schema(), "laplace")
        first, second = s.bounded_result(plan), s.bounded_result(plan)
        assert first.columns == second.columns
    finally:
        s.close()


def test_one_private_table_is_not_limited(tmp_path):
    policy = _heavy_db(tmp_path, limits="max_join_rows = 100")
    s = Session(load_policy(policy), "alice")
    try:
        sql = s.bounded_sql(
            plan_query(
                classify("SELECT COUNT(*) FROM events e JOIN places p ON e.place = p.name").tree,
                s.policy,
                s.engine.schema(),
                "laplace",
            )
        )
        assert "__dpsql_jn" not in sql
    finally:
        s.close()


@pytest.mark.parametrize("tables", [2, 3, 4, 6, 20])
def test_join_rows_each_is_the_largest_root(tables):
    limits = QueryLimits()
    keep = limits.join_rows_each(tables)
    assert keep**tables <= limits.max_join_rows < (keep + 1) ** tables


def test_a_join_too_wide_for_the_limit_is_refused_free(tmp_path):
    policy = _heavy_db(tmp_path, limits="max_join_rows = 4")  # two tables keep 2 rows each; events' max_rows is 3
    conn = dpsql.connect(policy, user="alice")
    try:
        with pytest.raises(dpsql.ProgrammingError) as info:
            conn.cursor().execute(SELF_JOIN)
        err = info.value
        assert err.sqlstate == "54000"
        assert "max_join_rows = 4" in err.message and "nothing was run or charged" in err.message
        assert "raise max_join_rows" in err.hint
        assert conn.session.budget()["queries"] == 0
    finally:
        conn.close()


def _assert_failed_after_charge(conn, sqlstate: str, words: str) -> None:
    """The last charge stands, its release record says it failed for a resource limit, and the
    session answers the next query."""
    ledger = conn.session.ledger
    last = ledger.history("alice")[-1]
    failure = failure_of(last["released"])
    assert failure == {"sqlstate": sqlstate, "reason": failure["reason"], "resource_limit": True}
    assert words in failure["reason"]
    assert not ledger.release_recorded("alice", last["id"])  # a failure is no receipt for a cached answer
    assert conn.session.budget()["queries"] == 1
    records = [r for r in search(ledger, Search(kind="charges")) if r.charge_id == last["id"]]
    assert records[0].released == f"no: failed ({sqlstate}, resource limit)"
    history = CliRunner().invoke(cli, ["budget", "history", "--policy", str(conn.session.policy.path), "alice"])
    assert (
        f"[charged; failed after its charge for a resource limit: {failure['reason']} (SQLSTATE {sqlstate}); "
        "nothing was released]" in history.output
    ), history.output
    cur = conn.cursor()
    cur.execute("SELECT COUNT(*) FROM places")  # public: free, and the session still works
    assert cur.fetchone() == (3,)


@pytest.mark.parametrize(
    "engine,sql,sqlstate,message,hint,reason",
    [
        (
            'memory_limit = "4MB"',
            SELF_JOIN,
            "53200",
            "out of memory: the query needed more memory than the engine may use",
            "memory_limit",
            "out of memory",
        ),
        (
            "statement_timeout = 0.05",
            SLOW,
            "57014",
            "canceling statement due to statement timeout",
            "statement_timeout",
            "statement timeout",
        ),
    ],
    ids=["out_of_memory", "statement_timeout"],
)
def test_a_resource_limit_after_the_charge_is_recorded_and_told(tmp_path, engine, sql, sqlstate, message, hint, reason):
    policy = _heavy_db(tmp_path, engine=f"{engine}\nthreads = 1")
    conn = dpsql.connect(policy, user="alice")
    try:
        cur = conn.cursor()
        cur.execute("SET dpsql.bounds = policy")
        with pytest.raises(dpsql.OperationalError) as info:
            cur.execute(sql)
        err = info.value
        assert (err.sqlstate, err.message) == (sqlstate, message)
        assert "stays charged" in err.hint and hint in err.hint
        assert "Traceback" not in str(err) and "duckdb" not in str(err).lower()
        _assert_failed_after_charge(conn, sqlstate, reason)
    finally:
        conn.close()


def test_statement_timeout_is_a_policy_key_of_duckdb(tmp_path):
    policy = _heavy_db(tmp_path, engine="statement_timeout = 12.5")
    assert load_policy(policy).engine.statement_timeout == 12.5
    text = policy.read_text().replace("statement_timeout = 12.5", "statement_timeout = -1")
    policy.write_text(text)
    with pytest.raises(dpsql.Error):
        load_policy(policy)


@pytest.mark.parametrize("workers", ["1", "2"])  # one process; a supervisor writing its workers' records
def test_out_of_memory_over_the_wire_keeps_the_connection(tmp_path, workers):
    from dpsql.ledger import Ledger

    from .server_fixture import Serve

    policy = _heavy_db(tmp_path, engine='memory_limit = "4MB"\nthreads = 1')
    serve = Serve(policy, tmp_path / "ledger.sqlite", "--workers", workers)
    try:
        serve.wait_for("serving")
        with psycopg.connect(serve.dsn(), autocommit=True) as conn:
            conn.execute("SET dpsql.bounds = policy")
            with pytest.raises(psycopg.errors.OutOfMemory) as info:
                conn.execute(SELF_JOIN)
            assert info.value.diag.sqlstate == "53200"
            assert "stays charged" in info.value.diag.message_hint
            assert "Traceback" not in str(info.value)
            assert conn.execute("SELECT COUNT(*) FROM places").fetchone()[0] == 3
            assert conn.execute("SELECT queries FROM dpsql_budget").fetchone()[0] == 1
    finally:
        out = serve.stop()
    assert "Traceback" not in out
    ledger = Ledger(tmp_path / "ledger.sqlite")
    try:
        failure = failure_of(ledger.history("alice")[-1]["released"])
    finally:
        ledger.close()
    assert failure is not None and failure["sqlstate"] == "53200" and failure["resource_limit"]


def test_the_watchdog_interrupts_only_what_outlives_it_and_rests_when_idle(monkeypatch):
    import time

    from dpsql.engines import watchdog

    def until(condition, seconds: float = 10.0) -> float:
        """Seconds until `condition` holds (polled; a busy host may wake the watchdog late)."""
        start = time.monotonic()
        while not condition():
            assert time.monotonic() - start < seconds
            time.sleep(0.005)
        return time.monotonic() - start

    monkeypatch.setattr(watchdog, "IDLE_EXIT", 0.2)
    dog = watchdog.Watchdog(0.05)
    interrupted = []
    try:
        with dog.timed(lambda: interrupted.append("slow")) as expired:
            assert until(expired) >= 0.04  # never before its timeout
        with dog.timed(lambda: interrupted.append("quick")) as expired:
            pass
        assert not expired() and interrupted == ["slow"]
        until(lambda: dog._thread is None)  # no thread kept for an engine that runs nothing
        with dog.timed(lambda: interrupted.append("again")) as expired:
            until(expired)
        assert interrupted == ["slow", "again"]
    finally:
        dog.close()


def test_queries_in_a_row_do_not_wake_the_watchdog_each_and_are_still_timed():
    """The thread sleeps until the earliest deadline it saw; a query registered meanwhile (a later
    deadline) does not wake it: 200 quick queries in a row wake it a few times, not 200; a query
    that outlives its timeout after them is still interrupted."""
    import time

    from dpsql.engines import watchdog

    dog = watchdog.Watchdog(0.5)
    interrupted = []
    try:
        for _ in range(200):
            with dog.timed(lambda: interrupted.append("quick")):
                pass
        assert dog.wakeups < 20 and interrupted == []
        with dog.timed(lambda: interrupted.append("slow")) as expired:
            start = time.monotonic()
            while not expired():
                assert time.monotonic() - start < 10.0
                time.sleep(0.005)
        assert time.monotonic() - start >= 0.4 and interrupted == ["slow"]
    finally:
        dog.close()


def test_the_watchdog_holds_no_interrupt_once_its_query_ends_and_close_waits_for_it():
    """A server aborted at exit ("terminate called ... exception not rethrown"): the watchdog's
    thread still held the last query's interrupt, a bound method of a DuckDB cursor, and dropped
    it while the interpreter exited, where the cursor's destructor cannot take the GIL back."""
    import gc
    import time
    import weakref

    from dpsql.engines import watchdog

    class Cursor:
        def interrupt(self) -> None:
            pass

    dog = watchdog.Watchdog(0.05)
    cursor = Cursor()
    gone = weakref.ref(cursor)
    with dog.timed(cursor.interrupt) as expired:
        while not expired():
            time.sleep(0.005)
    with dog.timed(Cursor().interrupt):
        pass
    del cursor
    time.sleep(0.1)  # the thread has looped and is asleep again
    gc.collect()
    assert gone() is None and dog._thread is not None
    thread = dog._thread
    dog.close()
    assert not thread.is_alive() and dog._thread is None


def test_a_forked_child_times_its_queries_with_a_watchdog_of_its_own():
    """fork() copies the watchdog's lock as it is: held, when the parent's thread was inside
    its loop at that instant, and then for ever in the child (a forked child's query hung)."""
    import os
    import time

    from dpsql.engines import watchdog

    dog = watchdog.Watchdog(0.05)
    with dog.timed(lambda: None):
        pass
    dog._cond.acquire()  # as the parent's thread holds it while it interrupts what expired
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            signal.alarm(20)
            with dog.timed(lambda: None) as expired:
                while not expired():
                    time.sleep(0.005)
            code = 0
        finally:
            os._exit(code)
    dog._cond.release()
    _, status = os.waitpid(pid, 0)
    dog.close()
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


# Strings a statement builds (sql/pgfunctions.py's MAX_STRING): no engine's memory limit stops
# REPEAT or LPAD, so their length is capped before anything runs.
@pytest.mark.parametrize(
    "sql",
    [
        "SELECT repeat('x', 2000000000)",
        "SELECT lpad('a', 200001)",
        "SELECT rpad('a', 100001, '-')",
        "SELECT COUNT(*), repeat('*', 5000000) AS bar FROM people",
        "SELECT format('%2000000s', 'a')",
    ],
)
def test_a_literal_string_length_over_the_cap_is_refused_free(session, sql):
    before = session.budget()["queries"]
    with pytest.raises(dpsql.ProgrammingError) as info:
        session.execute(sql)
    assert info.value.sqlstate == "54000" and "the limit is 100,000" in str(info.value)
    assert session.budget()["queries"] == before


def test_a_computed_string_length_over_the_cap_is_null(session):
    """A length from released values: NULL beyond the cap (it allocated 2 GB before), the
    query's own value within it; charged once, as the query without the bar would be."""
    result = session.execute(
        "SELECT repeat('*', COUNT(*) * 0 + 2000000000) AS big, repeat('*', COUNT(*) * 0 + 3) AS bar, "
        "lpad('a', CAST(COUNT(*) * 0 + 100000 AS INTEGER)) AS edge FROM people"
    )
    ((big, bar, edge),) = result.rows
    assert big is None and bar == "***" and len(edge) == 100_000
    assert session.budget()["queries"] == 1
    assert session.execute("SELECT repeat('ab', 3) AS x").rows == [("ababab",)]

"""Statement limits: pathological statements are refused before the expensive step, with
SQLSTATE 54000/54001 naming the limit, in well under a second of CPU, and charge nothing."""

from __future__ import annotations

import threading
import time

import pytest

import dpsql
from dpsql.errors import PolicyError

from .conftest import write_policy

PLUS = "SELECT COUNT(*) FROM people WHERE age < " + "+".join(["1"] * 1_000_000)
CASES = {
    "text size (2 MB expression)": (PLUS, "54000", "max_query_bytes"),
    "tokens": ("SELECT COUNT(*) FROM people WHERE age < " + "+".join(["1"] * 30_000), "54001", "max_tokens"),
    "IN list of 100,000": (
        "SELECT COUNT(*) FROM people WHERE age IN (" + ",".join(map(str, range(100_000))) + ")",
        "54000",
        "max_query_bytes",
    ),
    "IN list of 2,000": (
        "SELECT COUNT(*) FROM people WHERE age IN (" + ",".join(map(str, range(2_000))) + ")",
        "54000",
        "max_in_list",
    ),
    "10,000 chained CTEs": (
        "WITH "
        + ", ".join(f"c{i} AS (SELECT * FROM c{i - 1})" if i else "c0 AS (SELECT * FROM people)" for i in range(10_000))
        + " SELECT COUNT(*) FROM c9999",
        "54000",
        "max_query_bytes",
    ),
    "500 chained CTEs": (
        "WITH "
        + ", ".join(f"c{i} AS (SELECT * FROM c{i - 1})" if i else "c0 AS (SELECT * FROM people)" for i in range(500))
        + " SELECT COUNT(*) FROM c499",
        "54001",
        "max_depth",
    ),
    "40 nested subqueries": (
        "SELECT COUNT(*) FROM " + "(SELECT * FROM " * 40 + "people" + ") t" * 40,
        "54001",
        "max_depth",
    ),
}


def test_limits_refuse_quickly_and_free(conn):
    cur = conn.cursor()
    for name, (sql, sqlstate, key) in CASES.items():
        start = time.process_time()
        with pytest.raises(dpsql.ProgrammingError) as err:
            cur.execute(sql)
        assert time.process_time() - start < 1.0, name
        assert err.value.sqlstate == sqlstate and key in str(err.value), name
    assert conn.session.budget()["queries"] == 0
    cur.execute("SELECT COUNT(*) FROM people")  # the session is unharmed
    assert conn.session.budget()["queries"] == 1


def test_limits_come_from_the_policy(small_policy):
    write_policy(small_policy.parent, extra="\n[limits]\nmax_in_list = 5000\nmax_depth = 60\n")
    conn = dpsql.connect(small_policy, user="alice")
    cur = conn.cursor()
    cur.execute(CASES["IN list of 2,000"][0])
    cur.execute(CASES["40 nested subqueries"][0])
    conn.close()
    for bad in ("max_in_list = 0", "planning_seconds = -1", "max_rows = 3"):
        write_policy(small_policy.parent, extra=f"\n[limits]\n{bad}\n")
        with pytest.raises(PolicyError, match=r"\[limits\]"):
            dpsql.connect(small_policy, user="alice")


def test_planning_time_budget(small_policy):
    write_policy(small_policy.parent, extra="\n[limits]\nplanning_seconds = 0.000001\n")
    conn = dpsql.connect(small_policy, user="alice")
    with pytest.raises(dpsql.ProgrammingError) as err:
        conn.cursor().execute("SELECT sex, COUNT(*) FROM people GROUP BY sex")
    assert err.value.sqlstate == "54001" and "planning_seconds" in str(err.value)
    assert conn.session.budget()["queries"] == 0
    conn.close()


@pytest.mark.parametrize(
    "step",
    [
        # The first query over a large table builds its weighted copy inside planning: engine work
        # whose time depends on the data (else the first query over 10M rows was refused).
        "weighted_copy",
        # Binding the bounded query (and listing the declared keys): a busy Spark cluster took seconds.
        "describe",
    ],
)
def test_the_engines_work_is_not_planning(small_policy, step):
    """Engine work inside planning does not count against planning_seconds: a step that takes
    longer than the limit still lets the query be answered and charged once."""
    write_policy(small_policy.parent, extra="\n[limits]\nplanning_seconds = 0.2\n")
    conn = dpsql.connect(small_policy, user="alice")
    engine_step = getattr(conn.session.engine, step)

    def slow(*args, **kwargs):
        time.sleep(0.5)
        return engine_step(*args, **kwargs)

    setattr(conn.session.engine, step, slow)
    cur = conn.cursor()
    cur.execute("SELECT kind, COUNT(*) FROM events GROUP BY kind")
    assert len(cur.fetchall()) == 3 and conn.session.budget()["queries"] == 1
    conn.close()


def test_wire_workers_are_not_held(serve):
    """Hostile statements over the wire are refused in milliseconds while another analyst's
    queries keep being answered."""
    import psycopg

    errors, answered = [], []

    def hostile():
        with psycopg.connect(serve.dsn("bob")) as c:
            for _ in range(5):
                try:
                    c.execute(PLUS)
                except psycopg.Error as e:
                    errors.append(e.sqlstate)

    threads = [threading.Thread(target=hostile) for _ in range(4)]
    start = time.monotonic()
    for t in threads:
        t.start()
    with psycopg.connect(serve.dsn()) as c:
        c.execute("SET dpsql.cache = off")
        for _ in range(5):
            answered.append(c.execute("SELECT COUNT(*) FROM people").fetchone()[0])
    for t in threads:
        t.join(timeout=60)
    assert errors == ["54000"] * 20 and len(answered) == 5
    assert time.monotonic() - start < 30


@pytest.mark.parametrize("batch", [False, True], ids=["execute", "execute_batch"])
def test_a_tree_too_deep_for_python_is_refused_not_an_internal_error(small_policy, batch):
    """With max_expression_depth raised far beyond what a recursive pass can walk, a chain of
    5,000 ORs reaches Python's recursion limit: a 54001 refusal naming the limit, on both entry
    points, and nothing charged."""
    write_policy(
        small_policy.parent,
        extra=(
            "\n[limits]\nmax_expression_depth = 100000\nmax_nodes = 1000000\n"
            "max_tokens = 1000000\nmax_query_bytes = 10000000\n"
        ),
    )
    conn = dpsql.connect(small_policy, user="alice")
    sql = "SELECT COUNT(*) FROM people WHERE " + " OR ".join(f"age = {i}" for i in range(5000))
    with pytest.raises(dpsql.ProgrammingError) as err:
        if batch:
            conn.session.execute_batch([sql, "SELECT COUNT(*) FROM people"], epsilon=0.5)
        else:
            conn.cursor().execute(sql)
    assert err.value.sqlstate == "54001" and "max_expression_depth" in err.value.hint
    assert conn.session.budget()["queries"] == 0
    conn.close()

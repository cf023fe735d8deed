"""Noise and budget in SQL for dashboards: DP_INTERVAL_LOW/HIGH as result columns, the budget
as a free relation, and how many more queries like a given one the budget admits (EXPLAIN)."""

from __future__ import annotations

import psycopg
import pytest

import dpsql
from dpsql.accounting.cost import Cost
from dpsql.accounting.filters import make_filter, simulate


def test_interval_columns_are_the_released_intervals(conn):
    cur = conn.cursor()
    cur.execute(
        "SELECT sex, COUNT(*) AS n, DP_INTERVAL_LOW(n) AS lo, DP_INTERVAL_HIGH(COUNT(*)) AS hi, "
        "AVG(age) AS a, DP_INTERVAL_HIGH(a) - DP_INTERVAL_LOW(a) AS width FROM people GROUP BY sex "
        "ORDER BY sex"
    )
    rows = cur.fetchall()
    assert [d[0] for d in cur.description] == ["sex", "n", "lo", "hi", "a", "width"]
    for r, (clo, chi), (alo, ahi) in zip(rows, cur.dp["ci"]["n"], cur.dp["ci"]["a"]):
        assert (r[2], r[3]) == (clo, chi) and r[2] <= r[1] <= r[3]
        assert r[5] == pytest.approx(ahi - alo)
    assert conn.session.budget()["queries"] == 1  # the interval columns cost nothing more


def test_interval_of_something_else_is_refused_free(conn):
    cur = conn.cursor()
    with pytest.raises(dpsql.Error, match="not an aggregate"):
        cur.execute("SELECT COUNT(*), DP_INTERVAL_LOW(age) FROM people")
    assert conn.session.budget()["queries"] == 0


def test_the_budget_is_a_free_relation(conn):
    cur = conn.cursor()
    cur.execute("SELECT COUNT(*) FROM people")
    cur.execute("SELECT epsilon_spent, epsilon_remaining, queries FROM dpsql_budget")
    assert cur.fetchall() == [(1.0, 999.0, 1)]
    cur.execute("SELECT queries * 2 AS twice FROM dpsql.dpsql_budget WHERE epsilon_remaining > 0")
    assert cur.fetchall() == [(2,)]
    assert conn.session.budget()["queries"] == 1


def test_explain_says_how_many_more_queries_fit_and_charges_nothing(conn):
    cur = conn.cursor()
    cur.execute("EXPLAIN SELECT sex, COUNT(*) FROM people GROUP BY sex")
    lines = [r[0] for r in cur.fetchall()]
    f = make_filter("basic", 1000, 0)
    expected = simulate(f, Cost.pure(1))
    assert f"the budget admits {expected} more queries like this one" in lines
    assert "EXPLAIN itself charges nothing" in lines[0]
    assert cur.dp["admits_more"] == expected and conn.session.budget()["queries"] == 0


def test_explain_notice_over_the_wire(serve):
    notices = []
    with psycopg.connect(serve.dsn(), autocommit=True) as pg:
        pg.add_notice_handler(lambda d: notices.append(d.message_primary))
        pg.execute("EXPLAIN SELECT COUNT(*) FROM people").fetchall()
        budget = pg.execute("SELECT queries FROM dpsql_budget").fetchone()
    assert budget == (0,)
    assert len(notices) == 1 and "nothing was charged" in notices[0] and "more like it" in notices[0]


def test_explain_scales_a_samples_noise_explains_ratios_and_lays_the_sql_out(conn):
    """Under TABLESAMPLE at 10 % the released counts are divided by 0.1, and so is their noise:
    EXPLAIN's error is ten times the unsampled one. AVG gets a line of its own, and the bounded
    query comes one clause a line (psql shows each as a row)."""
    cur = conn.cursor()

    def explain(sql: str) -> list[str]:
        cur.execute("EXPLAIN " + sql)
        return [r[0] for r in cur.fetchall()]

    def count_error(lines: list[str]) -> float:
        line = next(x for x in lines if x.startswith("COUNT(*)"))
        return float(line.rsplit("±", 1)[1])

    plain = explain("SELECT sex, COUNT(*), AVG(age) FROM people GROUP BY sex")
    sampled = explain("SELECT sex, COUNT(*), AVG(age) FROM people TABLESAMPLE BERNOULLI (10) GROUP BY sex")
    assert count_error(sampled) == pytest.approx(10 * count_error(plain), rel=1e-9)
    assert any(x.startswith("TABLESAMPLE: estimates are divided by the rate 0.1") for x in sampled)
    assert not any(x.startswith("TABLESAMPLE") for x in plain)
    assert any(x.startswith("AVG(age): a ratio of the noisy totals") for x in plain)
    sql = plain[plain.index("rewritten query:") + 1 :]
    assert len(sql) > 5 and max(len(x) for x in sql) < 200  # laid out, a clause a line
    assert conn.session.budget()["queries"] == 0

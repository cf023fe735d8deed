"""The rows a query's aggregates read (sql/reads.py): when every aggregate is under FILTER (a CASE
without ELSE), the rows none reads are dropped before bounding, only over declared keys or none."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from sqlglot import exp

import dpsql
from dpsql import auto_bounds
from dpsql.config import load_policy
from dpsql.guarantee.bounding import TotalCap
from dpsql.prepare import plan_query
from dpsql.session import Session
from dpsql.session.explain import partly_read
from dpsql.sql.classify import classify
from dpsql.sql.frozen import Trees
from dpsql.sql.options import QueryOptions
from dpsql.sql.reads import case_conditions, filtered_column, read_conditions
from dpsql.sql.rewrite import rewrite

from .conftest import default_events, default_people, make_db, write_policy


def _plan(session: Session, sql: str, options: QueryOptions | None = None):
    return plan_query(classify(sql).tree, session.policy, session.engine.schema(), "laplace", options)


def _reads(session: Session, sql: str) -> list[str]:
    return [c.sql() for c in _plan(session, sql).relation.reads]


def _case(sql: str) -> exp.Expression:
    return classify(f"SELECT {sql} FROM t").tree.expressions[0]


def test_the_conditions_of_a_case_without_else():
    assert [c.sql() for c in case_conditions(_case("CASE WHEN a > 1 THEN x WHEN b THEN y END"))] == ["a > 1", "b"]
    assert case_conditions(_case("(CASE WHEN a > 1 THEN x END)")) is not None
    assert case_conditions(_case("CASE WHEN a > 1 THEN x ELSE 0 END")) is None  # ELSE reads every row
    assert case_conditions(_case("CASE a WHEN 1 THEN x END")) is None  # a simple CASE: not read here
    assert case_conditions(_case("x")) is None and case_conditions(None) is None
    both = read_conditions([_case("CASE WHEN a > 1 THEN x END"), _case("CASE WHEN a > 1 THEN 1 END")])
    assert [c.sql() for c in both] == ["a > 1"]  # each condition once
    assert read_conditions([_case("CASE WHEN a > 1 THEN x END"), None]) == ()  # COUNT(*) reads every row
    column, cond = filtered_column(_case("CASE WHEN x > 2000 THEN x END"))
    assert column.sql() == "x" and cond.sql() == "x > 2000"
    assert filtered_column(_case("CASE WHEN x > 2000 THEN x + 1 END")) is None


def test_filters_over_declared_keys_or_none_drop_the_rows_no_aggregate_reads(session):
    assert _reads(session, "SELECT kind, COUNT(*) FILTER (WHERE amount > 10) FROM events GROUP BY kind") == [
        "t0.amount > 10"
    ]
    two = "SELECT COUNT(*) FILTER (WHERE amount > 10), SUM(amount) FILTER (WHERE place = 'north') FROM events"
    assert _reads(session, two) == ["t0.amount > 10", "t0.place = 'north'"]
    # written as the CASE a FILTER is: the same plan
    assert _reads(session, "SELECT place, SUM(CASE WHEN amount > 10 THEN amount END) FROM events GROUP BY place")
    assert _reads(session, "SELECT kind, MEDIAN(amount) FILTER (WHERE amount > 5) FROM events GROUP BY kind")


@pytest.mark.parametrize(
    "sql",
    [
        # undeclared keys: partition selection's groups depend on each group's rows
        "SELECT city, COUNT(*) FILTER (WHERE age > 30) FROM people GROUP BY city",
        "SELECT p.city, SUM(e.amount) FILTER (WHERE e.amount > 10) FROM people p JOIN events e ON p.pid = e.pid "
        "GROUP BY p.city",
        # an aggregate of every row beside the filtered one
        "SELECT kind, COUNT(*) FILTER (WHERE amount > 10), COUNT(*) FROM events GROUP BY kind",
        "SELECT kind, COUNT(*) FILTER (WHERE amount > 10) FROM events GROUP BY kind HAVING COUNT(*) > 2",
        "SELECT kind, COUNT(*) FILTER (WHERE amount > 10), COUNT(DISTINCT pid) FROM events GROUP BY kind",
        "SELECT kind, SUM(CASE WHEN amount > 10 THEN amount ELSE 0 END) FROM events GROUP BY kind",
    ],
)
def test_other_queries_read_every_row(session, sql):
    assert not _plan(session, sql).relation.reads


@pytest.mark.parametrize(
    "sql,flagged",
    [
        ("SELECT kind, COUNT(*) FILTER (WHERE amount > 10), COUNT(*) FROM events GROUP BY kind", 1),
        ("SELECT SUM(amount), SUM(CASE WHEN place = 'north' THEN amount END), COUNT(*) FROM events", 1),
        ("SELECT kind, COUNT(*) FILTER (WHERE amount > 10) FROM events GROUP BY kind", 0),  # rows narrowed
        ("SELECT city, COUNT(*) FILTER (WHERE age > 30) FROM people GROUP BY city", 0),  # no aggregate of all
        ("SELECT kind, COUNT(*), SUM(amount) FROM events GROUP BY kind", 0),
        ("SELECT kind, SUM(CASE WHEN amount > 10 THEN 1 ELSE 0 END), COUNT(*) FROM events GROUP BY kind", 0),
    ],
)
def test_explain_tells_of_a_filtered_aggregate_beside_one_of_every_row(session, sql, flagged):
    """Such an aggregate gets noise for every row of its group (and auto bounds take it as holding
    them all): EXPLAIN says so and how to give it more of the epsilon, from the text only."""
    assert len(partly_read(_plan(session, sql))) == flagged
    lines = [r[0] for r in session.execute("EXPLAIN " + sql).rows]
    told = [line for line in lines if "reads only the rows where its condition holds" in line]
    assert len(told) == flagged
    if flagged:
        assert "/* dpsql: weights 1, 4 */" in told[0] and "FILTER" not in told[0].split(":")[0]
        before = session.budget()["queries"]
        weighted = session.execute("/* dpsql: weights 1, 4 */ " + sql)  # the hint, as written, is answered
        assert weighted.rows and session.budget()["queries"] == before + 1


def test_undeclared_keys_are_untouched(session):
    """Under partition selection the bounded query's rows are the WHERE's alone: a group whose
    rows no aggregate reads is still a candidate, as before."""
    sql = "SELECT city, COUNT(*) FILTER (WHERE age > 30) FROM people GROUP BY city"
    plan = _plan(session, sql)
    assert plan.needs_selection and not plan.relation.reads
    bounded = rewrite(plan, plan.literal_domain_size(), None, None).sql(dialect="duckdb")
    assert "WHERE NOT t0.pid IS NULL)" in bounded and "age > 30 THEN" in bounded


def test_a_filters_condition_narrows_its_columns_range_for_the_choice(session):
    """AVG(amount) FILTER (WHERE amount > 20) bins and clamps amount in [20, 50], as the same
    condition in WHERE does (sql/ranges.py)."""
    plan = _plan(session, "SELECT kind, AVG(amount) FILTER (WHERE amount > 20) FROM events GROUP BY kind")
    (col,) = auto_bounds.columns(plan)
    where = _plan(session, "SELECT kind, AVG(amount) FROM events WHERE amount > 20 GROUP BY kind")
    (same,) = auto_bounds.columns(where)
    assert (col.lower, col.edges) == (same.lower, same.edges) and col.lower == 20


def test_the_disjunction_keeps_a_row_one_condition_reads_where_another_fails(session):
    """Several conditions: one disjunction, each disjunct total on its own (a NULL from one does
    not drop the row the other reads), in parentheses after the unit's condition."""
    sql = (
        "SELECT COUNT(*) FILTER (WHERE amount > 10), COUNT(*) FILTER (WHERE place = 'north' AND amount / amount > 0) "
        "FROM events"
    )
    plan = _plan(session, sql)
    text = rewrite(plan, plan.literal_domain_size(), None, None).sql(dialect="duckdb")
    assert "WHERE NOT t0.pid IS NULL AND ((t0.amount > 10) OR (TRY(t0.place = 'north' AND " in text


LARGE = "max_groups = 100\nmax_rows = 1000\n"
EXACT_QUERIES = [
    "SELECT kind, COUNT(*) FILTER (WHERE amount > 10) FROM events GROUP BY kind",
    "SELECT kind, COUNT(*) FILTER (WHERE amount > 10), AVG(amount) FILTER (WHERE amount > 10) "
    "FROM events GROUP BY kind",
    "SELECT place, SUM(amount) FILTER (WHERE amount < 20), COUNT(amount) FILTER (WHERE kind = 'a') "
    "FROM events GROUP BY place",
    "SELECT COUNT(*) FILTER (WHERE amount > 10), SUM(amount) FILTER (WHERE place = 'north' AND amount / amount > 0), "
    "STDDEV(amount) FILTER (WHERE kind <> 'b') FROM events",
    "SELECT kind, place, MEDIAN(amount) FILTER (WHERE amount > 5) FROM events GROUP BY kind, place",
    "SELECT kind, COUNT(*) FILTER (WHERE kind = 'a') FROM events WHERE amount IS NOT NULL GROUP BY kind",
]


@pytest.fixture
def large(tmp_path: Path) -> Session:
    """Limits no unit reaches: the pre-noise values are the exact answer's."""
    events = default_events() + [(300 + i, "abc"[i % 3], None if i % 4 == 0 else 5.0, "north") for i in range(30)]
    make_db(tmp_path / "db.duckdb", default_people(), events)
    path = write_policy(tmp_path)
    path.write_text(path.read_text().replace("max_groups = 2\nmax_rows = 3\n", LARGE))
    s = Session(load_policy(path), "alice")
    yield s
    s.close()


def _values(session: Session, plan) -> dict[tuple, tuple]:
    """Per group, the measures' pre-noise values (a group absent: zeros; unit counts left out,
    released only under partition selection)."""
    rs = session.bounded_result(plan)
    n = len(plan.keys)
    rows = list(zip(*rs.columns)) if rs.row_count else []
    return {tuple(r[:n]): tuple(int(v or 0) for v in r[n + 1 :]) for r in rows if any(r[n + 1 :])}


@pytest.mark.parametrize("sql", EXACT_QUERIES)
@pytest.mark.parametrize("total", [None, 10**6])
def test_the_exact_answer_is_the_same_with_and_without_the_rows_none_reads(large, sql, total):
    plan = _plan(large, sql, None if total is None else QueryOptions(max_contributions=total))
    assert plan.relation.reads
    assert total is None or isinstance(plan.bounding, TotalCap)
    every_row = plan.with_relation(dataclasses.replace(plan.relation, reads=Trees()))
    assert _values(large, plan) == _values(large, every_row)


def test_a_heavy_units_unread_rows_no_longer_dilute_its_read_ones(tmp_path):
    """Under a total bound C, a unit's read rows are weighted C / max(n, C) with n its rows read,
    not all its rows: a unit of 1 row read among 9 counts 1, where it counted 1/3 at C = 3."""
    events = [(1, "a", 20.0, "north")] + [(1, "b", 1.0, "north")] * 8
    make_db(tmp_path / "db.duckdb", [(1, 30.0, "F", "Oslo")], events)
    s = Session(load_policy(write_policy(tmp_path)), "alice")
    try:
        sql = "SELECT kind, COUNT(*) FILTER (WHERE amount > 10) FROM events GROUP BY kind"
        capped = _plan(s, sql, QueryOptions(max_contributions=3))
        assert isinstance(capped.bounding, TotalCap) and capped.relation.reads
        every_row = capped.with_relation(dataclasses.replace(capped.relation, reads=Trees()))
        scale = 2 ** capped.measures[0].bits
        assert _values(s, capped)[("a",)] == (scale,)
        assert _values(s, every_row)[("a",)] == (scale * 3 // 9,)
    finally:
        s.close()


def test_every_declared_group_is_released_whatever_the_filter(small_policy):
    """The FILTER drops rows, never groups: each declared kind is answered, its count near 0
    where the condition holds for none of its rows."""
    conn = dpsql.connect(small_policy, user="alice")
    try:
        cur = conn.cursor()
        cur.execute("SELECT kind, COUNT(*) FILTER (WHERE kind = 'a') FROM events GROUP BY kind ORDER BY kind")
        assert [r[0] for r in cur.fetchall()] == ["a", "b", "c"]
    finally:
        conn.close()

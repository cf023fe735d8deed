"""The statement router (sql/route.py) and the query routes (session/routes.py): one kind per
statement from its text and public metadata, the same for every front end."""

from __future__ import annotations

import pytest

from dpsql.errors import ProgrammingError
from dpsql.session.routes import Way, way
from dpsql.sql.classify import DEFAULT_LIMITS, Explain, Query, SetCommand, ShowCommand, ViewCommand, classify
from dpsql.sql.route import Entry, Kind, route, route_one, word_kind

KINDS = [
    ("SELECT COUNT(*) FROM people", Kind.QUERY, Query),
    ("/* dbt */ WITH x AS (SELECT 1) SELECT * FROM x", Kind.QUERY, Query),
    ("(SELECT 1)", Kind.QUERY, Query),
    ("EXPLAIN SELECT COUNT(*) FROM people", Kind.EXPLAIN, Explain),
    ("SET dpsql.epsilon = 0.5", Kind.SET, SetCommand),
    ("RESET ALL", Kind.SET, SetCommand),
    ("SET LOCAL dpsql.epsilon = 0.5", Kind.SET_LOCAL, SetCommand),
    ("SHOW dpsql.budget", Kind.SHOW, ShowCommand),
    ("CREATE TEMPORARY VIEW v AS SELECT 1", Kind.VIEW, ViewCommand),
    ("BEGIN", Kind.BEGIN, None),
    ("START TRANSACTION", Kind.BEGIN, None),
    ("END", Kind.COMMIT, None),
    ("ABORT", Kind.ROLLBACK, None),
    ("ROLLBACK TO SAVEPOINT a", Kind.ROLLBACK, None),
    ("RELEASE SAVEPOINT a", Kind.SAVEPOINT, None),
    ("SET TRANSACTION ISOLATION LEVEL READ COMMITTED", Kind.NO_OP, None),
    ("RESET ROLE", Kind.NO_OP, None),
]


@pytest.mark.parametrize("text, kind, statement", KINDS)
def test_each_statement_has_one_kind_and_the_session_reading(text, kind, statement):
    routed = route(text, DEFAULT_LIMITS)
    assert routed.kind == kind and routed.error is None and routed.text == text
    if statement is not None:
        assert isinstance(routed.statement, statement)
        assert type(routed.statement) is type(classify(text))  # the session reads it as classify does


@pytest.mark.parametrize(
    "text, kind",
    [
        ("DISCARD ALL", Kind.DISCARD),
        ("DEALLOCATE ALL", Kind.DEALLOCATE),
        ("LISTEN x", Kind.NOTIFICATIONS),
        ("DECLARE c CURSOR FOR SELECT 1", Kind.DECLARE),
        ("FETCH 10 FROM c", Kind.FETCH),
        ("MOVE 10 IN c", Kind.MOVE),
        ("CLOSE c", Kind.CLOSE),
        ("COPY (SELECT 1) TO STDOUT", Kind.COPY),
    ],
)
def test_what_the_wire_answers_carries_the_sessions_refusal(text, kind):
    """A front end without a connection (dpsql.connect) refuses these as it always did."""
    routed = route(text, DEFAULT_LIMITS)
    assert routed.kind == kind and word_kind(text) == kind
    with pytest.raises(ProgrammingError) as direct:
        classify(text)
    assert routed.error is not None and routed.error.message == direct.value.message


def test_a_refused_statement_keeps_its_keywords_kind_and_the_refusal():
    for text, kind in (
        ("SET ROLE admin", Kind.SET),
        ("DROP TABLE people", Kind.REFUSED),
        ("SELEC 1", Kind.REFUSED),
        ("SELECT 1; SELECT 2", Kind.REFUSED),
    ):
        routed = route(text, DEFAULT_LIMITS)
        assert routed.kind == kind and routed.error is not None, text
        with pytest.raises(ProgrammingError):
            routed.checked()
    assert route(" ; -- nothing", DEFAULT_LIMITS).kind == Kind.EMPTY


def test_a_front_ends_entries_are_tried_on_selects_only_and_in_order():
    seen = []

    def catalog(text):
        seen.append(text)
        return "pg_class" in text

    entries = (Entry(Kind.ADVISORY, lambda text: None), Entry(Kind.CATALOG, catalog))
    assert route("SELECT relname FROM pg_class", DEFAULT_LIMITS, entries).kind == Kind.CATALOG
    assert route("SELECT COUNT(*) FROM people", DEFAULT_LIMITS, entries).kind == Kind.QUERY
    assert route("SHOW pg_class", DEFAULT_LIMITS, entries).kind == Kind.SHOW  # not a SELECT: never asked
    assert seen == ["SELECT relname FROM pg_class", "SELECT COUNT(*) FROM people"]
    found = route_one("SELECT relname FROM pg_class", DEFAULT_LIMITS, entries)
    assert found.kind == Kind.CATALOG and found.detail is True and found.statement is None


def test_a_queries_way_is_decided_from_the_tree_and_the_policy(session):
    def of(sql):
        return way(classify(sql).tree, session.policy)[0]

    assert of("SELECT * FROM dpsql_budget") == Way.BUDGET
    assert of("SELECT 1") == Way.PLANNED
    assert of("SELECT * FROM people WHERE 1 = 0") == Way.SCHEMA_PROBE
    assert of("SELECT * FROM people LIMIT 1") == Way.COLUMN_PROBE
    assert of("SELECT SUM(n) FROM (SELECT sex, COUNT(*) AS n FROM people GROUP BY sex) AS t") == Way.DERIVED
    assert of("SELECT sex, COUNT(*) FROM people GROUP BY sex") == Way.KEYS


def test_the_session_keeps_a_routed_query_and_answers_the_same_route(session):
    first = session.route("SELECT COUNT(*) FROM people")
    assert session.route("SELECT COUNT(*) FROM people") is first  # parsed once
    answered = session.execute(first)  # the route as it is: not read again
    assert len(answered.rows) == 1 and answered.dp["cost"]["epsilon"] > 0
    with pytest.raises(ProgrammingError, match="DISCARD statements are not allowed"):
        session.execute("DISCARD ALL")

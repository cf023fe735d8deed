"""The clock, PostgreSQL's formatting and string functions, and nested BI questions (issue 35):
the analysis in-process, then the same through `dpsql serve` and psycopg."""

from __future__ import annotations

import datetime

import psycopg
import pytest

import dpsql
from dpsql.config import load_policy
from dpsql.prepare import plan_query
from dpsql.sql.allowlist import written_name
from dpsql.sql.classify import classify
from dpsql.sql.clock import has_clock, pinned

from .conftest import SAMPLE, hospital_policy

UTC = datetime.timezone.utc
AT = datetime.datetime(2024, 6, 15, 13, 45, 7, 250300, tzinfo=UTC)


@pytest.fixture
def cur(tmp_path):
    """A cursor on the sample hospital (its own ledger, a large budget, the answer cache on)."""
    conn = dpsql.connect(hospital_policy(tmp_path, 1000.0), user="alice", ledger=tmp_path / "ledger.sqlite")
    yield conn.cursor()
    conn.close()


def spent(cur) -> tuple[int, float]:
    b = cur.connection.session.budget()
    return b["queries"], float(b["epsilon"]["spent"])


def refused(cur, sql: str, sqlstate: str) -> str:
    """The refusal's message, after checking its SQLSTATE and that nothing was charged."""
    before = spent(cur)
    with pytest.raises(dpsql.Error) as info:
        cur.execute(sql)
    assert info.value.sqlstate == sqlstate, (sql, info.value)
    assert spent(cur) == before, sql
    return str(info.value)


# The clock ------------------------------------------------------------------------------------
def test_every_clock_spelling_is_pinned_to_one_typed_literal():
    sql = (
        "SELECT NOW(), now(), CURRENT_TIMESTAMP, CURRENT_TIMESTAMP(0), CURRENT_DATE, LOCALTIMESTAMP, LOCALTIME, "
        "CURRENT_TIME, transaction_timestamp(), statement_timestamp(), clock_timestamp() FROM wards "
        "WHERE 1 IN (SELECT 1 WHERE CURRENT_DATE > DATE '2000-01-01')"
    )
    tree = classify(sql).tree
    assert has_clock(tree)
    out = pinned(tree, AT)
    assert not has_clock(out) and has_clock(tree)  # a copy: the parsed (cached) tree keeps its clock
    got = [e.sql(dialect="postgres") for e in out.expressions]
    stamp = "CAST('2024-06-15 13:45:07.250300+00' AS TIMESTAMPTZ)"
    assert got == [
        stamp,
        stamp,
        stamp,
        "CAST('2024-06-15 13:45:07+00' AS TIMESTAMPTZ)",
        "CAST('2024-06-15' AS DATE)",
        "CAST('2024-06-15 13:45:07.250300' AS TIMESTAMP)",
        "CAST('13:45:07.250300' AS TIME)",
        "CAST('13:45:07.250300+00' AS TIMETZ)",
        stamp,
        stamp,
        stamp,
    ]
    assert "CAST('2024-06-15' AS DATE)" in out.args["where"].sql(dialect="postgres")  # subqueries too
    assert pinned(classify("SELECT 1").tree, AT).sql() == "SELECT 1"


def test_clock_functions_answer_over_no_table_in_utc(cur):
    before = datetime.datetime.now(UTC)
    cur.execute(
        "SELECT NOW(), CURRENT_DATE, LOCALTIMESTAMP, clock_timestamp(), NOW() - INTERVAL '30 days', "
        "CURRENT_DATE - 7, date_trunc('month', now())"
    )
    now, today, local, clock, month_ago, week_ago, month = cur.fetchone()
    after = datetime.datetime.now(UTC)
    assert before <= now <= after and clock == now  # one instant per statement
    assert today == now.date() and local == now.replace(tzinfo=None)
    assert month_ago == now - datetime.timedelta(days=30) and week_ago == today - datetime.timedelta(days=7)
    assert month == now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    assert spent(cur) == (0, 0.0)


RELATIVE = [  # as Metabase, Looker and Superset write relative-date filters
    "SELECT COUNT(*) FROM visits WHERE visit_date >= CAST(NOW() + INTERVAL '-30 day' AS date)",
    "SELECT COUNT(*) FROM visits WHERE visit_date >= NOW() - INTERVAL '30 days'",
    "SELECT COUNT(*) FROM visits WHERE visit_date >= CURRENT_DATE - 7",
    "SELECT COUNT(*) FROM visits WHERE visit_date >= date_trunc('week', CURRENT_DATE)",
    "SELECT COUNT(*) FROM visits WHERE visit_date < LOCALTIMESTAMP",
    "SELECT COUNT(*) FROM visits WHERE (visit_date >= CAST((NOW() + INTERVAL '-3 year') AS date) "
    "AND visit_date < CAST(NOW() AS date))",
    "SELECT DATE_TRUNC('month', visit_date) AS m, COUNT(*) FROM visits "
    "WHERE visit_date < DATE_TRUNC('month', CURRENT_TIMESTAMP) GROUP BY 1",
    # Looker: a month dimension, and "in the past 900 days" as constant subqueries in the zone of the model
    "SELECT TO_CHAR(DATE_TRUNC('month', visits.visit_date ), 'YYYY-MM') AS \"visits.visit_month\", COUNT(*) AS "
    "\"visits.count\" FROM public.visits AS visits WHERE ((( visits.visit_date ) >= ((SELECT (DATE_TRUNC('day', "
    "CURRENT_TIMESTAMP AT TIME ZONE 'America/Los_Angeles') + (-899 || ' day')::INTERVAL))) AND ( visits.visit_date ) "
    "< ((SELECT ((DATE_TRUNC('day', CURRENT_TIMESTAMP AT TIME ZONE 'America/Los_Angeles') + (-899 || ' day')::INTERVAL)"
    " + (900 || ' day')::INTERVAL))))) GROUP BY DATE_TRUNC('month', visits.visit_date ) ORDER BY 1 DESC LIMIT 500",
    # Metabase: "previous 900 days" and a week starting on Sunday
    "SELECT CAST(date_trunc('week', (visit_date + INTERVAL '1 day')) + INTERVAL '-1 day' AS date) AS \"visit_date\", "
    'COUNT(*) AS "count" FROM "public"."visits" WHERE "public"."visits"."visit_date" >= '
    "CAST((CAST(NOW() AS timestamp) + INTERVAL '-900 day') AS date) GROUP BY 1 ORDER BY 1 ASC",
    # Superset: a time range as TO_TIMESTAMP and TO_DATE literals
    "SELECT DATE_TRUNC('week', visit_date) AS visit_date, COUNT(*) AS count FROM visits WHERE visit_date >= "
    "TO_TIMESTAMP('2024-01-01 00:00:00.000000', 'YYYY-MM-DD HH24:MI:SS.US') AND visit_date < "
    "TO_DATE('2024-02-01', 'YYYY-MM-DD') GROUP BY DATE_TRUNC('week', visit_date) ORDER BY count DESC LIMIT 3",
]


@pytest.mark.parametrize("sql", RELATIVE)
def test_relative_date_filters_are_answered_and_charged_once(cur, sql):
    cur.execute(sql)
    rows = cur.fetchall()
    assert rows and cur.dp["cost"]["epsilon"] == pytest.approx(0.1)
    if "visits.visit_month" in sql:
        assert rows[0][0] == "2024-12" and all(len(r[0]) == 7 for r in rows)
    assert spent(cur) == (1, pytest.approx(0.1))


def test_a_clock_filter_matches_the_literal_it_stands_for(tmp_path):
    """Before noise: the pinned filter selects what the same instant written as a literal does."""
    session = dpsql.connect(SAMPLE / "dpsql.toml", user="alice", ledger=tmp_path / "l.sqlite").session
    clocked = classify("SELECT COUNT(*) FROM visits WHERE visit_date >= CURRENT_DATE - 30").tree
    literal = classify("SELECT COUNT(*) FROM visits WHERE visit_date >= DATE '2024-06-15' - 30").tree
    counts = []
    for tree in (pinned(clocked, AT), literal):
        plan, _ = session._prepare(tree)
        counts.append(session.bounded_result(plan).columns)
    assert counts[0] == counts[1] and counts[0][0][0] > 0


def test_the_cache_serves_a_clock_query_only_at_the_same_clock(cur):
    """CURRENT_DATE pins to the day: repeated the same day it is the first answer again, free.
    NOW() pins to the microsecond: each run is a new release, charged."""
    sql = "SELECT COUNT(*) FROM visits WHERE visit_date >= CURRENT_DATE - 800"
    cur.execute(sql)
    first = cur.fetchall()
    cur.execute(sql)
    assert cur.fetchall() == first and cur.dp["cached"] and spent(cur)[0] == 1
    for _ in range(2):
        cur.execute("SELECT COUNT(*) FROM visits WHERE visit_date >= NOW() - INTERVAL '800 days'")
    assert spent(cur)[0] == 3


def test_refusals_name_the_function_as_written(cur):
    assert written_name(classify("SELECT now()").tree.expressions[0]) == "NOW"
    assert written_name(classify("SELECT to_char(d, 'YYYY')").tree.expressions[0]) == "TO_CHAR"
    msg = refused(cur, "SELECT to_date(diagnosis, 'YYYY') AS d, COUNT(*) FROM visits GROUP BY 1", "42501")
    assert "TO_DATE()" in msg and "STR_TO_DATE" not in msg
    msg = refused(cur, "SELECT md5(diagnosis), COUNT(*) FROM visits GROUP BY 1", "42501")
    assert "MD5()" in msg
    refused(cur, "SELECT COUNT(*) FROM visits WHERE replace(diagnosis, 'a', 'b') = 'cbrdibc'", "42501")
    refused(cur, "SELECT COUNT(*) FROM visits WHERE split_part(diagnosis, 'a', 0) = ''", "42501")
    msg = refused(cur, "SELECT COUNT(*) FROM visits WHERE visit_date AT TIME ZONE diagnosis > NOW()", "22023")
    assert "AT TIME ZONE" in msg


# FORMAT and string functions ------------------------------------------------------------------
FORMATS = [  # PostgreSQL's answers
    ("format('%s', 1)", "1"),
    ("format('%s-%s', 1, 2)", "1-2"),
    ("format('%s|%s', NULL, 'x')", "|x"),
    ("format('%2$s %1$s %s', 'a', 'b')", "b a b"),
    ("format('%%|%5s|%-5s|', 'ab', 'cd')", "%|   ab|cd   |"),
    ("format('%I.%I', 'public', 'My Table')", 'public."My Table"'),
    ("format('%I|%I', 'select', 'a\"b')", '"select"|"a""b"'),
    ("format('%L|%L', 'it''s', NULL)", "'it''s'|NULL"),
    ("format('INSERT INTO t VALUES (%L)', 42)", "INSERT INTO t VALUES ('42')"),
]


@pytest.mark.parametrize("call,expected", FORMATS)
def test_format_means_what_it_means_in_postgresql(cur, call, expected):
    cur.execute(f"SELECT {call}")
    assert cur.fetchone() == (expected,)


def test_format_refuses_what_postgresql_refuses(cur):
    assert "too few arguments" in refused(cur, "SELECT format('%s %s', 1)", "22023")
    refused(cur, "SELECT format('%d', 1)", "22023")
    refused(cur, "SELECT format(name, 1) FROM wards", "22023")


def test_string_functions_over_a_public_table_and_constants(cur):
    cur.execute(
        "SELECT replace(name, 'a', 'b'), split_part(name, 'o', 1), lpad(name, 12, '*'), rpad(name, 3), "
        "concat_ws('/', name, floor), reverse(name), format('%I', lower(name)), "
        "format('SELECT COUNT(*) FROM visits WHERE ward = %L', name) FROM wards WHERE name = 'Cardiology'"
    )
    assert cur.fetchall() == [
        (
            "Cbrdiology",
            "Cardi",
            "**Cardiology",
            "Car",
            "Cardiology/2",
            "ygoloidraC",
            "cardiology",
            "SELECT COUNT(*) FROM visits WHERE ward = 'Cardiology'",
        )
    ]
    cur.execute("SELECT split_part('a-b-c', '-', 2), upper(replace('x_y', '_', ' ')), lpad('7', 3, '0')")
    assert cur.fetchone() == ("b", "X Y", "007")
    cur.execute("SELECT COUNT(*) FROM visits WHERE diagnosis = replace('cbrdibc', 'b', 'a')")  # a constant: allowed
    assert cur.fetchone()[0] >= 0 and spent(cur)[0] == 1


def test_formatting_a_released_aggregate_is_post_processing(cur):
    """FORMAT, LPAD... of an aggregate run over its released value, with PostgreSQL's meaning."""
    cur.execute("SELECT format('%s visits', COUNT(*)) AS t, lpad(CAST(COUNT(*) AS TEXT), 9, '0') AS p FROM visits")
    ((text, padded),) = cur.fetchall()
    assert text.endswith(" visits") and text.split()[0].isdigit() and len(padded) == 9 and padded.isdigit()
    cur.execute("SELECT ward, format('%s: %s', ward, SUM(cost)) FROM visits GROUP BY ward ORDER BY 1 LIMIT 1")
    ward, text = cur.fetchone()
    assert text.startswith(f"{ward}: ") and float(text.split(": ")[1]) >= 0
    assert spent(cur)[0] == 2


def test_gexec_style_generated_sql_runs(cur):
    """psql's \\gexec runs each generated statement: here, one DP query per ward."""
    cur.execute("SELECT format('SELECT COUNT(*) FROM visits WHERE ward = %L', name) FROM wards ORDER BY name LIMIT 2")
    generated = [r[0] for r in cur.fetchall()]
    for sql in generated:
        cur.execute(sql)
        assert cur.fetchone()[0] >= 0
    assert spent(cur)[0] == 2


# TO_CHAR, EXTRACT, date_part ------------------------------------------------------------------
TO_CHAR = [  # PostgreSQL's to_char(TIMESTAMP '2024-03-05 14:07:09.123456', pattern)
    ("YYYY-MM-DD HH24:MI:SS", "2024-03-05 14:07:09"),
    ("HH12:MI AM", "02:07 PM"),
    ("hh:mi pm", "02:07 pm"),
    ("Month", "March    "),
    ("FMMonth", "March"),
    ("MONTH", "MARCH    "),
    ("Mon", "Mar"),
    ("mon", "mar"),
    ("Day", "Tuesday  "),
    ("FMDay", "Tuesday"),
    ("Dy", "Tue"),
    ("D", "3"),
    ("ID", "2"),
    ("DDD", "065"),
    ("Q", "1"),
    ("IW", "10"),
    ("WW", "10"),
    ("W", "1"),
    ("MS", "123"),
    ("US", "123456"),
    ("YY", "24"),
    ("FMDD", "5"),
    ('YYYY-"Q"Q', "2024-Q1"),
    ("IYYY-IW", "2024-10"),
    ("YYYY-MM", "2024-03"),
]


@pytest.mark.parametrize("pattern,expected", TO_CHAR)
def test_to_char_patterns(cur, pattern, expected):
    cur.execute(f"SELECT TO_CHAR(TIMESTAMP '2024-03-05 14:07:09.123456', '{pattern}')")
    assert cur.fetchone() == (expected,)


def test_to_char_refuses_patterns_it_does_not_write_out(cur):
    assert "th" in refused(cur, "SELECT TO_CHAR(visit_date, 'DDth') AS d, COUNT(*) FROM visits GROUP BY 1", "0A000")
    refused(cur, "SELECT TO_CHAR(visit_date, 'J') AS d, COUNT(*) FROM visits GROUP BY 1", "0A000")
    refused(cur, "SELECT TO_CHAR(visit_date, diagnosis) AS d, COUNT(*) FROM visits GROUP BY 1", "22023")
    assert "number" in refused(cur, "SELECT to_char(1234.5, '9999.9')", "0A000")


@pytest.mark.parametrize(
    "key,size",
    [
        ("TO_CHAR(visit_date, 'YYYY-MM')", 24),
        ("TO_CHAR(visit_date, 'YYYY-\"Q\"Q')", 8),
        ("TO_CHAR(visit_date, 'Dy')", 7),
        ("date_part('month', visit_date)", 12),
        ("EXTRACT(dow FROM visit_date)", 7),
        ("TO_CHAR(date_trunc('week', visit_date), 'IYYY-IW')", None),
    ],
)
def test_groupings_of_a_bounded_date_have_a_declared_domain(cur, key, size):
    """Grouping by a function of visit_date (public bounds): the image of its declared days is
    the domain, so no partition selection and no delta, and every key is released."""
    policy = load_policy(SAMPLE / "dpsql.toml")
    schema = cur.connection.session.engine.schema()
    plan = plan_query(classify(f"SELECT {key} AS k, COUNT(*) FROM visits GROUP BY 1").tree, policy, schema, "laplace")
    assert plan.declared and not plan.needs_selection
    cur.execute(f"SELECT {key} AS k, COUNT(*) FROM visits GROUP BY 1 ORDER BY 1")
    rows = cur.fetchall()
    assert cur.dp["cost"]["delta"] == 0
    assert len(rows) == size if size else len(rows) > 100
    if key.startswith("TO_CHAR(visit_date, 'YYYY-MM')"):
        assert rows[0][0] == "2023-01" and rows[-1][0] == "2024-12"


# Nested BI questions --------------------------------------------------------------------------
NESTED = [
    "SELECT * FROM (SELECT * FROM (SELECT ward, COUNT(*) AS c FROM visits GROUP BY ward) a) b "
    "WHERE c > 10 ORDER BY c LIMIT 5",
    # Metabase: a question over a saved question over a native query
    'SELECT "source"."ward" AS "ward", "source"."c" AS "c" FROM (SELECT "source"."ward" AS "ward", "source"."c" AS "c" '
    'FROM (SELECT ward, COUNT(*) AS c FROM visits GROUP BY ward) AS "source") AS "source" '
    'WHERE "source"."c" > 10 ORDER BY "source"."c" DESC LIMIT 5',
    # ... with a summary in between
    'SELECT "source"."sex" AS "sex", "source"."n" AS "n" '
    'FROM (SELECT "source"."sex" AS "sex", SUM("source"."c") AS "n" '
    'FROM (SELECT sex, region, COUNT(*) AS c FROM patients GROUP BY sex, region) AS "source" '
    'GROUP BY "source"."sex") AS "source" ORDER BY "source"."n" DESC LIMIT 5',
    "SELECT * FROM (SELECT * FROM (SELECT * FROM (SELECT ward, AVG(cost) AS c FROM visits GROUP BY ward) a) b) c "
    "WHERE c > 10 LIMIT 5",
]


@pytest.mark.parametrize("sql", NESTED)
def test_nested_questions_are_answered_and_charged_once(cur, sql):
    cur.execute(sql)
    rows = cur.fetchall()
    assert 1 <= len(rows) <= 5 and cur.dp["cost"]["epsilon"] == pytest.approx(0.1)
    assert spent(cur) == (1, pytest.approx(0.1))
    assert [d[0] for d in cur.description] == (["sex", "n"] if "sex" in sql else ["ward", "c"])
    if "ORDER BY c LIMIT" in sql:
        assert [r[1] for r in rows] == sorted(r[1] for r in rows) and all(r[1] > 10 for r in rows)


def test_nested_refusals_charge_nothing(cur):
    refused(
        cur,
        "SELECT * FROM (SELECT * FROM (SELECT patient_id, COUNT(*) AS n FROM visits GROUP BY patient_id) a) b",
        "42501",
    )
    refused(
        cur,
        "SELECT * FROM (SELECT * FROM (SELECT ward, COUNT(*) AS c FROM visits GROUP BY ward) a "
        "WHERE c > (SELECT COUNT(*) FROM patients)) b",
        "0A000",
    )
    refused(cur, "SELECT * FROM (SELECT * FROM visits) b LIMIT 1", "42501")


# Through dpsql serve ---------------------------------------------------------------------------
@pytest.fixture
def hospital_serve(tmp_path):
    from .server_fixture import Serve

    s = Serve(hospital_policy(tmp_path, 1000.0), tmp_path / "ledger.sqlite")
    yield s
    s.stop()


def test_through_dpsql_serve(hospital_serve):
    def queries(conn) -> int:
        return conn.execute("SHOW dpsql.budget").fetchone()[8]

    with psycopg.connect(hospital_serve.dsn(), autocommit=True) as conn:
        now, today, f = conn.execute("SELECT now(), CURRENT_DATE, format('%s-%s', 1, 2)").fetchone()
        assert abs(now - datetime.datetime.now(UTC)) < datetime.timedelta(minutes=5) and today == now.date()
        assert f == "1-2" and queries(conn) == 0
        assert conn.execute("SELECT replace(name, 'a', 'b') FROM wards WHERE name = 'Cardiology'").fetchone() == (
            "Cbrdiology",
        )
        (n,) = conn.execute(
            "SELECT COUNT(*) FROM visits WHERE visit_date >= CAST(NOW() + INTERVAL '-900 day' AS date)"
        ).fetchone()
        assert isinstance(n, int) and queries(conn) == 1
        months = conn.execute(
            "SELECT TO_CHAR(visit_date, 'YYYY-MM') AS m, COUNT(*) FROM visits GROUP BY 1 ORDER BY 1"
        ).fetchall()
        assert [m for m, _ in months][:2] == ["2023-01", "2023-02"] and len(months) == 24 and queries(conn) == 2
        cur = conn.execute(NESTED[1])
        assert [d.name for d in cur.description] == ["ward", "c"] and 1 <= len(cur.fetchall()) <= 5
        assert queries(conn) == 3
        with pytest.raises(psycopg.errors.InsufficientPrivilege) as info:
            conn.execute("SELECT to_date(diagnosis, 'YYYY') AS d, COUNT(*) FROM visits GROUP BY 1")
        assert "TO_DATE()" in info.value.diag.message_primary
        with pytest.raises(psycopg.errors.FeatureNotSupported):
            conn.execute("SELECT TO_CHAR(visit_date, 'DDth') AS d, COUNT(*) FROM visits GROUP BY 1")
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            conn.execute("SELECT format('%s %s', 1)")
        assert queries(conn) == 3  # refusals charge nothing
        # a prepared statement with a clock: each execution its own instant, described the same
        for _ in range(2):
            conn.execute(
                "SELECT COUNT(*) FROM visits WHERE visit_date >= NOW() - %s::interval", ("800 days",), prepare=True
            ).fetchone()
        assert queries(conn) == 5

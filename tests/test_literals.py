"""A string compared with a number or boolean column is that type's input, as in PostgreSQL: a
typo is refused free with PostgreSQL's error instead of matching no row and being charged."""

from __future__ import annotations

import datetime

import psycopg
import pytest
from sqlglot import exp

import dpsql
from dpsql.errors import DataError
from dpsql.sql.classify import classify
from dpsql.sql.literals import check_literals
from dpsql.sql.parameters import bind_parameters

# (DuckDB column type, PostgreSQL type, the string compared with it)
INPUTS = [
    (duck, pg, text)
    for duck, pg in (("INTEGER", "integer"), ("BIGINT", "bigint"), ("SMALLINT", "smallint"))
    for text in (
        "30",
        " 30 ",
        "+7",
        "-0",
        "007",
        "30.5",
        "3e1",
        "abc",
        "",
        " ",
        "1 2",
        "0x1F",
        "--1",
        "99999",
        "2147483648",
        "-2147483649",
        "9223372036854775807",
        "9223372036854775808",
    )
]
INPUTS += [
    (duck, pg, text)
    for duck, pg in (("DOUBLE", "double precision"), ("DECIMAL(10,2)", "numeric"), ("REAL", "real"))
    for text in (
        "1.5",
        " .5",
        "5.",
        "1e3",
        "-1E-3",
        "+2",
        "NaN",
        "inf",
        "-Infinity",
        "abc",
        "1.2.3",
        "",
        "e5",
        "1e",
        "--1",
        "1,5",
    )
]
INPUTS += [
    ("BOOLEAN", "boolean", text)
    for text in (
        "t",
        "true",
        "TRUE",
        " yes ",
        "y",
        "n",
        "no",
        "on",
        "off",
        "of",
        "o",
        "1",
        "0",
        "tr",
        "fals",
        "maybe",
        "",
        "2",
        "truee",
    )
]


def _checked(duck_type: str, text: str) -> bool:
    comparison = exp.EQ(this=exp.column("c", table="t0"), expression=exp.Literal.string(text))
    try:
        check_literals(comparison, lambda c: duck_type)
    except DataError:
        return False
    return True


@pytest.mark.backends
def test_accepts_exactly_what_postgresql_accepts(pg_server):
    """Each input judged by a real PostgreSQL 15 (`SELECT '...'::type`) and by the pass alike:
    never a refusal of what PostgreSQL reads, never a pass of what it rejects."""
    with psycopg.connect(pg_server.url(), autocommit=True) as con:
        for duck, pg, text in INPUTS:
            try:
                con.execute(f"SELECT {psycopg.sql.Literal(text).as_string(con)}::{pg}")
                accepted = True
            except (psycopg.errors.InvalidTextRepresentation, psycopg.errors.NumericValueOutOfRange):
                accepted = False
            assert _checked(duck, text) == accepted, (duck, pg, text, accepted)


@pytest.mark.parametrize(
    "sql, words",
    [
        ("SELECT COUNT(*) FROM patients WHERE age = 'abc'", 'invalid input syntax for type bigint: "abc"'),
        ("SELECT COUNT(*) FROM patients WHERE 'x' < age", 'for type bigint: "x"'),
        ("SELECT COUNT(*) FROM patients WHERE age IN ('1', 'two')", '"two"'),
        ("SELECT COUNT(*) FROM patients WHERE age BETWEEN '1' AND '9O'", '"9O"'),
        ("SELECT COUNT(*) FROM patients WHERE income > 'lots'", "for type double precision"),
        ("SELECT COUNT(*) FROM patients WHERE smoker = 'maybe'", "for type boolean"),
        ("SELECT SUM(CASE WHEN age = 'x' THEN 1 ELSE 0 END) FROM patients", '"x"'),
        ("SELECT COUNT(*) FROM visits v JOIN patients p ON v.patient_id = p.patient_id WHERE p.age > 'old'", '"old"'),
        ("SELECT COUNT(*) FROM patients WHERE age > CAST('1.5' AS INTEGER)", 'for type integer: "1.5"'),
        ("SELECT COUNT(*) FROM visits WHERE visit_date > 'Jan 1 2024'", 'cannot read "Jan 1 2024" as a date'),
        ("SELECT COUNT(*) FROM visits WHERE visit_date BETWEEN '2024-01-01' AND 'today'", '"today" as a date'),
        ("SELECT COUNT(*) FROM visits WHERE visit_date >= DATE '2024-02-30'", '"2024-02-30" as a date'),
        ("SELECT COUNT(*) FROM visits WHERE visit_date < CAST('01/02/2024' AS TIMESTAMP)", "as a timestamp"),
    ],
)
def test_a_typo_is_refused_free(hospital, sql, words):
    with pytest.raises(dpsql.DataError) as err:
        hospital.execute(sql)
    assert err.value.sqlstate in ("22P02", "22007") and words in str(err.value), str(err.value)
    assert "nothing was charged" in str(err.value)
    assert hospital.connection.session.budget()["queries"] == 0


def test_inputs_postgresql_reads_are_answered(hospital):
    for sql in (
        "SELECT COUNT(*) FROM patients WHERE age = ' 30 '",
        "SELECT COUNT(*) FROM patients WHERE income > '1e3'",
        "SELECT COUNT(*) FROM patients WHERE smoker = 'yes'",
        "SELECT COUNT(*) FROM patients WHERE CAST(age AS TEXT) = 'abc'",  # a text comparison
        "SELECT COUNT(*) FROM patients WHERE sex = 'Q'",
        "SELECT COUNT(*) FROM visits WHERE visit_date >= '2024-1-31'",
        "SELECT COUNT(*) FROM visits WHERE visit_date < '2024-01-31 13:45:00'",
        "SELECT COUNT(*) FROM visits WHERE visit_date < TIMESTAMP '2024-01-31T13:45:00'",
        "SELECT COUNT(*) FROM visits WHERE visit_date > '2024-01-01'::timestamptz",
    ):
        hospital.execute(sql)
        assert hospital.fetchall()
    assert hospital.connection.session.budget()["queries"] == 9


@pytest.mark.parametrize(
    "shape, good, bad, words",
    [
        ("SELECT COUNT(*) FROM patients WHERE age = {} AND sex = 'F'", ["'30'", "'31'", "'32'"], "'3l'", '"3l"'),
        (
            "SELECT COUNT(*) FROM visits WHERE visit_date >= {}",
            ["'2024-01-01'", "'2024-02-01'", "'2024-03-01'"],
            "'Apr 1 2024'",
            '"Apr 1 2024" as a date',
        ),
    ],
)
def test_a_typo_is_refused_free_after_its_shape_has_a_template(hospital, shape, good, bad, words):
    """The third text of a shape skips the analysis (sql/slots.py): its values are checked as
    they are put into the template's plan."""
    for value in good:
        hospital.execute(shape.format(value))
    from dpsql.plan_cache import Template

    assert any(isinstance(v, Template) for v in hospital.connection.session._plans._templates.values())
    with pytest.raises(dpsql.DataError) as err:
        hospital.execute(shape.format(bad))
    assert words in str(err.value) and "nothing was charged" in str(err.value)
    assert hospital.connection.session.budget()["queries"] == 3


def test_pgjdbc_set_date_is_read_as_its_date(hospital):
    """pgjdbc's setDate sends an untyped '2024-01-31 +01' (a date with its zone): decoded, it is
    a string DuckDB reads as that date, so the filter means what PostgreSQL means; DuckDB reads
    the raw form as nothing, which the literal check would refuse."""
    from dpsql.server.wire import types, values

    assert values.decode_param(b"2024-01-31 +01", 0, 0) == "2024-01-31 00:00:00+01"
    assert values.decode_param(b"2024-01-31 -05:30", types.DATE, 0) == datetime.date(2024, 1, 31)
    assert values.decode_param(b"2024-01-31 +01 x", 0, 0) == "2024-01-31 +01 x"  # anything else as sent
    session = hospital.connection.session
    filtered = "SELECT COUNT(*) FROM visits WHERE visit_date >= $1"

    def exact(value: str) -> list:
        plan, _ = session._prepare(bind_parameters(classify(filtered).tree, [value]))
        return session.bounded_result(plan).columns

    plain = exact("2024-01-31")
    assert plain != exact("2024-02-01")  # the filter matters
    for raw in (b"2024-01-31 +01", b"2024-01-31 -05", b"2024-01-31 +05:30"):
        assert exact(values.decode_param(raw, 0, 0)) == plain
    with pytest.raises(dpsql.DataError):
        hospital.execute(filtered.replace("$1", "%s"), ["2024-01-31 +01"])  # the raw form, decoded by no one

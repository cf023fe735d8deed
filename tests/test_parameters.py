"""The one parameter binder (sql/parameters.py), which the session and the catalog both call:
values become literals in the parsed tree, never text; placeholders are filled in the order they
are written; a missing or surplus value is a clear 08P01 for an analyst's statement, NULL for a
catalog query described before its values are known."""

from __future__ import annotations

import datetime
import decimal

import pytest
import sqlglot
from sqlglot import exp

import dpsql
from dpsql.errors import ProgrammingError
from dpsql.sql.parameters import SHOWN_VALUE_CHARS, bind, bind_parameters, null_parameters, to_literal


def _q(sql: str) -> exp.Expression:
    return sqlglot.parse_one(sql, read="postgres")


def _sql(tree: exp.Expression) -> str:
    return tree.sql(dialect="postgres")


def test_values_of_each_type_become_literals_of_that_type():
    day, moment = datetime.date(2024, 1, 31), datetime.datetime(2024, 1, 31, 12, 30)
    got = _sql(
        bind(
            _q("SELECT $1, $2, $3, $4, $5, $6, $7, $8"), [None, True, 7, 2.5, decimal.Decimal("1.10"), day, moment, "x"]
        )
    )
    assert got == (
        "SELECT NULL, TRUE, 7, 2.5, 1.10, CAST('2024-01-31' AS DATE), CAST('2024-01-31 12:30:00' AS TIMESTAMP), 'x'"
    )
    assert _sql(to_literal(float("nan"))) == "CAST('nan' AS DOUBLE PRECISION)"
    with pytest.raises(ProgrammingError) as info:
        to_literal(object())
    assert info.value.sqlstate == "22023"


def test_a_value_is_never_sql():
    hostile = "x'); DROP TABLE people; --"
    tree = bind(_q("SELECT * FROM t WHERE a = %s"), [hostile])
    (literal,) = [n for n in tree.walk() if isinstance(n, exp.Literal)]
    assert literal.this == hostile and literal.is_string
    assert len(list(tree.find_all(exp.Select))) == 1 and tree.find(exp.Drop) is None


def test_positional_placeholders_are_filled_in_the_order_written():
    """%s is the next value in the text's order, however deep the placeholder sits in the tree
    (a breadth-first walk gave the outer `w` the first value)."""
    tree = bind(_q("SELECT a FROM t WHERE (x = %s AND (y = %s OR z = %s)) AND w = %s"), [1, 2, 3, 4])
    assert _sql(tree) == "SELECT a FROM t WHERE (x = 1 AND (y = 2 OR z = 3)) AND w = 4"
    tree = bind(
        _q("SELECT f(%s, g(%s)), %s FROM t WHERE b IN (SELECT c FROM u WHERE d = %s) AND e = %s"), [1, 2, 3, 4, 5]
    )
    assert _sql(tree) == "SELECT F(1, G(2)), 3 FROM t WHERE b IN (SELECT c FROM u WHERE d = 4) AND e = 5"


def test_numbered_and_named_placeholders():
    assert _sql(bind(_q("SELECT $2, $1, $2"), ["a", "b"])) == "SELECT 'b', 'a', 'b'"
    assert _sql(bind(_q("SELECT %(b)s, %(a)s"), {"a": 1, "b": 2})) == "SELECT 2, 1"


def test_the_tree_given_is_not_changed():
    tree = _q("SELECT $1")
    bind(tree, [1])
    assert _sql(tree) == "SELECT $1"


@pytest.mark.parametrize(
    ("sql", "params", "message"),
    [
        ("SELECT $3", [1, 2], "no value for parameter 3"),
        ("SELECT $0", [1], "no value for parameter 0"),
        ("SELECT %s, %s", [1], "no value for parameter 2"),
        ("SELECT %(a)s", {"b": 1}, "no value for parameter 'a'"),
        ("SELECT %(a)s", [1], "named parameter %(a)s needs a mapping of parameters"),
        ("SELECT $1", None, "the query has placeholders but no parameters were given"),
        ("SELECT 1", [1], "parameters were given but the query has no placeholders"),
    ],
)
def test_an_analyst_s_missing_or_surplus_value_is_08P01(sql, params, message):
    with pytest.raises(ProgrammingError) as info:
        bind(_q(sql), params)
    assert info.value.sqlstate == "08P01" and str(info.value.message) == message


def test_absent_values_are_null_where_asked():
    """The catalog's reading (a statement described before its values exist): a placeholder
    without a value is NULL, and a value nobody asks for is ignored."""
    assert _sql(bind(_q("SELECT $1, $3"), ["a"], absent_as_null=True)) == "SELECT 'a', NULL"
    assert _sql(bind(_q("SELECT %s, %s"), [], absent_as_null=True)) == "SELECT NULL, NULL"
    assert _sql(bind(_q("SELECT 1"), [1], absent_as_null=True)) == "SELECT 1"
    assert _sql(bind(_q("SELECT %(a)s"), None, absent_as_null=True)) == "SELECT NULL"


def test_the_session_reads_a_list_parameter_as_an_in_list():
    tree = bind_parameters(_q("SELECT * FROM t WHERE a = ANY(%s)"), ["{1,2}"])
    assert _sql(tree) == "SELECT * FROM t WHERE a IN ('1', '2')"
    plain = _q("SELECT 1")
    assert bind_parameters(plain, None) is plain


def test_null_parameters_describe_each_placeholder():
    assert null_parameters(_q("SELECT $1, $3")) == [None, None, None]
    assert null_parameters(_q("SELECT %(a)s, %(b)s")) == {"a": None, "b": None}


def test_an_embedded_cursor_binds_nested_placeholders_in_order(conn):
    """Through dpsql.connect, over the public table places (answered exactly): in the order
    written, north, south and east all match (3); bound breadth-first, the outer `name = %s`
    took "north" and the others shifted, which matched two."""
    cur = conn.cursor()
    cur.execute(
        "SELECT COUNT(*) FROM places WHERE (name <> %s AND (name = %s OR name = %s)) OR name = %s",
        ("north", "south", "east", "north"),
    )
    assert cur.fetchall() == [(3,)]
    with pytest.raises(dpsql.Error) as info:
        cur.execute("SELECT COUNT(*) FROM places WHERE name = $2", ("north",))
    assert info.value.sqlstate == "08P01" and "parameter 2" in info.value.message


def test_the_ledger_records_a_statement_with_its_parameters_values(conn):
    """An officer reading the history sees what was asked: the text with $1 or %s alone does not
    say it. Each value as a literal (quotes doubled), a long one cut short."""
    cur = conn.cursor()
    cur.execute("SELECT COUNT(*) FROM people WHERE age > %s AND city = %s", (30, "O'Hare"))
    cur.fetchall()
    cur.execute("SELECT COUNT(*) FROM people WHERE age > %(low)s", {"low": 40})
    cur.fetchall()
    cur.execute("SELECT COUNT(*) FROM people WHERE city = %s", ("x" * 500,))
    cur.fetchall()
    cur.execute("SELECT COUNT(*) FROM people WHERE age > 50")
    cur.fetchall()
    texts = [c["sql"] for c in conn.session.ledger.history("alice")]
    assert (
        texts[0] == "SELECT COUNT(*) FROM people WHERE age > %s AND city = %s\n-- parameters: $1 = 30, $2 = 'O''Hare'"
    )
    assert texts[1] == "SELECT COUNT(*) FROM people WHERE age > %(low)s\n-- parameters: low = 40"
    assert texts[2].endswith("'" + "x" * (SHOWN_VALUE_CHARS - 4) + "...") and len(texts[2]) < 300
    assert texts[3] == "SELECT COUNT(*) FROM people WHERE age > 50"  # no parameters: the text as written

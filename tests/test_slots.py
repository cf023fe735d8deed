"""Filter values as slots (dpsql/sql/slots.py): a text that differs from two others only in the
values its WHERE compares with takes their plan, calibration and bounded query with its own
values put in. Every such text must get exactly what planning it in full gives: the same
bounded SQL (so the same pre-noise values), the same calibration (so the same noise and
charge), and a template that does not reproduce its two texts is never used."""

from __future__ import annotations

import pytest
from sqlglot import exp, parse_one

from dpsql.config import load_policy
from dpsql.plan_cache import UNUSABLE
from dpsql.session import Session
from dpsql.sql import slots
from dpsql.sql.classify import classify

# (shape with {} for each slot, three value tuples): the third text is answered from the template
CORPUS = [
    ("SELECT COUNT(*) FROM people WHERE age > {}", [("30",), ("41",), ("0",)]),
    ("SELECT COUNT(*) FROM people WHERE age > {}", [("'30'",), ("'41'",), ("' 5e1 '",)]),  # a double's inputs
    (
        "SELECT sex, COUNT(*), AVG(age) FROM people WHERE city = {} GROUP BY sex",
        [("'Oslo'",), ("'Rome'",), ("'it''s'",)],
    ),
    (
        "SELECT COUNT(*), SUM(age) FROM people WHERE age BETWEEN {} AND {} AND city <> {}",
        [("20", "40", "'Lima'"), ("21", "39", "'Pune'"), ("0", "100", "''")],
    ),
    (
        "SELECT kind, COUNT(*), SUM(amount) FROM events WHERE amount < {} GROUP BY kind",
        [("10.5",), ("20.25",), ("1e1",)],
    ),
    (
        "SELECT kind, COUNT(*) FROM events WHERE place IN ({}, {}) GROUP BY kind",
        [("'north'", "'south'"), ("'east'", "'south'"), ("'x'' OR TRUE --'", "'north'")],
    ),
    ("SELECT city, COUNT(*) FROM people WHERE age >= {} GROUP BY city", [("10",), ("20",), ("30",)]),
    (
        "SELECT sex, SUM(age) AS s FROM people WHERE city LIKE {} GROUP BY sex "
        "HAVING SUM(age) > 0 ORDER BY s DESC LIMIT 1",
        [("'O%'",), ("'R%'",), ("'%'",)],
    ),
    (
        "SELECT p.region, COUNT(*) FROM events e JOIN places p ON e.place = p.name "
        "WHERE e.amount > {} GROUP BY p.region",
        [("1",), ("2",), ("3",)],
    ),
    ("SELECT g, COUNT(*), AVG(v) FROM rows WHERE v > -{} GROUP BY g", [("1",), ("5",), ("9",)]),
    ("SELECT COUNT(*) FROM people WHERE CAST(age AS INTEGER) = {} OR age < {}", [("30", "5"), ("31", "6"), ("0", "0")]),
    ("SELECT kind, MEDIAN(amount) FROM events WHERE amount > {} GROUP BY kind", [("1",), ("2",), ("40",)]),
    (
        "SELECT COUNT(DISTINCT pid) FROM events TABLESAMPLE BERNOULLI (50) WHERE kind = {}",
        [("'a'",), ("'b'",), ("'c'",)],
    ),
]


def _planned(session: Session, sql: str):
    stmt = classify(sql)
    return session._plans.plan(session._plan_key(stmt.tree, stmt.options or _options(), sql))


def _options():
    from dpsql.sql.options import QueryOptions

    return QueryOptions()


def _full(small_policy, sql: str):
    """The text planned in full by a session of its own (a cache of its own)."""
    s = Session(load_policy(small_policy), "alice")
    try:
        stmt = classify(sql)
        plan, cal = s._prepare(stmt.tree, stmt.options)
        return s.bounded_sql(plan), cal, s.bounded_result(plan) if plan.sample_rate is None else None
    finally:
        s.close()


@pytest.mark.parametrize("shape,values", CORPUS, ids=[c[0][:60] for c in CORPUS])
def test_a_text_from_its_shapes_template_is_the_text_planned_in_full(small_policy, monkeypatch, shape, values):
    s = Session(load_policy(small_policy), "alice")
    s.execute("SET dpsql.cache = off")
    analysed = []
    plan_and_calibrate = Session._plan_and_calibrate
    monkeypatch.setattr(
        Session,
        "_plan_and_calibrate",
        lambda self, tree, options: analysed.append(1) or plan_and_calibrate(self, tree, options),
    )
    texts = [shape.format(*v) for v in values]
    try:
        for text in texts:
            s.execute(text)
        assert len(analysed) == 2  # the third text was neither analysed nor rewritten
        for text in texts:
            plan, cal = _planned(s, text)
            sql, full_cal, exact = _full(small_policy, text)
            assert s.bounded_sql(plan) == sql
            assert cal == full_cal
            if exact is not None:
                assert sorted(zip(*s.bounded_result(plan).columns)) == sorted(zip(*exact.columns))
    finally:
        s.close()


def test_a_template_that_does_not_reproduce_its_texts_is_never_used(small_policy, monkeypatch):
    """The check that guards the class of problem, not one instance: whatever makes a
    template's SQL differ from a text's own (here a splice that drops a value), the shape is
    planned in full from then on."""
    real = slots.Markers.splicer

    def broken(self, literals, sql_of):
        splice = real(self, literals, sql_of)
        return lambda template, values: splice(template, ["0" for _ in values])

    monkeypatch.setattr(slots.Markers, "splicer", broken)
    s = Session(load_policy(small_policy), "alice")
    s.execute("SET dpsql.cache = off")
    try:
        texts = [f"SELECT COUNT(*) FROM people WHERE age > {v}" for v in (30, 41, 50)]
        for text in texts:
            s.execute(text)
        assert UNUSABLE in s._plans._templates.values()
        plan, _ = _planned(s, texts[2])
        assert s.bounded_sql(plan) == _full(small_policy, texts[2])[0]
    finally:
        s.close()


def test_calibrations_that_differ_between_two_texts_leave_the_shape_without_template(small_policy, monkeypatch):
    s = Session(load_policy(small_policy), "alice")
    s.execute("SET dpsql.cache = off")
    plan_and_calibrate = Session._plan_and_calibrate
    calls = []

    def shifted(self, tree, options):
        plan, cal = plan_and_calibrate(self, tree, options)
        calls.append(1)
        from dataclasses import replace

        return plan, (replace(cal, planned_weight=cal.planned_weight / 2) if len(calls) == 2 else cal)

    monkeypatch.setattr(Session, "_plan_and_calibrate", shifted)
    try:
        for v in (1, 2, 3):
            s.execute(f"SELECT sex, COUNT(*) FROM people WHERE age > {v} GROUP BY sex")
        assert list(s._plans._templates.values()) == [UNUSABLE] and len(calls) == 3
    finally:
        s.close()


def test_parameters_bound_to_a_prepared_statement_share_one_template(small_policy):
    s = Session(load_policy(small_policy), "alice")
    s.execute("SET dpsql.cache = off")
    try:
        for v in (20, 30.5, 40, 50.5):
            s.execute("SELECT sex, COUNT(*) FROM people WHERE age > %s AND city = %s GROUP BY sex", (v, "Oslo"))
        kinds = sorted(type(e).__name__ for e in s._plans._templates.values())
        assert kinds == ["Template", "Template"]  # one for integers, one for decimals
    finally:
        s.close()


# The pure parts --------------------------------------------------------------------------------
def _slots(sql: str) -> list[str]:
    _, found = slots.tagged(parse_one(sql, read="postgres"))
    return [lit.sql() for lit in found]


def test_slots_are_the_comparison_operands_of_the_querys_own_where():
    sql = (
        "SELECT a + 1, COUNT(*) FROM t WHERE a > 5 AND b = 'x' AND c IN (1, 2) AND d BETWEEN 3 AND 4 "
        "AND e LIKE 'a%' AND f > -6 AND g >= CAST('2020-01-01' AS DATE) AND lower(h) = 'y' AND i + 7 < 8 "
        "AND j IN (SELECT k FROM p WHERE l = 9) AND substr(m, 10) = n GROUP BY a HAVING COUNT(*) > 11 LIMIT 12"
    )
    assert _slots(sql) == ["5", "'x'", "1", "2", "3", "4", "'a%'", "6", "'2020-01-01'", "'y'", "8"]


def test_texts_share_a_shape_only_when_they_differ_in_slot_values_of_one_kind():
    def shape(sql):
        tree, literals = slots.tagged(parse_one(sql, read="postgres"))
        before = tree.sql()
        written = slots.shape(tree, literals)
        assert tree.sql() == before  # the markers stood in only while it was written
        return written

    base = shape("SELECT COUNT(*) FROM t WHERE a > 5 AND b IN ('x', 'y') LIMIT 3")
    assert shape("SELECT COUNT(*) FROM t WHERE a > 70 AND b IN ('z', '') LIMIT 3") == base
    for other in (
        "SELECT COUNT(*) FROM t WHERE a > 5.5 AND b IN ('x', 'y') LIMIT 3",
        "SELECT COUNT(*) FROM t WHERE a > '5' AND b IN ('x', 'y') LIMIT 3",
        "SELECT COUNT(*) FROM t WHERE a > 5 AND b IN ('x', 'y', 'z') LIMIT 3",
        "SELECT COUNT(*) FROM t WHERE a > 5 AND b IN ('x', 'y') LIMIT 4",
        "SELECT COUNT(*) FROM t WHERE a >= 5 AND b IN ('x', 'y') LIMIT 3",
    ):
        assert shape(other) != base


def test_splicing_touches_the_markers_only():
    markers = slots.Markers.new()
    literals = [exp.Literal.string("x"), exp.Literal.number("5"), exp.Literal.number("2.5")]
    marks = [markers.marker(i, lit) for i, lit in enumerate(literals)]
    template = (
        f"SELECT {marks[0].sql()} AS a, '{markers.letters}' AS b, {marks[1].sql()} + {marks[2].sql()} "
        f"WHERE {marks[0].sql()} = 'y'"
    )
    splice = markers.splicer(literals, lambda lit: lit.sql())
    assert splice(template, ["'it''s'", "70", "0.25"]) == (
        f"SELECT 'it''s' AS a, '{markers.letters}' AS b, 70 + 0.25 WHERE 'it''s' = 'y'"
    )
    assert markers != slots.Markers.new()


def test_an_outer_part_that_cannot_be_computed_is_refused_free_for_every_text_of_a_shape(small_policy):
    """The outer part's check is kept per outer part once it passes (session/bounded.py check_post); one
    that fails is refused again for every text, and nothing is charged."""
    from dpsql.errors import ProgrammingError

    s = Session(load_policy(small_policy), "alice")
    s.execute("SET dpsql.cache = off")
    try:
        for v in (10, 20, 30, 40):
            with pytest.raises(ProgrammingError) as e:
                s.execute(f"SELECT sex, COUNT(*) FROM people WHERE age > {v} GROUP BY sex HAVING COUNT(*) > 'x'")
            assert e.value.sqlstate == "42601" and "nothing was charged" in e.value.hint
        for v in (10, 20, 30, 40):
            s.execute(
                f"SELECT sex, COUNT(*) AS n FROM people WHERE age > {v} GROUP BY sex HAVING COUNT(*) > 1 "
                "ORDER BY n DESC LIMIT 1"
            )
        assert s.budget()["queries"] == 4
    finally:
        s.close()

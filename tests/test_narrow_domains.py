"""Filters narrow declared domains (sql/narrow.py): a grouped query over declared keys answers
the keys its own conditions allow, evaluated over the declared values and public tables only.

The expected key sets below follow from the policy's declared values and the public wards table
alone (sample_data/dpsql.toml, sample_data/wards.csv): that is the point, the narrowing may not
depend on private rows.
"""

from __future__ import annotations

import datetime
import os
from pathlib import Path

import psycopg
import pytest

from dpsql.config import load_policy
from dpsql.session import Session
from dpsql.session import bounded as bounded_module
from dpsql.sql import rewrite as rewrite_module
from dpsql.sql.classify import classify
from dpsql.sql.narrow import NONE, narrowing, unlisted
from dpsql.sql.rewrite import declared_domain
from sample_data.generate import DIAGNOSES, REGIONS
from sample_data.generate import WARDS as SAMPLE_WARDS

from .conftest import SAMPLE, default_events, default_people, make_db, write_policy
from .test_golden import _pretty

FIXTURES = Path(__file__).resolve().parent / "fixtures"
WARDS = {name: rest for name, *rest in SAMPLE_WARDS}  # name: [building, floor, specialty], as in wards.csv


def _month(y: int, m: int) -> datetime.datetime:
    return datetime.datetime(y, m, 1)


def _months(first: tuple[int, int], last: tuple[int, int]) -> set[datetime.datetime]:
    out, (y, m) = set(), first
    while (y, m) <= last:
        out.add(_month(y, m))
        y, m = (y + 1, 1) if m == 12 else (y, m + 1)
    return out


def _keys(cur) -> set:
    """The keys answered: each row's columns but its last (every query here has one aggregate, last)."""
    return {r[0] if len(r) == 2 else tuple(r[:-1]) for r in cur.fetchall()}


# Each predicate form, over a listed domain (diagnosis), a public table's keys (ward: keys_from
# wards.name), a bounded integer (age 0..110) and the months of a date's declared range.
@pytest.mark.parametrize(
    "where,expected",
    [
        ("diagnosis = 'cardiac'", {"cardiac"}),
        ("diagnosis <> 'cardiac'", set(DIAGNOSES) - {"cardiac"}),
        ("diagnosis != 'cardiac'", set(DIAGNOSES) - {"cardiac"}),
        ("diagnosis IN ('cardiac', 'skin', 'not a diagnosis')", {"cardiac", "skin"}),
        ("diagnosis NOT IN ('cardiac', 'skin')", set(DIAGNOSES) - {"cardiac", "skin"}),
        ("diagnosis BETWEEN 'm' AND 'n'", {"mental", "musculoskeletal"}),
        ("diagnosis >= 'p'", {"pregnancy", "respiratory", "skin"}),
        ("diagnosis LIKE 'c%'", {"cardiac", "checkup"}),
        ("diagnosis LIKE '%in%'", {"infection", "injury", "skin"}),
        ("diagnosis NOT LIKE '%n%'", {"cardiac", "checkup", "respiratory", "digestive", "musculoskeletal"}),
        ("diagnosis ILIKE 'C%'", {"cardiac", "checkup"}),
        ("diagnosis LIKE 'C%'", set()),  # LIKE is case-sensitive: no key, nothing released
        ("diagnosis IS NOT NULL", set(DIAGNOSES)),
        ("diagnosis IS NULL", set()),  # a NULL key is in no group
        ("diagnosis = NULL", set()),
        ("diagnosis NOT IN ('cardiac', NULL)", set()),  # NULL for every key, as for every row
        ("UPPER(diagnosis) = 'SKIN'", {"skin"}),
        ("diagnosis IN ('cardiac', 'skin') AND diagnosis <> 'skin'", {"cardiac"}),
        ("(diagnosis = 'cardiac' OR diagnosis LIKE 's%')", {"cardiac", "skin"}),
        ("NOT (diagnosis <> 'injury')", {"injury"}),
        ("diagnosis = 'cardiac' AND cost > 100", {"cardiac"}),  # the other column's condition narrows nothing
        ("diagnosis = 'cardiac' OR cost > 100", set(DIAGNOSES)),  # an OR with another column: every key
        ("cost > 100", set(DIAGNOSES)),
    ],
)
def test_each_predicate_form_on_a_listed_domain(hospital, where, expected):
    hospital.execute(f"SELECT diagnosis, COUNT(*) FROM visits WHERE {where} GROUP BY diagnosis")
    assert _keys(hospital) == expected


@pytest.mark.parametrize(
    "where,expected",
    [
        ("ward IN ('Cardiology', 'Oncology')", {"Cardiology", "Oncology"}),
        ("ward = 'Cardiology'", {"Cardiology"}),
        ("ward NOT IN ('Cardiology', 'Oncology')", set(WARDS) - {"Cardiology", "Oncology"}),
        ("ward LIKE '%ology'", {w for w in WARDS if w.endswith("ology")}),
        ("ward < 'E'", {"Cardiology", "Dermatology"}),
        ("ward = 'cardiology'", set()),
    ],
)
def test_keys_from_a_public_table_are_narrowed_too(hospital, where, expected):
    hospital.execute(f"SELECT ward, COUNT(*) FROM visits WHERE {where} GROUP BY ward")
    assert _keys(hospital) == expected


@pytest.mark.parametrize(
    "where,expected",
    [
        ("age BETWEEN 18 AND 21", {18, 19, 20, 21}),
        ("age < 3", {0, 1, 2}),
        ("age > 107.5", {108, 109, 110}),
        ("age >= 65 AND age <= 66 OR age = 0", {0, 65, 66}),
        ("age IN (5, 500)", {5}),
        ("age % 50 = 0", {0, 50, 100}),
    ],
)
def test_numeric_ranges_on_a_bounded_integer(hospital, where, expected):
    hospital.execute(f"SELECT age, COUNT(*) FROM patients WHERE {where} GROUP BY age")
    assert _keys(hospital) == expected


@pytest.mark.parametrize(
    "sql,expected",
    [
        # date_trunc of a filtered date range: the buckets the range intersects
        (
            "SELECT date_trunc('month', visit_date) AS m, SUM(cost) FROM visits "
            "WHERE visit_date >= '2024-01-01' GROUP BY 1",
            _months((2024, 1), (2024, 12)),
        ),
        (
            "SELECT date_trunc('month', visit_date) AS m, COUNT(*) FROM visits "
            "WHERE visit_date BETWEEN '2024-03-15' AND '2024-05-02' GROUP BY 1",
            _months((2024, 3), (2024, 5)),
        ),
        (
            "SELECT date_trunc('month', visit_date) AS m, COUNT(*) FROM visits "
            "WHERE visit_date > DATE '2023-12-31' AND visit_date < DATE '2024-02-01' GROUP BY 1",
            {_month(2024, 1)},
        ),
        (
            "SELECT date_trunc('quarter', visit_date) AS q, COUNT(*) FROM visits "
            "WHERE visit_date < '2023-04-01' GROUP BY 1",
            {_month(2023, 1)},
        ),
        # a condition over the group expression itself
        (
            "SELECT date_trunc('month', visit_date) AS m, COUNT(*) FROM visits "
            "WHERE date_trunc('month', visit_date) IN (DATE '2024-02-01', DATE '2030-01-01') GROUP BY 1",
            {_month(2024, 2)},
        ),
        # HAVING on a key is a filter on keys too
        (
            "SELECT date_trunc('month', visit_date) AS m, COUNT(*) FROM visits GROUP BY 1 "
            "HAVING date_trunc('month', visit_date) >= '2024-11-01'",
            {_month(2024, 11), _month(2024, 12)},
        ),
        (
            "SELECT diagnosis, COUNT(*) FROM visits GROUP BY diagnosis HAVING diagnosis LIKE 'c%' AND COUNT(*) > -1e9",
            {"cardiac", "checkup"},
        ),
        # a day key under the same range: the days themselves
        (
            "SELECT visit_date, COUNT(*) FROM visits WHERE visit_date BETWEEN '2024-02-28' AND '2024-03-01' GROUP BY 1",
            {datetime.date(2024, 2, 28), datetime.date(2024, 2, 29), datetime.date(2024, 3, 1)},
        ),
        # a domain from the key's form (EXTRACT, CASE) over one enumerable column: the keys its allowed values give
        (
            "SELECT EXTRACT(month FROM visit_date) AS m, COUNT(*) FROM visits "
            "WHERE visit_date >= '2024-10-01' GROUP BY m",
            {10, 11, 12},
        ),
        (
            "SELECT EXTRACT(month FROM visit_date) AS m, COUNT(*) FROM visits GROUP BY m "
            "HAVING EXTRACT(month FROM visit_date) <= 2",
            {1, 2},
        ),
        (
            "SELECT CASE WHEN age < 18 THEN 'child' WHEN age < 65 THEN 'adult' ELSE 'senior' END AS band, COUNT(*) "
            "FROM patients WHERE age >= 70 OR age = 3 GROUP BY band",
            {"child", "senior"},
        ),
        # outside the declared range: nothing
        (
            "SELECT date_trunc('month', visit_date) AS m, COUNT(*) FROM visits "
            "WHERE visit_date >= '2025-01-01' GROUP BY 1",
            set(),
        ),
    ],
)
def test_dates_and_their_buckets(hospital, sql, expected):
    hospital.execute(sql)
    assert _keys(hospital) == expected


_VW = "FROM visits v JOIN wards w ON v.ward = w.name"


@pytest.mark.parametrize(
    "sql,expected",
    [
        (f"SELECT w.floor, COUNT(*) {_VW} WHERE w.building = 'A' GROUP BY w.floor", {2, 3, 4}),
        (
            f"SELECT w.building, w.floor, COUNT(*) {_VW} GROUP BY w.building, w.floor",
            {(b, f) for b, f, _ in WARDS.values()},
        ),
        (
            f"SELECT v.ward, w.building, COUNT(*) {_VW} GROUP BY v.ward, w.building",
            {(n, b) for n, (b, _, _) in WARDS.items()},
        ),
        (
            f"SELECT v.ward, COUNT(*) {_VW} WHERE w.specialty = 'heart' OR w.floor = 0 GROUP BY v.ward",
            {"Cardiology", "Emergency", "Radiology"},
        ),
        (
            f"SELECT v.ward, v.diagnosis, COUNT(*) {_VW} WHERE w.building = 'D' AND v.diagnosis = w.specialty "
            "GROUP BY v.ward, v.diagnosis",
            {("Dermatology", "skin")},
        ),
        (
            f"SELECT w.building, COUNT(*) {_VW} WHERE v.ward IN ('Cardiology', 'Emergency') GROUP BY w.building",
            {"A", "C"},
        ),
        # the nullable side of a LEFT JOIN: its ON condition holds for matched rows only, and a
        # WHERE on its columns passes unmatched rows (with NULLs): neither narrows the other keys
        (
            "SELECT v.ward, COUNT(*) FROM visits v LEFT JOIN wards w ON v.ward = w.name AND w.building = 'A' "
            "GROUP BY v.ward",
            set(WARDS),
        ),
        (
            "SELECT v.ward, COUNT(*) FROM visits v LEFT JOIN wards w ON v.ward = w.name AND w.building = 'A' "
            "WHERE w.floor IS NULL OR w.floor = 2 GROUP BY v.ward",
            set(WARDS),
        ),
        # ... but keys from that side come from its matched rows
        (
            "SELECT w.floor, COUNT(*) FROM visits v LEFT JOIN wards w ON v.ward = w.name AND w.building = 'A' "
            "GROUP BY w.floor",
            {2, 3, 4},
        ),
    ],
)
def test_a_join_with_a_public_table_answers_the_combinations_it_has(hospital, sql, expected):
    hospital.execute(sql)
    assert _keys(hospital) == expected


def test_private_joins_and_cross_products(hospital):
    # visits joined with patients: both keys narrowed, combined as a cross product (private rows tie them)
    hospital.execute(
        "SELECT p.region, v.diagnosis, COUNT(*) FROM visits v JOIN patients p ON v.patient_id = p.patient_id "
        "WHERE p.region IN ('North', 'Lakes') AND v.diagnosis LIKE 'c%' GROUP BY p.region, v.diagnosis"
    )
    assert _keys(hospital) == {(r, d) for r in ("North", "Lakes") for d in ("cardiac", "checkup")}
    # a condition between two private key columns narrows nothing (private rows decide it)
    hospital.execute(
        "SELECT p.region, v.diagnosis, COUNT(*) FROM visits v JOIN patients p ON v.patient_id = p.patient_id "
        "WHERE p.sex = 'F' GROUP BY p.region, v.diagnosis"
    )
    assert len(hospital.fetchall()) == len(REGIONS) * len(DIAGNOSES)


def test_an_excluded_domain_releases_nothing_and_charges_nothing(hospital):
    hospital.execute("SHOW dpsql.budget")
    queries = hospital.fetchone()[8]
    hospital.execute("SELECT ward, COUNT(*) FROM visits WHERE ward IS NULL GROUP BY ward")
    assert hospital.fetchall() == [] and "exclude every one" in hospital.dp["notice"]
    hospital.execute("SHOW dpsql.budget")
    assert hospital.fetchone()[8] == queries


def test_explain_shows_the_narrowed_domain(hospital):
    hospital.execute("EXPLAIN SELECT ward, COUNT(*) FROM visits WHERE ward IN ('Cardiology', 'Oncology') GROUP BY ward")
    lines = [r[0] for r in hospital.fetchall()]
    groups = next(line for line in lines if line.startswith("groups:"))
    assert "the 2 key tuple(s)" in groups and "ward IN ('Cardiology', 'Oncology')" in groups
    hospital.execute("EXPLAIN SELECT ward, COUNT(*) FROM visits WHERE cost > 10 GROUP BY ward")
    groups = next(r[0] for r in hospital.fetchall() if r[0].startswith("groups:"))
    assert "the 12 key tuple(s)" in groups and "allow" not in groups


# Neighbouring databases ------------------------------------------------------------------------
NARROWED = [  # (query, its number of keys, the keys it answers whatever the data)
    ("SELECT kind, COUNT(*), SUM(amount) FROM events WHERE kind IN ('a', 'c') GROUP BY kind", 1, {"a", "c"}),
    ("SELECT kind, COUNT(*) FROM events WHERE kind <> 'a' AND amount > 10 GROUP BY kind", 1, {"b", "c"}),
    ("SELECT place, COUNT(*) FROM events WHERE place LIKE '%th' GROUP BY place", 1, {"north", "south"}),
    (
        "SELECT e.kind, pl.region, COUNT(*) FROM events e JOIN places pl ON e.place = pl.name "
        "WHERE pl.region = 'r0' GROUP BY e.kind, pl.region",
        2,
        {(k, "r0") for k in "abc"},
    ),
    (
        "SELECT e.place, pl.region, AVG(e.amount) FROM events e JOIN places pl ON e.place = pl.name "
        "GROUP BY e.place, pl.region",
        2,
        {("north", "r0"), ("south", "r1"), ("east", "r0")},
    ),
    ("SELECT g, SUM(v) FROM rows WHERE g >= 2 GROUP BY g", 1, {2, 3}),
    ("SELECT kind, COUNT(*) FROM events GROUP BY kind HAVING kind = 'b'", 1, {"b"}),
]


def _session(directory: Path, people, events) -> Session:
    directory.mkdir()
    make_db(directory / "db.duckdb", people, events, rows=[((i % 21) - 10.0, 1 + i % 3) for i in range(300)])
    s = Session(load_policy(write_policy(directory)), "alice")
    s.execute("SET dpsql.cache = off")
    return s


def test_the_released_key_set_is_the_same_on_neighbouring_databases(tmp_path):
    """Whole persons removed (those with the most rows, and with rows only in kept or only in
    excluded keys), and every private row removed: the keys answered never change."""
    people, events = default_people(), default_events()
    heavy = max({e[0] for e in events}, key=lambda p: sum(e[0] == p for e in events))
    only_a = next(p for p in {e[0] for e in events} if {e[1] for e in events if e[0] == p} == {"a"})
    variants = {"full": (people, events), "empty": ([], [])}
    for pid in (heavy, only_a):
        variants[f"without {pid}"] = ([p for p in people if p[0] != pid], [e for e in events if e[0] != pid])
    sessions = {name: _session(tmp_path / name.replace(" ", "_"), *data) for name, data in variants.items()}
    try:
        for sql, n, expected in NARROWED:
            for name, s in sessions.items():
                released = {r[0] if n == 1 else tuple(r[:n]) for r in s.execute(sql).rows}
                assert released == expected, (sql, name)
    finally:
        for s in sessions.values():
            s.close()


def test_values_of_kept_groups_are_unchanged(tmp_path, monkeypatch):
    """The bounded (pre-noise) values of the groups a WHERE keeps are those without narrowing,
    and the groups it drops had nothing in them. (Under HAVING the groups dropped had rows, which
    no longer take a unit's share of its contribution limits: the groups kept can only gain.)"""
    narrowed = _session(tmp_path / "narrowed", default_people(), default_events())
    plain = _session(tmp_path / "plain", default_people(), default_events())
    try:
        for sql, _, _ in [q for q in NARROWED if "HAVING" not in q[0]]:
            plan, _ = narrowed._prepare(classify(sql).tree)
            kept = narrowed.bounded_result(plan)
            monkeypatch.setattr(rewrite_module, "narrowing", lambda plan: NONE)
            monkeypatch.setattr(bounded_module, "narrowing", lambda plan: NONE)
            whole = plain.bounded_result(plain._prepare(classify(sql).tree)[0])
            monkeypatch.undo()
            n = len(plan.keys)
            kept_rows = {tuple(r[:n]): r[n:] for r in zip(*kept.columns)}
            whole_rows = {tuple(r[:n]): r[n:] for r in zip(*whole.columns)}
            assert set(kept_rows) < set(whole_rows), sql
            assert all(whole_rows[k] == v for k, v in kept_rows.items()), sql
            assert all(not any(v) for k, v in whole_rows.items() if k not in kept_rows), sql
    finally:
        narrowed.close()
        plain.close()


def test_a_dashboards_filter_values_narrow_through_the_shape_template(session):
    """Texts of one shape (sql/slots.py) share a template from the third on: each still answers
    its own keys, and the domain listed for one is never another's."""
    session.execute("SET dpsql.cache = off")
    for kind in ["a", "b", "c", "a", "c"]:
        rows = session.execute(f"SELECT kind, COUNT(*) FROM events WHERE kind = '{kind}' GROUP BY kind").rows
        assert [r[0] for r in rows] == [kind]
    for low in [2, 3, 1]:
        rows = session.execute(f"SELECT g, COUNT(*) FROM rows WHERE g >= {low} GROUP BY g ORDER BY g").rows
        assert [r[0] for r in rows] == list(range(low, 4))


def test_parameters_over_the_wire_are_bound_before_narrowing(serve):
    with psycopg.connect(serve.dsn(), autocommit=True) as conn:
        for kinds in [("a", "b"), ("c", "c"), ("b", "zz"), ("a", "c")]:
            rows = conn.execute(
                "SELECT kind, COUNT(*) FROM events WHERE kind IN (%s, %s) GROUP BY kind ORDER BY kind",
                kinds,
                prepare=True,
            ).fetchall()
            assert [r[0] for r in rows] == sorted(set(kinds) & {"a", "b", "c"})
        rows = conn.execute("SELECT place, COUNT(*) FROM events WHERE place <> %s GROUP BY place", ("east",)).fetchall()
        assert {r[0] for r in rows} == {"north", "south"}


# Golden fixtures of the domain query ------------------------------------------------------------
GOLDEN = [
    "SELECT kind, COUNT(*) FROM events WHERE kind IN ('a', 'c') AND amount > 10 GROUP BY kind",
    "SELECT g, SUM(v) FROM rows WHERE g BETWEEN 2 AND 3 OR g IS NULL GROUP BY g",
    "SELECT place, COUNT(*) FROM events WHERE place LIKE 'n%' GROUP BY place",
    "SELECT e.kind, pl.region, COUNT(*) FROM events e JOIN places pl ON e.place = pl.name "
    "WHERE pl.region = 'r0' GROUP BY e.kind, pl.region",
    "SELECT pl.name, pl.region, COUNT(*) FROM events e JOIN places pl ON e.place = pl.name GROUP BY pl.name, pl.region",
    "SELECT e.kind, COUNT(*) FROM events e LEFT JOIN places pl ON e.place = pl.name AND pl.region = 'r1' "
    "GROUP BY e.kind",
    "SELECT kind, COUNT(*) FROM events GROUP BY kind HAVING kind <> 'b' AND COUNT(*) > 2",
    "SELECT kind, COUNT(*) FROM events WHERE amount > 10 GROUP BY kind",
    "SELECT CASE WHEN g = 1 THEN 'one' ELSE 'more' END AS b, SUM(v) FROM rows WHERE g >= 2 GROUP BY b",
]


def test_domain_queries_match_the_golden_fixture(session):
    """tests/fixtures/domains.sql: each query's narrowing and the domain query it gives.
    DPSQL_UPDATE_GOLDEN=1 rewrites it after a deliberate change."""
    blocks = []
    for sql in GOLDEN:
        plan, _ = session._prepare(classify(sql).tree)
        used = narrowing(plan).used
        blocks.append(
            f"{sql};\n-- narrowed by: {'; '.join(used) if used else '(nothing)'}\n{_pretty(declared_domain(plan))};\n"
        )
    got = "\n".join(blocks)
    path = FIXTURES / "domains.sql"
    if os.environ.get("DPSQL_UPDATE_GOLDEN"):
        path.write_text(got)
    assert got == path.read_text()


def _unlisted(sql: str, ledger: Path) -> tuple[str, ...]:
    session = Session(load_policy(SAMPLE / "dpsql.toml", ledger_path=ledger), "alice")
    try:
        return unlisted(session._prepare(classify(sql).tree)[0])
    finally:
        session.close()


@pytest.mark.parametrize(
    "where,told",
    [
        ("p.region = 'north'", ["'north' is not among region's declared keys", "did you mean 'North'?"]),
        ("'North ' = p.region", ["'North ' is not among region's", "did you mean 'North'?"]),
        ("v.diagnosis IN ('cardiac', 'Skin', 'gout')", ["'Skin', 'gout' is not among diagnosis's", "'skin'?"]),
        ("p.region = 'North' AND v.diagnosis = 'cardiac'", []),  # listed: nothing to tell
        ("p.region <> 'north'", []),  # only = and IN name values the rows must hold
        ("v.ward = 'cardio'", []),  # keys from a public table: the table's rows, not the policy, list them
        ("p.smoker = 'yes'", []),  # non-text keys: the engine's cast decides
    ],
)
def test_a_value_none_of_a_columns_declared_keys_is_told(where, told, tmp_path):
    """From the query and the policy only: a condition naming a value the column's listed keys do
    not hold matches only rows with an unlisted value, most likely a misspelling."""
    got = " | ".join(
        _unlisted(
            f"SELECT COUNT(*) FROM visits v JOIN patients p ON v.patient_id = p.patient_id WHERE {where}",
            tmp_path / "ledger.sqlite",
        )
    )
    assert all(t in got for t in told) and (got != "") == bool(told), got


def test_the_answer_and_explain_tell_an_unlisted_value_before_and_after_the_charge(hospital):
    sql = "SELECT AVG(income) FROM patients WHERE region = 'north'"
    hospital.execute(f"EXPLAIN {sql}")
    assert any(r[0].startswith("note: 'north' is not among region's") for r in hospital.fetchall())
    hospital.execute(sql)
    hospital.fetchall()
    assert "did you mean 'North'?" in hospital.dp.notice
    hospital.execute("SELECT AVG(income) FROM patients WHERE region = 'North'")
    hospital.fetchall()
    assert not (hospital.dp.notice or "").count("declared keys")

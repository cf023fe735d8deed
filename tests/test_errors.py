"""Error texts: a misspelt table or column names the nearest one and what is there, never a charge."""

from __future__ import annotations

import pytest

from dpsql.errors import ProgrammingError, undefined_column, undefined_table


def test_a_misspelt_column_hint_names_the_nearest_and_lists_the_columns():
    e = undefined_column("regon", columns=["region", "age", "sex", "__dpsql_w"])
    assert e.sqlstate == "42703" and e.message == 'column "regon" does not exist'
    assert e.hint == 'perhaps you meant "region"; the columns here: age, region, sex'


def test_a_qualified_column_is_matched_by_its_name():
    assert undefined_column("p.agee", columns=["age", "sex"]).hint.startswith('perhaps you meant "age"; ')


def test_nothing_near_lists_the_columns_only_and_a_long_list_is_cut():
    e = undefined_column("zzz", columns=[f"c{i:02}" for i in range(25)])
    assert e.hint == "the columns here: " + ", ".join(f"c{i:02}" for i in range(20)) + " and 5 more"
    assert undefined_column("zzz").hint is None


def test_a_misspelt_table_hint_names_the_nearest_declared_table():
    e = undefined_table("patient", ["visits", "patients", "wards"])
    assert e.sqlstate == "42P01"
    assert e.hint == (
        'perhaps you meant "patients"; only tables declared in the policy file can be queried: patients, visits, wards'
    )
    assert undefined_table("x").hint == "only tables declared in the policy file can be queried"


@pytest.mark.parametrize(
    ("sql", "state", "hint"),
    [
        ("SELECT AVG(agee) FROM people", "42703", 'perhaps you meant "age"; the columns here: age, city, pid, sex'),
        ("SELECT p.sexx, COUNT(*) FROM people p GROUP BY p.sexx", "42703", 'perhaps you meant "sex"'),
        ("SELECT COUNT(*) FROM peopel", "42P01", 'perhaps you meant "people"; '),
    ],
)
def test_a_session_refuses_a_typo_with_the_hint_and_charges_nothing(session, sql, state, hint):
    before = session.execute("SHOW dpsql.budget").rows
    with pytest.raises(ProgrammingError) as info:
        session.execute(sql)
    assert info.value.sqlstate == state and info.value.hint.startswith(hint)
    assert session.execute("SHOW dpsql.budget").rows == before

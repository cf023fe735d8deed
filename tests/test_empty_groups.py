"""The declared domain's empty groups are added in Python (guarantee/empty_groups.py), not by a join in
the engine: every key tuple of the domain appears once, in the domain's order, with zeros where
the data has no rows; a row outside the domain, or a key tuple twice, never passes."""

from __future__ import annotations

import pytest

from dpsql.engines.base import ResultSet
from dpsql.guarantee.empty_groups import with_empty_groups
from dpsql.guarantee.guard import ReleaseRefused

NAMES, TYPES = ["k0", "k1", "units", "m0"], ["VARCHAR", "INTEGER", "BIGINT", "BIGINT"]


def _rs(rows):
    return ResultSet(NAMES, TYPES, [list(c) for c in zip(*rows)] if rows else [[] for _ in NAMES])


def test_every_domain_tuple_once_in_the_domains_order_with_zeros_for_the_empty_ones():
    domain = [("a", 1), ("a", 2), ("b", 1), ("b", 2)]
    got = with_empty_groups(_rs([("b", 2, 7, 70), ("a", 1, 3, 30), ("z", 1, 9, 90)]), 2, domain)
    assert list(zip(*got.columns)) == [("a", 1, 3, 30), ("a", 2, 0, 0), ("b", 1, 0, 0), ("b", 2, 7, 70)]
    assert (got.names, got.types) == (NAMES, TYPES)


def test_no_rows_at_all_gives_the_whole_domain_and_an_empty_domain_gives_nothing():
    assert list(zip(*with_empty_groups(_rs([]), 2, [("a", 1)]).columns)) == [("a", 1, 0, 0)]
    assert with_empty_groups(_rs([("a", 1, 3, 30)]), 2, []).row_count == 0


def test_a_key_tuple_twice_is_refused():
    with pytest.raises(ReleaseRefused, match="more than once"):
        with_empty_groups(_rs([("a", 1, 3, 30), ("a", 1, 4, 40)]), 2, [("a", 1)])


@pytest.mark.parametrize(
    "query,keys",
    [
        # a declared list (kind), a public table's keys (place), and both: every combination (a
        # filter on the keys themselves narrows their domain: tests/test_narrow_domains.py)
        ("SELECT kind, COUNT(*), SUM(amount) FROM events WHERE pid = 1 GROUP BY kind", {("a",), ("b",), ("c",)}),
        ("SELECT place, COUNT(*) FROM events WHERE pid = 2 GROUP BY place", {("north",), ("south",), ("east",)}),
        (
            "SELECT kind, place, AVG(amount) FROM events WHERE amount > 1e9 GROUP BY kind, place",
            {(k, p) for k in "abc" for p in ("north", "south", "east")},
        ),
    ],
)
@pytest.mark.parametrize("weighted", [True, False])
def test_a_session_releases_every_declared_group_whatever_the_data_holds(session, query, keys, weighted):
    """The filter leaves rows in few groups or none; the others are released all the same (with
    noisy zeros), from the weighted copy and from the per-unit bounding alike."""
    if not weighted:
        session._weighting = lambda plan: None
    session.execute("SET dpsql.cache = off")
    result = session.execute(query)
    n = len(next(iter(keys)))
    assert sorted(tuple(r[:n]) for r in result.rows) == sorted(keys)


def test_keys_alone_under_a_where_clause_are_the_whole_domain_with_a_notice(session):
    """A cascading filter's question (keys under a WHERE) gets every declared key, free, and a
    notice that says which of them have rows is not what it is."""
    filtered = session.execute("SELECT DISTINCT kind FROM events WHERE amount > 40 AND pid = 5")
    assert sorted(filtered.rows) == [("a",), ("b",), ("c",)] and "whatever the WHERE" in filtered.dp["notice"]
    plain = session.execute("SELECT DISTINCT kind FROM events")
    assert sorted(plain.rows) == [("a",), ("b",), ("c",)] and plain.dp is None
    assert session.budget()["queries"] == 0


@pytest.mark.parametrize("weighted", [True, False])
def test_rows_outside_the_declared_domain_never_become_a_group(tmp_path, weighted):
    """'zz' and NULL are not declared keys: a weighted copy's rows are not filtered by key, so
    their groups reach the session, which drops them; per-query bounding filters them first."""
    from dpsql.config import load_policy
    from dpsql.session import Session

    from .conftest import default_people, make_db, write_policy

    events = [(i, ["a", "zz", None][i % 3], 1.0, "north") for i in range(1, 201)]
    make_db(tmp_path / "db.duckdb", default_people(), events)
    s = Session(load_policy(write_policy(tmp_path)), "alice")
    try:
        if not weighted:
            s._weighting = lambda plan: None
        s.execute("SET dpsql.cache = off")
        assert sorted(r[0] for r in s.execute("SELECT kind, COUNT(*) FROM events GROUP BY kind").rows) == [
            "a",
            "b",
            "c",
        ]
    finally:
        s.close()


def test_a_declaration_tells_values_of_other_types_apart():
    """Domains are kept per declaration: [1], [1.0] and [True] on a text key are the groups '1',
    '1.0' and 'true', so their declarations must differ although the tuples are equal."""
    from sqlglot import exp

    from dpsql.guarantee.plan import GroupKey

    keys = [GroupKey("k", exp.column("k"), domain=(v,), type_name="VARCHAR") for v in (1, 1.0, True)]
    assert len({k.declaration() for k in keys}) == 3
    assert keys[0].declaration() == GroupKey("j", exp.column("j"), domain=(1,), type_name="VARCHAR").declaration()


def test_no_group_under_the_expression_is_answered_free(conn):
    """CAST(sex AS INT) turns every declared key into NULL: the domain, listed from the policy
    before the charge, is empty, so the answer is known without the data: empty, and free."""
    cur = conn.cursor()
    cur.execute("SELECT CAST(sex AS INT) AS s, COUNT(*) FROM people GROUP BY 1")
    assert cur.fetchall() == [] and [d[0] for d in cur.description] == ["s", "count"]
    assert "nothing was released or charged" in cur.dp["notice"]
    assert conn.session.budget()["queries"] == 0

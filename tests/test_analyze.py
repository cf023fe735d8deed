"""GROUP BY the privacy unit: refused before any charge, with the per-unit subquery that works."""

from __future__ import annotations

import pytest

from dpsql.errors import ProgrammingError


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT pid, COUNT(*) FROM events GROUP BY pid",
        "SELECT e.pid, SUM(amount) FROM events e JOIN people p ON e.pid = p.pid GROUP BY 1",
    ],
)
def test_grouping_by_the_privacy_unit_is_refused_free(session, sql):
    before = session.execute("SHOW dpsql.budget").rows
    with pytest.raises(ProgrammingError) as info:
        session.execute(sql)
    assert info.value.sqlstate == "0A000"
    assert info.value.message.startswith("GROUP BY pid: pid is the privacy unit of ")
    assert "FROM (SELECT pid, COUNT(*) AS n FROM " in info.value.hint
    assert session.execute("SHOW dpsql.budget").rows == before


def test_the_hints_per_unit_subquery_is_answered(session):
    result = session.execute(
        "SELECT n, COUNT(*) FROM (SELECT pid, COUNT(*) AS n FROM events GROUP BY pid) t GROUP BY n"
    )
    assert result.rows and result.dp.cost.epsilon > 0


def test_a_unit_column_with_declared_keys_still_groups(small_policy):
    from dpsql.config import load_policy
    from dpsql.session import Session

    text = small_policy.read_text().replace(
        'privacy_unit = "pid"\nmax_groups = 1',
        'privacy_unit = "pid"\nmax_groups = 1\ncolumns.pid = { keys = { range = [1, 5] } }',
    )
    assert "columns.pid" in text
    small_policy.write_text(text)
    s = Session(load_policy(small_policy), "alice")
    try:
        assert len(s.execute("SELECT pid, COUNT(*) FROM people GROUP BY pid").rows) == 5
    finally:
        s.close()

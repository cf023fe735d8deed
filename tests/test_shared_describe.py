"""A Describe's answer is kept for every session of the same analyst over one engine: a new
connection's first prepared statement (psycopg's sixth execution) no longer plans the query
again, and the answer is the one planning gives."""

from __future__ import annotations

import pytest

from dpsql.config import load_policy
from dpsql.engines import open_engine
from dpsql.session import Session
from dpsql.session import describe as describe_module

QUERY = "SELECT kind, COUNT(*) AS n, AVG(amount) AS a FROM events GROUP BY kind"


@pytest.fixture
def sessions(small_policy):
    policy = load_policy(small_policy)
    engine = open_engine(policy)
    made: list[Session] = []

    def new(user: str = "alice") -> Session:
        made.append(Session(policy, user, engine=engine))
        return made[-1]

    yield new
    for s in made:
        s.close()
    engine.close()


@pytest.fixture
def plans(monkeypatch):
    """How many times a Describe planned its query."""
    calls = []
    real = describe_module.describe_tree

    def counted(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(describe_module, "describe_tree", counted)
    return calls


def test_a_second_session_reuses_the_first_ones_describe(sessions, plans):
    first, second = sessions(), sessions()
    shape = first.describe(QUERY)
    assert len(plans) == 1
    assert second.describe(QUERY) == shape
    assert len(plans) == 1  # kept: not planned again
    assert shape[0] == ["kind", "n", "a"] and len(shape[1]) == 3


def test_the_kept_describe_equals_a_fresh_one(small_policy, sessions, plans):
    kept = sessions()
    kept.describe(QUERY)
    fresh = Session(load_policy(small_policy), "alice")  # its own engine: its own cache
    try:
        assert fresh.describe(QUERY) == kept.describe(QUERY)
    finally:
        fresh.close()


def test_not_shared_between_analysts_settings_or_views(sessions, plans):
    alice, bob = sessions("alice"), sessions("bob")
    alice.describe(QUERY)
    bob.describe(QUERY)
    assert len(plans) == 2  # per analyst, as plans are
    other = sessions("alice")
    other.execute("SET dpsql.mechanism = gaussian")
    other.describe(QUERY)
    assert len(plans) == 3  # the settings are in the key
    viewer = sessions("alice")
    viewer.execute("CREATE TEMP VIEW v AS SELECT * FROM events")
    viewer.describe(QUERY)
    viewer.describe(QUERY)
    assert len(plans) == 5  # a session with views of its own describes each time


def test_placeholders_are_described_each_time(sessions, plans):
    s = sessions()
    sql = "SELECT kind, COUNT(*) FROM events WHERE amount > $1 GROUP BY kind"
    assert s.describe(sql, [1.0]) == s.describe(sql, [2.0])
    assert len(plans) == 2


def test_a_started_server_freezes_its_heap():
    """What start-up allocated is out of the collector's view (listener.settle_heap), so a full
    collection under load does not walk the modules and the catalog."""
    import gc

    from dpsql.server.listener import settle_heap

    try:
        settle_heap()
        assert gc.get_freeze_count() > 10_000
    finally:
        gc.unfreeze()

"""Budget windows: a budget that starts afresh every window, computed from the ledger's own
clock, with an optional lifetime cap over all windows that never refreshes."""

from __future__ import annotations

import threading
from fractions import Fraction

import pytest

import dpsql
from dpsql.config import load_policy
from dpsql.errors import PolicyError
from dpsql.ledger import WINDOW_EPOCH, Ledger

from .conftest import write_policy

HOUR = 3600


@pytest.fixture
def clock(monkeypatch):
    """The ledger's clock, set by the test: the start of some window, then moved on."""
    now = [float(WINDOW_EPOCH + 1000 * 24 * HOUR + 60)]
    monkeypatch.setattr(Ledger, "now", lambda self, con=None: now[0])
    return now


def _policy(directory, extra_privacy: str):
    path = write_policy(directory, epsilon=1.0, query_epsilon=0.5)
    path.write_text(path.read_text().replace('mechanism = "laplace"\n', f'mechanism = "laplace"\n{extra_privacy}\n'))
    return path


def test_the_budget_refreshes_each_window_and_says_when(small_policy, tmp_path, clock):
    conn = dpsql.connect(_policy(small_policy.parent, 'window = "1h"'), user="alice", ledger=tmp_path / "w.sqlite")
    cur = conn.cursor()
    cur.execute("SET dpsql.cache = off")
    for _ in range(2):
        cur.execute("SELECT COUNT(*) FROM people")
    with pytest.raises(dpsql.BudgetExceeded) as info:
        cur.execute("SELECT COUNT(*) FROM people")
    assert "for this window (it refreshes at" in str(info.value)
    cur.execute("SHOW dpsql.budget")
    row = dict(zip([d[0] for d in cur.description], cur.fetchone()))
    assert row["epsilon_remaining"] == 0 and row["window_refreshes"].endswith("UTC")
    clock[0] += HOUR  # the next window: a fresh filter
    cur.execute("SELECT COUNT(*) FROM people")
    assert conn.session.budget()["epsilon"]["spent"] == Fraction(1, 2)
    assert conn.session.budget()["queries"] == 1
    conn.close()
    assert Ledger(tmp_path / "w.sqlite").verify() == []


def test_a_lifetime_cap_never_refreshes(small_policy, tmp_path, clock):
    policy = _policy(small_policy.parent, 'window = "daily"\nlifetime_epsilon = 2\nlifetime_delta = 1e-6')
    conn = dpsql.connect(policy, user="alice", ledger=tmp_path / "l.sqlite")
    cur = conn.cursor()
    cur.execute("SET dpsql.cache = off")
    for day in range(2):
        for _ in range(2):
            cur.execute("SELECT COUNT(*) FROM people")
        clock[0] += 24 * HOUR
    before = conn.session.budget()
    with pytest.raises(dpsql.BudgetExceeded) as info:
        cur.execute("SELECT COUNT(*) FROM people")  # a fresh window, but the lifetime is spent
    assert "lifetime cap" in str(info.value) and "never refreshes" in str(info.value)
    assert conn.session.budget() == before  # refused: nothing charged
    assert before["lifetime"]["epsilon"]["spent"] == 2
    conn.close()
    assert Ledger(tmp_path / "l.sqlite").verify() == []


def test_proxies_sharing_a_ledger_agree_on_the_window(small_policy, tmp_path, clock):
    """Two sessions (two ledgers on one file, as two proxies) charge concurrently across a
    window boundary: each window admits exactly its budget, never more."""
    policy = _policy(small_policy.parent, 'window = "1h"')
    conns = [dpsql.connect(policy, user="alice", ledger=tmp_path / "s.sqlite") for _ in range(2)]
    answered = []
    lock = threading.Lock()

    def work(conn):
        cur = conn.cursor()
        cur.execute("SET dpsql.cache = off")
        for _ in range(6):
            try:
                cur.execute("SELECT COUNT(*) FROM people")
                with lock:
                    answered.append(clock[0])
            except dpsql.BudgetExceeded:
                pass

    for step in range(2):  # two windows, both proxies hammering each
        threads = [threading.Thread(target=work, args=(c,)) for c in conns]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        clock[0] += HOUR
    assert len(answered) == 4  # 2 per window (epsilon 1, 0.5 each)
    for c in conns:
        c.close()
    assert Ledger(tmp_path / "s.sqlite").verify() == []


def test_window_settings_are_checked(small_policy):
    with pytest.raises(PolicyError, match="is not a duration"):
        load_policy(_policy(small_policy.parent, 'window = "soon"'))
    with pytest.raises(PolicyError, match="no window is set"):
        load_policy(_policy(small_policy.parent, "lifetime_epsilon = 5"))
    with pytest.raises(PolicyError, match="at least one window"):
        load_policy(_policy(small_policy.parent, 'window = "7d"\nlifetime_epsilon = 0.5'))
    p = load_policy(_policy(small_policy.parent, 'window = "weekly"'))
    assert p.user("alice").budget.window == 7 * 24 * HOUR


def test_the_postgres_ledger_uses_the_server_clock(pg_ledger_url):
    import time

    from dpsql.ledger import PostgresLedger

    ledger = PostgresLedger(pg_ledger_url)
    assert abs(ledger.now() - time.time()) < 60

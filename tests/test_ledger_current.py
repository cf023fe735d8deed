"""The ledger's writer keeps what it last wrote (ledger/current.py) only while nobody else has
written: whatever another connection or process writes, and whatever its own transactions roll
back, the next charge sees the ledger as it is, and the ledger verifies."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from fractions import Fraction

import pytest

from dpsql.accounting.cost import Cost
from dpsql.config import BudgetPolicy
from dpsql.errors import BudgetExceeded, OperationalError
from dpsql.ledger import Ledger

from .conftest import ROOT

TENTH = Cost.pure(Fraction(1, 10))
THREE = BudgetPolicy("basic", Fraction(3, 10), Fraction(1, 10**6))  # exactly three queries of 0.1


def _charges(path):
    with sqlite3.connect(path) as con:
        return con.execute("SELECT id, user_name FROM charges ORDER BY id").fetchall()


def test_charges_of_other_connections_and_processes_are_seen(tmp_path):
    """Two Ledger objects (two connections, as two proxies) and a second process share a budget
    of three queries: exactly three are admitted in all, ids and chains stay consistent."""
    path = tmp_path / "ledger.sqlite"
    a, b = Ledger(path), Ledger(path)
    a.group_commit()
    a.charge("alice", THREE, TENTH, "SELECT 1", {})  # a's writer now keeps alice's totals and head
    b.charge("alice", THREE, TENTH, "SELECT 2", {})
    code = (
        "import sys; from fractions import Fraction; from dpsql.ledger import Ledger; "
        "from dpsql.accounting.cost import Cost; from dpsql.config import BudgetPolicy; "
        "Ledger(sys.argv[1]).charge('alice', BudgetPolicy('basic', Fraction(3, 10), Fraction(1, 10**6)), "
        "Cost.pure(Fraction(1, 10)), 'SELECT 3', {})"
    )
    subprocess.run([sys.executable, "-c", code, str(path)], check=True, cwd=ROOT, timeout=120)
    # b's opening did not drop this process's locks on the ledger (owner_only.touch), so the
    # other process, closing, did not take itself for the last user and remove the -shm
    assert (tmp_path / "ledger.sqlite-shm").exists()
    with pytest.raises(BudgetExceeded):
        a.charge("alice", THREE, TENTH, "SELECT 4", {})
    assert a.spent("alice", THREE).queries == 3 and a.spent("alice", THREE).epsilon == Fraction(3, 10)
    a.charge("bob", THREE, TENTH, "SELECT 5", {})
    b.charge("bob", THREE, TENTH, "SELECT 6", {})
    a.charge("bob", THREE, TENTH, "SELECT 7", {})  # after b's insert: not the id a would guess
    assert [u for _, u in _charges(path)] == ["alice"] * 3 + ["bob"] * 3
    assert [i for i, _ in _charges(path)] == list(range(1, 7))
    assert a.verify() == [] and b.verify() == []
    a.close()
    b.close()


def test_a_grant_through_another_connection_is_seen(tmp_path):
    path = tmp_path / "ledger.sqlite"
    a, b = Ledger(path), Ledger(path)
    a.group_commit()
    for i in range(3):  # the budget spent, as a's writer remembers (a refusal would make it forget)
        a.charge("alice", THREE, TENTH, f"SELECT {i}", {})
    b.grant("alice", Fraction(1, 10), Fraction(0), THREE)
    a.charge("alice", THREE, TENTH, "SELECT 4", {})  # admitted by the grant a did not write
    with pytest.raises(BudgetExceeded):
        a.charge("alice", THREE, TENTH, "SELECT 5", {})
    assert a.verify() == []
    a.close()
    b.close()


def test_a_charge_rolled_back_is_forgotten(tmp_path, monkeypatch):
    """A charge whose transaction rolls back after writing (here: its totals cannot be written)
    leaves nothing behind, in the ledger or in what its writer keeps: the next charges get the
    next ids, the chain continues from the last record kept, and the totals count what stands."""
    path = tmp_path / "ledger.sqlite"
    ledger = Ledger(path)
    ledger.group_commit()
    ledger.charge("alice", THREE, TENTH, "SELECT 1", {})
    real = Ledger._put_totals

    def failing(self, con, user, segment, totals):
        real(self, con, user, segment, totals)
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(Ledger, "_put_totals", failing)
    with pytest.raises(OperationalError):
        ledger.charge("alice", THREE, TENTH, "SELECT 2", {})
    monkeypatch.setattr(Ledger, "_put_totals", real)
    ledger.charge("alice", THREE, TENTH, "SELECT 3", {})
    ledger.charge("alice", THREE, TENTH, "SELECT 4", {})
    with pytest.raises(BudgetExceeded):
        ledger.charge("alice", THREE, TENTH, "SELECT 5", {})
    assert [i for i, _ in _charges(path)] == [1, 2, 3]
    assert [h["sql"] for h in ledger.history("alice")] == ["SELECT 1", "SELECT 3", "SELECT 4"]
    assert ledger.verify() == []
    ledger.close()


def test_an_edit_by_another_connection_is_not_overwritten(tmp_path):
    """Whoever changes the totals behind the writer's back (a restore, an operator) is read,
    not overwritten with what the writer remembers."""
    path = tmp_path / "ledger.sqlite"
    ledger = Ledger(path)
    ledger.group_commit()
    ledger.charge("alice", THREE, TENTH, "SELECT 1", {})
    with sqlite3.connect(path) as con:
        (sums,) = con.execute("SELECT sums FROM totals WHERE user_name = 'alice'").fetchone()
        con.execute("UPDATE totals SET sums = ? WHERE user_name = 'alice'", (sums.replace('"1/10"', '"3/10"', 1),))
    with pytest.raises(BudgetExceeded):  # 3/10 spent as the ledger now says, not 1/10 as remembered
        ledger.charge("alice", THREE, TENTH, "SELECT 2", {})
    ledger.close()


def test_a_commit_that_fails_charges_nothing_and_is_forgotten(tmp_path, monkeypatch):
    """A charge admitted in its transaction whose COMMIT then fails (a full disk) is not durable:
    `durable()` raises (so no answer leaves), nothing stays charged, and the writer forgets what
    it wrote in that transaction: the next charge gets the next id and the chain verifies."""
    path = tmp_path / "ledger.sqlite"
    ledger = Ledger(path)
    ledger.group_commit()
    ledger.charge("alice", THREE, TENTH, "SELECT 1", {})
    failing = {"armed": False}
    real_con = Ledger._con

    class Connection:
        def __init__(self, con):
            self._con = con

        def execute(self, sql, *args):
            if sql == "COMMIT" and failing["armed"]:
                failing["armed"] = False
                raise sqlite3.OperationalError("database or disk is full")
            return self._con.execute(sql, *args)

        def __getattr__(self, name):
            return getattr(self._con, name)

    monkeypatch.setattr(Ledger, "_con", lambda self: Connection(real_con(self)))
    failing["armed"] = True
    pending = ledger.charging("alice", THREE, TENTH, "SELECT 2", {})
    with pytest.raises(OperationalError, match="could not record the charge"):
        pending.admitted()  # admitted in the open transaction (or told the failure already)...
        pending.durable()  # ...but never durable: nothing may leave
    ledger.charge("alice", THREE, TENTH, "SELECT 3", {})
    ledger.charge("alice", THREE, TENTH, "SELECT 4", {})
    with pytest.raises(BudgetExceeded):
        ledger.charge("alice", THREE, TENTH, "SELECT 5", {})
    assert [(h["id"], h["sql"]) for h in ledger.history("alice")] == [(1, "SELECT 1"), (2, "SELECT 3"), (3, "SELECT 4")]
    assert ledger.verify() == []
    ledger.close()

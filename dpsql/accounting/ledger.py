"""The durable ledger: atomic check-and-charge, audit log, answer cache (SQLite, WAL).

One `BEGIN IMMEDIATE` transaction reads the analyst's running sums, asks the filter, records
the charge and commits with synchronous=FULL before the engine runs: an answer never leaves
without a durable charge, and concurrent sessions (threads or processes) serialize on the
write lock, so they can never overspend together.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from ..errors import BudgetExceeded, OperationalError
from .cost import Cost, fraction_text, parse_fraction, show
from .filters import Filter, Spent

_SCHEMA = """
CREATE TABLE IF NOT EXISTS spent (
    user TEXT PRIMARY KEY,
    epsilon TEXT NOT NULL,
    delta TEXT NOT NULL,
    queries INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS charges (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    user TEXT NOT NULL,
    at REAL NOT NULL,
    sql TEXT NOT NULL,
    cost TEXT NOT NULL,
    detail TEXT NOT NULL,
    released TEXT
);
CREATE INDEX IF NOT EXISTS charges_user ON charges(user, id);
CREATE TABLE IF NOT EXISTS cache (
    user TEXT NOT NULL,
    key TEXT NOT NULL,
    answer TEXT NOT NULL,
    at REAL NOT NULL,
    PRIMARY KEY (user, key)
);
"""


class Ledger:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._local = threading.local()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            con = self._con()
            con.executescript(_SCHEMA)
        except (sqlite3.Error, OSError) as e:
            raise OperationalError(f"cannot open the ledger at {self.path}: {e}",
                                   hint="check that the directory is writable, or set [ledger] path in the policy") from None

    def _con(self) -> sqlite3.Connection:
        con = getattr(self._local, "con", None)
        if con is None:
            con = sqlite3.connect(self.path, isolation_level=None, timeout=60.0, check_same_thread=False)
            con.execute("PRAGMA journal_mode=WAL")
            con.execute("PRAGMA synchronous=FULL")
            con.execute("PRAGMA busy_timeout=60000")
            self._local.con = con
        return con

    @staticmethod
    def _spent(con: sqlite3.Connection, user: str) -> Spent:
        row = con.execute("SELECT epsilon, delta, queries FROM spent WHERE user = ?", (user,)).fetchone()
        if row is None:
            return Spent()
        return Spent(parse_fraction(row[0]), parse_fraction(row[1]), row[2])

    def spent(self, user: str) -> Spent:
        return self._spent(self._con(), user)

    def charge(self, user: str, budget: Filter, cost: Cost, sql: str, detail: dict[str, Any]) -> tuple[int, Spent]:
        """Check the filter and record the charge in one transaction; refuse (charging nothing)
        when the filter would HALT."""
        con = self._con()
        con.execute("BEGIN IMMEDIATE")
        try:
            spent = self._spent(con, user)
            if not budget.admits(spent, cost):
                con.execute("ROLLBACK")
                raise BudgetExceeded(
                    f'privacy budget exhausted for analyst "{user}": this query costs epsilon={show(cost.epsilon)}, '
                    f"delta={show(cost.delta)}; {budget.describe(spent)}",
                    hint=_budget_hint(budget, spent, cost),
                )
            after = spent.plus(cost)
            cur = con.execute(
                "INSERT INTO charges (user, at, sql, cost, detail) VALUES (?, ?, ?, ?, ?)",
                (user, time.time(), sql, cost.to_json(), json.dumps(detail, default=str)),
            )
            con.execute(
                "INSERT INTO spent (user, epsilon, delta, queries) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(user) DO UPDATE SET epsilon = excluded.epsilon, delta = excluded.delta, queries = excluded.queries",
                (user, fraction_text(after.epsilon), fraction_text(after.delta), after.queries),
            )
            con.execute("COMMIT")
            return cur.lastrowid, after
        except BudgetExceeded:
            raise
        except sqlite3.Error as e:
            if con.in_transaction:
                con.execute("ROLLBACK")
            raise OperationalError(f"the ledger could not record the charge: {e}",
                                   hint="nothing was charged and nothing was released; try again") from None

    def record_release(self, charge_id: int, released: Any) -> None:
        self._con().execute("UPDATE charges SET released = ? WHERE id = ?", (json.dumps(released, default=str), charge_id))

    def history(self, user: str) -> list[dict[str, Any]]:
        rows = self._con().execute(
            "SELECT id, at, sql, cost, released IS NOT NULL FROM charges WHERE user = ? ORDER BY id", (user,)).fetchall()
        return [{"id": r[0], "at": r[1], "sql": r[2], "cost": Cost.from_json(r[3]), "released": bool(r[4])} for r in rows]

    def cache_get(self, user: str, key: str) -> Any | None:
        row = self._con().execute("SELECT answer FROM cache WHERE user = ? AND key = ?", (user, key)).fetchone()
        return None if row is None else json.loads(row[0])

    def cache_put(self, user: str, key: str, answer: Any) -> None:
        self._con().execute("INSERT OR REPLACE INTO cache (user, key, answer, at) VALUES (?, ?, ?, ?)",
                            (user, key, json.dumps(answer, default=str), time.time()))

    def close(self) -> None:
        con = getattr(self._local, "con", None)
        if con is not None:
            con.close()
            self._local.con = None


def _budget_hint(budget: Filter, spent: Spent, cost: Cost) -> str:
    left = budget.remaining(spent)
    cache = "identical repeats of earlier queries are answered from the cache at no cost"
    if cost.delta > left["delta"]:
        return (f"only delta={show(left['delta'])} is left: SET dpsql.delta to at most that, or ask with "
                f"Laplace noise over declared group keys, which needs no delta; {cache}")
    if left["epsilon"] > 0:
        return f"a cheaper query still fits: SET dpsql.epsilon = {show(left['epsilon'])} (or less); {cache}"
    return f"the budget is spent; an administrator can grant more; {cache}"

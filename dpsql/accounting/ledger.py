"""The durable ledger: atomic check-and-charge, audit log, answer cache, grants.

One write transaction reads the analyst's running totals (and the global ones), asks the
filters, records the charge and commits before the engine runs: an answer never leaves
without a durable charge, and concurrent sessions - threads, processes, or several proxies on
one PostgreSQL ledger - serialize on a lock, so together they can never overspend.

SQLite (default): WAL, synchronous=FULL, `BEGIN IMMEDIATE` takes the write lock before the
read. PostgreSQL (`[ledger] url`): transaction-scoped advisory locks per analyst (and one for
the global filter, always taken first, so there is no deadlock).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sqlite3
import threading
import time
import zlib
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Iterator

from ..config import BudgetPolicy
from ..errors import BudgetExceeded, OperationalError
from .cost import Cost, fraction_text, parse_fraction, show
from .filters import Filter, Totals, make_filter

GLOBAL = "*global*"

_SCHEMA = [
    """CREATE TABLE IF NOT EXISTS totals (
        user_name TEXT NOT NULL, segment INTEGER NOT NULL, sums TEXT NOT NULL, queries INTEGER NOT NULL,
        PRIMARY KEY (user_name, segment))""",
    """CREATE TABLE IF NOT EXISTS grants (
        user_name TEXT NOT NULL, seq INTEGER NOT NULL, epsilon TEXT NOT NULL, delta TEXT NOT NULL,
        at DOUBLE PRECISION NOT NULL, PRIMARY KEY (user_name, seq))""",
    """CREATE TABLE IF NOT EXISTS charges (
        id {serial}, user_name TEXT NOT NULL, segment INTEGER NOT NULL, at DOUBLE PRECISION NOT NULL,
        sql TEXT NOT NULL, cost TEXT NOT NULL, detail TEXT NOT NULL, released TEXT)""",
    "CREATE INDEX IF NOT EXISTS charges_user ON charges (user_name, id)",
    """CREATE TABLE IF NOT EXISTS users (
        user_name TEXT PRIMARY KEY, verifier TEXT NOT NULL, role TEXT NOT NULL, created DOUBLE PRECISION NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS cache (
        user_name TEXT NOT NULL, key TEXT NOT NULL, answer TEXT NOT NULL, at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (user_name, key))""",
]


def segment_filter(budget: BudgetPolicy, grants: list[tuple[Fraction, Fraction]]) -> tuple[int, Filter]:
    """The filter in force for a budget after its grants.

    Under basic composition a grant simply adds to the totals. Any other filter's guarantee
    needs its budget fixed in advance, so a grant opens a new *segment*: a fresh filter over
    the granted amount, composed with the earlier segments by basic composition (what was left
    of the earlier segment is not carried over)."""
    if budget.filter == "basic":
        return 0, make_filter("basic", budget.epsilon + sum(g[0] for g in grants),
                              budget.delta + sum(g[1] for g in grants))
    if not grants:
        return 0, make_filter(budget.filter, budget.epsilon, budget.delta, reserve=budget.delta_reserve,
                              rdp_order=budget.rdp_order)
    eps, delta = grants[-1]
    reserve = budget.delta_reserve * delta / budget.delta if budget.delta else Fraction(0)
    return len(grants), make_filter(budget.filter, eps, delta, reserve=reserve, rdp_order=budget.rdp_order)


@dataclass(frozen=True)
class Charge:
    """The receipt of a durable charge: made only once its transaction has committed, and
    required by the release guard (dpsql/guard.py) before any noisy value is drawn."""

    id: int
    totals: Totals
    filter: Filter
    cost: Cost


class Ledger:
    """SQLite ledger; `PostgresLedger` below shares everything but connections and locking."""

    placeholder = "?"
    serial = "INTEGER PRIMARY KEY AUTOINCREMENT"

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._local = threading.local()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._init_schema()
        except (sqlite3.Error, OSError) as e:
            raise OperationalError(f"cannot open the ledger at {self.path}: {e}",
                                   hint="check that the directory is writable, or set [ledger] path in the policy") from None

    # Connections and transactions -------------------------------------------------------
    def _init_schema(self) -> None:
        con = self._con()
        for stmt in _SCHEMA:
            con.execute(stmt.format(serial=self.serial))

    def _con(self):
        con = getattr(self._local, "con", None)
        if con is None:
            con = sqlite3.connect(self.path, isolation_level=None, timeout=60.0, check_same_thread=False)
            con.execute("PRAGMA journal_mode=WAL")
            con.execute("PRAGMA synchronous=FULL")
            con.execute("PRAGMA busy_timeout=60000")
            self._local.con = con
        return con

    def _sql(self, sql: str) -> str:
        return sql if self.placeholder == "?" else sql.replace("?", self.placeholder)

    def _exec(self, con, sql: str, params: tuple = ()):
        return con.execute(self._sql(sql), params)

    @contextlib.contextmanager
    def _write(self, users: list[str]) -> Iterator[Any]:
        """A write transaction holding the locks of `users` (SQLite: the database write lock)."""
        con = self._con()
        con.execute("BEGIN IMMEDIATE")
        try:
            yield con
        except BaseException:
            if con.in_transaction:
                con.execute("ROLLBACK")
            raise
        else:
            con.execute("COMMIT")

    def _write_one(self, sql: str, params: tuple = ()) -> Any:
        """One statement on its own, which both databases apply atomically (an autocommit
        connection): no BEGIN and COMMIT round trips for a write that takes no lock."""
        return self._exec(self._con(), sql, params)

    _errors: tuple[type[BaseException], ...] = (sqlite3.Error,)

    # Reads -------------------------------------------------------------------------------
    def _grants(self, con, user: str) -> list[tuple[Fraction, Fraction]]:
        rows = self._exec(con, "SELECT epsilon, delta FROM grants WHERE user_name = ? ORDER BY seq", (user,)).fetchall()
        return [(parse_fraction(e), parse_fraction(d)) for e, d in rows]

    def _totals(self, con, user: str, segment: int) -> Totals:
        row = self._exec(con, "SELECT sums, queries FROM totals WHERE user_name = ? AND segment = ?",
                         (user, segment)).fetchone()
        if row is None:
            return Totals()
        return Totals({k: parse_fraction(v) for k, v in json.loads(row[0]).items()}, row[1])

    def _put_totals(self, con, user: str, segment: int, totals: Totals) -> None:
        sums = json.dumps({k: fraction_text(v) for k, v in totals.sums.items()})
        self._exec(con, "INSERT INTO totals (user_name, segment, sums, queries) VALUES (?, ?, ?, ?) "
                        "ON CONFLICT (user_name, segment) DO UPDATE SET sums = excluded.sums, queries = excluded.queries",
                   (user, segment, sums, totals.queries))

    def state(self, user: str, budget: BudgetPolicy) -> tuple[Filter, Totals]:
        """The analyst's current filter and its totals."""
        con = self._con()
        segment, f = segment_filter(budget, self._grants(con, user))
        totals = self._totals(con, user, segment)
        return f, totals

    def spent(self, user: str, budget: BudgetPolicy) -> Totals:
        return self.state(user, budget)[1]

    # Check and charge ---------------------------------------------------------------------
    def charge(self, user: str, budget: BudgetPolicy, cost: Cost, sql: str, detail: dict[str, Any],
               global_budget: BudgetPolicy | None = None) -> Charge:
        """Check every applicable filter and record the charge in one transaction; refuse
        (charging nothing) when a filter would HALT."""
        users = ([GLOBAL] if global_budget is not None else []) + [user]
        try:
            with self._write(users) as con:
                checks = [(user, budget)] + ([(GLOBAL, global_budget)] if global_budget is not None else [])
                results = []
                for who, b in checks:
                    segment, f = segment_filter(b, self._grants(con, who))
                    totals = self._totals(con, who, segment)
                    after = totals.plus(f.usage(cost))
                    if not f.admits(after):
                        raise _refusal(who, user, f, totals, cost)
                    results.append((who, segment, f, after))
                cur = self._exec(con, "INSERT INTO charges (user_name, segment, at, sql, cost, detail) "
                                      "VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
                                 (user, results[0][1], time.time(), sql, cost.to_json(), json.dumps(detail, default=str)))
                charge_id = cur.fetchone()[0]
                for who, segment, _, after in results:
                    self._put_totals(con, who, segment, after)
            return Charge(charge_id, results[0][3], results[0][2], cost)
        except BudgetExceeded:
            raise
        except self._errors as e:
            raise OperationalError(f"the ledger could not record the charge: {e}",
                                   hint="nothing was charged and nothing was released; try again") from None

    def grant(self, user: str, epsilon: Fraction, delta: Fraction) -> None:
        with self._write([user]) as con:
            seq = len(self._grants(con, user)) + 1
            self._exec(con, "INSERT INTO grants (user_name, seq, epsilon, delta, at) VALUES (?, ?, ?, ?, ?)",
                       (user, seq, fraction_text(epsilon), fraction_text(delta), time.time()))

    # Audit log and cache ----------------------------------------------------------------
    def release_recorded(self, user: str, charge_id: int) -> bool:
        """Whether the analyst's charge `charge_id` exists and its release was recorded (the
        receipt a cached answer carries)."""
        row = self._exec(self._con(), "SELECT 1 FROM charges WHERE id = ? AND user_name = ? AND released IS NOT NULL",
                         (charge_id, user)).fetchone()
        return row is not None

    def record_release(self, charge_id: int, released: Any) -> None:
        self._write_one("UPDATE charges SET released = ? WHERE id = ?", (json.dumps(released, default=str), charge_id))

    def history(self, user: str) -> list[dict[str, Any]]:
        con = self._con()
        rows = self._exec(con, "SELECT id, at, sql, cost, detail, released FROM charges WHERE user_name = ? ORDER BY id",
                          (user,)).fetchall()
        return [{"id": r[0], "at": r[1], "sql": r[2], "cost": Cost.from_json(r[3]), "detail": json.loads(r[4]),
                 "released": None if r[5] is None else json.loads(r[5])} for r in rows]

    def cache_get(self, user: str, key: str) -> Any | None:
        con = self._con()
        row = self._exec(con, "SELECT answer FROM cache WHERE user_name = ? AND key = ?", (user, key)).fetchone()
        return None if row is None else json.loads(row[0])

    def cache_put(self, user: str, key: str, answer: Any) -> None:
        self._write_one("INSERT INTO cache (user_name, key, answer, at) VALUES (?, ?, ?, ?) "
                        "ON CONFLICT (user_name, key) DO UPDATE SET answer = excluded.answer, at = excluded.at",
                        (user, key, json.dumps(answer, default=str), time.time()))

    # Analysts' credentials (SCRAM verifiers; the server never stores a password) ----------
    def set_user(self, user: str, verifier: str, role: str) -> None:
        with self._write([]) as con:
            self._exec(con, "INSERT INTO users (user_name, verifier, role, created) VALUES (?, ?, ?, ?) "
                            "ON CONFLICT (user_name) DO UPDATE SET verifier = excluded.verifier, role = excluded.role",
                       (user, verifier, role, time.time()))

    def remove_user(self, user: str) -> bool:
        with self._write([]) as con:
            cur = self._exec(con, "DELETE FROM users WHERE user_name = ?", (user,))
            return cur.rowcount > 0

    def user_credentials(self, user: str) -> tuple[str, str] | None:
        con = self._con()
        row = self._exec(con, "SELECT verifier, role FROM users WHERE user_name = ?", (user,)).fetchone()
        return None if row is None else (row[0], row[1])

    def list_users(self) -> list[tuple[str, str, float]]:
        con = self._con()
        return [tuple(r) for r in self._exec(con, "SELECT user_name, role, created FROM users ORDER BY user_name").fetchall()]

    def close(self) -> None:
        con = getattr(self._local, "con", None)
        if con is not None:
            con.close()
            self._local.con = None


class PostgresLedger(Ledger):
    """The same ledger on a shared PostgreSQL database (psycopg 3), for several proxies."""

    placeholder = "%s"
    serial = "BIGSERIAL PRIMARY KEY"

    def __init__(self, url: str):
        try:
            import psycopg
        except ImportError:
            raise OperationalError("a PostgreSQL ledger needs psycopg 3", hint='pip install "dpsql[postgres]"') from None
        self._psycopg = psycopg
        self.url = url
        self.path = Path(url)
        self._errors = (psycopg.Error,)
        self._local = threading.local()
        try:
            with self._write([]) as con:
                con.execute("SELECT pg_advisory_xact_lock(0)")  # one schema creator at a time
                for stmt in _SCHEMA:
                    con.execute(stmt.format(serial=self.serial))
        except psycopg.Error as e:
            raise OperationalError(f"cannot open the PostgreSQL ledger: {e}",
                                   hint="check [ledger] url; nothing was charged or released") from None

    def _con(self):
        con = getattr(self._local, "con", None)
        if con is None or con.closed:
            con = self._psycopg.connect(self.url, autocommit=True)
            self._local.con = con
        return con

    @contextlib.contextmanager
    def _write(self, users: list[str]) -> Iterator[Any]:
        con = self._con()
        with con.transaction():
            for u in users:  # GLOBAL always first: a fixed order, so no deadlock
                con.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_key(u),))
            yield con


def _lock_key(user: str) -> int:
    return zlib.crc32(user.encode()) + 1


def open_ledger(path: Path | None, url: str | None) -> Ledger:
    if url:
        return PostgresLedger(url)
    return Ledger(path)


def _refusal(who: str, user: str, f: Filter, totals: Totals, cost: Cost) -> BudgetExceeded:
    """Why the filter halts, said as it is: "exhausted" only when nothing is left; a query that
    needs a delta the budget does not provide, or more epsilon than is left, is told so."""
    whose = "the global budget shared by all analysts" if who == GLOBAL else f'the privacy budget of analyst "{user}"'
    left = f.remaining(totals)
    state = f.describe(totals)
    costs = f"this query costs epsilon={show(cost.epsilon)}, delta={show(cost.delta)}"
    cache = "identical repeats of earlier queries are answered from the cache at no cost"
    without_delta = Cost.of([dataclasses.replace(p, delta=Fraction(0)) for p in cost.parts])
    if cost.delta > 0 and f.admits_cost(totals, without_delta):
        if f.delta_left(Totals()) == 0 and f.delta_left(totals) == 0:
            setting = "delta" if f.name == "basic" or f.delta == 0 else "delta_reserve"
            return BudgetExceeded(f"{whose} provides no delta for releases like this one (partition selection of "
                                  f"undeclared group keys, or Gaussian noise): {costs}; {state}",
                                  hint=f"declare the group keys in the policy, use Laplace noise, or set {setting} in "
                                       "the policy's budget; nothing was charged")
        return BudgetExceeded(f"{whose} has delta={show(left['delta'])} left, less than this query needs: {costs}; {state}",
                              hint=f"SET dpsql.delta to at most {show(left['delta'])}, or ask with Laplace noise over "
                                   f"declared group keys, which needs no delta; {cache}")
    if left["epsilon"] > 0:
        return BudgetExceeded(f"{whose} has epsilon={show(left['epsilon'])} left, not enough for this query: {costs}; "
                              f"{state}", hint=f"a cheaper query still fits: SET dpsql.epsilon = "
                                               f"{show(_round_down(left['epsilon']))} (or less); {cache}")
    return BudgetExceeded(f"{whose} is exhausted: {costs}; {state}",
                          hint=f"an administrator can grant more (dpsql budget grant); {cache}")


def _round_down(x: Fraction) -> Fraction:
    """A short decimal no larger than x, for hints people can type."""
    if Fraction(repr(float(x))) == x:
        return x
    return Fraction(int(x * 10**6), 10**6)

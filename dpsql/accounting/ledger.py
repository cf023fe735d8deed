"""The durable ledger: atomic check-and-charge, audit log, answer cache, grants.

One write transaction reads the analyst's running totals (and the global ones), asks the
filters, records the charge and commits before the engine runs: an answer never leaves
without a durable charge, and concurrent sessions - threads, processes, or several proxies on
one PostgreSQL ledger - serialize on a lock, so together they can never overspend.

SQLite (default): WAL, synchronous=FULL, `BEGIN IMMEDIATE` takes the write lock before the
read. Writers take turns on a lock file beside it first (`<ledger>-writers`, flock: empty, it
holds nothing), so a writer of another thread or process waits in the kernel and starts the
moment the lock is free, rather than in SQLite's busy handler, which sleeps 1, 2, 5, ... 100 ms
between tries. PostgreSQL (`[ledger] url`): transaction-scoped advisory locks per analyst (and one for
the global filter, always taken first, so there is no deadlock).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import functools
import glob
import json
import os
import sqlite3
import threading
import time
import types
import weakref
import zlib
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from .. import owner_only
from ..config import BudgetPolicy
from ..errors import BudgetExceeded, OperationalError
from .cost import Cost, fraction_text, parse_fraction, show
from .filters import Filter, Totals, make_filter
from .group_commit import GroupCommit, Pending
from .integrity import (
    SCHEMA_VERSION,
    Identity,
    charge_record,
    grant_record,
    head_tag,
    identity_file,
    read_identity,
    tag,
    write_identity,
)
from .jobs import GLOBAL, ChargeJob, StatementJob

WINDOW_EPOCH = 1577836800  # 2020-01-01 00:00 UTC: windows are counted from here, in the ledger's clock
WINDOW_STRIDE = 1000  # segment = window * WINDOW_STRIDE + the window's grant segment
LIFETIME = -1  # the segment of a windowed budget's lifetime cap: every charge, never refreshed

_SCHEMA = [
    """CREATE TABLE IF NOT EXISTS totals (
        user_name TEXT NOT NULL, segment INTEGER NOT NULL, sums TEXT NOT NULL, queries INTEGER NOT NULL,
        PRIMARY KEY (user_name, segment))""",
    """CREATE TABLE IF NOT EXISTS grants (
        user_name TEXT NOT NULL, seq INTEGER NOT NULL, epsilon TEXT NOT NULL, delta TEXT NOT NULL,
        at DOUBLE PRECISION NOT NULL, chain TEXT, PRIMARY KEY (user_name, seq))""",
    """CREATE TABLE IF NOT EXISTS charges (
        id {serial}, user_name TEXT NOT NULL, segment INTEGER NOT NULL, at DOUBLE PRECISION NOT NULL,
        sql TEXT NOT NULL, cost TEXT NOT NULL, detail TEXT NOT NULL, released TEXT, chain TEXT)""",
    "CREATE INDEX IF NOT EXISTS charges_user ON charges (user_name, id)",
    """CREATE TABLE IF NOT EXISTS users (
        user_name TEXT PRIMARY KEY, verifier TEXT NOT NULL, role TEXT NOT NULL, created DOUBLE PRECISION NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS cache (
        user_name TEXT NOT NULL, key TEXT NOT NULL, answer TEXT NOT NULL, at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (user_name, key))""",
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE IF NOT EXISTS events (
        at DOUBLE PRECISION NOT NULL, kind TEXT NOT NULL, user_name TEXT NOT NULL, address TEXT NOT NULL,
        detail TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS heads (
        user_name TEXT NOT NULL, kind TEXT NOT NULL, count INTEGER NOT NULL, last TEXT NOT NULL, tag TEXT NOT NULL,
        PRIMARY KEY (user_name, kind))""",
]

# SQLSTATEs of a query stopped by a resource limit after its charge (out of memory, disk full,
# statement timeout or a cancel); other failures after a charge are engine errors.
RESOURCE_LIMITS = {"53100": "disk full", "53200": "out of memory", "57014": "statement timeout or cancel"}
FAILED_PREFIX = '{"failed":'  # how a failure's release record starts (record_failure)


def failure_of(released: Any) -> dict[str, Any] | None:
    """The failure a release record holds (record_failure), or None for a release."""
    if isinstance(released, dict) and isinstance(released.get("failed"), dict):
        return released["failed"]
    return None


def failure_text(failure: Mapping[str, Any]) -> str:
    """A failure record in words, for the audit log and the history."""
    kind = "a resource limit" if failure.get("resource_limit") else "an engine failure"
    return (f"charged; failed after its charge for {kind}: {failure.get('reason')} "
            f"(SQLSTATE {failure.get('sqlstate')}); nothing was released")


# Ordered migrations: MIGRATIONS[v] brings a version-v ledger to v + 1 (after a backup).
# Version 1 (shipped before the meta table): no identity, no chain.
_V1_TO_V2 = ["ALTER TABLE charges ADD COLUMN chain TEXT", "ALTER TABLE grants ADD COLUMN chain TEXT",
             "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
             _SCHEMA[-2], _SCHEMA[-1]]


# A PostgreSQL ledger opened without an identity file (tools, benchmarks): no identity check,
# and its chain keyed by a public constant, so it only shows accidental damage.
UNCHECKED = Identity("unchecked", bytes(32), 0.0)


class LedgerError(OperationalError):
    """The ledger cannot be trusted as it is: dpsql does not start (or answer) on it."""

    sqlstate = "XX001"


class _SumsTexts:
    """Totals rows' sums by their text (read-only mappings). A charge reads back the text the
    previous charge wrote, so the writer files each text it writes with the sums it came from:
    parsing the fractions again was a fifth of a charge's own work. Bounded: emptied when full."""

    def __init__(self, size: int = 4096):
        self._size, self._known = size, dict[str, Mapping[str, Fraction]]()

    def parsed(self, text: str) -> Mapping[str, Fraction]:
        hit = self._known.get(text)
        if hit is None:
            hit = self.file(text, {k: parse_fraction(v) for k, v in json.loads(text).items()})
        return hit

    def text(self, sums: Mapping[str, Fraction]) -> str:
        text = json.dumps({k: fraction_text(v) for k, v in sums.items()})
        self.file(text, sums)
        return text

    def file(self, text: str, sums: Mapping[str, Fraction]) -> Mapping[str, Fraction]:
        if len(self._known) >= self._size:
            self._known = {}
        view = self._known[text] = types.MappingProxyType(dict(sums))
        return view


_SUMS = _SumsTexts()


@functools.lru_cache(maxsize=1024)
def _parsed_grants(rows: tuple[tuple[str, str], ...]) -> tuple[tuple[Fraction, Fraction], ...]:
    return tuple((parse_fraction(e), parse_fraction(d)) for e, d in rows)


@functools.lru_cache(maxsize=1024)
def _segment_filter(budget: BudgetPolicy, grants: tuple[tuple[Fraction, Fraction], ...]) -> tuple[int, Filter]:
    """`segment_filter` once per budget and grants (filters are immutable): each charge asks."""
    return segment_filter(budget, grants)


def segment_filter(budget: BudgetPolicy, grants: Sequence[tuple[Fraction, Fraction]]) -> tuple[int, Filter]:
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


def window_of(budget: BudgetPolicy, now: float) -> tuple[int, float, float] | None:
    """A windowed budget's current window at `now`: its number, start and end (epoch seconds)."""
    if budget.window is None:
        return None
    index = (int(now) - WINDOW_EPOCH) // budget.window
    start = WINDOW_EPOCH + index * budget.window
    return index, float(start), float(start + budget.window)


def lifetime_filter(budget: BudgetPolicy) -> Filter | None:
    """A windowed budget's lifetime cap: a filter of the same kind over every charge ever."""
    if budget.lifetime_epsilon is None:
        return None
    reserve = budget.delta_reserve * budget.lifetime_delta / budget.delta if budget.delta and budget.delta_reserve else Fraction(0)
    return make_filter(budget.filter, budget.lifetime_epsilon, budget.lifetime_delta, reserve=reserve,
                       rdp_order=budget.rdp_order)


@dataclass(frozen=True)
class Charge:
    """The receipt of a charge the filters admitted, written in its transaction, and required
    by the release guard (dpsql/guard.py) before any noisy value is drawn; nothing drawn leaves
    before that transaction is durable (PendingCharge.durable)."""

    id: int
    totals: Totals
    filter: Filter
    cost: Cost


def _writer_for(ledger: Ledger) -> GroupCommit:
    """A writer thread that holds its ledger weakly: a Ledger nobody closed (a Session dropped
    without close()) is collected as before, and its collection stops the thread."""
    ref = weakref.ref(ledger)

    def begin(users: list[str], durable: bool):
        owner = ref()
        if owner is None:
            raise OperationalError("the ledger was closed", hint="nothing was charged; open a new connection")
        return owner._write(users, durable)

    def finish() -> None:
        owner = ref()
        if owner is not None:
            owner._close_connection()

    writer = GroupCommit(begin, GLOBAL, finish)
    weakref.finalize(ledger, writer.stop)
    return writer


class PendingCharge:
    """A charge whose transaction is under way (Ledger.charging)."""

    def __init__(self, pending: Pending, errors: tuple[type[BaseException], ...]):
        self._pending, self._errors = pending, errors

    def admitted(self) -> Charge:
        """The charge, once the filters have admitted it and it is written (not yet on disk)."""
        return self._told(self._pending.ran)

    def durable(self) -> Charge:
        """The charge, once its COMMIT is on disk."""
        return self._told(self._pending.committed)

    def _told(self, wait: Callable[[], Charge]) -> Charge:
        try:
            return wait()
        except BudgetExceeded:
            raise
        except self._errors as e:
            raise OperationalError(f"the ledger could not record the charge: {e}",
                                   hint="nothing was charged and nothing was released; try again") from None


class Ledger:
    """SQLite ledger; `PostgresLedger` below shares everything but connections and locking."""

    placeholder = "?"
    serial = "INTEGER PRIMARY KEY AUTOINCREMENT"
    _writer: GroupCommit | None = None
    _remote: Any = None  # the supervisor's writer (use_writer)
    _remote_pid = 0
    _grouped = False  # group_commit(): every write through the writer thread
    _writer_pid = 0  # the process whose thread `_writer` is
    _turn_pid = 0  # the process that opened `_turn_fd` (an open file shared through fork() shares its flock)

    def __init__(self, path: str | Path, identity: Path | None = None, *, create: bool = True):
        """Open the SQLite ledger at `path`, checked against its identity file (default: beside
        it). A new ledger is created only where neither exists (and `create` allows it)."""
        self.path = Path(path)
        self.identity_path = identity or identity_file(self.path)
        self._local = threading.local()
        self._turn_lock = threading.Lock()
        self._writer_lock = threading.Lock()
        self._turn_fd: int | None = None
        ident = self._read_identity()
        if ident is not None and not (self.path.exists() and self.path.stat().st_size > 0):
            state = "missing" if not self.path.exists() else "empty"
            raise LedgerError(f"the ledger {self.path} is {state}, but {self.identity_path} says ledger "
                              f"{ident.ledger_id} was created there on {_date(ident.created)}",
                              hint="restore the ledger from a backup (dpsql ledger backup); starting afresh would "
                                   "forget every budget spent. To do that deliberately, remove the identity file and "
                                   "run dpsql ledger init")
        try:
            owner_only.make_dirs(self.path.parent)
            owner_only.touch(self.path)  # owner-only from the start, and so are its -wal, -shm and -journal
            self._open(ident, create)
        except sqlite3.OperationalError as e:  # busy, unwritable: not a damaged file
            self.close()
            raise OperationalError(f"cannot open the ledger at {self.path}: {e}",
                                   hint="check that the directory is writable and that no other program holds the "
                                        "ledger locked; nothing was charged") from None
        except sqlite3.DatabaseError as e:
            self.close()
            raise LedgerError(f"the ledger {self.path} is damaged or not a dpsql ledger: {e}",
                              hint="restore it from a backup (dpsql ledger backup); nothing was charged") from None
        except (sqlite3.Error, OSError) as e:
            self.close()
            raise OperationalError(f"cannot open the ledger at {self.path}: {e}",
                                   hint="check that the directory is writable, or set [ledger] path in the policy") from None

    def _read_identity(self) -> Identity | None:
        try:
            return read_identity(self.identity_path)
        except ValueError as e:
            raise LedgerError(str(e), hint="restore the identity file from a backup of the ledger's directory") from None

    # Identity, versions and migrations -----------------------------------------------------
    def _open(self, ident: Identity | None, create: bool) -> None:
        """Check the ledger's identity and schema version; create it (first start) or migrate it
        forward (after a backup) as needed."""
        with self._write([]) as con:
            self._schema_lock(con)
            ident = self._read_identity()  # again, under the lock: another process may just have created it
            version = self._version(con)
            if version == 0:
                if ident is not None and ident is not UNCHECKED:
                    raise LedgerError(f"the ledger {self.where} has no tables, but {self.identity_path} says ledger "
                                      f"{ident.ledger_id} was created there on {_date(ident.created)}",
                                      hint="restore the ledger from a backup; starting afresh would forget every "
                                           "budget spent")
                if not create:
                    raise LedgerError(f"there is no ledger at {self.where}", hint="create one with dpsql ledger init")
                ident = ident or Identity.new()
                for stmt in _SCHEMA:
                    self._exec(con, stmt.format(serial=self.serial))
                self._put_meta(con, ident)
                if ident is not UNCHECKED:
                    write_identity(self.identity_path, ident)
            elif version < SCHEMA_VERSION:
                self._backup_before_migrating(con, version)
                adopted = ident is None
                ident = ident or Identity.new()
                for stmt in _V1_TO_V2:
                    self._exec(con, stmt)
                self._put_meta(con, ident)
                self._chain_existing(con, ident.key)
                if adopted:
                    write_identity(self.identity_path, ident)
            elif version > SCHEMA_VERSION:
                raise LedgerError(f"the ledger {self.where} has schema version {version}; this dpsql knows up to "
                                  f"{SCHEMA_VERSION}", hint="upgrade dpsql")
            elif ident is not UNCHECKED:
                stored = dict(self._exec(con, "SELECT key, value FROM meta").fetchall())
                if ident is None:
                    raise LedgerError(f"the ledger {self.where} (id {stored.get('ledger_id')}) has no identity file "
                                      f"{self.identity_path}", hint="restore the identity file from a backup of the "
                                                                    "ledger's directory")
                if stored.get("ledger_id") != ident.ledger_id:
                    raise LedgerError(f"the ledger {self.where} is ledger {stored.get('ledger_id')}, not "
                                      f"{ident.ledger_id} which {self.identity_path} names",
                                      hint="point [ledger] at the ledger this policy has used, or restore it from a backup")
        self.identity = ident

    @property
    def where(self) -> str:
        return str(self.path)

    def private_files(self) -> list[Path]:
        """The files holding this ledger's records or key, or guarding its writes (whoever can
        read the writers' lock can flock it): each should be its owner's only (owner_only.loose)."""
        beside = [Path(f"{self.path}{suffix}") for suffix in ("-wal", "-shm", "-journal", "-writers")]
        migrated = sorted(self.path.parent.glob(glob.escape(self.path.name) + ".v*.backup*"))
        return [self.path, *beside, *migrated, self.identity_path]

    def _schema_lock(self, con) -> None:
        """One schema creator or migrator at a time (SQLite: the write lock already is)."""

    def _version(self, con) -> int:
        tables = self._tables(con)
        if "meta" in tables:
            row = self._exec(con, "SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            return int(row[0]) if row else 1
        return 1 if "charges" in tables else 0

    def _tables(self, con) -> set[str]:
        return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()}

    def _put_meta(self, con, ident: Identity) -> None:
        for key, value in (("schema_version", str(SCHEMA_VERSION)), ("ledger_id", ident.ledger_id),
                           ("created", repr(ident.created))):
            self._exec(con, "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                       (key, value))

    def _backup_before_migrating(self, con, version: int) -> None:
        """A copy of the file as it was (the write lock is held, so nothing changes meanwhile)."""
        target = Path(f"{self.path}.v{version}.backup")
        if not target.exists():
            wal, target_wal = Path(f"{self.path}-wal"), Path(f"{target}-wal")
            target_wal.unlink(missing_ok=True)  # left by a copy that stopped before its main file
            if wal.exists():
                owner_only.copy(wal, target_wal)
            owner_only.copy(self.path, target)

    def _chain_existing(self, con, key: bytes) -> None:
        """Tag the records of a ledger migrated from before the chain, in their order."""
        heads: dict[tuple[str, str], tuple[int, str]] = {}
        for cid, user, segment, at, sql, cost, detail in self._exec(
                con, "SELECT id, user_name, segment, at, sql, cost, detail FROM charges ORDER BY id").fetchall():
            count, last = heads.get((user, "charge"), (0, ""))
            t = tag(key, last, charge_record(cid, user, segment, at, sql, cost, detail))
            self._exec(con, "UPDATE charges SET chain = ? WHERE id = ?", (t, cid))
            heads[(user, "charge")] = (count + 1, t)
        for user, seq, eps, dlt, at in self._exec(
                con, "SELECT user_name, seq, epsilon, delta, at FROM grants ORDER BY user_name, seq").fetchall():
            count, last = heads.get((user, "grant"), (0, ""))
            t = tag(key, last, grant_record(user, seq, eps, dlt, at))
            self._exec(con, "UPDATE grants SET chain = ? WHERE user_name = ? AND seq = ?", (t, user, seq))
            heads[(user, "grant")] = (count + 1, t)
        for (user, kind), (count, last) in heads.items():
            self._put_head(con, user, kind, count, last, key)

    def _put_head(self, con, user: str, kind: str, count: int, last: str, key: bytes) -> None:
        self._exec(con, "INSERT INTO heads (user_name, kind, count, last, tag) VALUES (?, ?, ?, ?, ?) "
                        "ON CONFLICT (user_name, kind) DO UPDATE SET count = excluded.count, last = excluded.last, "
                        "tag = excluded.tag", (user, kind, count, last, head_tag(key, user, kind, count, last)))

    def _append(self, con, user: str, kind: str, record: list[Any]) -> str:
        """The new record's chained tag, with the analyst's head moved on."""
        row = self._exec(con, "SELECT count, last FROM heads WHERE user_name = ? AND kind = ?", (user, kind)).fetchone()
        count, last = (row[0], row[1]) if row else (0, "")
        t = tag(self.identity.key, last, record)
        self._put_head(con, user, kind, count + 1, t, self.identity.key)
        return t

    # Connections and transactions -------------------------------------------------------

    def _con(self):
        con = getattr(self._local, "con", None)
        if con is None or self._local.pid != os.getpid():  # never a connection inherited through fork()
            # In a writers' turn: a connection's first PRAGMA journal_mode=WAL, while another
            # connection creates the file or recovers its log, can fail at once with
            # "database is locked" (no busy wait there), as 64 sessions opening one new ledger did.
            with self._turn():
                con = sqlite3.connect(self.path, isolation_level=None, timeout=60.0, check_same_thread=False)
                con.execute("PRAGMA busy_timeout=60000")
                con.execute("PRAGMA journal_mode=WAL")
                con.execute("PRAGMA synchronous=FULL")
            self._local.con, self._local.durable, self._local.pid = con, True, os.getpid()
        return con

    def _sql(self, sql: str) -> str:
        return sql if self.placeholder == "?" else sql.replace("?", self.placeholder)

    def _exec(self, con, sql: str, params: tuple = ()):
        return con.execute(self._sql(sql), params)

    def group_commit(self) -> None:
        """From now on, writes from every thread share transactions (one fsync per batch): a
        server's sessions all charge through this one ledger object."""
        self._grouped = True
        self._start_writer()

    def _start_writer(self) -> GroupCommit:
        """The writer thread. Charges always go through it (`charging`), so that their fsync
        overlaps the query's run; without group commit, release records and cached answers are
        written on the caller's own connection, which spares them a round trip to the thread."""
        with self._writer_lock:
            writer = self._writer
            if writer is None or self._writer_pid != os.getpid():  # a forked child has no thread
                writer = self._writer = _writer_for(self)
                self._writer_pid = os.getpid()
            return writer

    @contextlib.contextmanager
    def _write(self, users: list[str], durable: bool = True) -> Iterator[Any]:
        """A write transaction holding the locks of `users` (SQLite: the database write lock),
        whose COMMIT returns once it is on disk when `durable`."""
        con = self._con()
        self._sync(con, durable)
        with self._turn():
            con.execute("BEGIN IMMEDIATE")
            try:
                yield con
            except BaseException:
                if con.in_transaction:
                    con.execute("ROLLBACK")
                raise
            else:
                con.execute("COMMIT")

    @contextlib.contextmanager
    def _turn(self) -> Iterator[None]:
        """This writer's turn among the ledger's writers: threads of this Ledger wait on a lock,
        other Ledgers and processes on the lock file (flock, released by the kernel if the holder
        dies)."""
        with self._turn_lock:
            if self._turn_fd is None or self._turn_pid != os.getpid():  # a forked child shares the parent's flock
                self._turn_pid = os.getpid()
                self._turn_fd = owner_only.open_file(self.path.with_name(self.path.name + "-writers"))
                self._turn_closer = weakref.finalize(self, os.close, self._turn_fd)  # a Ledger nobody closed
            fcntl.flock(self._turn_fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(self._turn_fd, fcntl.LOCK_UN)

    def _sync(self, con, durable: bool) -> None:
        """WAL with synchronous=NORMAL commits without an fsync; the next FULL commit's fsync of
        the log makes it durable too, since the log is replayed in order."""
        if getattr(self._local, "durable", True) != durable:
            con.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
            self._local.durable = durable

    def _write_one(self, sql: str, params: tuple = (), *, durable: bool = True) -> Any:
        """One statement on its own, which both databases apply atomically (an autocommit
        connection): no BEGIN and COMMIT round trips for a write that takes no lock."""
        con = self._con()
        self._sync(con, durable)
        with self._turn():
            return self._exec(con, sql, params)

    def _write_lazily(self, sql: str, params: tuple) -> None:
        """One statement committed without waiting for the disk (a release record, a cached
        answer): in the batch under way with group commit, else on its own."""
        if not self._grouped or (self._writer is None and self._remote is None):
            self._write_one(sql, params, durable=False)
        else:
            self._submit(StatementJob(sql, params)).committed()

    _errors: tuple[type[BaseException], ...] = (sqlite3.Error,)

    # Reads -------------------------------------------------------------------------------
    def _grants(self, con, user: str, since: float | None = None) -> tuple[tuple[Fraction, Fraction], ...]:
        """The user's grants (in a windowed budget: those of the current window, from `since`)."""
        rows = self._exec(con, "SELECT epsilon, delta FROM grants WHERE user_name = ? AND at >= ? ORDER BY seq",
                          (user, since if since is not None else float("-inf"))).fetchall()
        return _parsed_grants(tuple((e, d) for e, d in rows))

    def now(self, con=None) -> float:
        """The ledger's own clock (epoch seconds): windows are computed from it, so proxies
        sharing a ledger agree on them whatever their own clocks say."""
        return time.time()

    def _segment(self, con, who: str, budget: BudgetPolicy, now: float) -> tuple[int, Filter, float | None]:
        """The segment and filter in force for `who` at `now` (the window's, after its grants),
        and when that window ends (None: the budget does not refresh)."""
        window = window_of(budget, now)
        segment, f = _segment_filter(budget, self._grants(con, who, window[1] if window else None))
        if window is None:
            return segment, f, None
        return window[0] * WINDOW_STRIDE + segment, f, window[2]

    def _totals(self, con, user: str, segment: int) -> Totals:
        row = self._exec(con, "SELECT sums, queries FROM totals WHERE user_name = ? AND segment = ?",
                         (user, segment)).fetchone()
        if row is None:
            return Totals()
        return Totals(_SUMS.parsed(row[0]), row[1])

    def _put_totals(self, con, user: str, segment: int, totals: Totals) -> None:
        sums = _SUMS.text(totals.sums)
        self._exec(con, "INSERT INTO totals (user_name, segment, sums, queries) VALUES (?, ?, ?, ?) "
                        "ON CONFLICT (user_name, segment) DO UPDATE SET sums = excluded.sums, queries = excluded.queries",
                   (user, segment, sums, totals.queries))

    def state(self, user: str, budget: BudgetPolicy) -> tuple[Filter, Totals]:
        """The analyst's current filter and its totals (in a windowed budget: this window's)."""
        con = self._con()
        segment, f, _ = self._segment(con, user, budget, self.now(con))
        totals = self._totals(con, user, segment)
        return f, totals

    def lifetime(self, user: str, budget: BudgetPolicy) -> tuple[Filter, Totals] | None:
        """A windowed budget's lifetime cap and what every window together has spent of it."""
        f = lifetime_filter(budget)
        return None if f is None else (f, self._totals(self._con(), user, LIFETIME))

    def spent(self, user: str, budget: BudgetPolicy) -> Totals:
        return self.state(user, budget)[1]

    # Check and charge ---------------------------------------------------------------------
    def charge(self, user: str, budget: BudgetPolicy, cost: Cost, sql: str, detail: dict[str, Any],
               global_budget: BudgetPolicy | None = None) -> Charge:
        """Check every applicable filter and record the charge in one transaction; refuse
        (charging nothing) when a filter would HALT. Returns once the charge is durable."""
        return self.charging(user, budget, cost, sql, detail, global_budget).durable()

    def charging(self, user: str, budget: BudgetPolicy, cost: Cost, sql: str, detail: dict[str, Any] | str,
                 global_budget: BudgetPolicy | None = None, failed: Callable[[], None] | None = None,
                 others: Sequence[tuple[str, BudgetPolicy]] = ()) -> PendingCharge:
        """`charge`, with its transaction on the ledger's writer thread: the caller learns at
        `admitted()` whether the filters admit it (a refusal raises there) and may run the query
        while the COMMIT reaches the disk; `durable()` must return before anything derived from
        the data leaves. `failed()` runs on the writer thread as soon as the charge is refused or
        cannot be recorded, before `admitted()` or `durable()` tell: a query that started before
        its admission is stopped by it. `detail` may be given as its JSON text already (a plan's
        is the same for every execution). `others`: analysts charged the same cost in the same
        transaction (each with a charge record of their own): admitted together or not at all."""
        text = detail if isinstance(detail, str) else json.dumps(detail, default=str)
        job = ChargeJob(user, budget, cost, sql, text, global_budget, tuple(others))
        return PendingCharge(self._submit(job, failed), self._errors)

    def _charge_in(self, con, job: ChargeJob) -> Charge:
        """A charge job, applied in the writer's open transaction: every filter of the analyst
        (and of the job's other analysts, and the global budget) is checked before anything is
        written; then one charge record per analyst. Returns the first analyst's receipt."""
        user, cost = job.user, job.cost
        payers = [(user, job.budget)] + [(u, b) for u, b in job.others if u != user]
        checks = payers + ([(GLOBAL, job.global_budget)] if job.global_budget is not None else [])
        now = self.now(con)  # inside the transaction: every proxy sees one window
        results = []
        for who, b in checks:
            segment, f, refreshes = self._segment(con, who, b, now)
            filters = [(segment, f, refreshes)]
            life = lifetime_filter(b)
            if life is not None:
                filters.append((LIFETIME, life, None))
            for seg, flt, refresh in filters:
                totals = self._totals(con, who, seg)
                after = totals.plus(flt.usage(cost))
                if not flt.admits(after):
                    raise _refusal(who, user, flt, totals, cost, refresh, lifetime=seg == LIFETIME)
                results.append((who, seg, flt, after))
        at, cost_text = time.time(), cost.to_json()
        receipts: dict[str, int] = {}
        for who, _ in payers:
            segment = next(seg for w, seg, _, _ in results if w == who)
            cur = self._exec(con, "INSERT INTO charges (user_name, segment, at, sql, cost, detail) "
                                  "VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
                             (who, segment, at, job.sql, cost_text, job.detail))
            charge_id = cur.fetchone()[0]
            chain = self._append(con, who, "charge",
                                 charge_record(charge_id, who, segment, at, job.sql, cost_text, job.detail))
            self._exec(con, "UPDATE charges SET chain = ? WHERE id = ?", (chain, charge_id))
            receipts.setdefault(who, charge_id)
        for who, segment, _, after in results:
            self._put_totals(con, who, segment, after)
        return Charge(receipts[user], results[0][3], results[0][2], cost)

    def _apply(self, con, job: ChargeJob | StatementJob) -> Any:
        """A job's work in the writer's open transaction (this process's writer, or the one a
        supervisor runs for its workers)."""
        if isinstance(job, ChargeJob):
            return self._charge_in(con, job)
        self._exec(con, job.sql, job.params)
        return None

    def _submit(self, job: ChargeJob | StatementJob, failed: Callable[[], None] | None = None) -> Pending:
        """Queue a job for the writer: the supervisor's (use_writer), else this process's thread."""
        remote = self._remote
        if remote is not None and self._remote_pid == os.getpid():
            return remote.start(job, failed)
        return self._start_writer().start(list(job.users), lambda con: self._apply(con, job), durable=job.durable,
                                  failed=failed)

    def use_writer(self, remote: Any) -> None:
        """From now on the hot writes (charges, release records, cached answers) go to `remote`,
        the writer a `dpsql serve --workers` supervisor runs for all its workers (its `start(job,
        failed)` returns a Pending); the rest is written here, under the same locks."""
        self._remote, self._remote_pid, self._grouped = remote, os.getpid(), True

    def grant(self, user: str, epsilon: Fraction, delta: Fraction, budget: BudgetPolicy | None = None,
              event: tuple[str, str, str] | None = None) -> None:
        """More budget for `user` (in a windowed budget: for the current window only); `event`
        (kind, address, detail: who granted it and why) is written in the same transaction, so
        a grant never stands without its reason."""
        with self._write([user]) as con:
            window = window_of(budget, self.now(con)) if budget is not None else None
            if window and len(self._grants(con, user, window[1])) >= WINDOW_STRIDE - 1:
                raise OperationalError(f"{user} has {WINDOW_STRIDE - 1} grants in this window already",
                                       sqlstate="54000", hint="grant a larger amount at once")
            seq = len(self._grants(con, user)) + 1
            eps, dlt, at = fraction_text(epsilon), fraction_text(delta), time.time()
            chain = self._append(con, user, "grant", grant_record(user, seq, eps, dlt, at))
            self._exec(con, "INSERT INTO grants (user_name, seq, epsilon, delta, at, chain) VALUES (?, ?, ?, ?, ?, ?)",
                       (user, seq, eps, dlt, at, chain))
            if event is not None:  # at the grant's own time: the audit log pairs them by it
                self._exec(con, "INSERT INTO events (at, kind, user_name, address, detail) VALUES (?, ?, ?, ?, ?)",
                           (at, event[0], user, event[1], event[2]))

    # Audit log and cache ----------------------------------------------------------------
    def release_recorded(self, user: str, charge_id: int) -> bool:
        """Whether the analyst's charge `charge_id` exists and its release was recorded (the
        receipt a cached answer carries)."""
        row = self._exec(self._con(), "SELECT 1 FROM charges WHERE id = ? AND user_name = ? AND released IS NOT NULL "
                         "AND released NOT LIKE ?", (charge_id, user, FAILED_PREFIX + "%")).fetchone()
        return row is not None

    def record_release(self, charge_id: int, released: Any) -> None:
        """Recorded before the answer leaves: a ledger that cannot record it refuses the answer.
        Not fsync'd on its own (the next charge's commit is): a record lost in a power failure
        loses the answer's free repetition (its cached answer has no receipt and is not
        served), never a charge."""
        sql, params = "UPDATE charges SET released = ? WHERE id = ?", (json.dumps(released, default=str), charge_id)
        try:
            self._write_lazily(sql, params)
        except self._errors as e:
            raise OperationalError(f"the ledger could not record the release: {e}",
                                   hint="nothing was released; the query's cost stays charged") from None

    def record_failure(self, charge_id: int, sqlstate: str, reason: str) -> None:
        """A query that failed after its charge (a resource limit, an engine failure): its
        release record says so, with the SQLSTATE and dpsql's own message (never the engine's),
        so the audit log shows it charged and failed, nothing released. Best effort, as the
        failure is told to the client either way and its charge is already durable."""
        record = {"failed": {"sqlstate": sqlstate, "reason": reason, "resource_limit": sqlstate in RESOURCE_LIMITS}}
        with contextlib.suppress(*self._errors, OperationalError):
            self._write_lazily("UPDATE charges SET released = ? WHERE id = ? AND released IS NULL",
                               (json.dumps(record), charge_id))

    def history(self, user: str | None = None) -> list[dict[str, Any]]:
        """The charges of `user` (None: of every analyst, as an auditor reads them), oldest first."""
        sql = "SELECT id, at, sql, cost, detail, released, user_name FROM charges"
        rows = self._exec(self._con(), sql + (" WHERE user_name = ? ORDER BY id" if user is not None else " ORDER BY id"),
                          (user,) if user is not None else ()).fetchall()
        return [{"id": r[0], "at": r[1], "sql": r[2], "cost": Cost.from_json(r[3]), "detail": json.loads(r[4]),
                 "released": None if r[5] is None else json.loads(r[5]), "user": r[6]} for r in rows]

    def grants(self, user: str) -> list[dict[str, Any]]:
        """The grants to `user` (GLOBAL: to the global budget), oldest first, with their times:
        a budget's history over time needs them beside the charges."""
        rows = self._exec(self._con(), "SELECT seq, epsilon, delta, at FROM grants WHERE user_name = ? ORDER BY seq",
                          (user,)).fetchall()
        return [{"seq": r[0], "epsilon": parse_fraction(r[1]), "delta": parse_fraction(r[2]), "at": r[3]} for r in rows]

    def cached_answers(self, user: str, receipts: set[int]) -> dict[int, Any]:
        """The user's cached answers that carry one of these receipts (charge ids), by receipt:
        the released answer's column names and intervals, which the charge record does not keep."""
        found: dict[int, Any] = {}
        for (text,) in self._exec(self._con(), "SELECT answer FROM cache WHERE user_name = ?", (user,)).fetchall():
            answer = json.loads(text)
            receipt = (answer.get("dp") or {}).get("receipt")
            if receipt in receipts:
                found[receipt] = answer
        return found

    def cache_get(self, user: str, key: str) -> Any | None:
        con = self._con()
        row = self._exec(con, "SELECT answer FROM cache WHERE user_name = ? AND key = ?", (user, key)).fetchone()
        return None if row is None else json.loads(row[0])

    def cache_put(self, user: str, key: str, answer: Any) -> None:
        """Best effort and not fsync'd: an answer that cannot be cached (or whose entry a power
        failure loses) is still an answer, whose release is recorded."""
        sql = ("INSERT INTO cache (user_name, key, answer, at) VALUES (?, ?, ?, ?) "
               "ON CONFLICT (user_name, key) DO UPDATE SET answer = excluded.answer, at = excluded.at")
        params = (user, key, json.dumps(answer, default=str), time.time())
        with contextlib.suppress(*self._errors):
            self._write_lazily(sql, params)

    def record_event(self, kind: str, user: str, address: str, detail: str = "") -> None:
        """The audit log of what is not a charge (failed and refused logins): best effort, a
        ledger that cannot write it still refuses the login it records."""
        with contextlib.suppress(*self._errors):
            self._write_one("INSERT INTO events (at, kind, user_name, address, detail) VALUES (?, ?, ?, ?, ?)",
                            (time.time(), kind, user, address, detail))

    def events(self, user: str | None = None) -> list[dict[str, Any]]:
        sql = "SELECT at, kind, user_name, address, detail FROM events"
        rows = self._exec(self._con(), sql + (" WHERE user_name = ? ORDER BY at" if user else " ORDER BY at"),
                          (user,) if user else ()).fetchall()
        return [{"at": r[0], "kind": r[1], "user": r[2], "address": r[3], "detail": r[4]} for r in rows]

    # Verification and backup ----------------------------------------------------------------
    def verify(self) -> list[str]:
        """Every problem found: a record edited, deleted, inserted or reordered (its chain or an
        analyst's head does not match), or totals that disagree with the charges."""
        key, con, problems = self.identity.key, self._con(), []
        walked: dict[tuple[str, str], tuple[int, str]] = {}
        for cid, user, segment, at, sql, cost, detail, chain in self._exec(
                con, "SELECT id, user_name, segment, at, sql, cost, detail, chain FROM charges ORDER BY id").fetchall():
            count, last = walked.get((user, "charge"), (0, ""))
            expected = tag(key, last, charge_record(cid, user, segment, at, sql, cost, detail))
            if chain != expected:
                problems.append(f"charge {cid} of {user}: edited, or a charge before it was removed")
            walked[(user, "charge")] = (count + 1, chain or expected)
        for user, seq, eps, dlt, at, chain in self._exec(
                con, "SELECT user_name, seq, epsilon, delta, at, chain FROM grants ORDER BY user_name, seq").fetchall():
            count, last = walked.get((user, "grant"), (0, ""))
            if chain != tag(key, last, grant_record(user, seq, eps, dlt, at)):
                problems.append(f"grant {seq} of {user}: edited, or a grant before it was removed")
            walked[(user, "grant")] = (count + 1, chain or "")
        heads = {(u, k): (c, last, t) for u, k, c, last, t in
                 self._exec(con, "SELECT user_name, kind, count, last, tag FROM heads").fetchall()}
        for (user, kind), (count, last, t) in heads.items():
            if t != head_tag(key, user, kind, count, last):
                problems.append(f"the {kind} head of {user} was edited")
            elif walked.get((user, kind)) != (count, last):
                problems.append(f"{kind}s of {user}: {walked.get((user, kind), (0, ''))[0]} found, {count} recorded "
                                "(records removed or added)")
        for user, kind in set(walked) - set(heads):
            problems.append(f"{kind}s of {user} without a head (records added, or the head removed)")
        spent: dict[tuple[str, int], list] = {}
        for user, segment, cost in self._exec(con, "SELECT user_name, segment, cost FROM charges").fetchall():
            c = Cost.from_json(cost)
            acc = spent.setdefault((user, segment), [0, Fraction(0), Fraction(0)])
            acc[0] += 1
            acc[1] += c.epsilon
            acc[2] += c.delta
        lifetime: dict[str, list] = {}
        for (user, _), (n, eps, dlt) in spent.items():
            acc = lifetime.setdefault(user, [0, Fraction(0), Fraction(0)])
            acc[0], acc[1], acc[2] = acc[0] + n, acc[1] + eps, acc[2] + dlt
        for user, segment, sums, queries in self._exec(con, "SELECT user_name, segment, sums, queries FROM totals").fetchall():
            if user == GLOBAL:
                continue
            totals = {k: parse_fraction(v) for k, v in json.loads(sums).items()}
            if segment == LIFETIME:  # a lifetime cap counts every charge of its user
                got = lifetime.get(user, [0, Fraction(0), Fraction(0)])
            else:
                got = spent.pop((user, segment), [0, Fraction(0), Fraction(0)])
            if [queries, totals.get("epsilon", Fraction(0)), totals.get("delta", Fraction(0))] != got:
                problems.append(f"the totals of {user} (segment {segment}) disagree with the charges")
        for user, segment in spent:
            problems.append(f"charges of {user} (segment {segment}) without totals")
        return problems

    def backup(self, target: Path) -> None:
        """A consistent copy while serving (SQLite's online backup), with its identity file."""
        target = Path(target)
        owner_only.touch(target)  # a copy of the ledger is as private as the ledger
        dest = sqlite3.connect(target)
        try:
            self._con().backup(dest)
        finally:
            dest.close()
        identity = identity_file(target)
        if not identity.exists():
            write_identity(identity, self.identity)

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
        """This thread's connection closed, and the writer thread stopped (with its own)."""
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
        remote, self._remote = self._remote, None
        if remote is not None:
            remote.close()
        self._close_connection()
        self._turn_fd = None
        closer = getattr(self, "_turn_closer", None)
        if closer is not None:
            closer()

    def _close_connection(self) -> None:
        con = getattr(self._local, "con", None)
        if con is not None:
            con.close()
            self._local.con = None


class PostgresLedger(Ledger):
    """The same ledger on a shared PostgreSQL database (psycopg 3), for several proxies."""

    placeholder = "%s"
    serial = "BIGSERIAL PRIMARY KEY"

    def __init__(self, url: str, identity: Path | None = None, *, create: bool = True):
        """Open the ledger at `url`; with an identity file (open_ledger gives the policy's), it is
        checked as a SQLite ledger is; without one, only its schema is."""
        try:
            import psycopg
        except ImportError:
            raise OperationalError("a PostgreSQL ledger needs psycopg 3", hint='pip install "dpsql[postgres]"') from None
        self._psycopg = psycopg
        self.url = url
        self.path = Path(url)
        self._errors = (psycopg.Error,)
        self._local = threading.local()
        self._writer_lock = threading.Lock()
        self.identity_path = identity  # type: ignore[assignment]  # None: not checked (_read_identity)
        try:
            ident = self._read_identity()
            self._open(ident, create)
        except psycopg.Error as e:
            raise OperationalError(f"cannot open the PostgreSQL ledger: {e}",
                                   hint="check [ledger] url; nothing was charged or released") from None

    def _read_identity(self) -> Identity | None:
        return UNCHECKED if self.identity_path is None else super()._read_identity()

    def now(self, con=None) -> float:
        """The database server's clock, one for every proxy sharing this ledger."""
        row = self._exec(con or self._con(), "SELECT EXTRACT(EPOCH FROM clock_timestamp())").fetchone()
        return float(row[0])

    @property
    def where(self) -> str:
        return "at [ledger] url"

    def private_files(self) -> list[Path]:
        """The identity file: the records are the database server's to protect."""
        return [] if self.identity_path is None else [self.identity_path]

    def _schema_lock(self, con) -> None:
        con.execute("SELECT pg_advisory_xact_lock(0)")  # one schema creator at a time

    def _tables(self, con) -> set[str]:
        return {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables "
                                          "WHERE table_schema = current_schema()").fetchall()}

    def _backup_before_migrating(self, con, version: int) -> None:
        for table in ("totals", "grants", "charges", "users"):
            con.execute(f"CREATE TABLE IF NOT EXISTS {table}_v{version}_backup AS SELECT * FROM {table}")

    def backup(self, target: Path) -> None:
        """A consistent snapshot (one REPEATABLE READ transaction, so serving goes on) copied
        into a SQLite ledger file with the same identity: `dpsql ledger verify --ledger` checks it."""
        target = Path(target)
        owner_only.touch(target)  # a copy of the ledger is as private as the ledger
        dest = sqlite3.connect(target)
        try:
            for stmt in _SCHEMA:
                dest.execute(stmt.format(serial=Ledger.serial))
            con = self._con()
            with con.transaction():
                con.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                for table in ("meta", "totals", "grants", "charges", "users", "cache", "events", "heads"):
                    cur = con.execute(f"SELECT * FROM {table}")
                    names = [d[0] for d in cur.description]
                    rows = cur.fetchall()
                    if rows:
                        dest.executemany(f"INSERT INTO {table} ({', '.join(names)}) VALUES "
                                         f"({', '.join('?' for _ in names)})", rows)
            dest.commit()
        finally:
            dest.close()
        if self.identity is not UNCHECKED and not identity_file(target).exists():
            write_identity(identity_file(target), self.identity)

    def _con(self):
        con = getattr(self._local, "con", None)
        if con is None or con.closed or self._local.pid != os.getpid():  # never a socket shared through fork()
            con = self._psycopg.connect(self.url, autocommit=True)
            self._local.con, self._local.pid = con, os.getpid()
        return con

    @contextlib.contextmanager
    def _write(self, users: list[str], durable: bool = True) -> Iterator[Any]:
        con = self._con()
        with con.transaction():
            if not durable:  # made durable by the next synchronous commit: the WAL is flushed in order
                con.execute("SET LOCAL synchronous_commit = off")
            for u in users:  # GLOBAL always first: a fixed order, so no deadlock
                con.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_key(u),))
            yield con

    def _write_one(self, sql: str, params: tuple = (), *, durable: bool = True) -> Any:
        if durable:
            return self._exec(self._con(), sql, params)
        with self._write([], durable=False) as con:
            return self._exec(con, sql, params)


def _lock_key(user: str) -> int:
    return zlib.crc32(user.encode()) + 1


def open_ledger(path: Path | None, url: str | None, *, identity: Path | None = None, create: bool = True) -> Ledger:
    """The policy's ledger, checked against its identity file (Policy.ledger_identity; by
    default beside a SQLite ledger)."""
    if url:
        return PostgresLedger(url, identity or (identity_file(path) if path is not None else None), create=create)
    if path is None:
        raise OperationalError("no ledger to open", hint="set [ledger] path or url")
    return Ledger(path, identity, create=create)


def _refusal(who: str, user: str, f: Filter, totals: Totals, cost: Cost, refresh: float | None = None,
             lifetime: bool = False) -> BudgetExceeded:
    """Why the filter halts, said as it is: "exhausted" only when nothing is left; a query that
    needs a delta the budget does not provide, or more epsilon than is left, is told so; a
    windowed budget says when it refreshes, a lifetime cap that it never does."""
    whose = "the global budget shared by all analysts" if who == GLOBAL else f'the privacy budget of analyst "{user}"'
    if lifetime:
        whose = f"the lifetime cap of {whose} (over all budget windows; it never refreshes)"
    elif refresh is not None:
        whose = f"{whose} for this window (it refreshes at {_date(refresh)})"
    left = f.remaining(totals)
    state = f.describe(totals)
    costs = f"this query costs epsilon={show(cost.epsilon)}, delta={show(cost.delta)}"
    cache = "identical repeats of earlier queries are answered from the cache at no cost"
    without_delta = Cost.of([dataclasses.replace(p, delta=Fraction(0)) for p in cost.parts])
    if f.name == "gdp" and any(p.kind != "gaussian" and p.delta > 0 for p in cost.parts):
        return BudgetExceeded(f"{whose} is a Gaussian DP (gdp) filter, which admits Gaussian and pure epsilon-DP "
                              "(Laplace) releases, but this release has delta > 0 of another kind (partition selection "
                              f"of undeclared group keys, or a PLD-planned batch) and no GDP guarantee: {costs}; {state}",
                              hint="declare the group keys in the policy (then no partition selection is needed), or "
                                   "send the queries one by one; nothing was charged")
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


def _date(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(at))


def _round_down(x: Fraction) -> Fraction:
    """A short decimal no larger than x, for hints people can type."""
    if Fraction(repr(float(x))) == x:
        return x
    return Fraction(int(x * 10**6), 10**6)

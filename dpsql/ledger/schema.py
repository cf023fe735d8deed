"""The ledger's tables, its identity check, and migrations forward (after a backup); the
chain's heads each record moves on. A mixin of `Ledger`: the backends supply connections."""

from __future__ import annotations

import time
from typing import Any

from ..errors import OperationalError
from .current import Current, keep
from .integrity import (
    SCHEMA_VERSION,
    Identity,
    charge_record,
    grant_record,
    head_tag,
    read_identity,
    tag,
    write_identity,
)
from .store import Store

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


# Ordered migrations: MIGRATIONS[v] brings a version-v ledger to v + 1 (after a backup).
# Version 1 (shipped before the meta table): no identity, no chain.
_V1_TO_V2 = [
    "ALTER TABLE charges ADD COLUMN chain TEXT",
    "ALTER TABLE grants ADD COLUMN chain TEXT",
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    _SCHEMA[-2],
    _SCHEMA[-1],
]


# A PostgreSQL ledger opened without an identity file (tools, benchmarks): no identity check,
# and its chain keyed by a public constant, so it only shows accidental damage.
UNCHECKED = Identity("unchecked", bytes(32), 0.0)


class LedgerError(OperationalError):
    """The ledger cannot be trusted as it is: dpsql does not start (or answer) on it."""

    sqlstate = "XX001"


class Schema(Store):
    """Identity, versions and migrations, and the per-analyst heads of the HMAC chain."""

    def _read_identity(self) -> Identity | None:
        try:
            return read_identity(self.identity_path)
        except ValueError as e:
            raise LedgerError(
                str(e), hint="restore the identity file from a backup of the ledger's directory"
            ) from None

    def _open(self, ident: Identity | None, create: bool) -> None:
        """Check the ledger's identity and schema version; create it (first start) or migrate it
        forward (after a backup) as needed."""
        with self._write([]) as con:
            self._schema_lock(con)
            ident = self._read_identity()  # again, under the lock: another process may just have created it
            version = self._version(con)
            if version == 0:
                if ident is not None and ident is not UNCHECKED:
                    raise LedgerError(
                        f"the ledger {self.where} has no tables, but {self.identity_path} says ledger "
                        f"{ident.ledger_id} was created there on {_date(ident.created)}",
                        hint="restore the ledger from a backup; starting afresh would forget every budget spent",
                    )
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
                raise LedgerError(
                    f"the ledger {self.where} has schema version {version}; this dpsql knows up to {SCHEMA_VERSION}",
                    hint="upgrade dpsql",
                )
            elif ident is not UNCHECKED:
                stored = dict(self._exec(con, "SELECT key, value FROM meta").fetchall())
                if ident is None:
                    raise LedgerError(
                        f"the ledger {self.where} (id {stored.get('ledger_id')}) has no identity file "
                        f"{self.identity_path}",
                        hint="restore the identity file from a backup of the ledger's directory",
                    )
                if stored.get("ledger_id") != ident.ledger_id:
                    raise LedgerError(
                        f"the ledger {self.where} is ledger {stored.get('ledger_id')}, not "
                        f"{ident.ledger_id} which {self.identity_path} names",
                        hint="point [ledger] at the ledger this policy has used, or restore it from a backup",
                    )
        self.identity = ident

    def _version(self, con) -> int:
        tables = self._tables(con)
        if "meta" in tables:
            row = self._exec(con, "SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            return int(row[0]) if row else 1
        return 1 if "charges" in tables else 0

    def _put_meta(self, con, ident: Identity) -> None:
        for key, value in (
            ("schema_version", str(SCHEMA_VERSION)),
            ("ledger_id", ident.ledger_id),
            ("created", repr(ident.created)),
        ):
            self._exec(
                con,
                "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, value),
            )

    def _chain_existing(self, con, key: bytes) -> None:
        """Tag the records of a ledger migrated from before the chain, in their order."""
        heads: dict[tuple[str, str], tuple[int, str]] = {}
        for cid, user, segment, at, sql, cost, detail in self._exec(
            con, "SELECT id, user_name, segment, at, sql, cost, detail FROM charges ORDER BY id"
        ).fetchall():
            count, last = heads.get((user, "charge"), (0, ""))
            t = tag(key, last, charge_record(cid, user, segment, at, sql, cost, detail))
            self._exec(con, "UPDATE charges SET chain = ? WHERE id = ?", (t, cid))
            heads[(user, "charge")] = (count + 1, t)
        for user, seq, eps, dlt, at in self._exec(
            con, "SELECT user_name, seq, epsilon, delta, at FROM grants ORDER BY user_name, seq"
        ).fetchall():
            count, last = heads.get((user, "grant"), (0, ""))
            t = tag(key, last, grant_record(user, seq, eps, dlt, at))
            self._exec(con, "UPDATE grants SET chain = ? WHERE user_name = ? AND seq = ?", (t, user, seq))
            heads[(user, "grant")] = (count + 1, t)
        for (user, kind), (count, last) in heads.items():
            self._put_head(con, user, kind, count, last, key)

    def _put_head(self, con, user: str, kind: str, count: int, last: str, key: bytes) -> None:
        self._exec(
            con,
            "INSERT INTO heads (user_name, kind, count, last, tag) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (user_name, kind) DO UPDATE SET count = excluded.count, last = excluded.last, "
            "tag = excluded.tag",
            (user, kind, count, last, head_tag(key, user, kind, count, last)),
        )

    def _append(self, con, user: str, kind: str, record: list[Any], current: Current | None = None) -> str:
        """The new record's chained tag, with the analyst's head moved on (read from `current`,
        what this writer wrote last, when nobody has written since)."""
        head = current.heads.get((user, kind)) if current is not None else None
        if head is None:
            row = self._exec(
                con, "SELECT count, last FROM heads WHERE user_name = ? AND kind = ?", (user, kind)
            ).fetchone()
            head = (row[0], row[1]) if row else (0, "")
        count, last = head
        t = tag(self.identity.key, last, record)
        self._put_head(con, user, kind, count + 1, t, self.identity.key)
        if current is not None:
            keep(current.heads, (user, kind), (count + 1, t))
        return t


def _date(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(at))

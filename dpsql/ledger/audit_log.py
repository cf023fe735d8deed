"""The ledger's audit log: release and failure records on the charges, charge and grant
history, and the events that are not charges (logins). A mixin of `Ledger`."""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any, Mapping

from ..accounting.cost import Cost, parse_fraction
from ..errors import OperationalError
from .store import Store

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
    return (
        f"charged; failed after its charge for {kind}: {failure.get('reason')} "
        f"(SQLSTATE {failure.get('sqlstate')}); nothing was released"
    )


class AuditLog(Store):
    """What was released (or failed) for each charge, and who did what when."""

    def release_recorded(self, user: str, charge_id: int) -> bool:
        """Whether the analyst's charge `charge_id` exists and its release was recorded (the
        receipt a cached answer carries)."""
        row = self._exec(
            self._con(),
            "SELECT 1 FROM charges WHERE id = ? AND user_name = ? AND released IS NOT NULL AND released NOT LIKE ?",
            (charge_id, user, FAILED_PREFIX + "%"),
        ).fetchone()
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
            raise OperationalError(
                f"the ledger could not record the release: {e}",
                hint="nothing was released; the query's cost stays charged",
            ) from None

    def record_failure(self, charge_id: int, sqlstate: str, reason: str) -> None:
        """A query that failed after its charge (a resource limit, an engine failure): its
        release record says so, with the SQLSTATE and dpsql's own message (never the engine's),
        so the audit log shows it charged and failed, nothing released. Best effort, as the
        failure is told to the client either way and its charge is already durable."""
        record = {"failed": {"sqlstate": sqlstate, "reason": reason, "resource_limit": sqlstate in RESOURCE_LIMITS}}
        with contextlib.suppress(*self._errors, OperationalError):
            self._write_lazily(
                "UPDATE charges SET released = ? WHERE id = ? AND released IS NULL", (json.dumps(record), charge_id)
            )

    def history(self, user: str | None = None) -> list[dict[str, Any]]:
        """The charges of `user` (None: of every analyst, as an auditor reads them), oldest first."""
        sql = "SELECT id, at, sql, cost, detail, released, user_name FROM charges"
        rows = self._exec(
            self._con(),
            sql + (" WHERE user_name = ? ORDER BY id" if user is not None else " ORDER BY id"),
            (user,) if user is not None else (),
        ).fetchall()
        return [
            {
                "id": r[0],
                "at": r[1],
                "sql": r[2],
                "cost": Cost.from_json(r[3]),
                "detail": json.loads(r[4]),
                "released": None if r[5] is None else json.loads(r[5]),
                "user": r[6],
            }
            for r in rows
        ]

    def grants(self, user: str) -> list[dict[str, Any]]:
        """The grants to `user` (GLOBAL: to the global budget), oldest first, with their times:
        a budget's history over time needs them beside the charges."""
        rows = self._exec(
            self._con(), "SELECT seq, epsilon, delta, at FROM grants WHERE user_name = ? ORDER BY seq", (user,)
        ).fetchall()
        return [{"seq": r[0], "epsilon": parse_fraction(r[1]), "delta": parse_fraction(r[2]), "at": r[3]} for r in rows]

    def record_event(self, kind: str, user: str, address: str, detail: str = "") -> None:
        """The audit log of what is not a charge (failed and refused logins): best effort, a
        ledger that cannot write it still refuses the login it records."""
        with contextlib.suppress(*self._errors):
            self._write_one(
                "INSERT INTO events (at, kind, user_name, address, detail) VALUES (?, ?, ?, ?, ?)",
                (time.time(), kind, user, address, detail),
            )

    def events(self, user: str | None = None) -> list[dict[str, Any]]:
        sql = "SELECT at, kind, user_name, address, detail FROM events"
        rows = self._exec(
            self._con(), sql + (" WHERE user_name = ? ORDER BY at" if user else " ORDER BY at"), (user,) if user else ()
        ).fetchall()
        return [{"at": r[0], "kind": r[1], "user": r[2], "address": r[3], "detail": r[4]} for r in rows]

"""The durable ledger: atomic check-and-charge, audit log, answer cache, logins, integrity,
and the writers that make charges durable. Its interface is this package: `open_ledger`, the
`Ledger` (SQLite) and `PostgresLedger` classes, the `Charge` receipt and the budget helpers.

One write transaction reads the analyst's running totals (and the global ones), asks the
filters (dpsql/accounting), records the charge and commits before the engine runs: an answer
never leaves without a durable charge, and concurrent sessions - threads, processes, or several
proxies on one PostgreSQL ledger - serialize on a lock, so together they can never overspend.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import OperationalError
from .audit_log import FAILED_PREFIX, RESOURCE_LIMITS, failure_of, failure_text
from .budgets import (
    LIFETIME,
    WINDOW_EPOCH,
    WINDOW_STRIDE,
    Charge,
    PendingCharge,
    lifetime_filter,
    segment_filter,
    window_of,
)
from .integrity import identity_file
from .jobs import GLOBAL
from .postgres import PostgresLedger
from .schema import UNCHECKED, LedgerError
from .sqlite import Ledger

__all__ = [
    "FAILED_PREFIX",
    "GLOBAL",
    "LIFETIME",
    "RESOURCE_LIMITS",
    "UNCHECKED",
    "WINDOW_EPOCH",
    "WINDOW_STRIDE",
    "Charge",
    "Ledger",
    "LedgerError",
    "PendingCharge",
    "PostgresLedger",
    "failure_of",
    "failure_text",
    "lifetime_filter",
    "open_ledger",
    "segment_filter",
    "window_of",
]


def open_ledger(path: Path | None, url: str | None, *, identity: Path | None = None, create: bool = True) -> Ledger:
    """The policy's ledger, checked against its identity file (Policy.ledger_identity; by
    default beside a SQLite ledger)."""
    if url:
        return PostgresLedger(url, identity or (identity_file(path) if path is not None else None), create=create)
    if path is None:
        raise OperationalError("no ledger to open", hint="set [ledger] path or url")
    return Ledger(path, identity, create=create)

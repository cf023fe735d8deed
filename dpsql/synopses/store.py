"""Published synopses, kept in the ledger's database (owner-only, like the charges they came
from), one row per synopsis and data version. A synopsis is read only at the data version it
was published for: when the data changes it is stale, and answers go the per-query way until
it is published again.

The body is the released cube (JSON): the dimensions' values, each measure's consistent cube
and the eigenvalues of its estimator (for intervals), the receipt of its charge.
"""

from __future__ import annotations

import json
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any

_TABLE = """CREATE TABLE IF NOT EXISTS synopses (
    name TEXT NOT NULL, data_version TEXT NOT NULL, at DOUBLE PRECISION NOT NULL, charge_id INTEGER NOT NULL,
    body TEXT NOT NULL, PRIMARY KEY (name, data_version))"""

FRESH_FOR = 1.0  # seconds a process trusts its copy of the list of published synopses


@dataclass(frozen=True)
class Stored:
    name: str
    data_version: str
    at: float
    charge_id: int
    body: dict[str, Any]


_made: weakref.WeakSet = weakref.WeakSet()  # ledgers whose table is known to exist
_cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # ledger -> (read at, synopses)
_lock = threading.Lock()


def _ensure(ledger) -> None:
    if ledger in _made:
        return
    with ledger._write([]) as con:  # the ledger's own write transaction (its locks, its database)
        ledger._exec(con, _TABLE)
    _made.add(ledger)


def put(ledger, name: str, data_version: str, charge_id: int, body: dict[str, Any]) -> None:
    """Store (or replace) the synopsis published for this data version."""
    _ensure(ledger)
    with ledger._write([]) as con:
        ledger._exec(con, "DELETE FROM synopses WHERE name = ? AND data_version = ?", (name, data_version))
        ledger._exec(
            con,
            "INSERT INTO synopses (name, data_version, at, charge_id, body) VALUES (?, ?, ?, ?, ?)",
            (name, data_version, time.time(), charge_id, json.dumps(body)),
        )
    _forget(ledger)


def drop(ledger, name: str) -> int:
    """Remove every version of the synopsis; how many were removed."""
    _ensure(ledger)
    with ledger._write([]) as con:
        n = ledger._exec(con, "DELETE FROM synopses WHERE name = ?", (name,)).rowcount
    _forget(ledger)
    return n


def listed(ledger) -> list[Stored]:
    """Every stored synopsis, every version (without re-reading within FRESH_FOR seconds)."""
    return list(_all(ledger).values())


def current(ledger, name: str, data_version: str) -> Stored | None:
    return _all(ledger).get((name, data_version))


def _all(ledger) -> dict[tuple[str, str], Stored]:
    now = time.monotonic()
    with _lock:
        hit = _cache.get(ledger)
        if hit is not None and now - hit[0] < FRESH_FOR:
            return hit[1]
    try:  # read without creating: a ledger nothing was published to has no table (and stays untouched)
        rows = ledger._exec(ledger._con(), "SELECT name, data_version, at, charge_id, body FROM synopses").fetchall()
    except ledger._errors:
        rows = []
    found = {(r[0], r[1]): Stored(r[0], r[1], r[2], r[3], json.loads(r[4])) for r in rows}
    with _lock:
        _cache[ledger] = (now, found)
    return found


def _forget(ledger) -> None:
    with _lock:
        _cache.pop(ledger, None)


def status(specs: dict[str, Any], stored: list[Stored], version: str) -> list[dict[str, Any]]:
    """Each declared synopsis (spec.py's SynopsisSpec by name) and whether it is published for
    the data version `version`, stale (published for another), or not published."""
    rows = []
    for name, spec in sorted(specs.items()):
        mine = sorted((s for s in stored if s.name == name), key=lambda s: s.at)
        current = [s for s in mine if s.data_version == version]
        state = "published" if current else ("stale (the data changed: publish again)" if mine else "not published")
        rows.append(
            {
                "name": name,
                "table": spec.table,
                "epsilon": float(spec.epsilon),
                "charged_to": spec.charged_to,
                "dimensions": [d.describe() for d in spec.dimensions],
                "measures": [m.name for m in spec.measures],
                "state": state,
                "published_at": current[-1].at if current else None,
                "receipt": current[-1].charge_id if current else None,
                "measured": current[-1].body.get("strategy") if current else None,
            }
        )
    return rows

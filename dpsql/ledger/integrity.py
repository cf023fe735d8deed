"""The ledger's identity and tamper evidence, pure: what a ledger is, and how its records chain.

A ledger is created once, deliberately, and gets an identity: a random id, stored in the
ledger's meta table, and a secret key, stored beside it in an identity file (0600) that never
enters the ledger. Every charge and grant is chained per analyst: its tag is an HMAC, under the
key, of the previous tag and the record's content, and the analyst's head (record count, last
tag) carries a tag of its own. Whoever edits or deletes a record, or rolls an analyst back to an
earlier state, without the key, is caught by `dpsql ledger verify`. A missing, empty, truncated
or foreign ledger beside an identity file is a start-up error, never a fresh start.
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import owner_only

SCHEMA_VERSION = 2


@dataclass(frozen=True)
class Identity:
    ledger_id: str
    key: bytes
    created: float

    @classmethod
    def new(cls) -> "Identity":
        return cls(secrets.token_hex(16), secrets.token_bytes(32), time.time())


def identity_file(ledger_path: Path) -> Path:
    """Where a ledger's identity lives: beside the SQLite file (or, for a PostgreSQL ledger,
    where the policy's SQLite ledger would be)."""
    return Path(str(ledger_path) + ".id")


def read_identity(path: Path) -> Identity | None:
    try:
        data = json.loads(path.read_text())
        return Identity(str(data["ledger_id"]), bytes.fromhex(data["key"]), float(data["created"]))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"the ledger identity file {path} is unreadable ({e})") from None


def write_identity(path: Path, ident: Identity) -> None:
    """Written once, owner-only (the key must not be readable by others), and atomically: a
    temporary file linked into place, so a reader never sees it half written and an existing
    identity is never replaced (FileExistsError)."""
    owner_only.make_dirs(path.parent)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
    fd = owner_only.create(tmp)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump({"ledger_id": ident.ledger_id, "key": ident.key.hex(), "created": ident.created}, f)
            f.flush()
            os.fsync(f.fileno())
        os.link(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def tag(key: bytes, previous: str, record: list[Any]) -> str:
    """The chained tag of one record."""
    body = json.dumps(record, separators=(",", ":"), sort_keys=True, default=str)
    return hmac.digest(key, (previous + "\n" + body).encode(), "sha256").hex()


def charge_record(cid: int, user: str, segment: int, at: float, sql: str, cost: str, detail: str) -> list[Any]:
    return ["charge", int(cid), user, int(segment), repr(float(at)), sql, cost, detail]


def grant_record(user: str, seq: int, epsilon: str, delta: str, at: float) -> list[Any]:
    return ["grant", user, int(seq), epsilon, delta, repr(float(at))]


def head_tag(key: bytes, user: str, kind: str, count: int, last: str) -> str:
    return tag(key, "head", [user, kind, int(count), last])

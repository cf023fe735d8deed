"""What pools, poolers and ORMs send to check or reset a connection, read from its text (pure:
the connection applies what a reset clears).

For a read-only proxy these are no-ops with PostgreSQL's answers: asyncpg's pool reset
(`SELECT pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL;`), pgbouncer's
`DISCARD ALL`, advisory locks (dpsql has nothing for them to protect; they are granted at once
and exclude nobody), UNLISTEN. LISTEN and NOTIFY are refused: dpsql relays no notifications,
and a client waiting for one would wait forever.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import Error, unsupported
from ..sql.classify import identifier, without_leading_comments
from .wire import types

# Advisory-lock functions and the type of what they return (void, or whether the lock was taken or released).
_ADVISORY = {
    "pg_advisory_lock": types.VOID,
    "pg_advisory_lock_shared": types.VOID,
    "pg_advisory_xact_lock": types.VOID,
    "pg_advisory_xact_lock_shared": types.VOID,
    "pg_advisory_unlock_all": types.VOID,
    "pg_advisory_unlock": types.BOOL,
    "pg_advisory_unlock_shared": types.BOOL,
    "pg_try_advisory_lock": types.BOOL,
    "pg_try_advisory_lock_shared": types.BOOL,
    "pg_try_advisory_xact_lock": types.BOOL,
    "pg_try_advisory_xact_lock_shared": types.BOOL,
}
# The keys are never evaluated (the answer does not depend on them): literals, parameters, hashtext('name').
_ADVISORY_CALL = re.compile(
    r"^SELECT\s+(?:pg_catalog\s*\.\s*)?(?P<fn>pg_\w*advisory\w*)\s*\((?P<args>(?:[^()]|\([^()]*\))*)\)"
    r"(?:\s+(?:AS\s+)?(?P<alias>\"[^\"]+\"|\w+))?\s*;?\s*$",
    re.I | re.S,
)
_UNLISTEN = re.compile(r"^UNLISTEN\s+(?:\*|\"[^\"]+\"|\w+)\s*;?\s*$", re.I)
_DISCARD = re.compile(r"^DISCARD\s+(?P<what>ALL|PLANS|SEQUENCES|TEMP|TEMPORARY)\s*;?\s*$", re.I)
_DEALLOCATE = re.compile(r"^DEALLOCATE\s+(?:PREPARE\s+)?(?P<name>\"[^\"]+\"|\w+)\s*;?\s*$", re.I)

WORDS = {"UNLISTEN", "LISTEN", "NOTIFY", "DISCARD", "DEALLOCATE"}  # statements read here, never by the session


@dataclass(frozen=True)
class Advisory:
    """An advisory-lock call, answered at once: one column named as the function, void or true."""

    column: str
    oid: int

    @property
    def value(self) -> object:
        return "" if self.oid == types.VOID else True


def advisory(sql: str) -> Advisory | None:
    """`SELECT pg_advisory_lock(key)` and its kin (keys as literals or parameters), or None."""
    body = without_leading_comments(sql)
    if "advisory" not in body[:64].lower():
        return None
    m = _ADVISORY_CALL.match(body)
    if m is None or m.group("fn").lower() not in _ADVISORY:
        return None
    fn = m.group("fn").lower()
    keys = [a for a in re.sub(r"\([^()]*\)", "()", m.group("args")).split(",") if a.strip()]
    if len(keys) not in ((0,) if fn == "pg_advisory_unlock_all" else (1, 2)):
        return None  # a wrong number of keys: the session refuses it as PostgreSQL would
    return Advisory(identifier(m.group("alias")) if m.group("alias") else fn, _ADVISORY[fn])


def discard(sql: str) -> str:
    """What DISCARD discards: ALL, PLANS, SEQUENCES or TEMP (its command tag names it)."""
    m = _DISCARD.match(without_leading_comments(sql))
    if m is None:
        raise Error("syntax error in DISCARD", sqlstate="42601", hint="DISCARD ALL | PLANS | SEQUENCES | TEMP")
    what = m.group("what").upper()
    return "TEMP" if what == "TEMPORARY" else what


def deallocated(sql: str) -> str | None:
    """The prepared statement DEALLOCATE names, or None for DEALLOCATE ALL."""
    m = _DEALLOCATE.match(without_leading_comments(sql))
    if m is None:
        raise Error("syntax error in DEALLOCATE", sqlstate="42601", hint="DEALLOCATE name | ALL")
    name = m.group("name")
    return None if name.upper() == "ALL" else identifier(name)


def notifications(sql: str) -> str:
    """UNLISTEN's command tag; LISTEN and NOTIFY refused, saying why."""
    body = without_leading_comments(sql)
    if _UNLISTEN.match(body):
        return "UNLISTEN"
    word = body.split(None, 1)[0].upper().rstrip(";")
    if word == "UNLISTEN":
        raise Error("syntax error in UNLISTEN", sqlstate="42601", hint="UNLISTEN channel | *")
    raise unsupported(
        f"{word}: dpsql relays no notifications (it is a read-only proxy, and nothing is ever notified through it)",
        hint="poll with a query instead; UNLISTEN is accepted",
    )

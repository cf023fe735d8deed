"""The statement router: which way a statement goes, decided once, from its text and public
metadata only (never the data, the ledger or the budget).

`route` gives every statement one `Kind`: what the wire connection answers itself
(transactions, cursors, COPY, DISCARD, DEALLOCATE, LISTEN, advisory locks, catalog queries),
what the session answers (SET, SHOW, views, EXPLAIN) and queries. The front ends dispatch on
the kind through a table (server/app.py, session/pipeline.py) and never look at the text again.
A front end adds routes as `Entry` values tried before the session's kinds (the wire's catalog
and advisory locks); a query's own way (budget relation, probes, synopses, DP) is decided after
its parameters are bound, by the query routes in session/routes.py.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..errors import Error, forbidden, syntax_error
from .classify import (
    _ALLOWED_HINT,
    Explain,
    Query,
    SetCommand,
    ShowCommand,
    Statement,
    TransactionCommand,
    ViewCommand,
    classify_one,
    split_statements,
    without_leading_comments,
)
from .limits import QueryLimits


class Kind(enum.Enum):
    EMPTY = "empty"  # nothing but comments or semicolons
    REFUSED = "refused"  # what dpsql never runs: Routed.error says why
    BEGIN = "begin"
    COMMIT = "commit"
    ROLLBACK = "rollback"
    SAVEPOINT = "savepoint"  # SAVEPOINT, RELEASE
    NO_OP = "no-op"  # SET TRANSACTION, back to the login's own identity: a command tag only
    SET = "set"
    SET_LOCAL = "set local"
    SHOW = "show"
    VIEW = "view"
    EXPLAIN = "explain"
    QUERY = "query"
    DISCARD = "discard"
    DEALLOCATE = "deallocate"
    NOTIFICATIONS = "notifications"  # LISTEN, UNLISTEN, NOTIFY
    DECLARE = "declare"
    FETCH = "fetch"
    MOVE = "move"
    CLOSE = "close"
    COPY = "copy"
    ADVISORY = "advisory"
    CANCEL_BACKEND = "cancel backend"
    CATALOG = "catalog"


# Statements read by their leading keyword alone, before any parse.
_KEYWORDS = {
    "DISCARD": Kind.DISCARD,
    "DEALLOCATE": Kind.DEALLOCATE,
    "LISTEN": Kind.NOTIFICATIONS,
    "UNLISTEN": Kind.NOTIFICATIONS,
    "NOTIFY": Kind.NOTIFICATIONS,
    "DECLARE": Kind.DECLARE,
    "FETCH": Kind.FETCH,
    "MOVE": Kind.MOVE,
    "CLOSE": Kind.CLOSE,
    "COPY": Kind.COPY,
}
_VERBS = {
    "BEGIN": Kind.BEGIN,
    "START": Kind.BEGIN,
    "COMMIT": Kind.COMMIT,
    "END": Kind.COMMIT,
    "ROLLBACK": Kind.ROLLBACK,
    "ABORT": Kind.ROLLBACK,
    "SAVEPOINT": Kind.SAVEPOINT,
    "RELEASE": Kind.SAVEPOINT,
}
_WIRE_ONLY = frozenset(_KEYWORDS.values())
_KINDS: dict[type, Kind] = {
    SetCommand: Kind.SET,
    ShowCommand: Kind.SHOW,
    ViewCommand: Kind.VIEW,
    Explain: Kind.EXPLAIN,
    Query: Kind.QUERY,
}
_SET_LOCAL = re.compile(r"SET\s+LOCAL\s", re.I)  # matched after the leading comments
_SELECTS = ("SELECT", "WITH")  # the words a front end's own query routes (Entry) start with


@dataclass(frozen=True)
class Routed:
    """One statement and its way: `statement` is classify's reading of it for what the session
    answers (None for what the connection answers), `error` the refusal of a REFUSED one."""

    kind: Kind
    text: str
    statement: Statement | None = None
    error: Error | None = None
    detail: Any = None  # what an Entry's recogniser returned (the advisory lock, the pid to cancel)

    def checked(self) -> Statement:
        """The statement, or its refusal raised."""
        if self.error is not None:
            raise self.error
        assert self.statement is not None, self.kind
        return self.statement


@dataclass(frozen=True)
class Entry:
    """A front end's own route for SELECT-shaped statements it answers itself: `recognise`
    returns something (kept as Routed.detail) for a statement of the kind, else None or False."""

    kind: Kind
    recognise: Callable[[str], Any]


def _first_word(body: str) -> str:
    """The leading keyword of a statement without its leading comments, upper-case."""
    return body.split(None, 1)[0].upper().rstrip(";").rstrip("(") if body else ""


def word_kind(text: str) -> Kind | None:
    """The kind its leading keyword alone gives a statement, without parsing it (None: a
    SELECT, or what only a parse can tell): cheap enough for the wire's event loop."""
    body = without_leading_comments(text)
    word = _first_word(body)
    if word in _KEYWORDS:
        return _KEYWORDS[word]
    if word in _VERBS:
        return _VERBS[word]
    if word in ("SET", "RESET"):
        return Kind.SET_LOCAL if _SET_LOCAL.match(body) else Kind.SET
    return Kind.SHOW if word == "SHOW" else None


def route(
    text: str, limits: QueryLimits, entries: Sequence[Entry] = (), classify: Callable[[str], Statement] | None = None
) -> Routed:
    """The way of one statement (a text with several is REFUSED, as PostgreSQL refuses them in a
    prepared statement). `classify` reads the session's kinds (a session passes its memoised
    one); the text is split and checked against the limits once, here."""
    try:
        parts = split_statements(text, limits)
    except Error as e:
        return Routed(Kind.REFUSED, text, error=e)
    if not parts:
        return Routed(Kind.EMPTY, text)
    if len(parts) > 1:
        return Routed(
            Kind.REFUSED,
            text,
            error=forbidden(
                "multiple statements in one query string are not allowed", hint="send one statement at a time"
            ),
        )
    routed = route_one(parts[0], limits, entries, classify)
    return routed if routed.text == text else dataclasses.replace(routed, text=text)


def route_one(
    text: str, limits: QueryLimits, entries: Sequence[Entry] = (), classify: Callable[[str], Statement] | None = None
) -> Routed:
    """The way of one statement split from a script (split_statements' part: not split again)."""
    kind = word_kind(text)
    if kind is not None and kind in _WIRE_ONLY:
        return _refused_to_session(kind, text, limits)
    if kind is None and entries:
        body = without_leading_comments(text)
        if _first_word(body) in _SELECTS or body.startswith("("):
            for entry in entries:
                found = entry.recognise(text)
                if found:
                    return Routed(entry.kind, text, detail=found)
    return _read(kind, text, limits, classify)


def _read(kind: Kind | None, text: str, limits: QueryLimits, classify: Callable[[str], Statement] | None) -> Routed:
    """A statement the session reads (classify_one), routed by what it is; a refused one keeps
    the kind its keyword gives it (a refused SET is still a SET: the wire describes no rows)."""
    try:
        stmt = classify(text) if classify is not None else classify_one(text, limits)
    except Error as e:
        return Routed(kind or Kind.REFUSED, text, error=e)
    if isinstance(stmt, TransactionCommand):
        return Routed(_VERBS.get(stmt.verb, Kind.NO_OP), text, stmt)
    return Routed(Kind.SET_LOCAL if kind == Kind.SET_LOCAL else _KINDS[type(stmt)], text, stmt)


def _refused_to_session(kind: Kind, text: str, limits: QueryLimits) -> Routed:
    """A statement only the wire connection answers: the session's refusal of it comes along,
    for a front end that has no connection (dpsql.connect)."""
    try:
        classify_one(text, limits)
    except Error as e:
        return Routed(kind, text, error=e)
    return Routed(kind, text, error=forbidden(f"{kind.name} statements are not allowed", hint=_ALLOWED_HINT))


def empty_refusal() -> Error:
    return syntax_error("empty query", hint=_ALLOWED_HINT)

"""The extended query protocol without I/O: a connection's prepared statements and portals, the
client's Parse, Bind, Describe, Execute and Close read into values (every protocol check and
parameter decoding here, with the SQLSTATE PostgreSQL gives), which messages wait for Sync, and
the statement a message concerns. The message loop (server/messages.py) reads and writes."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any, Mapping

from ...errors import Error
from . import codec, copyout, types, values
from .codes import Frontend


@dataclass
class Answer:
    """One statement's outcome in wire terms."""

    fields: list[codec.Field] | None
    rows: list[tuple]
    tag: str
    notices: list[str] = field(default_factory=list)
    copy: copyout.Copy | None = None  # sent as COPY TO STDOUT data, not as rows
    empty: bool = False  # an empty statement (comments, semicolons): EmptyQueryResponse


@dataclass
class Prepared:
    sql: str
    param_oids: list[int]
    kind: Any = None  # its leading keyword's kind (sql/route.py word_kind), read once at Parse


@dataclass
class Portal:
    stmt: Prepared
    params: list[Any]
    result_formats: list[int]
    answer: Answer | None = None
    pos: int = 0


@dataclass(frozen=True)
class Parse:
    """A Parse message: the statement's name, its SQL and the parameter types the client gave."""

    name: str
    sql: str
    param_oids: list[int]


def read_parse(r: codec.Reader) -> Parse:
    name, sql = r.cstring(), r.cstring()
    return Parse(name, sql, [r.int32() for _ in range(r.int16())])


def param_oids(given: list[int], inferred: list[int]) -> list[int]:
    """Each parameter's type: the client's where it gave one (not 0), else the inferred one,
    else text."""
    n = max(len(given), len(inferred))
    return [
        (given[i] if i < len(given) and given[i] else (inferred[i] if i < len(inferred) else types.TEXT))
        for i in range(n)
    ]


def read_bind(r: codec.Reader, statements: Mapping[str, Prepared]) -> tuple[str, Portal]:
    """A Bind message: the portal's name and the portal, its parameters decoded by their
    statement's types (22P02 for a bad text value, 22P03 for a bad binary one)."""
    portal, name = r.cstring(), r.cstring()
    stmt = statements.get(name)
    if stmt is None:
        raise Error(f'prepared statement "{name}" does not exist', sqlstate="26000")
    fmts = [r.int16() for _ in range(r.int16())]
    count = r.int16()
    if len(fmts) not in (0, 1, count):
        raise codec.ProtocolError(f"bind message has {len(fmts)} parameter formats but {count} parameters")
    params = []
    for i in range(count):
        n = r.int32()
        if n < -1:
            raise codec.ProtocolError(f"invalid length {n} of bind parameter {i + 1}")
        raw = None if n == -1 else r.bytes(n)
        oid = stmt.param_oids[i] if i < len(stmt.param_oids) else types.TEXT
        try:
            params.append(values.decode_param(raw, oid, result_format(fmts, i)))
        except ValueError as e:
            raise Error(str(e), sqlstate="22P02") from None
        except (struct.error, UnicodeDecodeError):
            raise Error(
                f"incorrect binary data format in bind parameter {i + 1}",
                sqlstate="22P03",
                hint=f"a parameter of type {types.TYPE_NAMES.get(oid, oid)} was expected",
            ) from None
    result_formats = [r.int16() for _ in range(r.int16())]
    if r.pos != len(r.data):
        raise codec.ProtocolError("bind message has trailing bytes")
    return portal, Portal(stmt, params, result_formats)


def read_target(r: codec.Reader) -> tuple[str, str]:
    """A Describe's or Close's target: "S" (a statement) or "P" (a portal), and its name."""
    return chr(r.byte()), r.cstring()


def read_execute(r: codec.Reader) -> tuple[str, int]:
    """An Execute message: the portal's name and the most rows to return (0: all)."""
    return r.cstring(), r.int32()


def statement_of(kind: bytes, body: bytes, statements: Mapping[str, Prepared], portals: Mapping[str, Portal]) -> str:
    """The SQL a message concerns, for the operator's log of an internal error (never sent)."""
    try:
        r = codec.Reader(body)
        if kind in (Frontend.QUERY, Frontend.PARSE):
            if kind == Frontend.PARSE:
                r.cstring()  # the statement's name
            return r.cstring()
        if kind == Frontend.BIND:
            r.cstring()
            stmt = statements.get(r.cstring())
            return stmt.sql if stmt is not None else ""
        if kind in (Frontend.DESCRIBE, Frontend.EXECUTE):
            what = chr(r.byte()) if kind == Frontend.DESCRIBE else "P"
            name = r.cstring()
            found = statements.get(name) if what == "S" else getattr(portals.get(name), "stmt", None)
            return found.sql if found is not None else ""
    except Exception:  # noqa: BLE001 - a malformed message has no statement to log
        pass
    return ""


def result_format(formats: list[int], i: int) -> int:
    """Column (or parameter) i's format code from a message's list: none (all text), one (all
    alike) or one per column."""
    if not formats:
        return 0
    return formats[0] if len(formats) == 1 else (formats[i] if i < len(formats) else 0)

"""PostgreSQL protocol 3.0's messages: framing (a type byte from codes.py, a length, a body),
a body's reader, and the server's messages built (pure: no I/O)."""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass

from .codes import Backend, ErrorField
from .types import TYPE_LENGTH


class ProtocolError(Exception):
    """The client broke the protocol: the connection is closed."""


@dataclass
class Reader:
    data: bytes
    pos: int = 0

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise ProtocolError("message too short")
        b = self.data[self.pos]
        self.pos += 1
        return b

    def int16(self) -> int:
        return self._unpack("!h", 2)

    def int32(self) -> int:
        return self._unpack("!i", 4)

    def _unpack(self, fmt: str, n: int) -> int:
        if self.pos + n > len(self.data):
            raise ProtocolError("message too short")
        (v,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += n
        return v

    def cstring(self) -> str:
        end = self.data.find(b"\0", self.pos)
        if end < 0:
            raise ProtocolError("unterminated string")
        s = self.data[self.pos : end].decode("utf-8", errors="strict")
        self.pos = end + 1
        return s

    def bytes(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ProtocolError("message too short")
        b = self.data[self.pos : self.pos + n]
        self.pos += n
        return b


def message(kind: bytes, payload: bytes = b"") -> bytes:
    return kind + struct.pack("!i", len(payload) + 4) + payload


def cstr(s: str) -> bytes:
    return s.encode("utf-8") + b"\0"


def int16(v: int) -> bytes:
    return struct.pack("!h", v)


def int32(v: int) -> bytes:
    return struct.pack("!i", v)


def parameter_status(name: str, value: str) -> bytes:
    return message(Backend.PARAMETER_STATUS, cstr(name) + cstr(value))


def ready(status: str = "I") -> bytes:
    return message(Backend.READY_FOR_QUERY, status.encode())


def command_complete(tag: str) -> bytes:
    return message(Backend.COMMAND_COMPLETE, cstr(tag))


def error_response(sqlstate: str, text: str, hint: str | None = None, severity: str = "ERROR") -> bytes:
    return message(Backend.ERROR_RESPONSE, _fields(severity, sqlstate, text, hint))


def notice(text: str) -> bytes:
    return message(Backend.NOTICE_RESPONSE, _fields("NOTICE", "00000", text, None))


def _fields(severity: str, sqlstate: str, text: str, hint: str | None) -> bytes:
    """An ErrorResponse's or NoticeResponse's fields, each a code and a string, then a zero byte."""
    out = (
        ErrorField.SEVERITY
        + cstr(severity)
        + ErrorField.SEVERITY_NONLOCALIZED
        + cstr(severity)
        + ErrorField.SQLSTATE
        + cstr(sqlstate)
        + ErrorField.MESSAGE
        + cstr(text)
    )
    if hint:
        out += ErrorField.HINT + cstr(hint)
    return out + b"\0"


def authentication(request: int, payload: bytes = b"") -> bytes:
    """An AuthenticationRequest (codes.Authentication): OK, or a step of the SASL exchange."""
    return message(Backend.AUTHENTICATION, int32(request) + payload)


def backend_key_data(pid: int, key: int) -> bytes:
    """The process id and secret key a client's CancelRequest must quote."""
    return message(Backend.BACKEND_KEY_DATA, int32(pid) + int32(key))


def parameter_description(oids: list[int]) -> bytes:
    return message(Backend.PARAMETER_DESCRIPTION, int16(len(oids)) + b"".join(int32(o) for o in oids))


@dataclass(frozen=True)
class Field:
    name: str
    oid: int
    format: int = 0
    table_oid: int = 0
    column: int = 0
    typmod: int = -1


def row_description(fields: list[Field]) -> bytes:
    """A RowDescription: sent with every answer of a statement, built once per set of fields."""
    return _row_description(tuple(fields))


@functools.lru_cache(maxsize=1024)
def _row_description(fields: tuple[Field, ...]) -> bytes:
    out = [int16(len(fields))]
    for f in fields:
        out.append(
            cstr(f.name)
            + int32(f.table_oid)
            + int16(f.column)
            + int32(f.oid)
            + int16(TYPE_LENGTH.get(f.oid, -1))
            + int32(f.typmod)
            + int16(f.format)
        )
    return message(Backend.ROW_DESCRIPTION, b"".join(out))


def data_row(values: list[bytes | None]) -> bytes:
    out = [int16(len(values))]
    for v in values:
        out.append(int32(-1) if v is None else int32(len(v)) + v)
    return message(Backend.DATA_ROW, b"".join(out))

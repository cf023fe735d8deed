"""PostgreSQL protocol 3.0: message framing, type OIDs, and value encoding (text and binary)."""

from __future__ import annotations

import datetime
import decimal
import functools
import math
import re
import struct
from dataclasses import dataclass
from typing import Any

PROTOCOL_3 = 196608
SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
CANCEL_REQUEST = 80877102

# PostgreSQL type OIDs (pg_type.oid), as clients expect them.
BOOL, BYTEA, CHAR, NAME, INT8, INT2, INT4, TEXT, OID = 16, 17, 18, 19, 20, 21, 23, 25, 26
FLOAT4, FLOAT8, UNKNOWN, VARCHAR, BPCHAR = 700, 701, 705, 1043, 1042
DATE, TIME, TIMESTAMP, TIMESTAMPTZ, INTERVAL, NUMERIC = 1082, 1083, 1114, 1184, 1186, 1700
UUID, JSON, JSONB, REGCLASS, REGPROC, REGTYPE, REGNAMESPACE = 2950, 114, 3802, 2205, 24, 2206, 4089
INT2VECTOR, OIDVECTOR = 22, 30
VOID = 2278  # what a function returning nothing returns: an empty value, not NULL
TEXT_ARRAY, INT2_ARRAY, INT4_ARRAY, INT8_ARRAY, OID_ARRAY, NAME_ARRAY, CHAR_ARRAY, BOOL_ARRAY = (
    1009,
    1005,
    1007,
    1016,
    1028,
    1003,
    1002,
    1000,
)
FLOAT8_ARRAY, ACLITEM_ARRAY = 1022, 1034

TYPE_LENGTH = {
    BOOL: 1,
    CHAR: 1,
    NAME: 64,
    INT8: 8,
    INT2: 2,
    INT4: 4,
    OID: 4,
    FLOAT4: 4,
    FLOAT8: 8,
    DATE: 4,
    TIME: 8,
    TIMESTAMP: 8,
    TIMESTAMPTZ: 8,
    INTERVAL: 16,
    UUID: 16,
    REGCLASS: 4,
    REGPROC: 4,
    REGTYPE: 4,
    REGNAMESPACE: 4,
}

_DUCKDB_TO_OID = {
    "BOOLEAN": BOOL,
    "TINYINT": INT2,
    "SMALLINT": INT2,
    "INTEGER": INT4,
    "BIGINT": INT8,
    "HUGEINT": NUMERIC,
    "UTINYINT": INT2,
    "USMALLINT": INT4,
    "UINTEGER": INT8,
    "UBIGINT": NUMERIC,
    "UHUGEINT": NUMERIC,
    "FLOAT": FLOAT4,
    "REAL": FLOAT4,
    "DOUBLE": FLOAT8,
    "DECIMAL": NUMERIC,
    "VARCHAR": TEXT,
    "BLOB": BYTEA,
    "DATE": DATE,
    "TIME": TIME,
    "TIMESTAMP": TIMESTAMP,
    "TIMESTAMP WITH TIME ZONE": TIMESTAMPTZ,
    "INTERVAL": INTERVAL,
    "UUID": UUID,
    "JSON": JSON,
    "NULL": TEXT,
    # type aliases the catalog uses to keep PostgreSQL's own column types
    "PG_NAME": NAME,
    "PG_OID": OID,
    "PG_CHAR": CHAR,
    "PG_REGCLASS": REGCLASS,
    "PG_REGPROC": REGPROC,
    "PG_REGTYPE": REGTYPE,
    "PG_INT2VECTOR": INT2VECTOR,
    "PG_OIDVECTOR": OIDVECTOR,
    "PG_BPCHAR": BPCHAR,
    "PG_VARCHAR": VARCHAR,
    "PG_ACLITEM_ARRAY": ACLITEM_ARRAY,
    "PG_REGNAMESPACE": REGNAMESPACE,
}
_ARRAY_OF = {
    TEXT: TEXT_ARRAY,
    VARCHAR: TEXT_ARRAY,
    NAME: NAME_ARRAY,
    INT2: INT2_ARRAY,
    INT4: INT4_ARRAY,
    INT8: INT8_ARRAY,
    OID: OID_ARRAY,
    CHAR: CHAR_ARRAY,
    BOOL: BOOL_ARRAY,
    FLOAT8: FLOAT8_ARRAY,
}

TYPE_NAMES = {
    BOOL: "boolean",
    BYTEA: "bytea",
    CHAR: '"char"',
    NAME: "name",
    INT8: "bigint",
    INT2: "smallint",
    INT4: "integer",
    TEXT: "text",
    OID: "oid",
    FLOAT4: "real",
    FLOAT8: "double precision",
    VARCHAR: "character varying",
    BPCHAR: "character",
    DATE: "date",
    TIME: "time without time zone",
    TIMESTAMP: "timestamp without time zone",
    TIMESTAMPTZ: "timestamp with time zone",
    INTERVAL: "interval",
    NUMERIC: "numeric",
    UUID: "uuid",
    JSON: "json",
}


def array_of(oid: int) -> int:
    """The array type of a type (text[] where PostgreSQL's array type is not emulated)."""
    return _ARRAY_OF.get(oid, TEXT_ARRAY)


@functools.lru_cache(maxsize=1024)
def oid_of(duckdb_type: str) -> int:
    """The PostgreSQL type OID for a DuckDB type name (lists become arrays); every answer asks
    it for each of its columns."""
    t = duckdb_type.upper().strip()
    if t.endswith("[]"):
        return array_of(oid_of(t[:-2]))
    base = t.split("(")[0]
    return _DUCKDB_TO_OID.get(t, _DUCKDB_TO_OID.get(base, TEXT))


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
    return message(b"S", cstr(name) + cstr(value))


def ready(status: str = "I") -> bytes:
    return message(b"Z", status.encode())


def command_complete(tag: str) -> bytes:
    return message(b"C", cstr(tag))


def error_response(sqlstate: str, text: str, hint: str | None = None, severity: str = "ERROR") -> bytes:
    fields = b"S" + cstr(severity) + b"V" + cstr(severity) + b"C" + cstr(sqlstate) + b"M" + cstr(text)
    if hint:
        fields += b"H" + cstr(hint)
    return message(b"E", fields + b"\0")


def notice(text: str) -> bytes:
    return message(
        b"N", b"S" + cstr("NOTICE") + b"V" + cstr("NOTICE") + b"C" + cstr("00000") + b"M" + cstr(text) + b"\0"
    )


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
    return message(b"T", b"".join(out))


def data_row(values: list[bytes | None]) -> bytes:
    out = [int16(len(values))]
    for v in values:
        out.append(int32(-1) if v is None else int32(len(v)) + v)
    return message(b"D", b"".join(out))


# Values -------------------------------------------------------------------------------------
_PG_EPOCH = datetime.date(2000, 1, 1)
# A date with a time zone and no time: pgjdbc's setDate sends it untyped ('2024-01-31 +01'), for
# PostgreSQL to read as a date (the zone ignored) or a timestamptz (midnight there). DuckDB reads
# neither; with a midnight time added it reads it as a date, a timestamp and a timestamptz alike.
_ZONED_DATE = re.compile(r"(\d{4}-\d{2}-\d{2}) ([+-]\d{2}(?::\d{2})?)")
_PG_EPOCH_DT = datetime.datetime(2000, 1, 1)


def _float_text(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    s = repr(v)
    return s[:-2] if s.endswith(".0") else s


def _array_text(values: list) -> str:
    parts = []
    for v in values:
        if v is None:
            parts.append("NULL")
            continue
        t = encode_text(v)
        if t == "" or any(ch in t for ch in ' ,{}"\\') or t.upper() == "NULL":
            t = '"' + t.replace("\\", "\\\\").replace('"', '\\"') + '"'
        parts.append(t)
    return "{" + ",".join(parts) + "}"


def encode_text(v: Any) -> str:
    if isinstance(v, bool):
        return "t" if v else "f"
    if isinstance(v, float):
        return _float_text(v)
    if isinstance(v, (int, decimal.Decimal)):
        return str(v)
    if isinstance(v, datetime.datetime):
        return v.isoformat(sep=" ")
    if isinstance(v, (datetime.date, datetime.time)):
        return v.isoformat()
    if isinstance(v, datetime.timedelta):
        return str(v)
    if isinstance(v, (list, tuple)):
        return _array_text(list(v))
    if isinstance(v, bytes):
        return "\\x" + v.hex()
    if isinstance(v, dict):
        import json

        return json.dumps(v)
    return str(v)


def _numeric_binary(v: decimal.Decimal | int | float) -> bytes:
    d = decimal.Decimal(v) if not isinstance(v, decimal.Decimal) else v
    if d.is_nan():
        return struct.pack("!hhHh", 0, 0, 0xC000, 0)
    sign = 0x4000 if d < 0 else 0
    d = abs(d)
    t = d.as_tuple()
    dscale = max(0, -t.exponent)
    digits_str = "".join(map(str, t.digits))
    exp10 = t.exponent
    if exp10 > 0:
        digits_str += "0" * exp10
        exp10 = 0
    int_part = digits_str[: len(digits_str) + exp10] if exp10 < 0 else digits_str
    frac_part = digits_str[len(digits_str) + exp10 :] if exp10 < 0 else ""
    int_part = int_part.lstrip("0")
    pad_int = (-len(int_part)) % 4
    int_part = "0" * pad_int + int_part
    frac_part = frac_part + "0" * ((-len(frac_part)) % 4)
    groups = [int(int_part[i : i + 4]) for i in range(0, len(int_part), 4)] + [
        int(frac_part[i : i + 4]) for i in range(0, len(frac_part), 4)
    ]
    weight = len(int_part) // 4 - 1
    while groups and groups[0] == 0:
        groups.pop(0)
        weight -= 1
    while groups and groups[-1] == 0:
        groups.pop()
    if not groups:
        weight = 0
    return struct.pack("!hhHh", len(groups), weight, sign, dscale) + b"".join(struct.pack("!h", g) for g in groups)


def encode_binary(v: Any, oid: int) -> bytes:
    if oid == BOOL:
        return b"\x01" if v else b"\x00"
    if oid == INT2:
        return struct.pack("!h", int(v))
    if oid in (INT4,):
        return struct.pack("!i", int(v))
    if oid in (OID, REGCLASS, REGPROC, REGTYPE, REGNAMESPACE):
        return struct.pack("!I", int(v))
    if oid == INT8:
        return struct.pack("!q", int(v))
    if oid == FLOAT4:
        return struct.pack("!f", float(v))
    if oid == FLOAT8:
        return struct.pack("!d", float(v))
    if oid == NUMERIC:
        return _numeric_binary(v)
    if oid == DATE:
        return struct.pack("!i", (v - _PG_EPOCH).days)
    if oid in (TIMESTAMP, TIMESTAMPTZ):
        if v.tzinfo is not None:
            v = v.astimezone(datetime.timezone.utc).replace(tzinfo=None)
        delta = v - _PG_EPOCH_DT
        return struct.pack("!q", (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds)
    if oid == BYTEA:
        return bytes(v)
    return encode_text(v).encode("utf-8")


def encode(v: Any, oid: int, fmt: int) -> bytes | None:
    if v is None:
        return None
    return encode_binary(v, oid) if fmt == 1 else encode_text(v).encode("utf-8")


def decode_param(raw: bytes | None, oid: int, fmt: int) -> Any:
    """A bound parameter as a Python value (by its declared or inferred type)."""
    if raw is None:
        return None
    if fmt == 1:
        if oid == BOOL:
            return raw != b"\x00"
        if oid == INT2:
            return struct.unpack("!h", raw)[0]
        if oid in (INT4,):
            return struct.unpack("!i", raw)[0]
        if oid in (OID, REGCLASS, REGPROC, REGTYPE, REGNAMESPACE):
            return struct.unpack("!I", raw)[0]
        if oid == INT8:
            return struct.unpack("!q", raw)[0]
        if oid == FLOAT4:
            return struct.unpack("!f", raw)[0]
        if oid == FLOAT8:
            return struct.unpack("!d", raw)[0]
        if oid == DATE:
            return _PG_EPOCH + datetime.timedelta(days=struct.unpack("!i", raw)[0])
        if oid in (TIMESTAMP, TIMESTAMPTZ):
            return _PG_EPOCH_DT + datetime.timedelta(microseconds=struct.unpack("!q", raw)[0])
        if oid == NUMERIC:
            return _numeric_from_binary(raw)
        if oid in ARRAY_OIDS:
            return _array_text(_array_from_binary(raw))
        return raw.decode("utf-8")
    text = raw.decode("utf-8")
    zoned = _ZONED_DATE.fullmatch(text)
    if zoned is not None and oid in (0, DATE, TIMESTAMP, TIMESTAMPTZ):  # pgjdbc's setDate
        if oid == DATE:
            return datetime.date.fromisoformat(zoned[1])
        text = f"{zoned[1]} 00:00:00{zoned[2]}"
    try:
        if oid in (INT2, INT4, INT8, OID):
            return int(text)
        if oid in (FLOAT4, FLOAT8):
            return float(text)
        if oid == NUMERIC:
            return decimal.Decimal(text)
        if oid == BOOL:
            return text.strip().lower() in ("t", "true", "1", "yes", "on", "y")
        if oid == DATE:
            return datetime.date.fromisoformat(text)
        if oid in (TIMESTAMP, TIMESTAMPTZ):
            return datetime.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"invalid input for a parameter of type {TYPE_NAMES.get(oid, oid)}: {text!r}") from None
    return text


# Arrays a client may send in binary (psycopg's %b with a list, asyncpg always): one-dimensional.
ARRAY_OIDS = frozenset(_ARRAY_OF.values()) | {1015, 1021, 1182, 1115, 1185, 1231}


def _array_from_binary(raw: bytes) -> list:
    """A one-dimensional binary array's elements (each decoded by its element type), read the
    way the text path reads '{a,b}': the same parameter becomes the same array literal."""
    try:
        ndim, _, elem_oid = struct.unpack_from("!iii", raw)
        if ndim == 0:
            return []
        if ndim != 1:
            raise ValueError("only one-dimensional arrays can be parameters")
        count, _ = struct.unpack_from("!ii", raw, 12)
        at, values = 20, []
        for _ in range(count):
            (size,) = struct.unpack_from("!i", raw, at)
            at += 4
            if size < 0:
                values.append(None)
                continue
            values.append(decode_param(raw[at : at + size], elem_oid, 1))
            at += size
        return values
    except struct.error:
        raise ValueError("a binary array parameter is malformed") from None


def _numeric_from_binary(raw: bytes) -> decimal.Decimal:
    ndigits, weight, sign, dscale = struct.unpack_from("!hhHh", raw)
    if sign == 0xC000:
        return decimal.Decimal("NaN")
    digits = struct.unpack_from(f"!{ndigits}h", raw, 8)
    value = decimal.Decimal(0)
    for i, d in enumerate(digits):
        value += decimal.Decimal(d) * (decimal.Decimal(10000) ** (weight - i))
    value = value.quantize(decimal.Decimal(1).scaleb(-dscale)) if dscale else value.to_integral_value()
    return -value if sign == 0x4000 else value

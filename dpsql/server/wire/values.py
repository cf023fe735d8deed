"""Values on the wire: a Python value written in PostgreSQL's text or binary format for its type,
and a bound parameter read back from either (pure)."""

from __future__ import annotations

import datetime
import decimal
import json
import math
import re
import struct
from typing import Any

from .types import (
    ARRAY_OIDS,
    BOOL,
    BYTEA,
    DATE,
    FLOAT4,
    FLOAT8,
    INT2,
    INT4,
    INT8,
    NUMERIC,
    OID,
    REGCLASS,
    REGNAMESPACE,
    REGPROC,
    REGTYPE,
    TIMESTAMP,
    TIMESTAMPTZ,
    TYPE_NAMES,
)

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

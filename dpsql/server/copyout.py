"""COPY (<query>) TO STDOUT: the statement's options, and its rows in PostgreSQL's text, CSV and
binary COPY formats (pure: no I/O; app.py sends CopyOutResponse, CopyData, CopyDone)."""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

from ..errors import ProgrammingError, unsupported
from . import codec

_COPY = re.compile(r"^\s*COPY\s+(?:\((?P<query>.*)\)|(?P<table>[\w.\"]+)(?:\s*\([^)]*\))?)\s+TO\s+STDOUT\b(?P<options>.*?)\s*;?\s*$",
                   re.I | re.S)
_BINARY_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack("!ii", 0, 0)


@dataclass(frozen=True)
class Copy:
    """What a COPY TO STDOUT asks: the query whose rows it copies, and how to write them."""

    query: str
    format: str = "text"  # text | csv | binary
    header: bool = False
    delimiter: str = "\t"
    null: str = "\\N"


def parse(sql: str) -> Copy:
    """COPY (query) TO STDOUT [WITH] [(FORMAT csv, HEADER, DELIMITER ',', NULL '')] or the
    pre-9.0 spellings (CSV, HEADER, BINARY). COPY table TO STDOUT copies SELECT * FROM table."""
    m = _COPY.match(sql)
    if m is None:
        if re.search(r"\bFROM\s+STDIN\b", sql, re.I):
            raise unsupported("COPY ... FROM STDIN: dpsql is read-only", hint="load data into the engine directly")
        raise unsupported("COPY is supported as COPY (query) TO STDOUT",
                          hint="psql: \\copy (SELECT ...) TO 'file.csv' WITH CSV HEADER")
    query = m.group("query") or f"SELECT * FROM {m.group('table')}"
    opts = m.group("options").strip()
    opts = re.sub(r"^WITH\b", "", opts, flags=re.I).strip()
    if opts.startswith("(") and opts.endswith(")"):
        opts = opts[1:-1]
    fmt, header, delimiter, null = "text", False, None, None
    for raw in re.split(r",|\s+(?=(?:FORMAT|HEADER|DELIMITER|NULL|CSV|BINARY)\b)", opts, flags=re.I):
        item = raw.strip()
        if not item:
            continue
        key, _, value = item.partition(" ")
        key, value = key.upper(), value.strip().strip("'")
        if key == "FORMAT":
            fmt = value.lower()
        elif key in ("CSV", "BINARY"):
            fmt = key.lower()
        elif key == "HEADER":
            header = value.lower() not in ("false", "off", "0")
        elif key == "DELIMITER":
            delimiter = value
        elif key == "NULL":
            null = value
        else:
            raise unsupported(f"COPY option {key}", hint="FORMAT, HEADER, DELIMITER and NULL are supported")
    if fmt not in ("text", "csv", "binary"):
        raise ProgrammingError(f"COPY format {fmt!r} not recognized", sqlstate="22023")
    if delimiter is not None and len(delimiter) != 1:
        raise ProgrammingError("COPY delimiter must be a single one-byte character", sqlstate="0A000")
    default_delim, default_null = (",", "") if fmt == "csv" else ("\t", "\\N")
    return Copy(query, fmt, header, delimiter or default_delim, default_null if null is None else null)


def encode(copy: Copy, names: list[str], oids: list[int], rows: list[tuple]) -> list[bytes]:
    """The CopyData payloads: one per row (binary: the header before the first row, in its
        message as PostgreSQL sends it, and a trailer last)."""
    if copy.format == "binary":
        out: list[bytes] = []
        for row in rows:
            fields = [struct.pack("!h", len(row))]
            for v, oid in zip(row, oids):
                if v is None:
                    fields.append(struct.pack("!i", -1))
                else:
                    data = codec.encode_binary(v, oid)
                    fields.append(struct.pack("!i", len(data)) + data)
            out.append(b"".join(fields))
        out.append(struct.pack("!h", -1))
        out[0] = _BINARY_HEADER + out[0]
        return out
    lines = []
    if copy.header and copy.format == "csv":
        lines.append(copy.delimiter.join(_csv(n, copy) for n in names))
    for row in rows:
        if copy.format == "csv":
            lines.append(copy.delimiter.join(copy.null if v is None else _csv(codec.encode_text(v), copy) for v in row))
        else:
            lines.append(copy.delimiter.join(copy.null if v is None else _text(codec.encode_text(v), copy) for v in row))
    return [(line + "\n").encode("utf-8") for line in lines]


def _text(value: str, copy: Copy) -> str:
    out = value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    return out.replace(copy.delimiter, "\\" + copy.delimiter) if copy.delimiter not in "\\nrt" else out


def _csv(value: str, copy: Copy) -> str:
    if value == "" or value == copy.null or any(ch in value for ch in (copy.delimiter, '"', "\n", "\r")):
        return '"' + value.replace('"', '""') + '"'
    return value


def response(copy: Copy, columns: int) -> bytes:
    """CopyOutResponse: overall format, then each column's."""
    fmt = 1 if copy.format == "binary" else 0
    return codec.message(b"H", struct.pack("!bh", fmt, columns) + struct.pack("!h", fmt) * columns)


def data(payload: bytes) -> bytes:
    return codec.message(b"d", payload)

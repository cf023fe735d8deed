"""COPY (<query>) TO STDOUT: the statement's options, and its rows in PostgreSQL's text, CSV and
binary COPY formats (pure: no I/O; messages.py sends CopyOutResponse, CopyData, CopyDone)."""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

from ...errors import ProgrammingError, unsupported
from . import codec, values
from .codes import Backend

_COPY = re.compile(
    r"^\s*COPY\s+(?P<binary>BINARY\s+)?(?:\((?P<query>.*)\)|(?P<table>[\w.\"]+)(?:\s*\([^)]*\))?)"
    r"\s+TO\s+STDOUT\b(?P<options>.*?)\s*;?\s*$",
    re.I | re.S,
)
_BINARY_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack("!ii", 0, 0)
# An option list's tokens: a 'string' (E'...' too), a "quoted name", a word or number, or punctuation.
_TOKEN = re.compile(
    r"\s*(?:(?P<string>[eE]?'(?:[^']|'')*')|(?P<quoted>\"(?:[^\"]|\"\")*\")|(?P<word>[\w.+-]+)|"
    r"(?P<punct>[(),*]))",
    re.S,
)
_FORMATS = ("text", "csv", "binary")


@dataclass(frozen=True)
class Copy:
    """What a COPY TO STDOUT asks: the query whose rows it copies, and how to write them."""

    query: str
    format: str = "text"  # text | csv | binary
    header: bool = False
    delimiter: str = "\t"
    null: str = "\\N"
    quote: str = '"'  # CSV only
    escape: str = '"'  # CSV only: what doubles a quote inside a quoted value
    force_quote: bool = False  # CSV: FORCE_QUOTE *, every non-NULL value quoted


def parse(sql: str) -> Copy:
    """COPY (query) TO STDOUT in every spelling PostgreSQL accepts: [WITH] (FORMAT csv, HEADER,
    DELIMITER ',', NULL '', QUOTE '"', ESCAPE '"', FORCE_QUOTE *, ENCODING 'UTF8'), a format
    written as a word, a "quoted name" or a 'string' (DuckDB's postgres extension sends
    (FORMAT "binary")), and the pre-9.0 forms (COPY BINARY t, WITH BINARY, CSV HEADER QUOTE AS
    '"', DELIMITER AS ';', USING DELIMITERS). COPY table TO STDOUT copies SELECT * FROM table."""
    m = _COPY.match(sql)
    if m is None:
        if re.search(r"\bFROM\s+STDIN\b", sql, re.I):
            raise unsupported("COPY ... FROM STDIN: dpsql is read-only", hint="load data into the engine directly")
        raise unsupported(
            "COPY is supported as COPY (query) TO STDOUT",
            hint="psql: \\copy (SELECT ...) TO 'file.csv' WITH CSV HEADER",
        )
    query = m.group("query") or f"SELECT * FROM {m.group('table')}"
    tokens = _tokens(m.group("options"))
    if tokens and tokens[0] == ("word", "WITH"):
        tokens = tokens[1:]
    if tokens and tokens[0] == ("punct", "("):
        options = _options(tokens)
    else:
        options = _legacy_options(tokens)
    if m.group("binary"):
        options.insert(0, ("FORMAT", "binary"))
    return _copy(query, options)


def _tokens(text: str) -> list[tuple[str, str]]:
    """(kind, text) pairs: words upper-cased, names and strings unquoted."""
    out, pos, text = [], 0, text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise ProgrammingError(
                f"syntax error in COPY options near {text[pos : pos + 20].strip()!r}",
                sqlstate="42601",
                hint="COPY (SELECT ...) TO STDOUT WITH (FORMAT csv, HEADER)",
            )
        kind = m.lastgroup
        value = m.group(kind)
        if kind == "string":
            escaped = value[0] in "eE"
            value = value[2:-1] if escaped else value[1:-1]
            value = value.replace("''", "'")
            if escaped:
                value = value.encode("latin-1", "backslashreplace").decode("unicode_escape")
        elif kind == "quoted":
            value = value[1:-1].replace('""', '"')
        elif kind == "word":
            value = value.upper()
        out.append((kind, value))
        pos = m.end()
    return out


def _value(token: tuple[str, str]) -> str:
    """An option's argument as written: a word keeps its case folded to lower, as PostgreSQL's do."""
    kind, text = token
    return text.lower() if kind == "word" else text


def _options(tokens: list[tuple[str, str]]) -> list[tuple[str, str | None]]:
    """The 9.0+ list: ( name [value], ... ), a value being a word, name, string, number, * or (list)."""
    if tokens[-1] != ("punct", ")"):
        raise ProgrammingError("COPY options must end with )", sqlstate="42601")
    out: list[tuple[str, str | None]] = []
    item: list[tuple[str, str]] = []
    depth = 0
    for token in tokens[1:-1] + [("punct", ",")]:
        if token == ("punct", "("):
            depth += 1
        elif token == ("punct", ")"):
            depth -= 1
        if token == ("punct", ",") and depth == 0:
            if not item:
                raise ProgrammingError("syntax error in COPY options: an empty option", sqlstate="42601")
            name = item[0][1].upper() if item[0][0] != "string" else item[0][1]
            rest = item[1:]
            out.append(
                (
                    name,
                    None
                    if not rest
                    else "*"
                    if rest == [("punct", "*")]
                    else _value(rest[0])
                    if len(rest) == 1
                    else "(list)",
                )
            )
            item = []
        else:
            item.append(token)
    return out


def _legacy_options(tokens: list[tuple[str, str]]) -> list[tuple[str, str | None]]:
    """The pre-9.0 keywords: BINARY, CSV, HEADER, DELIMITER [AS] 'd', NULL [AS] 'n', QUOTE [AS] 'q',
    ESCAPE [AS] 'e', FORCE QUOTE cols | *, USING DELIMITERS 'd' (as PostgreSQL still reads them)."""
    out: list[tuple[str, str | None]] = []
    i = 0
    while i < len(tokens):
        kind, word = tokens[i]
        i += 1
        if kind != "word":
            raise ProgrammingError(
                f"syntax error in COPY options at {word!r}",
                sqlstate="42601",
                hint="COPY (SELECT ...) TO STDOUT WITH (FORMAT csv, HEADER)",
            )
        if word in ("BINARY", "CSV"):
            out.append(("FORMAT", word.lower()))
        elif word == "HEADER":
            out.append(("HEADER", None))
        elif word in ("DELIMITER", "DELIMITERS", "NULL", "QUOTE", "ESCAPE"):
            if i < len(tokens) and tokens[i] == ("word", "AS"):
                i += 1
            if i >= len(tokens) or tokens[i][0] != "string":
                raise ProgrammingError(f"COPY {word} needs a quoted string", sqlstate="42601")
            out.append(("DELIMITER" if word == "DELIMITERS" else word, tokens[i][1]))
            i += 1
        elif word in ("USING", "WITH"):
            continue  # USING DELIMITERS 'x' WITH NULL AS ''"
        elif word == "FORCE" and i < len(tokens) and tokens[i] == ("word", "QUOTE"):
            i += 1
            if i < len(tokens) and tokens[i] == ("punct", "*"):
                out.append(("FORCE_QUOTE", "*"))
                i += 1
            else:
                out.append(("FORCE_QUOTE", "(list)"))
                while i < len(tokens) and (tokens[i][0] != "word" or tokens[i][1] not in _LEGACY_WORDS):
                    i += 1
        else:
            out.append((word, None))
    return out


_LEGACY_WORDS = {"BINARY", "CSV", "HEADER", "DELIMITER", "DELIMITERS", "NULL", "QUOTE", "ESCAPE", "USING", "FORCE"}


def _copy(query: str, options: list[tuple[str, str | None]]) -> Copy:
    fmt, header, delimiter, null, quote, escape, force_quote = "text", False, None, None, None, None, False
    for key, value in options:
        if key == "FORMAT":
            fmt = value or ""  # a "quoted" name keeps its case, as in PostgreSQL: "BINARY" is no format
            if fmt not in _FORMATS:
                raise ProgrammingError(
                    f'COPY format "{value}" not recognized', sqlstate="22023", hint="FORMAT text, csv or binary"
                )
        elif key == "HEADER":
            header = value is None or value.lower() in ("true", "on", "1", "yes")
            if value is not None and not header and value.lower() not in ("false", "off", "0", "no"):
                raise ProgrammingError(
                    f"HEADER {value} is for COPY FROM; COPY TO takes true or false", sqlstate="22023"
                )
        elif key == "DELIMITER":
            delimiter = value
        elif key == "NULL":
            null = value
        elif key == "QUOTE":
            quote = value
        elif key == "ESCAPE":
            escape = value
        elif key == "FORCE_QUOTE":
            if value != "*":
                raise unsupported("FORCE_QUOTE of chosen columns", hint="FORCE_QUOTE * quotes every value")
            force_quote = True
        elif key == "ENCODING":
            if (value or "").replace("-", "").replace("_", "").lower() not in ("utf8", "unicode"):
                raise unsupported(f"COPY ENCODING {value}: dpsql writes UTF8", hint="ENCODING 'UTF8', or leave it out")
        else:
            raise unsupported(
                f"COPY option {key}",
                hint="FORMAT, HEADER, DELIMITER, NULL, QUOTE, ESCAPE, FORCE_QUOTE * and ENCODING 'UTF8' are supported",
            )
    if fmt != "csv" and (quote is not None or escape is not None or force_quote):
        raise ProgrammingError("COPY QUOTE, ESCAPE and FORCE_QUOTE are available only in CSV mode", sqlstate="0A000")
    if fmt == "binary" and (delimiter is not None or null is not None or header):
        raise ProgrammingError("cannot specify DELIMITER, NULL or HEADER in BINARY mode", sqlstate="42601")
    for name, char in (("delimiter", delimiter), ("quote", quote), ("escape", escape)):
        if char is not None and len(char.encode("utf-8")) != 1:
            raise ProgrammingError(f"COPY {name} must be a single one-byte character", sqlstate="0A000")
    default_delim, default_null = (",", "") if fmt == "csv" else ("\t", "\\N")
    quote = quote or '"'
    return Copy(
        query,
        fmt,
        header,
        delimiter or default_delim,
        default_null if null is None else null,
        quote,
        escape or quote,
        force_quote,
    )


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
                    data = values.encode_binary(v, oid)
                    fields.append(struct.pack("!i", len(data)) + data)
            out.append(b"".join(fields))
        out.append(struct.pack("!h", -1))
        out[0] = _BINARY_HEADER + out[0]
        return out
    lines = []
    if copy.header:
        lines.append(
            copy.delimiter.join(_csv(n, copy, header=True) if copy.format == "csv" else _text(n, copy) for n in names)
        )
    for row in rows:
        if copy.format == "csv":
            lines.append(
                copy.delimiter.join(copy.null if v is None else _csv(values.encode_text(v), copy) for v in row)
            )
        else:
            lines.append(
                copy.delimiter.join(copy.null if v is None else _text(values.encode_text(v), copy) for v in row)
            )
    return [(line + "\n").encode("utf-8") for line in lines]


def _text(value: str, copy: Copy) -> str:
    out = value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    return out.replace(copy.delimiter, "\\" + copy.delimiter) if copy.delimiter not in "\\nrt" else out


def _csv(value: str, copy: Copy, header: bool = False) -> str:
    if (
        (copy.force_quote and not header)
        or value == ""
        or value == copy.null
        or any(ch in value for ch in (copy.delimiter, copy.quote, "\n", "\r"))
    ):
        if copy.escape != copy.quote:
            value = value.replace(copy.escape, copy.escape * 2)
        return copy.quote + value.replace(copy.quote, copy.escape + copy.quote) + copy.quote
    return value


def response(copy: Copy, columns: int) -> bytes:
    """CopyOutResponse: overall format, then each column's."""
    fmt = 1 if copy.format == "binary" else 0
    return codec.message(Backend.COPY_OUT_RESPONSE, struct.pack("!bh", fmt, columns) + struct.pack("!h", fmt) * columns)


def data(payload: bytes) -> bytes:
    return codec.message(Backend.COPY_DATA, payload)

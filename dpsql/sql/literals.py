"""A string literal compared with a typed column, or cast to a type, read as that type's input.

PostgreSQL types `age = '30'` by the column: the string is an integer's input, and `age =
'abc'` or `age = '30.5'` is an error (invalid input syntax for type integer), as is
`CAST('abc' AS INTEGER)`. Left to the engine, dpsql's nonfailing() would make the comparison NULL
instead (TRY: no row matches), so a typo would be answered with zero rows and charged. This
pass refuses it first, free: it reads the query's text and the schema's types only, never the
data.

Numbers and booleans are judged exactly as PostgreSQL judges them. Dates and timestamps are
judged by what the engine-neutral reading, DuckDB's, can read (ISO 8601 forms): PostgreSQL
reads more (`'Jan 1 2024'`, `'today'`), and such a string, which would match no row here, is
refused with the form to write instead. DuckDB's own cast decides, on a connection of no
data, so that the check and the bounded query agree.

One pass over a resolved expression (columns qualified by dpsql's aliases), beside
division.py's.
"""

from __future__ import annotations

import re
import threading
from functools import lru_cache

import duckdb
from sqlglot import exp

from ..errors import DataError
from .division import ColumnType

# DuckDB's type names -> PostgreSQL's name for the input, and the integer range it accepts
_INTEGERS = {
    "TINYINT": ("smallint", 15),
    "INT1": ("smallint", 15),
    "SMALLINT": ("smallint", 15),
    "INT2": ("smallint", 15),
    "SHORT": ("smallint", 15),
    "UTINYINT": ("smallint", 15),
    "INTEGER": ("integer", 31),
    "INT": ("integer", 31),
    "INT4": ("integer", 31),
    "SIGNED": ("integer", 31),
    "USMALLINT": ("integer", 31),
    "BIGINT": ("bigint", 63),
    "INT8": ("bigint", 63),
    "LONG": ("bigint", 63),
    "UINTEGER": ("bigint", 63),
}
_FLOATS = {
    "DOUBLE": "double precision",
    "FLOAT8": "double precision",
    "FLOAT": "real",
    "FLOAT4": "real",
    "REAL": "real",
    "DECIMAL": "numeric",
    "NUMERIC": "numeric",
    "HUGEINT": "numeric",
    "UBIGINT": "numeric",
    "UHUGEINT": "numeric",
}
_INTEGER_TEXT = re.compile(r"\s*[+-]?\d+\s*")
_NUMBER_TEXT = re.compile(r"\s*[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?\s*|\s*[+-]?(nan|inf|infinity)\s*", re.IGNORECASE)
_BOOLEAN_WORDS = ("true", "false", "yes", "no", "on", "off", "1", "0")
_DATES = {
    "DATE": ("date", "DATE"),
    "TIMESTAMP": ("timestamp", "TIMESTAMP"),
    "DATETIME": ("timestamp", "TIMESTAMP"),
    "TIMESTAMP_S": ("timestamp", "TIMESTAMP"),
    "TIMESTAMP_MS": ("timestamp", "TIMESTAMP"),
    "TIMESTAMP_NS": ("timestamp", "TIMESTAMP"),
    "TIMESTAMP WITH TIME ZONE": ("timestamptz", "TIMESTAMPTZ"),
    "TIMESTAMPTZ": ("timestamptz", "TIMESTAMPTZ"),
}
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.In, exp.Between)


def check_literals(node: exp.Expression, column_type: ColumnType) -> None:
    """Raise PostgreSQL's error for the first string literal, compared with a column, that is
    not an input of the column's type."""
    for cast in node.find_all(exp.Cast):  # TryCast too: written as CAST, read as CAST
        if isinstance(cast.this, exp.Literal) and cast.this.is_string:
            _check(cast.this.this, cast.to.sql(dialect="duckdb"))
    for comparison in node.find_all(*_COMPARISONS):
        for column, values in _operands(comparison):
            kind = column_type(column)
            for value in values:
                if kind is not None and isinstance(value, exp.Literal) and value.is_string:
                    _check(value.this, kind)


def _operands(comparison: exp.Expression) -> list[tuple[exp.Column, list[exp.Expression]]]:
    """The comparison's column operands, each with what it is compared with."""
    if isinstance(comparison, exp.In):
        pairs = [(comparison.this, comparison.expressions)]
    elif isinstance(comparison, exp.Between):
        pairs = [(comparison.this, [comparison.args.get("low"), comparison.args.get("high")])]
    else:  # either side may be the column
        pairs = [(comparison.this, [comparison.expression]), (comparison.expression, [comparison.this])]
    return [(column, values) for column, values in ((_column(c), v) for c, v in pairs) if column is not None]


def _column(node: exp.Expression | None) -> exp.Column | None:
    while isinstance(node, exp.Paren):
        node = node.this
    return node if isinstance(node, exp.Column) else None


def _check(text: str, column_type: str) -> None:
    base = column_type.split("(")[0].strip().upper()
    if base in _INTEGERS:
        name, bits = _INTEGERS[base]
        if not _INTEGER_TEXT.fullmatch(text):
            raise _invalid(name, text)
        if not -(2**bits) <= int(text) < 2**bits:
            raise DataError(
                f'value "{text}" is out of range for type {name}',
                sqlstate="22003",
                hint="compare with a value the column's type can hold; nothing was charged",
            )
    elif base in _FLOATS:
        if not _NUMBER_TEXT.fullmatch(text):
            raise _invalid(_FLOATS[base], text)
    elif base in ("BOOLEAN", "BOOL", "LOGICAL"):
        word = text.strip().lower()
        matches = [w for w in _BOOLEAN_WORDS if w.startswith(word)] if word else []
        if len(matches) != 1 and word not in _BOOLEAN_WORDS:
            raise _invalid("boolean", text)
    elif base in _DATES:
        name, cast_type = _DATES[base]
        if not _reads_as(text, cast_type):
            raise DataError(
                f'dpsql cannot read "{text}" as a {name}',
                sqlstate="22007",
                hint="write it in ISO 8601 form, '2024-01-31' or '2024-01-31 13:45:00' (CURRENT_DATE "
                "for today); nothing was charged",
            )


_reader: list[duckdb.DuckDBPyConnection] = []
_reader_lock = threading.Lock()


@lru_cache(maxsize=4096)
def _reads_as(text: str, cast_type: str) -> bool:
    """Whether DuckDB's cast reads `text` as a `cast_type`, on one connection of no data shared
    by every thread (a call per distinct string: the answers are kept)."""
    with _reader_lock:
        if not _reader:
            _reader.append(duckdb.connect())
        return bool(_reader[0].execute(f"SELECT TRY_CAST($1 AS {cast_type}) IS NOT NULL", [text]).fetchone()[0])


def _invalid(type_name: str, text: str) -> DataError:
    return DataError(
        f'invalid input syntax for type {type_name}: "{text}"',
        sqlstate="22P02",
        hint=f"write a value of type {type_name} there (quoted or not); nothing was charged",
    )

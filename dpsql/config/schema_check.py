"""The policy checked against the engine's schema: declared tables and columns exist, bounds
are on numbers, keys are of their column's type."""

from __future__ import annotations

import datetime
from typing import Mapping

from ..errors import PolicyError
from .model import ColumnPolicy, Policy


class SchemaMismatch(PolicyError):
    """The policy disagrees with the data's schema: the first problem is the message and hint
    (what `dpsql serve` stops with), `problems` holds every one (what `dpsql policy check` lists)."""

    def __init__(self, problems: list[PolicyError]):
        super().__init__(problems[0].message, hint=problems[0].hint)
        self.problems = problems


def check_against_schema(policy: Policy, schema: Mapping[str, Mapping[str, str]]) -> None:
    """Check the policy against the data's schema (table -> column -> type name); raise
    SchemaMismatch with every problem (schema_problems), the first as its message."""
    problems = schema_problems(policy, schema)
    if problems:
        raise SchemaMismatch(problems)


def schema_problems(policy: Policy, schema: Mapping[str, Mapping[str, str]]) -> list[PolicyError]:
    """Every mismatch between the policy and the data's schema, in the policy's order.

    Every declared table, column, privacy unit and keys_from must exist, and bounds must sit on
    numeric columns; each message names file, table, column and the fix.
    """
    problems: list[PolicyError] = []
    for table in policy.tables.values():
        where = f"{policy.path}: [tables.{table.name}]"
        cols = schema.get(table.name)
        if cols is None:
            origin = str(table.source or policy.engine.database)
            problems.append(
                PolicyError(
                    f"{where}: no table {table.name!r} in {origin}",
                    hint="fix the table name, or give the table a source file",
                )
            )
            continue
        if table.privacy_unit and not table.row_unit and table.privacy_unit not in cols:
            problems.append(
                PolicyError(
                    f"{where}: privacy_unit column {table.privacy_unit!r} does not exist",
                    hint=f"the table's columns are: {', '.join(cols)}",
                )
            )
        for col in table.columns.values():
            problem = _column_problem(where, col, cols, schema)
            if problem is not None:
                problems.append(problem)
    return problems


def _column_problem(
    where: str, col: ColumnPolicy, cols: Mapping[str, str], schema: Mapping[str, Mapping[str, str]]
) -> PolicyError | None:
    """The first mismatch of one declared column with the data (None: it fits)."""
    if col.name not in cols:
        return PolicyError(
            f"{where} column {col.name!r}: no such column in the data",
            hint=f"the table's columns are: {', '.join(cols)}",
        )
    if col.bounded and not is_numeric_type(cols[col.name]):
        return PolicyError(
            f"{where} column {col.name!r}: bounds on a {cols[col.name]} column",
            hint="declare lower/upper only on numeric columns; use keys for categories",
        )
    if col.dates and cols[col.name].upper() != "DATE":
        return PolicyError(
            f"{where} column {col.name!r}: date bounds on a {cols[col.name]} column",
            hint="declare date bounds only on DATE columns",
        )
    if col.keys is not None and (wrong := _key_type_problem(where, col, cols[col.name])) is not None:
        return wrong
    if col.keys_from:
        t, c = col.keys_from
        if c not in schema.get(t, {}):
            return PolicyError(
                f'{where} column {col.name!r}: keys_from = "{t}.{c}" does not resolve: table {t!r} has no column {c!r}',
                hint=f"columns of {t}: {', '.join(schema.get(t, {}))}",
            )
    return None


def _key_kind(type_name: str) -> tuple[str, tuple[type, ...]] | None:
    """What TOML values a column of this type takes as keys (None: not checked)."""
    base = type_name.upper().split("(")[0]
    if base in INTEGER_TYPES:
        return "integers", (int,)
    if base in NUMERIC_TYPES:
        return "numbers", (int, float)
    if base in ("VARCHAR", "TEXT", "STRING", "CHAR", "BPCHAR"):
        return "strings", (str,)
    if base == "DATE":
        return "dates", (datetime.date,)
    if base in ("BOOLEAN", "BOOL"):
        return "booleans", (bool,)
    return None


def _key_type_problem(where: str, col: ColumnPolicy, type_name: str) -> PolicyError | None:
    """Keys must be values of the column's own type: ' 1', '01' and 1 are one INTEGER key to the
    engine, and a key released once per spelling would be released several times."""
    kind = _key_kind(type_name)
    if kind is None:
        return None
    label, types = kind
    for k in col.keys:
        ok = isinstance(k, types) and (bool in types or not isinstance(k, bool))
        if not ok or (label == "dates" and isinstance(k, datetime.datetime)):
            return PolicyError(
                f"{where} column {col.name!r}: key {k!r} is not of the column's type {type_name}",
                hint=f"list {label} as keys of this column, each once",
            )
    return None


INTEGER_TYPES = (
    "TINYINT",
    "SMALLINT",
    "INTEGER",
    "INT",
    "BIGINT",
    "HUGEINT",
    "UTINYINT",
    "USMALLINT",
    "UINTEGER",
    "UBIGINT",
    "UHUGEINT",
)


NUMERIC_TYPES = (*INTEGER_TYPES, "FLOAT", "DOUBLE", "REAL", "DECIMAL", "NUMERIC")


def is_numeric_type(type_name: str) -> bool:
    return type_name.upper().split("(")[0] in NUMERIC_TYPES

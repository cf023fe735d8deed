"""The [tables.NAME] sections: privacy units, limits, sources, and each column's bounds, keys and
type (pure)."""

from __future__ import annotations

import datetime
import math
import re
from pathlib import Path
from typing import Mapping

from ..errors import PolicyError
from .model import FILE_TYPES, ROW_UNIT, SOURCE_FORMATS, ColumnPolicy, TablePolicy
from .reader import _Reader


def _parse_table(r: _Reader, name: str, base: Path) -> TablePolicy:
    r.unknown_keys({"public", "privacy_unit", "max_groups", "max_rows", "max_contributions", "source", "columns"})
    public = r.data.get("public", False)
    if not isinstance(public, bool):
        raise r.fail("public must be true or false", "write public = true for a table with no private data")
    unit = r.data.get("privacy_unit")
    if public and unit is not None:
        raise r.fail("a public table has no privacy unit", "remove privacy_unit, or remove public = true")
    if not public:
        if unit is None:
            raise r.fail(
                "missing privacy_unit",
                'name the column that identifies a person (privacy_unit = "patient_id"), '
                'or privacy_unit = "row" if every row is a different person, or public = true',
            )
        if not isinstance(unit, str) or not unit:
            raise r.fail(
                f'privacy_unit = {unit!r} must be a column name or "row"', 'for example privacy_unit = "patient_id"'
            )
    source = r.data.get("source")
    source_path = None
    if source is not None:
        source_path = (base / source).resolve()
        if source_path.suffix.lower() not in SOURCE_FORMATS:
            raise r.fail(f"source {source!r} has an unknown format", f"use one of: {', '.join(SOURCE_FORMATS)}")
        if not source_path.exists():
            raise r.fail(
                f"source file {source_path} does not exist", "fix the path (it is relative to the policy file)"
            )
    columns_raw = r.data.get("columns", {})
    if not isinstance(columns_raw, dict):
        raise r.fail("columns must be a table", "write columns.NAME = { lower = 0, upper = 100 }")
    columns: dict[str, ColumnPolicy] = {}
    for col, spec in columns_raw.items():
        columns[col.lower()] = _parse_column(
            _Reader(r.path, f"{r.where} column {col!r}", spec if isinstance(spec, dict) else {"?": spec}), col
        )
    return TablePolicy(
        name=name.lower(),
        public=public,
        privacy_unit=None if public else (unit if unit == ROW_UNIT else unit.lower()),
        max_groups=r.integer("max_groups", 1),
        max_rows=r.integer("max_rows", 1),
        max_contributions=r.integer("max_contributions", 1) if "max_contributions" in r.data else None,
        source=source_path,
        columns=columns,
    )


def _parse_column(r: _Reader, name: str) -> ColumnPolicy:
    r.unknown_keys({"lower", "upper", "keys", "keys_from", "type"})
    declared = r.data.get("type")
    if declared is not None:
        if not isinstance(declared, str) or not (
            declared.upper() in FILE_TYPES or _DECIMAL.fullmatch(declared.upper())
        ):
            raise r.fail(
                f"type = {declared!r} is not a supported column type",
                f"use one of {', '.join(FILE_TYPES)} or DECIMAL(p, s)",
            )
        declared = declared.upper().replace(" ", "")
    lower, upper = r.data.get("lower"), r.data.get("upper")
    if (lower is None) != (upper is None):
        raise r.fail("has only one of lower and upper", "declare both bounds, e.g. { lower = 0, upper = 100 }")
    dates = None
    if isinstance(lower, datetime.date) or isinstance(upper, datetime.date):
        if not all(isinstance(v, datetime.date) and not isinstance(v, datetime.datetime) for v in (lower, upper)):
            raise r.fail("date bounds must both be dates", "for example { lower = 2023-01-01, upper = 2024-12-31 }")
        if lower > upper:
            raise r.fail(f"lower bound {lower} is after upper bound {upper}", "swap them")
        dates, lower, upper = (lower, upper), None, None
    elif lower is not None:
        for key, value in (("lower", lower), ("upper", upper)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise r.fail(f"{key} = {value!r} is not a finite number", "bounds must be finite numbers")
        if lower > upper:
            raise r.fail(
                f"lower bound {lower} is greater than upper bound {upper}",
                f"swap them: {{ lower = {upper}, upper = {lower} }}",
            )
    keys = r.data.get("keys")
    keys_from = r.data.get("keys_from")
    if keys is not None and keys_from is not None:
        raise r.fail("has both keys and keys_from", "declare the key domain once")
    if isinstance(keys, dict):
        keys = _key_range(r, keys)
    if keys is not None:
        if not isinstance(keys, list) or not keys:
            raise r.fail("keys must be a non-empty list", 'for example keys = ["F", "M", "X"]')
        for k in keys:
            if isinstance(k, float) and not math.isfinite(k):
                raise r.fail(f"key {k} is not finite", "list only finite values")
            if isinstance(k, (dict, list)):
                raise r.fail(f"key {k!r} is not a single value", "list strings, numbers, booleans or dates")
        if len(set(keys)) != len(keys):
            raise r.fail("keys has duplicates", "list each key once")
    parsed_from = None
    if keys_from is not None:
        if not isinstance(keys_from, str) or keys_from.count(".") != 1:
            raise r.fail(
                f"keys_from = {keys_from!r} must name a public table column as TABLE.COLUMN",
                'for example keys_from = "wards.name"',
            )
        t, c = keys_from.lower().split(".")
        parsed_from = (t, c)
    return ColumnPolicy(
        name=name.lower(),
        lower=None if lower is None else float(lower),
        upper=None if upper is None else float(upper),
        keys=tuple(keys) if keys is not None else None,
        keys_from=parsed_from,
        dates=dates,
        type=declared,
    )


MAX_KEYS = 100_000


_DECIMAL = re.compile(r"DECIMAL\(\s*\d{1,2}\s*,\s*\d{1,2}\s*\)")


def _key_range(r: _Reader, spec: dict) -> list[int]:
    """keys = { range = [0, 110] }: every integer from the first to the last, both included."""
    bounds = spec.get("range")
    if set(spec) != {"range"} or not (
        isinstance(bounds, list)
        and len(bounds) == 2
        and all(isinstance(b, int) and not isinstance(b, bool) for b in bounds)
    ):
        raise r.fail(f"keys = {spec!r} is not a key list or an integer range", "write keys = { range = [0, 110] }")
    lo, hi = bounds
    if not lo <= hi or hi - lo >= MAX_KEYS:
        raise r.fail(f"keys range [{lo}, {hi}] must be ascending and hold at most {MAX_KEYS} keys", "narrow the range")
    return list(range(lo, hi + 1))


def _check_key_references(path: Path, tables: Mapping[str, TablePolicy]) -> None:
    for table in tables.values():
        for col in table.columns.values():
            if col.keys_from is None:
                continue
            t, _ = col.keys_from
            where = f"[tables.{table.name}] column {col.name!r}"
            target = tables.get(t)
            if target is None:
                raise PolicyError(
                    f"{path}: {where}: keys_from names table {t!r}, which the policy does not declare",
                    hint=f"declare [tables.{t}] with public = true, or fix the name",
                )
            if not target.public:
                raise PolicyError(
                    f"{path}: {where}: keys_from names table {t!r}, which is private",
                    hint=(
                        "key domains must come from a public table: "
                        "add public = true to it if it holds no personal data"
                    ),
                )

"""[synopses.NAME] sections of the policy, in exactly this form:

    [synopses.patients_dashboard]
    table = "patients"
    dimensions = ["region", "sex", "smoker", { column = "age", width = 10 }]
    measures = ["count", "sum(income)"]
    epsilon = 0.5
    charged_to = "bob"          # an analyst, or "everyone"
    # optional, to tune what is measured (strategy.py) to the dashboard's charts:
    charts = [["region"], ["sex"], ["region", "sex"], ["age"], []]  # GROUP BY of each chart
    filters = ["region"]        # dimensions the charts are filtered on (one value at a time)
    # optional, the noise: "laplace" (pure epsilon), or "gaussian" (zCDP: rho from epsilon and
    # delta); by default gaussian when every payer's filter is zcdp, else laplace
    mechanism = "gaussian"
    delta = 1e-8                # the Gaussian's delta (default: the policy's per-query delta)

A dimension is a column with declared keys, or a bounded numeric column bucketed by `width`,
or a date column bucketed by `unit` = "month" or "year"; written `other.column` it is a column
of another private table, joined to the synopsis's table through the privacy unit (each
table's privacy_unit column), as a per-query join would be: `dimensions = ["diagnosis",
"patients.region"]` on visits. A measure is `count` or `sum(col)` of a bounded numeric column
of the synopsis's own table. Parsing is pure: the policy's own tables and users are the only
thing checked against.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Mapping

from ..errors import PolicyError

EVERYONE = "everyone"
DATE_UNITS = ("month", "year")
MAX_CELLS = 1_000_000  # the full cube's cells: its least squares runs in memory
MAX_DIMENSIONS = 10  # the strategy weighs all 2^k marginals (about 4 s at 10)
_SUM = re.compile(r"sum\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)", re.IGNORECASE)


@dataclass(frozen=True)
class Dimension:
    column: str
    width: float | None = None  # a bounded numeric column's bucket width
    unit: str | None = None  # a date column's bucket: month or year
    table: str | None = None  # a table joined through the privacy unit (None: the synopsis's)

    @property
    def label(self) -> str:
        return self.column if self.table is None else f"{self.table}.{self.column}"

    @property
    def bucketed(self) -> bool:
        return self.width is not None or self.unit is not None

    def describe(self) -> str:
        if self.width is not None:
            return f"{self.label} (width {self.width:g})"
        if self.unit is not None:
            return f"{self.label} (by {self.unit})"
        return self.label


@dataclass(frozen=True)
class Measure:
    kind: str  # count | sum
    column: str | None = None

    @property
    def name(self) -> str:
        return "count" if self.kind == "count" else f"sum({self.column})"


@dataclass(frozen=True)
class SynopsisSpec:
    name: str
    table: str
    dimensions: tuple[Dimension, ...]
    measures: tuple[Measure, ...]
    epsilon: Fraction
    charged_to: str
    charts: tuple[tuple[int, ...], ...] | None = None  # each declared chart's dimensions (indexes)
    filters: tuple[int, ...] = ()  # dimensions (indexes) the charts are filtered on
    mechanism: str | None = None  # laplace | gaussian; None: by the payers' filters (publish.py)
    delta: Fraction | None = None  # the Gaussian's delta; None: the policy's per-query delta

    @property
    def joined(self) -> tuple[str, ...]:
        """The other tables its dimensions come from, joined through the privacy unit."""
        return tuple(dict.fromkeys(d.table for d in self.dimensions if d.table is not None))

    def readers(self, users: Mapping[str, Any]) -> tuple[str, ...]:
        """The analysts who may read it: whoever paid for it."""
        return tuple(users) if self.charged_to == EVERYONE else (self.charged_to,)


REQUIRED = ("table", "dimensions", "measures", "epsilon", "charged_to")
ALLOWED = REQUIRED + ("charts", "filters", "mechanism", "delta")
MECHANISMS = ("laplace", "gaussian")


def parse_synopses(
    raw: Any, path: Path, tables: Mapping[str, Any], users: Mapping[str, Any]
) -> dict[str, SynopsisSpec]:
    """Every [synopses.NAME] section, validated; PolicyError names the place and the fix."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise PolicyError(f"{path}: synopses is not a table", hint="write each as a [synopses.NAME] section")
    out = {}
    for name, body in raw.items():
        where = f"{path}: [synopses.{name}]"
        if not isinstance(body, dict):
            raise PolicyError(f"{where}: is not a table", hint=f"write it as a [synopses.{name}] section")
        out[name.lower()] = _parse_one(name.lower(), body, where, tables, users)
    return out


def _fail(where: str, what: str, fix: str) -> PolicyError:
    return PolicyError(f"{where}: {what}", hint=fix)


def _parse_one(
    name: str, body: Mapping[str, Any], where: str, tables: Mapping[str, Any], users: Mapping[str, Any]
) -> SynopsisSpec:
    extra = sorted(set(body) - set(ALLOWED))
    if extra:
        raise _fail(where, f"unknown key {extra[0]!r}", f"allowed keys here are: {', '.join(ALLOWED)}")
    for key in REQUIRED:
        if key not in body:
            raise _fail(
                where, f"missing {key}", "see the example in README: table, dimensions, measures, epsilon, charged_to"
            )
    table_name = body["table"]
    table = tables.get(table_name.lower()) if isinstance(table_name, str) else None
    if table is None:
        raise _fail(
            where, f"table = {table_name!r} is not a table of the policy", f"name one of: {', '.join(sorted(tables))}"
        )
    if table.public:
        raise _fail(where, f"table {table.name!r} is public", "a public table needs no synopsis: query it directly")
    dims_raw = body["dimensions"]
    if not isinstance(dims_raw, list) or not dims_raw:
        raise _fail(
            where,
            "dimensions must be a non-empty list",
            'for example dimensions = ["region", { column = "age", width = 10 }]',
        )
    if len(dims_raw) > MAX_DIMENSIONS:
        raise _fail(
            where,
            f"{len(dims_raw)} dimensions, more than {MAX_DIMENSIONS}",
            "split the dashboard into synopses of fewer dimensions",
        )
    dimensions = tuple(_dimension(d, where, table, tables) for d in dims_raw)
    names = [d.label for d in dimensions]
    if len(set(names)) != len(names):
        raise _fail(where, "a column is listed twice in dimensions", "list each dimension once")
    measures_raw = body["measures"]
    if not isinstance(measures_raw, list) or not measures_raw:
        raise _fail(where, "measures must be a non-empty list", 'for example measures = ["count", "sum(income)"]')
    measures = tuple(_measure(m, where, table) for m in measures_raw)
    if len(set(measures)) != len(measures):
        raise _fail(where, "a measure is listed twice", "list each measure once")
    eps = body["epsilon"]
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0 or eps != eps or eps == float("inf"):
        raise _fail(where, f"epsilon = {eps!r} must be a positive number", "for example epsilon = 0.5")
    epsilon = Fraction(repr(eps)) if isinstance(eps, float) else Fraction(eps)
    who = body["charged_to"]
    if not isinstance(who, str) or (who != EVERYONE and who not in users):
        raise _fail(
            where,
            f'charged_to = {who!r} is neither an analyst of the policy nor "everyone"',
            f'name one of: {", ".join(sorted(users))}, or "everyone"',
        )
    cells = 1
    for d in dimensions:
        cells *= dimension_size(d, table if d.table is None else tables[d.table])
    if cells > MAX_CELLS:
        raise _fail(
            where, f"the full cube has {cells} cells, more than {MAX_CELLS}", "use fewer dimensions or wider buckets"
        )
    charts = None if "charts" not in body else tuple(_chart(c, where, names) for c in _list(body, "charts", where))
    if charts == ():
        raise _fail(
            where,
            "charts is empty",
            "leave it out (every chart of one or two dimensions), or list the "
            'charts: [["region"], ["region", "sex"], []]',
        )
    filters = tuple(sorted({_index(f, where, names, "filters") for f in _list(body, "filters", where)}))
    mechanism = body.get("mechanism")
    if mechanism is not None and mechanism not in MECHANISMS:
        raise _fail(where, f"mechanism = {mechanism!r} is not laplace or gaussian", 'write mechanism = "gaussian"')
    delta = body.get("delta")
    if delta is not None:
        if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0 < delta < 1:
            raise _fail(where, f"delta = {delta!r} must be a number between 0 and 1", "for example delta = 1e-8")
        if mechanism == "laplace":
            raise _fail(
                where, "delta is set but the mechanism is laplace", 'remove delta, or set mechanism = "gaussian"'
            )
        delta = Fraction(repr(float(delta)))
    return SynopsisSpec(name, table.name, dimensions, measures, epsilon, who, charts, filters, mechanism, delta)


def _list(body: Mapping[str, Any], key: str, where: str) -> list:
    raw = body.get(key, [])
    if not isinstance(raw, list):
        raise _fail(
            where,
            f"{key} must be a list",
            'for example charts = [["region"], ["region", "sex"]] and filters = ["region"]',
        )
    return raw


def _index(raw: Any, where: str, names: list[str], key: str) -> int:
    """The dimension a chart or filter names (its column, as listed in dimensions)."""
    if not isinstance(raw, str) or raw.lower() not in names:
        raise _fail(where, f"{key}: {raw!r} is not one of the dimensions", f"name one of: {', '.join(names)}")
    return names.index(raw.lower())


def _chart(raw: Any, where: str, names: list[str]) -> tuple[int, ...]:
    """A declared chart: the dimensions it groups by ([] is the total)."""
    if not isinstance(raw, list):
        raise _fail(
            where,
            f"charts: {raw!r} is not a list of dimensions",
            'write each chart as the list of the dimensions it groups by: [["region"], ["region", "sex"], []]',
        )
    dims = tuple(sorted({_index(d, where, names, "charts") for d in raw}))
    if len(dims) != len(raw):
        raise _fail(where, f"charts: {raw!r} names a dimension twice", "list each dimension of a chart once")
    return dims


def _joined(raw: str, where: str, table: Any, tables: Mapping[str, Any]) -> tuple[str, Any, str | None]:
    """A dimension's column name, its table's policy and the joined table's name (None: its own):
    `other.column` names a column of another private table, joined through the privacy unit."""
    name = raw.lower()
    if "." not in name:
        return name, table, None
    other_name, column = name.split(".", 1)
    if other_name == table.name:
        return column, table, None
    other = tables.get(other_name)
    if other is None:
        raise _fail(
            where,
            f"dimension {raw!r}: {other_name!r} is not a table of the policy",
            f"name one of: {', '.join(sorted(tables))}",
        )
    if other.public:
        raise _fail(
            where,
            f"dimension {raw!r}: {other.name} is public, not joined through the privacy unit",
            "a synopsis's dimensions come from its table or a private table joined on the privacy unit",
        )
    return column, other, other.name


def _dimension(raw: Any, where: str, table: Any, tables: Mapping[str, Any]) -> Dimension:
    if isinstance(raw, str):
        column, table, joined = _joined(raw, where, table, tables)
        col = table.columns.get(column)
        if col is None or (col.keys is None and col.keys_from is None):
            raise _fail(
                where,
                f"dimension {raw!r} has no declared keys in [tables.{table.name}]",
                f"declare columns.{column} = {{ keys = [...] }}, or bucket a bounded column: "
                f'{{ column = "{raw}", width = 10 }}',
            )
        if col.keys is None:
            raise _fail(
                where,
                f"dimension {raw!r} takes its keys from a public table (keys_from)",
                "list its keys in the policy (keys = [...]) for a synopsis",
            )
        return Dimension(col.name, table=joined)
    if not isinstance(raw, dict):
        raise _fail(
            where,
            f"dimension {raw!r} is neither a column name nor {{ column = ..., width = ... }}",
            'write "region" or { column = "age", width = 10 }',
        )
    extra = sorted(set(raw) - {"column", "width", "unit"})
    if extra or "column" not in raw:
        raise _fail(
            where,
            f"dimension {raw!r}: {'unknown key ' + repr(extra[0]) if extra else 'missing column'}",
            'write { column = "age", width = 10 } or { column = "visit_date", unit = "month" }',
        )
    name, table, joined = _joined(str(raw["column"]), where, table, tables)
    col = table.columns.get(name)
    if col is None:
        raise _fail(
            where,
            f"dimension column {name!r} is not declared in [tables.{table.name}]",
            f"declare its bounds: columns.{name} = {{ lower = ..., upper = ... }}",
        )
    if "width" in raw:
        w = raw["width"]
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not w > 0:
            raise _fail(where, f"dimension {name!r}: width = {w!r} must be a positive number", "for example width = 10")
        if not col.bounded:
            raise _fail(
                where,
                f"dimension {name!r} is bucketed by width but has no numeric bounds",
                f"declare columns.{name} = {{ lower = ..., upper = ... }}",
            )
        if "unit" in raw:
            raise _fail(where, f"dimension {name!r} has both width and unit", "keep one")
        return Dimension(name, width=float(w), table=joined)
    unit = raw.get("unit")
    if unit not in DATE_UNITS:
        raise _fail(
            where,
            f'dimension {name!r}: give width = N (numbers) or unit = "month" | "year" (dates)',
            'for example { column = "visit_date", unit = "month" }',
        )
    if col.dates is None:
        raise _fail(
            where,
            f"dimension {name!r} is bucketed by {unit} but has no date bounds",
            f"declare columns.{name} = {{ lower = 2023-01-01, upper = 2024-12-31 }}",
        )
    return Dimension(name, unit=unit, table=joined)


def _measure(raw: Any, where: str, table: Any) -> Measure:
    if raw == "count":
        return Measure("count")
    m = _SUM.fullmatch(raw.strip()) if isinstance(raw, str) else None
    if m is None:
        raise _fail(
            where, f"measure {raw!r} is not count or sum(column)", 'for example measures = ["count", "sum(income)"]'
        )
    col = table.columns.get(m.group(1).lower())
    if col is None or not col.bounded or col.dates is not None:
        raise _fail(
            where,
            f"measure {raw!r}: {m.group(1)} has no numeric bounds in [tables.{table.name}]",
            f"declare columns.{m.group(1)} = {{ lower = ..., upper = ... }}: a sum is bounded as any query is",
        )
    return Measure("sum", col.name)


def dimension_size(d: Dimension, table: Any) -> int:
    """How many cells the dimension has, from the policy alone."""
    col = table.columns[d.column]
    if d.width is not None:
        return math.floor(col.upper / d.width) - math.floor(col.lower / d.width) + 1
    if d.unit is not None:
        first, last = col.dates
        if d.unit == "year":
            return last.year - first.year + 1
        return (last.year - first.year) * 12 + last.month - first.month + 1
    return len(col.keys)

"""Key domains of GROUP BY expressions, derived from the policy alone.

With a declared domain every key is shown (empty groups with noise), so no partition
selection is needed and the query needs no delta. Besides a column's declared keys:

- a bounded integer column: every integer between its bounds (`GROUP BY age`);
- a DATE column with date bounds: every day between them;
  (both a `Span`: a range the engine enumerates, so a century of days is a few SQL nodes);
- CASE ... THEN 'a' ... ELSE 'b' END with literal results: those literals;
- width_bucket(x, lo, hi, n) with literal arguments: 0 .. n + 1;
- EXTRACT(MONTH | DOW | QUARTER | ... FROM d): the field's fixed range;
- any other row-level function of one column with such a domain: its image, computed by the
  engine from the column's domain inside the bounded query (date_trunc('month', d),
  FLOOR(age / 10) * 10, EXTRACT(YEAR FROM d), ...), so analysis stays pure.

Rows whose key falls outside its domain (NULL among them) are left out of every group.
"""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence, overload

from sqlglot import exp

from ..config import INTEGER_TYPES, is_numeric_type
from ..errors import unsupported
from .bounds import EXTRACT_RANGES
from .frozen import Owned
from .scope import Source

MAX_DERIVED_KEYS = 100_000
COLUMN = exp.column("c", table="d")  # the placeholder an image domain's expression is written over


@dataclass(frozen=True)
class Span(Sequence[Any]):
    """Every integer, or every day, from `first` on, `size` of them: a declared range kept as its
    ends, not its values (rendered as a series the engine generates, sql/rewrite.py)."""

    first: Any  # int or datetime.date
    size: int

    def __len__(self) -> int:
        return self.size

    @overload
    def __getitem__(self, i: int) -> Any: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[Any, ...]: ...

    def __getitem__(self, i):
        if isinstance(i, slice):
            return tuple(self[j] for j in range(*i.indices(self.size)))
        if i < 0:
            i += self.size
        if not 0 <= i < self.size:
            raise IndexError(i)
        return self.first + (datetime.timedelta(days=i) if self.dates else i)

    def __iter__(self) -> Iterator[Any]:
        return (self[i] for i in range(self.size))

    @property
    def dates(self) -> bool:
        return isinstance(self.first, datetime.date)


@dataclass(frozen=True)
class Image:
    """Keys = { expr(c) : c in values }, computed by the engine; expr is over d.c."""

    expr: Owned[exp.Expression] = Owned()
    values: tuple[Any, ...]
    type_name: str | None


def column_values(source: Source, name: str) -> tuple[Any, ...] | None:
    """Every value a column may take, as the policy declares it (None: not enumerable)."""
    policy = source.table.column(name)
    if policy.keys is not None:
        return policy.keys
    type_name = (source.columns.get(name) or "").upper().split("(")[0]
    if policy.bounded and type_name in INTEGER_TYPES:
        lo, hi = math.ceil(policy.lower), math.floor(policy.upper)
        if 0 <= hi - lo < MAX_DERIVED_KEYS:
            return Span(lo, hi - lo + 1)
    if policy.dates is not None:
        first, last = policy.dates
        days = (last - first).days
        if 0 <= days < MAX_DERIVED_KEYS:
            return Span(first, days + 1)
    return None


def literal_domain(expr: exp.Expression) -> tuple[Any, ...] | None:
    """A domain that follows from the expression's form alone."""
    if isinstance(expr, exp.Case):
        results = [i.args.get("true") for i in expr.args.get("ifs") or []] + [expr.args.get("default")]
        values = []
        literals = [r for r in results if r is not None and not isinstance(r, exp.Null)]
        if not all(isinstance(r, exp.Literal) for r in literals):
            return None
        if len({r.is_string for r in literals}) > 1:
            # The engine unifies 1 and '1' into one key; as Python values they would be two,
            # and one group released twice, with independent noise, would average it away.
            raise unsupported(
                f"{expr.sql(dialect='postgres')}: a group key mixes text and number results",
                hint="give every THEN and ELSE branch the same type, e.g. all quoted: THEN '1' ... ELSE '2'",
            )
        for r in literals:
            v = r.this if r.is_string else _number(r.this)
            if v not in values:
                values.append(v)
        return tuple(values) or None
    if isinstance(expr, exp.WidthBucket):
        n = expr.args.get("num_buckets")
        if isinstance(n, exp.Literal) and not n.is_string and n.this.isdigit() and 0 < int(n.this) < MAX_DERIVED_KEYS:
            return tuple(range(0, int(n.this) + 2))
    if isinstance(expr, exp.Extract) and isinstance(expr.this, exp.Var):
        field = expr.this.name.upper()
        if field in EXTRACT_RANGES:
            lo, hi = EXTRACT_RANGES[field]
            return tuple(range(lo, hi + 1))
    return None


def image(expr: exp.Expression, source_of: Callable[[str], Source]) -> Image | None:
    """The domain of a function of one enumerable column, as an engine-computed image."""
    columns = {(c.table, c.name) for c in expr.find_all(exp.Column)}
    if len(columns) != 1 or expr.find(exp.Subquery, exp.Select) is not None:
        return None
    ((alias, name),) = columns
    source = source_of(alias)
    values = column_values(source, name)
    if values is None:
        return None
    over = expr.copy().transform(lambda n: COLUMN.copy() if isinstance(n, exp.Column) else n, copy=False)
    type_name = source.columns.get(name)
    return Image(
        over, values, type_name if type_name and (is_numeric_type(type_name) or type_name.upper() == "DATE") else None
    )


def _number(text: str) -> int | float:
    """A numeric literal's value: exact for integers (no rounding through a float, which could
    merge two keys the engine keeps apart), a float otherwise."""
    try:
        return int(text)
    except ValueError:
        value = float(text)
        return int(value) if value.is_integer() else value

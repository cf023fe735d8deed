"""Measures: the noisy vectors a plan releases, one integer per group in fixed-point units of
2**-bits, each with its per-row value, its per-unit partials and its per-row bound.

The bound is what sensitivity rests on (guarantee/bounding.py multiplies it by the rows and groups
a unit may reach); the SQL here is what makes the bound true: a row adds at most `row_bound`
because its value is clamped before it is converted to an integer. Which measures an aggregate
needs is its family's choice (families.py); the kinds are classes, so no module compares
kind names.
"""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass
from typing import Any, ClassVar

from sqlglot import exp

from ..sql import build as b
from ..sql.build import dtype
from ..sql.frozen import Owned
from ..sql.nonfailing import clamp, finite, nonfailing, try_casts, try_wrap

FIXED_POINT_DIGITS = 24  # binary digits kept of the largest per-row magnitude
COUNT_BITS = 10  # fractional binary digits of counts when a unit's groups are scaled down
# A spread's count when a unit's shares are scaled (guarantee/families._Variance): its squares are
# summed centred at half their range, h^2 / 2, which the estimate adds back times the noisy count,
# so a count floored to COUNT_BITS against the squares' fixed point of FIXED_POINT_DIGITS (a unit
# of 13 rows in all: 78/1024 for 1/13, 1 % short) moved the variance by h^2 / 2 times that
# shortfall: the sample's STDDEV(cost) by diagnosis under a total bound of 1 was 12-16 % low at
# any epsilon. At 20 bits a unit's share is short by at most 2^-20 of a row. In a weighted copy
# every measure reads the same COUNT_BITS row weights, so the count, scaled up to 20 bits, agrees.
FINE_COUNT_BITS = 20


def literal(value: Any) -> exp.Expression:
    """A declared key or category as a SQL literal of its own type."""
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, (int, float)):
        return b.node(value)
    if isinstance(value, datetime.date):
        return exp.Cast(this=exp.Literal.string(value.isoformat()), to=dtype("DATE"))
    return exp.Literal.string(str(value))


@dataclass(frozen=True)
class Measure:
    """One noisy vector. `value` is the row expression it reads (None: every row)."""

    value: Owned[exp.Expression | None] = Owned()
    lower: float = 0.0
    upper: float = 0.0
    centre: float = 0.0
    bits: int = 0
    bins: int = 0
    categories: tuple[Any, ...] | None = None  # a histogram over these values instead of ranges
    # A SUM's own total: under a total bound, clipped by the L1 norm of the unit's own sums
    # (C * row_bound / max(that norm, C * row_bound)) rather than by its rows. Never an AVG's
    # or a variance's sum, whose ratio to a count must see the same rows.
    own_norm: bool = False

    name: ClassVar[str]
    width: ClassVar[int] = 1  # columns of this measure in the bounded query's result
    weighted_rows: ClassVar[bool] = True  # bounded by a unit's rows (a unit count is not: one per group)

    @property
    def row_bound(self) -> int:
        """Largest |per-row integer| this measure adds (fixed-point units)."""
        return 1 << self.bits

    def group_bound(self, max_rows: int) -> int:
        """Largest |integer| one unit adds to one group: max_rows rows of row_bound."""
        return max_rows * self.row_bound

    @property
    def unit_scale(self) -> float:
        return 2.0**-self.bits

    def signature(self) -> tuple[Any, ...]:
        value = self.value
        return (
            self.name,
            value.sql() if value is not None else None,
            self.lower,
            self.upper,
            self.centre,
            self.bits,
            self.bins,
            self.categories,
            self.own_norm,
        )

    def spec(self) -> tuple[Any, ...]:
        """What makes two measures' per-row values equal whatever the columns' table alias
        (a weighted copy stores a measure's per-row values once per table)."""
        value = self.value
        text = None if value is None else value.transform(_unqualified).sql()
        return (self.name, text, self.lower, self.upper, self.centre, self.bits, self.own_norm)

    def read(self) -> exp.Expression:
        """The row expression of a measure that reads one (a sum, a histogram)."""
        value = self.value
        if value is None:
            raise TypeError(f"a {self.name} measure reads a row expression")
        return value

    def _inner(self) -> str:
        value = self.value
        return "*" if value is None else value.sql(dialect="postgres")

    def describe(self) -> str:
        raise NotImplementedError

    # SQL: the bounded query's pieces for this measure, the j-th of its plan ---------------
    def row_value(self) -> exp.Expression | None:
        """The per-row integer v{j} (None: the measure reads no value)."""
        value = self.value
        return None if value is None else nonfailing(value)

    def partials(self, j: int) -> list[exp.Expression]:
        """Per unit and group: its rows with a value (n{j}), and what it sums."""
        return [] if self.value is None else [b.named(b.count(f"v{j}"), f"n{j}")]

    def rows(self, j: int) -> str:
        return "n" if self.value is None else f"n{j}"

    def raw(self, j: int) -> exp.Expression:
        """A unit's unbounded share in one group, from its partials."""
        return b.mul(self.rows(j), self.row_bound) if self.bits else b.col(self.rows(j))

    def capped(self, j: int, max_rows: int) -> exp.Expression:
        """A unit's share in one group with at most max_rows of its rows: at most group_bound."""
        least = b.func("LEAST", self.rows(j), max_rows)
        return b.mul(least, self.row_bound) if self.bits else least

    def per_row(self, j: int) -> exp.Expression | None:
        """The group's total when every row is its own unit (no per-unit stage)."""
        return b.count(None if self.value is None else f"v{j}")

    def rows_total(self, j: int) -> exp.Expression:
        """The group's total over rows of units within every limit (bounding.SplitCopy): each
        row adds its value, as `raw` would for a unit of those rows."""
        c = self.per_row(j)
        if c is None:
            raise TypeError(f"a {self.name} measure is totalled per bin, not per row")
        return b.mul(c, self.row_bound) if self.bits else c

    def weighted_row(self, value: exp.Expression, weight: exp.Expression) -> exp.Expression:
        """A row's weighted value (a weighted copy's column): its weight where it has a value."""
        return b.case((b.not_null(exp.Paren(this=value)), weight))

    def weighted(self, j: int, stored: bool) -> exp.Expression | None:
        """The group's total from weighted rows (column w; v{j} holds the weighted value when
        `stored`). A count in whole rows (one group only, see Plan.weightable) floors the one
        weighted total: the floor moves it by at most its bound too."""
        if stored:
            weighted_total = b.total(f"v{j}")
        elif self.value is None:
            weighted_total = b.total("w")
        else:
            weighted_total = b.total(b.case((b.not_null(b.col(f"v{j}")), "w")))
        if self.bits > COUNT_BITS:  # a spread's fine count (FINE_COUNT_BITS) of weights of COUNT_BITS
            return b.mul(weighted_total, 2 ** (self.bits - COUNT_BITS))
        return weighted_total if self.bits == COUNT_BITS else b.idiv(weighted_total, 2 ** (COUNT_BITS - self.bits))


class Count(Measure):
    """Rows whose `value` is not NULL (every row if None), 2**bits each."""

    name = "count"

    def describe(self) -> str:
        return f"COUNT({self._inner()})"

    def spec(self) -> tuple[Any, ...]:
        return (self.name, super().spec()[1])


class Units(Measure):
    """Distinct units in a group, 2**bits each: one per unit and group, whatever its rows."""

    name = "units"
    weighted_rows = False

    def group_bound(self, max_rows: int) -> int:
        return self.row_bound

    def describe(self) -> str:
        return "COUNT(DISTINCT unit)"

    def raw(self, j: int) -> exp.Expression:
        return b.node(self.row_bound)

    def capped(self, j: int, max_rows: int) -> exp.Expression:
        return b.node(self.row_bound)

    def per_row(self, j: int) -> exp.Expression:
        return b.count()  # every row is its own unit there

    def rows_total(self, j: int) -> exp.Expression:
        raise ValueError("a unit count needs its units, not rows")

    def weighted(self, j: int, stored: bool) -> None:
        raise ValueError("a unit count is not a weighted sum of rows")


class Sum(Measure):
    """round((clamp(value) - centre) * 2**bits) summed: |per-row| at most row_bound."""

    name = "sum"

    @property
    def row_bound(self) -> int:
        spread = max(abs(self.lower - self.centre), abs(self.upper - self.centre))
        return 0 if spread == 0 else math.floor(spread * 2.0**self.bits) + 1

    def describe(self) -> str:
        return f"SUM(clamp({self._inner()}, {self.lower:g}, {self.upper:g}) - {self.centre:g})"

    def row_value(self) -> exp.Expression:
        clamped = clamp(_as_double(self.read()), self.lower, self.upper)
        centred = b.binary(exp.Sub, clamped, self.centre) if self.centre else clamped
        return b.cast(exp.Round(this=b.mul(centred, float(2.0**self.bits))), "BIGINT")

    def partials(self, j: int) -> list[exp.Expression]:
        return super().partials(j) + [b.named(b.total(f"v{j}"), f"s{j}")]

    def raw(self, j: int) -> exp.Expression:
        return b.col(f"s{j}")

    def capped(self, j: int, max_rows: int) -> exp.Expression:
        """Its sum scaled by max_rows / n when it has n > max_rows rows (truncated toward 0),
        rather than an arbitrary max_rows of them: the same bound, and its own mean is kept."""
        n = self.rows(j)
        return b.case(
            (exp.GT(this=b.col(n), expression=b.node(max_rows)), b.idiv(b.mul(f"s{j}", max_rows), n)), default=f"s{j}"
        )

    def per_row(self, j: int) -> exp.Expression:
        return b.total(f"v{j}")

    def rows_total(self, j: int) -> exp.Expression:
        return self.per_row(j)  # rows' values in fixed point already

    def weighted_row(self, value: exp.Expression, weight: exp.Expression) -> exp.Expression:
        return weighted(exp.Paren(this=value), exp.Paren(this=weight))

    def weighted(self, j: int, stored: bool) -> exp.Expression:
        return b.total(f"v{j}" if stored else weighted(b.col(f"v{j}"), b.col("w")))


class Histogram(Measure):
    """A count split over `bins` equal-width bins of [lower, upper] (or over declared
    `categories`), one vector per bin; a unit's rows in a group still add at most max_rows in
    all, so its L1 and L2 over the bins are a count's. Its stages are rewrite.histogram_ctes."""

    name = "histogram"

    @property
    def width(self) -> int:  # type: ignore[override]
        return self.bins

    def describe(self) -> str:
        if self.categories is not None:
            return f"COUNT(*) PER VALUE OF {self._inner()} ({self.bins} declared keys)"
        return f"HISTOGRAM({self._inner()}, {self.bins} bins over [{self.lower:g}, {self.upper:g}])"

    def row_value(self) -> exp.Expression:
        """The row's bin index, 0..bins-1."""
        if self.categories is not None:
            return exp.Case(
                this=nonfailing(self.read()),
                ifs=[exp.If(this=literal(k), true=b.node(i)) for i, k in enumerate(self.categories)],
            )
        per_bin = float(self.bins / (self.upper - self.lower))
        position = exp.Floor(this=b.mul(b.binary(exp.Sub, _as_double(self.read()), self.lower), per_bin))
        return b.cast(clamp(position, 0, self.bins - 1), "INTEGER")

    def per_row(self, j: int) -> None:
        return None

    def weighted(self, j: int, stored: bool) -> None:
        return None  # its weighted bins are stages of their own (bounding.WeightedCopy)


def weighted(value: exp.Expression, weight: exp.Expression) -> exp.Expression:
    """A fixed-point value times a weight of COUNT_BITS fractional bits, truncated toward zero."""
    return b.idiv(b.mul(value, weight), 2**COUNT_BITS)


def _as_double(value: exp.Expression) -> exp.Expression:
    double = dtype("DOUBLE")
    if isinstance(value, exp.Column):
        return exp.TryCast(this=value.copy(), to=double)
    return try_wrap(exp.Cast(this=finite(try_casts(value)), to=double))  # NaN/infinity: NULL, not a bound


def sum_measure(value: exp.Expression, lower: float, upper: float, centre: float, own_norm: bool = False) -> Sum:
    """A sum of clamp(value) - centre, with FIXED_POINT_DIGITS binary digits of its largest
    per-row magnitude kept."""
    spread = max(abs(lower - centre), abs(upper - centre))
    bits = FIXED_POINT_DIGITS - math.ceil(math.log2(spread)) if spread > 0 else 0
    return Sum(value, lower, upper, centre, bits, own_norm=own_norm)


def squares_measure(value: exp.Expression, lower: float, upper: float) -> Sum:
    """A variance's sum of (clamp(value) - c)^2, c the centre of [lower, upper], itself centred
    at half the square's range."""
    centre, half = (lower + upper) / 2, (upper - lower) / 2
    deviation = exp.Paren(this=exp.Sub(this=clamp(value, lower, upper), expression=exp.Literal.number(centre)))
    square = exp.Mul(this=deviation, expression=deviation.copy())
    return sum_measure(square, 0.0, half * half, half * half / 2)


def _unqualified(node: exp.Expression) -> exp.Expression:
    return exp.column(node.name) if isinstance(node, exp.Column) else node

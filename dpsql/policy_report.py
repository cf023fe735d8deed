"""The data owner's report: what the policy's limits cut from the real data (`dpsql policy check --data`).

This is the *owner's view*, outside the privacy model (DESIGN §1). It reads the private tables'
raw rows through the policy's engine, as their owner or a DBA may, and reports exact, un-noised
counts and quantiles of them: per private table its rows and units, how many rows each unit
holds, what the total bound (`max_contributions`, or `max_groups * max_rows`) and the per-group
caps (`max_rows`, `max_groups`, over each declared-key column, a plausible grouping) cut, what
each bounded column's `lower`/`upper` clip, and limits that would keep a chosen share of the
data, each with what it would cut and how it would scale the noise. The privacy officer who
writes the policy needs exactly this to choose limits that fit the data, and no analyst may see
it: it would tell them how many people there are, how heavy the heaviest one is, and where the
extremes lie. So only the command line calls this module, on the data's side, with the policy
file and the engine's credentials; no session, wire server, DB-API connection or console page
imports it (tests/test_policy_check.py checks the imports), and nothing here is charged,
recorded in the ledger, or released with noise.

The engine computes small histograms (units by their rows, unit-key cells by their rows, units
by their distinct keys) and one row of clipping counts per column; everything else, the
quantiles, cuts and suggestions, is pure arithmetic on them (`Histogram`, `suggested_bounds`).
"""

from __future__ import annotations

import decimal
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable, Mapping

from sqlglot import exp

from .config import ColumnPolicy, Policy, TablePolicy
from .engines import Engine
from .guarantee.measures import literal
from .sql import build as b

KEEP = 0.99  # the share of rows (units, values) a suggested limit keeps, unless the owner says otherwise
QUANTILES = (0.5, 0.9, 0.99)  # of rows per unit
COLUMN_QUANTILES = (0.01, 0.5, 0.99)  # of a bounded column's values


# Pure: distributions and what a limit cuts -------------------------------------------------


@dataclass(frozen=True)
class Histogram:
    """Items (units, or one unit's rows under one key) by their size (rows, or distinct keys):
    how many items have each size, and how many rows those items hold together."""

    items: Mapping[int, int]
    rows: Mapping[int, int]

    @classmethod
    def of_rows(cls, items: Mapping[int, int]) -> "Histogram":
        """Items whose size is their own number of rows."""
        return cls(dict(items), {n: n * k for n, k in items.items()})

    @property
    def total_items(self) -> int:
        return sum(self.items.values())

    @property
    def total_rows(self) -> int:
        return sum(self.rows.values())

    @property
    def largest(self) -> int:
        return max(self.items, default=0)

    def quantile(self, q: float) -> int:
        """The smallest size at least a share q of the items do not exceed: PERCENTILE_DISC,
        as the engines compute a column's quantiles (position ceil(q * items) in size order)."""
        position = max(1, math.ceil(Fraction(str(q)) * self.total_items))
        seen = 0
        for size in sorted(self.items):
            seen += self.items[size]
            if seen >= position:
                return size
        return self.largest

    def excess(self, limit: int) -> int:
        """What a limit on each item's size cuts: sizes beyond it, summed (rows cut, when the
        size is an item's rows)."""
        return sum((size - limit) * k for size, k in self.items.items() if size > limit)

    def over(self, limit: int) -> int:
        """Items larger than the limit."""
        return sum(k for size, k in self.items.items() if size > limit)

    def rows_over(self, limit: int) -> int:
        """Rows held by items larger than the limit."""
        return sum(r for size, r in self.rows.items() if size > limit)


def least_limit(hist: Histogram, fits: Callable[[int], bool]) -> int:
    """The smallest limit of at least 1 that `fits` (a test that only gets easier as the limit
    grows, as the cuts shrink); the largest size always fits, as nothing is over it."""
    low, high = 1, max(1, hist.largest)
    while low < high:
        mid = (low + high) // 2
        if fits(mid):
            high = mid
        else:
            low = mid + 1
    return low


def spared(keep: float) -> Fraction:
    """The share a suggestion may cut, 1 - keep, exactly (1 - 0.99 in floats is 0.010000000000000009)."""
    return 1 - Fraction(str(keep))


def keeping_rows(hist: Histogram, keep: float, rows: int) -> int:
    """The smallest limit on each item's rows that cuts at most a share 1 - keep of `rows`."""
    return least_limit(hist, lambda limit: hist.excess(limit) <= spared(keep) * rows)


def keeping_items(hist: Histogram, keep: float, items: int) -> int:
    """The smallest limit on each item's size that at most a share 1 - keep of `items` exceed."""
    return least_limit(hist, lambda limit: hist.over(limit) <= spared(keep) * items)


def share(part: float, whole: float) -> float:
    return part / whole if whole else 0.0


def round_out(x: float, up: bool) -> float:
    """x rounded away from the data's middle to two significant digits (4,213 up: 4,300), so a
    suggested bound reads as a policy value and clips no more than the quantile it comes from."""
    if x == 0 or not math.isfinite(x):
        return x
    digits = 1 - math.floor(math.log10(abs(x)))
    step = Fraction(10) ** -digits
    steps = Fraction(x) / step
    return float((math.ceil(steps) if up else math.floor(steps)) * step)


def suggested_bounds(p_low: float, p_high: float, integer: bool) -> tuple[float, float]:
    """Bounds from a column's low and high quantiles, rounded out to two significant digits."""
    low, high = round_out(float(p_low), up=False), round_out(float(p_high), up=True)
    return (int(low), int(high)) if integer else (low, high)


def sum_noise_ratio(now: tuple[float, float], then: tuple[float, float]) -> float:
    """How a SUM's noise scales when its bounds change: with its per-row bound, max(|lower|, |upper|)."""
    return share(max(abs(then[0]), abs(then[1])), max(abs(now[0]), abs(now[1])))


def avg_noise_ratio(now: tuple[float, float], then: tuple[float, float]) -> float:
    """How an AVG's (a centred sum's) noise scales: with the bounds' width."""
    return share(then[1] - then[0], now[1] - now[0])


def _plain(value: Any) -> Any:
    """An engine's value as JSON-friendly Python: DECIMAL as a float, dates kept."""
    return float(value) if isinstance(value, decimal.Decimal) else value


# The engine's part: histograms and clipping counts -------------------------------------------


def _rows_of(engine: Engine, tree: exp.Select) -> list[tuple]:
    rs = engine.execute(engine.sql_of(tree, owned=True))
    return list(zip(*rs.columns)) if rs.row_count else []


def _table(table: TablePolicy) -> exp.Table:
    return exp.to_table(table.name, quoted=True)


def _unit(table: TablePolicy) -> exp.Column:
    return exp.column(table.privacy_unit, quoted=True)


def _histogram(engine: Engine, per_item: exp.Select) -> Histogram:
    """`per_item` gives one row per item with its `item_size` and its rows `n`: grouped by size."""
    tree = b.select(
        [b.col("item_size"), b.named(b.count(), "items"), b.named(b.total("n"), "held")],
        b.subquery(per_item, "per_item"),
        group=["item_size"],
    )
    rows = _rows_of(engine, tree)
    return Histogram({int(s): int(k) for s, k, _ in rows}, {int(s): int(r) for s, _, r in rows})


def _in_domain(col: ColumnPolicy) -> exp.Expression:
    """The rows a grouping by this declared-key column keeps: its value is in the domain."""
    value = exp.column(col.name, quoted=True)
    if col.keys is not None:
        return exp.In(this=value, expressions=[literal(k) for k in col.keys])
    source, name = col.keys_from
    keys = b.select([exp.column(name, quoted=True)], exp.to_table(source, quoted=True))
    return exp.In(this=value, query=exp.Subquery(this=keys))


def units_by_rows(engine: Engine, table: TablePolicy) -> Histogram:
    """Units by their rows in the table (what the total bound caps)."""
    per_unit = b.select(
        [_unit(table), b.named(b.count(), "item_size"), b.named(b.count(), "n")],
        _table(table),
        where=[b.not_null(_unit(table))],
        group=[_unit(table)],
    )
    return _histogram(engine, per_unit)


def cells_by_rows(engine: Engine, table: TablePolicy, col: ColumnPolicy) -> Histogram:
    """Each unit's rows under each key of the column (what max_rows caps)."""
    key = exp.column(col.name, quoted=True)
    per_cell = b.select(
        [_unit(table), key, b.named(b.count(), "item_size"), b.named(b.count(), "n")],
        _table(table),
        where=[b.not_null(_unit(table)), _in_domain(col)],
        group=[_unit(table), key.copy()],
    )
    return _histogram(engine, per_cell)


def units_by_keys(engine: Engine, table: TablePolicy, col: ColumnPolicy) -> Histogram:
    """Units by the distinct keys of the column they reach (what max_groups caps), with their rows."""
    distinct = exp.Count(this=exp.Distinct(expressions=[exp.column(col.name, quoted=True)]))
    per_unit = b.select(
        [_unit(table), b.named(distinct, "item_size"), b.named(b.count(), "n")],
        _table(table),
        where=[b.not_null(_unit(table)), _in_domain(col)],
        group=[_unit(table)],
    )
    return _histogram(engine, per_unit)


def row_counts(engine: Engine, table: TablePolicy) -> tuple[int, int]:
    """The table's rows, and those with a privacy unit (the rows any query counts)."""
    counted = b.count() if table.row_unit else b.count(_unit(table))
    ((rows, with_unit),) = _rows_of(
        engine, b.select([b.named(b.count(), "all_rows"), b.named(counted, "counted")], _table(table))
    )
    return int(rows), int(with_unit)


@dataclass(frozen=True)
class Clipping:
    """A bounded column over the counted rows: values present, below and above its bounds, the
    sum of |value| and of what clamping moves (numeric columns), and the quantiles asked for."""

    rows: int
    present: int
    below: int
    above: int
    mass: float | None
    moved: float | None
    quantiles: tuple[Any, ...] = ()

    def shares(self) -> dict[str, float | None]:
        return {
            "null_share": share(self.rows - self.present, self.rows),
            "below_lower_share": share(self.below, self.present),
            "above_upper_share": share(self.above, self.present),
            "sum_clipped_share": None if self.mass is None else share(self.moved, self.mass),
        }


def bounds_of(col: ColumnPolicy) -> tuple[Any, Any]:
    return col.dates if col.dates is not None else (col.lower, col.upper)


def clipping(
    engine: Engine, table: TablePolicy, col: ColumnPolicy, bounds: tuple[Any, Any], quantiles: tuple[float, ...] = ()
) -> Clipping:
    """One pass over the column's counted rows: what `bounds` clip, and the quantiles asked for."""
    x = exp.column(col.name, quoted=True)
    low, high = (literal(v) for v in bounds)
    items = [
        b.named(b.count(), "all_rows"),
        b.named(b.count(x.copy()), "present"),
        b.named(b.count(b.case((exp.LT(this=x.copy(), expression=low.copy()), 1))), "below"),
        b.named(b.count(b.case((exp.GT(this=x.copy(), expression=high.copy()), 1))), "above"),
    ]
    if col.dates is None:
        value = b.cast(x.copy(), "DOUBLE")
        clamped = b.func("LEAST", b.func("GREATEST", value.copy(), low.copy()), high.copy())
        items += [
            b.named(b.total(exp.Abs(this=value.copy())), "mass"),
            b.named(b.total(exp.Abs(this=b.binary(exp.Sub, value, clamped))), "moved"),
        ]
    items += [
        b.named(exp.PercentileDisc(this=x.copy(), expression=b.node(q)), f"q{i}") for i, q in enumerate(quantiles)
    ]
    where = [] if table.row_unit else [b.not_null(_unit(table))]
    (row,) = _rows_of(engine, b.select(items, _table(table), where=where))
    rows, present, below, above = (int(v) for v in row[:4])
    sums, found = (row[4:6], row[6:]) if col.dates is None else (None, row[4:])
    mass, moved = (None, None) if sums is None else (float(sums[0] or 0), float(sums[1] or 0))
    return Clipping(rows, present, below, above, mass, moved, tuple(_plain(v) for v in found))


# The report: JSON-ready dicts ----------------------------------------------------------------


def report(
    engine: Engine, policy: Policy, keep: float = KEEP, progress: Callable[[str], None] = lambda text: None
) -> dict[str, Any]:
    """The owner's report on every private table of the policy (public tables hold nobody)."""
    private = [t for t in policy.tables.values() if not t.public]
    tables = []
    for i, table in enumerate(private, 1):
        progress(f"reading {table.name} ({i} of {len(private)} private tables)")
        tables.append(table_report(engine, table, keep))
    return {"policy": str(policy.path), "engine": policy.engine.kind, "keep": keep, "tables": tables}


def table_report(engine: Engine, table: TablePolicy, keep: float) -> dict[str, Any]:
    """One private table: its rows and units, what its limits cut, and limits that keep `keep`."""
    rows, counted = row_counts(engine, table)
    out: dict[str, Any] = {
        "table": table.name,
        "privacy_unit": table.privacy_unit,
        "rows": rows,
        "rows_without_unit": rows - counted,
        "units": counted,
    }
    suggestions: list[dict[str, Any]] = []
    if not table.row_unit:  # a table whose every row is its own unit has no contribution limits to check
        units = units_by_rows(engine, table)
        out["units"] = units.total_items
        out["rows_per_unit"] = {**{f"p{round(q * 100)}": units.quantile(q) for q in QUANTILES}, "max": units.largest}
        out["total_bound"] = total_bound(table, units, counted)
        suggestions.append(total_bound_suggestion(table, units, counted, keep))
        keyed = [c for c in table.columns.values() if c.keys is not None or c.keys_from is not None]
        caps = [(c, cells_by_rows(engine, table, c), units_by_keys(engine, table, c)) for c in keyed]
        out["keys"] = [key_report(table, c, cells, reach, counted, units.total_items) for c, cells, reach in caps]
        if caps:
            suggestions += cap_suggestions(
                table, [(cells, reach) for _, cells, reach in caps], counted, units.total_items, keep
            )
    out["columns"] = []
    for col in (c for c in table.columns.values() if c.bounded or c.dates is not None):
        column, suggestion = column_report(engine, table, col, keep)
        out["columns"].append(column)
        if suggestion is not None:
            suggestions.append(suggestion)
    out["suggestions"] = suggestions
    return out


def total_limit(table: TablePolicy) -> int:
    """The total bound on a unit's rows: declared, or max_groups * max_rows (Laplace's default)."""
    return table.max_contributions or table.max_groups * table.max_rows


def total_bound(table: TablePolicy, units: Histogram, counted: int) -> dict[str, Any]:
    """What the total bound cuts: rows beyond it, units over it and the rows those hold."""
    limit = total_limit(table)
    return {
        "limit": limit,
        "declared": table.max_contributions is not None,
        "rows_cut": units.excess(limit),
        "rows_cut_share": share(units.excess(limit), counted),
        "units_over": units.over(limit),
        "units_over_share": share(units.over(limit), units.total_items),
        "rows_of_units_over_share": share(units.rows_over(limit), counted),
    }


def key_report(
    table: TablePolicy, col: ColumnPolicy, cells: Histogram, reach: Histogram, counted: int, unit_count: int
) -> dict[str, Any]:
    """What the per-group caps cut when grouping by one declared-key column (rows outside its
    domain are in no group, as in a query)."""
    domain = f"{col.keys_from[0]}.{col.keys_from[1]}" if col.keys_from else f"{len(col.keys)} keys"
    return {
        "column": col.name,
        "domain": domain,
        "rows_outside_domain_share": share(counted - cells.total_rows, counted),
        "rows_per_unit_and_key": {"p50": cells.quantile(0.5), "p99": cells.quantile(0.99), "max": cells.largest},
        "max_rows": {
            "limit": table.max_rows,
            "rows_cut": cells.excess(table.max_rows),
            "rows_cut_share": share(cells.excess(table.max_rows), counted),
        },
        "keys_per_unit": {"p50": reach.quantile(0.5), "p99": reach.quantile(0.99), "max": reach.largest},
        "max_groups": {
            "limit": table.max_groups,
            "units_over": reach.over(table.max_groups),
            "units_over_share": share(reach.over(table.max_groups), unit_count),
            "rows_of_units_over_share": share(reach.rows_over(table.max_groups), counted),
        },
    }


def _suggestion(
    limit: str,
    current: Any,
    suggested: Any,
    rule: str,
    cut_of: str,
    cut_now: float,
    cut_suggested: float,
    noise_ratio: float | None,
    **more: Any,
) -> dict[str, Any]:
    return {
        "limit": limit,
        "current": current,
        "suggested": suggested,
        "rule": rule,
        "cut_of": cut_of,
        "cut_now": cut_now,
        "cut_suggested": cut_suggested,
        "noise_ratio": noise_ratio,
        **more,
    }


def _at_most(keep: float) -> str:
    return f"at most {float(spared(keep)):.2%}".replace(".00%", "%")


def total_bound_suggestion(table: TablePolicy, units: Histogram, counted: int, keep: float) -> dict[str, Any]:
    """A total bound that cuts at most 1 - keep of the rows; noise under a total bound scales with it."""
    now, then = total_limit(table), keeping_rows(units, keep, counted)
    return _suggestion(
        "max_contributions",
        now,
        then,
        f"the smallest total bound that cuts {_at_most(keep)} of rows",
        "rows",
        share(units.excess(now), counted),
        share(units.excess(then), counted),
        share(then, now),
    )


def cap_suggestions(
    table: TablePolicy, caps: list[tuple[Histogram, Histogram]], counted: int, unit_count: int, keep: float
) -> list[dict[str, Any]]:
    """max_rows and max_groups that fit every declared-key column (the largest any column needs),
    with the worst column's cuts; per-group noise scales with each."""
    rows_then = max(keeping_rows(cells, keep, counted) for cells, _ in caps)
    groups_then = max(keeping_items(reach, keep, unit_count) for _, reach in caps)
    rows_cut = [max(share(cells.excess(limit), counted) for cells, _ in caps) for limit in (table.max_rows, rows_then)]
    over = [max(share(reach.over(limit), unit_count) for _, reach in caps) for limit in (table.max_groups, groups_then)]
    return [
        _suggestion(
            "max_rows",
            table.max_rows,
            rows_then,
            f"the smallest max_rows that cuts {_at_most(keep)} of rows under each declared-key column",
            "rows",
            *rows_cut,
            share(rows_then, table.max_rows),
        ),
        _suggestion(
            "max_groups",
            table.max_groups,
            groups_then,
            f"the smallest max_groups that {_at_most(keep)} of units exceed under each declared-key column",
            "units",
            *over,
            share(groups_then, table.max_groups),
        ),
    ]


def column_report(
    engine: Engine, table: TablePolicy, col: ColumnPolicy, keep: float
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """What a column's bounds clip, and bounds from its quantiles at 1 - keep and keep, with what
    those would clip and how they would scale a SUM's and an AVG's noise. Date bounds get no
    suggestion: they are a public calendar for grouping, and no noise depends on them."""
    now = bounds_of(col)
    clip = clipping(engine, table, col, now, COLUMN_QUANTILES + (float(spared(keep)), keep))
    p_low, p50, p_high, q_low, q_high = clip.quantiles
    column = {
        "column": col.name,
        "kind": "numeric" if col.dates is None else "date",
        "lower": now[0],
        "upper": now[1],
        **clip.shares(),
        "p1": p_low,
        "p50": p50,
        "p99": p_high,
    }
    if col.dates is not None or q_low is None:  # a calendar, or no values to suggest from
        return column, None
    then = suggested_bounds(q_low, q_high, isinstance(q_low, int))
    after = clipping(engine, table, col, then)
    return column, _suggestion(
        f"columns.{col.name}",
        list(now),
        list(then),
        f"lower and upper at the values' {float(spared(keep)):g} and "
        f"{keep:g} quantiles, rounded out to two significant digits: {_at_most(keep)} clipped on each side",
        "values",
        *(share(c.below + c.above, c.present) for c in (clip, after)),
        sum_noise_ratio(now, then),
        avg_noise_ratio=avg_noise_ratio(now, then),
        sum_clipped_now=clip.shares()["sum_clipped_share"],
        sum_clipped_suggested=after.shares()["sum_clipped_share"],
    )

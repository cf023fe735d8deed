"""Released answers as pages show them: a table with each noisy value's interval beside it,
and error bars per noisy column. Only what a client of the wire would receive is used."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from markupsafe import Markup

from .charts import error_bars, number

MAX_ROWS = 500  # rows a page shows of one answer
MAX_BARS = 40  # groups an error-bar chart shows


@dataclass(frozen=True)
class Column:
    name: str
    noisy: bool


@dataclass(frozen=True)
class Table:
    columns: list[Column]
    rows: list[list[str]]  # per cell: the value, and for a noisy column its interval after it
    total: int  # rows in the answer (the page shows at most MAX_ROWS)
    bars: list[tuple[str, Markup]]  # per noisy column: its name and its error-bar chart


def table(
    names: Sequence[str],
    rows: Sequence[Sequence[Any]],
    ci: Mapping[str, Any] | None,
    chart_prefix: str,
    limit: int = MAX_ROWS,
) -> Table:
    """The answer's rows with intervals (ci: column -> one [low, high] per row, or None)."""
    ci = ci or {}
    columns = [Column(n, ci.get(n) is not None) for n in names]
    shown = list(rows)[:limit]
    out = []
    for i, row in enumerate(shown):
        cells = []
        for col, value in zip(columns, row):
            cells.append(_cell(value))
            if col.noisy:
                iv = _interval(ci[col.name], i)
                cells.append("" if iv is None else f"[{number(iv[0])}, {number(iv[1])}]")
        out.append(cells)
    keys = [j for j, c in enumerate(columns) if not c.noisy]
    labels = [" / ".join(_cell(r[j]) for j in keys) or f"row {i + 1}" for i, r in enumerate(shown[:MAX_BARS])]
    bars = []
    for j, col in enumerate(columns):
        if not col.noisy:
            continue
        values = [
            r[j] if isinstance(r[j], (int, float)) and not isinstance(r[j], bool) else None for r in shown[:MAX_BARS]
        ]
        intervals = [_interval(ci[col.name], i) for i in range(len(values))]
        chart = error_bars(
            labels,
            values,
            intervals,
            chart_id=f"{chart_prefix}-{j}",
            title=f"{col.name}: released values with their intervals",
        )
        if chart:
            bars.append((col.name, chart))
    return Table(columns, out, len(rows), bars)


def _interval(intervals: Sequence[Any], i: int) -> tuple[float, float] | None:
    if i >= len(intervals) or intervals[i] is None:
        return None
    low, high = intervals[i]
    return None if low is None or high is None else (float(low), float(high))


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return number(value)
    return str(value)

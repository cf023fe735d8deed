"""Charts as inline SVG, rendered on the server: no JavaScript and nothing fetched, so the
console works offline and under a strict Content-Security-Policy. Every text in a chart is
escaped; styling is by class (console.css), never by inline style attributes."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Sequence

from markupsafe import Markup, escape

WIDTH, HEIGHT = 720, 280
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 16, 56


@dataclass(frozen=True)
class Series:
    """One line of a time chart: (epoch seconds, value) points, drawn as steps (a budget
    changes at a charge or grant and stays until the next one)."""

    label: str
    points: Sequence[tuple[float, float]]
    css: str


def number(x: float | None) -> str:
    """A value for people: up to 6 significant digits, no exponent for everyday magnitudes."""
    if x is None:
        return ""
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if float(x).is_integer() and abs(x) < 1e15:
        return str(int(x))
    if abs(x) >= 1:
        text = f"{x:.6g}"
        return text if "e" not in text else f"{x:.2f}"
    return f"{x:.6g}"


def nice_ceiling(x: float) -> float:
    """The smallest of 1, 2, 2.5, 5 times a power of ten that is at least x."""
    if x <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(x))
    for step in (1, 2, 2.5, 5, 10):
        if step * power >= x * (1 - 1e-12):
            return step * power
    return 10 * power


def nice_step(span: float, parts: int = 4) -> float:
    """A round tick step (1, 2, 2.5 or 5 times a power of ten) giving about `parts` ticks over span."""
    return nice_ceiling(span / parts) if span > 0 else 1.0


def _time_label(at: float, span: float) -> str:
    fmt = "%H:%M:%S" if span < 2 * 3600 else "%H:%M" if span < 2 * 86400 else "%Y-%m-%d"
    return time.strftime(fmt, time.gmtime(at))


def time_chart(
    series: Sequence[Series],
    *,
    chart_id: str,
    title: str,
    unit: str = "epsilon",
    width: int = WIDTH,
    height: int = HEIGHT,
) -> Markup:
    """A step chart of several series over time, with axes, ticks, a legend and a text
    description for screen readers. Each series' first value is drawn from the left edge: it
    is the state before anything happened."""
    points = [p for s in series for p in s.points]
    if not points:
        return Markup(f'<p class="empty">{escape(title)}: nothing to chart yet.</p>')
    t0, t1 = min(p[0] for p in points), max(p[0] for p in points)
    if t1 - t0 < 10:
        t0, t1 = t1 - 10, t1
    ymax = nice_ceiling(max(p[1] for p in points))
    plot_w, plot_h = width - LEFT - RIGHT, height - TOP - BOTTOM

    def x(t: float) -> float:
        return LEFT + (t - t0) / (t1 - t0) * plot_w

    def y(v: float) -> float:
        return TOP + plot_h - max(0.0, v) / ymax * plot_h

    parts = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" aria-labelledby="{chart_id}-t {chart_id}-d"'
        f' data-points="{len(points)}" xmlns="http://www.w3.org/2000/svg">',
        f'<title id="{chart_id}-t">{escape(title)}</title>',
        f'<desc id="{chart_id}-d">{escape(_describe(series, unit))}</desc>',
        f'<rect class="plot" x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}"/>',
    ]
    for i in range(5):
        v = ymax * i / 4
        parts.append(
            f'<line class="grid" x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y(v):.1f}" y2="{y(v):.1f}"/>'
            f'<text class="tick" x="{LEFT - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{number(v)}</text>'
        )
    for i in range(5):
        t = t0 + (t1 - t0) * i / 4
        anchor = "start" if i == 0 else "end" if i == 4 else "middle"
        parts.append(
            f'<text class="tick" x="{x(t):.1f}" y="{TOP + plot_h + 16}" text-anchor="{anchor}">'
            f"{escape(_time_label(t, t1 - t0))}</text>"
        )
    parts.append(
        f'<text class="axis-label" x="12" y="{TOP + plot_h / 2:.1f}" '
        f'transform="rotate(-90 12 {TOP + plot_h / 2:.1f})" text-anchor="middle">{escape(unit)}</text>'
    )
    for s in series:
        if not s.points:
            continue
        d = [f"M{LEFT},{y(s.points[0][1]):.1f}H{x(s.points[0][0]):.1f}"]  # the first value held before it
        for (_, prev), (t, v) in zip(s.points, s.points[1:]):
            d.append(f"H{x(t):.1f}V{y(v):.1f}" if prev != v else f"H{x(t):.1f}")
        parts.append(f'<path class="series {escape(s.css)}" d="{"".join(d)}"/>')
        last_t, last_v = s.points[-1]
        parts.append(f'<circle class="dot {escape(s.css)}" cx="{x(last_t):.1f}" cy="{y(last_v):.1f}" r="3"/>')
    lx = LEFT
    for s in series:
        parts.append(
            f'<rect class="key {escape(s.css)}" x="{lx}" y="{height - 18}" width="14" height="4"/>'
            f'<text class="legend" x="{lx + 20}" y="{height - 12}">{escape(s.label)}</text>'
        )
        lx += 28 + 8 * len(s.label)
    parts.append("</svg>")
    return Markup("".join(parts))


def _describe(series: Sequence[Series], unit: str) -> str:
    """What the chart shows, in words: each series' latest value."""
    latest = [f"{s.label}: {number(s.points[-1][1])}" for s in series if s.points]
    return f"{unit} over time; latest values: " + "; ".join(latest)


def error_bars(
    labels: Sequence[str],
    values: Sequence[float | None],
    intervals: Sequence[tuple[float, float] | None],
    *,
    chart_id: str,
    title: str,
    width: int = 640,
) -> Markup:
    """Released values with their intervals as horizontal error bars, one row per group."""
    rows = [
        (lab, v, iv)
        for lab, v, iv in zip(labels, values, intervals)
        if v is not None and iv is not None and all(isinstance(e, (int, float)) and math.isfinite(e) for e in (v, *iv))
    ]
    if not rows:
        return Markup("")
    lo = min(min(iv[0], v) for _, v, iv in rows)
    hi = max(max(iv[1], v) for _, v, iv in rows)
    if lo > 0 and lo < (hi - lo):
        lo = 0.0
    step = nice_step(hi - lo)
    lo, hi = math.floor(lo / step) * step, math.ceil(hi / step) * step
    if hi == lo:
        hi = lo + step
    label_w, row_h, top = 150, 22, 8
    plot_w = width - label_w - 40
    height = top + row_h * len(rows) + 28

    def x(v: float) -> float:
        return label_w + (v - lo) / (hi - lo) * plot_w

    parts = [
        f'<svg class="chart bars" viewBox="0 0 {width} {height}" role="img" aria-labelledby="{chart_id}-t"'
        f' xmlns="http://www.w3.org/2000/svg"><title id="{chart_id}-t">{escape(title)}</title>'
    ]
    if lo < 0 < hi:
        parts.append(f'<line class="zero" x1="{x(0):.1f}" x2="{x(0):.1f}" y1="{top}" y2="{top + row_h * len(rows)}"/>')
    for i, (label, v, (a, b)) in enumerate(rows):
        cy = top + row_h * i + row_h / 2
        text = label if len(label) <= 22 else label[:21] + "…"
        parts.append(
            f'<text class="tick" x="{label_w - 8}" y="{cy + 4:.1f}" text-anchor="end">{escape(text)}</text>'
            f'<line class="whisker" x1="{x(a):.1f}" x2="{x(b):.1f}" y1="{cy:.1f}" y2="{cy:.1f}"/>'
            f'<line class="whisker" x1="{x(a):.1f}" x2="{x(a):.1f}" y1="{cy - 5:.1f}" y2="{cy + 5:.1f}"/>'
            f'<line class="whisker" x1="{x(b):.1f}" x2="{x(b):.1f}" y1="{cy - 5:.1f}" y2="{cy + 5:.1f}"/>'
            f'<circle class="dot value" cx="{x(v):.1f}" cy="{cy:.1f}" r="4">'
            f"<title>{escape(label)}: {number(v)} [{number(a)}, {number(b)}]</title></circle>"
        )
    axis_y = top + row_h * len(rows) + 16
    ticks = int(round((hi - lo) / step))
    for i in range(ticks + 1):
        v = lo + step * i
        parts.append(f'<text class="tick" x="{x(v):.1f}" y="{axis_y}" text-anchor="middle">{number(v)}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))

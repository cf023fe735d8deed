"""Turn the bounded query's exact per-group values into released, noisy estimates.

Order of operations matters for privacy: noise is drawn for every group, partition selection
keeps groups whose noisy unit count clears the threshold, and rows are sorted by their (public)
key values so that the engine's internal row order, which may depend on data, never shows.
Everything after the noise (estimates, clamping counts at 0, intervals) is post-processing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .calibration import Calibration
from .engines.base import ResultSet
from .mechanisms import add_noise
from .sql.analyze import Estimate, Plan


@dataclass
class NoisyTable:
    """Released per-group values: keys (exact, public or selected) and noisy estimates."""

    keys: list[list[Any]]
    key_types: list[str]
    estimates: list[list[float | int]]
    intervals: list[list[tuple[float, float]]]
    estimate_types: list[str]

    @property
    def n_rows(self) -> int:
        if self.keys:
            return len(self.keys[0])
        return len(self.estimates[0]) if self.estimates else 0


def _sort_key(row: tuple) -> tuple:
    return tuple((v is None, str(type(v)), v if v is not None else 0) for v in row)


def release(plan: Plan, cal: Calibration, rs: ResultSet, confidence: float) -> NoisyTable:
    n_keys = len(plan.keys)
    rows = list(zip(*rs.columns)) if rs.columns and rs.row_count else []
    rows.sort(key=lambda r: _sort_key(r[:n_keys]))
    columns = [list(c) for c in zip(*rows)] if rows else [[] for _ in rs.names]
    key_cols = columns[:n_keys]
    units = columns[n_keys]
    measures = columns[n_keys + 1:]
    noisy = [add_noise(col, mn.noise) for col, mn in zip(measures, cal.measures)]
    keep = list(range(len(units)))
    if cal.selection is not None:
        noisy_units = add_noise(units, cal.selection.noise)
        keep = [i for i, u in enumerate(noisy_units) if u >= cal.selection.threshold]
    key_cols = [[col[i] for i in keep] for col in key_cols]
    noisy = [[col[i] for i in keep] for col in noisy]

    # Each estimate's interval holds at `confidence`; an AVG's parts at (1 + confidence) / 2 each.
    half = [mn.noise.half_width(confidence) for mn in cal.measures]
    half_split = [mn.noise.half_width((1 + confidence) / 2) for mn in cal.measures]
    values, intervals, types = [], [], []
    for est in plan.estimates:
        v, ci, t = _estimate(plan, est, noisy, half, half_split)
        values.append(v)
        intervals.append(ci)
        types.append(t)
    return NoisyTable(key_cols, list(rs.types[:n_keys]), values, intervals, types)


def _estimate(plan: Plan, est: Estimate, noisy: list[list[int]], half: list[float], half_split: list[float]):
    if est.func == "count":
        scale = plan.measures[est.count].unit_scale
        col, h = [c * scale for c in noisy[est.count]], half[est.count] * scale
        vals = [max(0, round(c)) for c in col]
        # Counts are whole numbers: widen the interval outward to integers (still valid).
        return vals, [(float(max(0, math.floor(c - h))), float(max(0, math.ceil(c + h)))) for c in col], "BIGINT"
    m = plan.measures[est.total]
    unit = m.unit_scale
    if est.func == "sum":
        col, h = noisy[est.total], half[est.total] * unit
        vals = [s * unit for s in col]
        return vals, [(v - h, v + h) for v in vals], "DOUBLE"
    count_scale = plan.measures[est.count].unit_scale
    counts, sums = [c * count_scale for c in noisy[est.count]], noisy[est.total]
    hc, hs = half_split[est.count] * count_scale, half_split[est.total] * unit
    vals, cis = [], []
    for c, s in zip(counts, sums):
        s = s * unit
        vals.append(min(est.upper, max(est.lower, est.centre + s / max(c, 1))))
        if c - hc <= 0:
            cis.append((est.lower, est.upper))
            continue
        corners = [est.centre + sv / cv for sv in (s - hs, s + hs) for cv in (c - hc, c + hc)]
        cis.append((max(est.lower, min(corners)), min(est.upper, max(corners))))
    return vals, cis, "DOUBLE"

"""Turn the bounded query's exact per-group values into released, noisy estimates.

Order of operations matters for privacy: partition selection keeps groups by their unit
counts' release odds (or their noisy unit counts against a threshold), rows are sorted by their
(public, or selected) key values so that the engine's internal row order, which may depend on
data, never shows, and every kept group's measures are noised.
Everything after the noise (estimates, clamping counts at 0, intervals) is post-processing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy

from ..config import Policy
from ..engines.base import ResultSet
from ..ledger import Charge
from . import guard
from .calibration import Calibration
from .families import family
from .measures import Histogram
from .mechanisms import add_noise
from .plan import Plan
from .selection import select


@dataclass
class NoisyTable:
    """Released per-group values: keys (exact, public or selected) and noisy estimates."""

    keys: list[list[Any]]
    key_types: list[str]
    estimates: list[Sequence[float | None]]
    intervals: list[Sequence[tuple[float, float] | None]]
    estimate_types: list[str]

    @property
    def n_rows(self) -> int:
        if self.keys:
            return len(self.keys[0])
        return len(self.estimates[0]) if self.estimates else 0


def key_order(row: tuple[Any, ...]) -> tuple[tuple[bool, str, Any], ...]:
    """Released rows' order: by their key values (None last, types apart), never the engine's."""
    return tuple((v is None, str(type(v)), v if v is not None else 0) for v in row)


def _sort_by_keys(rows: list[tuple[Any, ...]], n_keys: int) -> None:
    """Sort in place by key_order; when each key column holds values of one type only (the usual
    case), by the values themselves, which is the same order at a fraction of the cost."""
    if all(len({type(r[i]) for r in rows}) <= 1 for i in range(n_keys)):
        rows.sort(key=lambda r: r[:n_keys])
    else:
        rows.sort(key=lambda r: key_order(r[:n_keys]))


def release(
    plan: Plan, cal: Calibration, rs: ResultSet, confidence: float, charge: Charge, policy: Policy
) -> NoisyTable:
    """Noise the bounded query's result: only with the receipt of its durable charge, and only
    once the release guard has checked the result against it (no noise is drawn before)."""
    guard.check(plan, cal, rs, charge, policy)
    n_keys = len(plan.keys)
    columns: Sequence[Sequence[Any]] = rs.columns
    sel = cal.selection
    if sel is not None and rs.row_count:
        # Partition selection first: a group is kept by its odds (selection.py) or when its noisy
        # unit count clears the threshold. Measures' noise is independent of it, so drawing it
        # for the kept groups only is the same release, without the noise of the dropped ones.
        units = columns[n_keys]
        if sel.odds is not None:
            kept = select(units, sel.odds)
        else:
            kept = numpy.array([u >= sel.threshold for u in add_noise(units, sel.noise)], dtype=bool)
        if len(kept) != rs.row_count:
            raise guard.ReleaseRefused(f"{len(kept)} selection decisions for {rs.row_count} groups")
        chosen = numpy.flatnonzero(kept).tolist()
        columns = [[col[i] for i in chosen] for col in columns]
    rows = list(zip(*columns)) if columns and len(columns[0]) else []
    _sort_by_keys(rows, n_keys)
    columns = [list(c) for c in zip(*rows)] if rows else [[] for _ in rs.names]
    key_cols = columns[:n_keys]
    noisy: list[list[Any]] = []
    at = n_keys + 1
    for m, mn in zip(plan.measures, cal.measures):
        cols = [add_noise(col, mn.noise) for col in columns[at : at + m.width]]
        noisy.append(cols if isinstance(m, Histogram) else cols[0])
        at += m.width

    noises = [mn.noise for mn in cal.measures]
    values, intervals, types = [], [], []
    for est in plan.estimates:
        v, ci = family(est).estimate(plan, est, noisy, noises, confidence)
        values.append(v)
        intervals.append(ci)
        types.append(family(est).result_type)
    return NoisyTable([list(c) for c in key_cols], list(rs.types[:n_keys]), values, intervals, types)

"""Timing helpers shared by the benchmarks."""

from __future__ import annotations

import statistics
import time
from typing import Callable, Sequence


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    """Median wall time of `repeat` calls, in milliseconds."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def interleaved_ms(fns: Sequence[Callable[[], object]], repeat: int) -> list[float]:
    """Median wall time of each function over `repeat` rounds that call them in turn, in
    milliseconds: side by side, so a ratio between them sees the same machine load."""
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for fn, out in zip(fns, times):
            t = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t) * 1000)
    return [statistics.median(t) for t in times]

"""Limited-translation shrinkage of a grouped spread (post-processing, guarantee/shrinkage.py)."""

from __future__ import annotations

import random

from dpsql.guarantee import shrinkage


def test_each_value_moves_toward_the_median_by_at_most_its_reach():
    rng = random.Random(7)
    for _ in range(500):
        k = rng.randint(3, 15)
        values = [rng.uniform(0, 10) for _ in range(k)]
        intervals = [(max(0.0, v - w), v + w) for v in values for w in [rng.uniform(0, 4)]]
        centre = sorted(values)[k // 2] if k % 2 else (sorted(values)[k // 2 - 1] + sorted(values)[k // 2]) / 2
        for v, m, (lo, hi) in zip(values, shrinkage.toward_median(values, intervals), intervals):
            assert abs(m - v) <= shrinkage.REACH * (hi - lo) / 2 + 1e-12
            assert abs(m - centre) <= abs(v - centre) + 1e-12  # toward, never past, the median
            assert min(lo, v) <= m <= max(hi, v)  # never out of the interval


def test_a_group_apart_moves_only_its_reach_and_close_ones_join():
    values = [1.0, 1.2, 1.1, 0.0, 5.3]
    intervals = [(0.0, 3.0), (0.0, 3.0), (0.0, 3.0), (0.0, 3.0), (3.0, 7.0)]
    moved = shrinkage.toward_median(values, intervals)
    assert moved[:3] == [1.1, 1.1, 1.1]
    assert moved[3] == 0.75  # capped at half its half-width of 1.5
    assert moved[4] == 5.3 - 1.0  # Intensive Care's long stays stay apart


def test_fewer_than_three_groups_are_kept():
    assert shrinkage.toward_median([1.0, 9.0], [(0.0, 20.0), (0.0, 20.0)]) == [1.0, 9.0]


def _explained(cursor, sql: str) -> list[str]:
    cursor.execute(f"EXPLAIN {sql}")
    return [r[0] for r in cursor.fetchall()]


def test_explain_says_a_grouped_spread_is_shrunk_and_a_scalar_one_is_not(hospital):
    grouped = _explained(hospital, "SELECT ward, STDDEV(length_of_stay) FROM visits GROUP BY ward")
    assert any(line.startswith("STDDEV(length_of_stay): over 3 groups or more") for line in grouped)
    scalar = _explained(hospital, "SELECT STDDEV(length_of_stay) FROM visits")
    assert not any("toward the groups' median" in line for line in scalar)

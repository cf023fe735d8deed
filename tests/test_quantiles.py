"""MEDIAN / PERCENTILE_CONT / QUANTILE / MIN / MAX: DP quantiles from a noisy histogram.

Accuracy is checked in ranks, where a bound holds with a stated probability: the returned
point x must have true rank within 2S of the target p * N, where S bounds the sum of the
absolute noise over all bins. For B bins of Laplace noise of scale b, Chernoff at lambda =
1/(2b) gives P(S > t) <= 2^B e^{-t / (2b)}; t = 2b (B ln 2 + ln 1e9) makes that <= 1e-9 per
run. Isotonic regression and clipping are non-expansive in the sup norm, so every fitted
cumulative count, and the total, stay within S of the truth.
"""

from __future__ import annotations

import math

import duckdb
import pytest
from scipy import stats

import dpsql
from dpsql.sql.analyze import QUANTILE_BINS

from .conftest import SAMPLE

AGES = f"SELECT LEAST(GREATEST(age, 0), 110) AS a, sex FROM '{SAMPLE / 'patients.parquet'}'"


def _rank_bound(b: float) -> float:
    return 2 * b * (QUANTILE_BINS * math.log(2) + math.log(1e9))


def _ranks(sex: str, x: float) -> tuple[int, int]:
    """(#rows below x - one bin width, #rows at or below x + one bin width)."""
    width = 110 / QUANTILE_BINS
    return (
        duckdb.connect()
        .execute(
            f"SELECT COUNT(*) FILTER (WHERE a < ?), COUNT(*) FILTER (WHERE a <= ?) FROM ({AGES}) WHERE sex = ?",
            [x - width, x + width, sex],
        )
        .fetchone()
    )


def test_quantiles_are_within_the_rank_bound(hospital):
    n = dict(duckdb.connect().execute(f"SELECT sex, COUNT(*) FROM ({AGES}) GROUP BY sex").fetchall())
    hospital.execute("EXPLAIN SELECT sex, MEDIAN(age) FROM patients GROUP BY sex")
    assert any("HISTOGRAM(age, 64 bins over [0, 110])" in r[0] for r in hospital.fetchall())
    s = _rank_bound(1.0)  # one histogram at epsilon 1, one row per patient: Laplace scale 1 per bin
    for _ in range(20):
        hospital.execute(
            "SELECT sex, MEDIAN(age), PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY age), "
            "QUANTILE(age, 0.1), MIN(age), MAX(age) FROM patients GROUP BY sex"
        )
        assert hospital.dp["cost"]["epsilon"] == pytest.approx(1.0)  # one shared histogram
        for sex, median, p90, p10, low, high in hospital.fetchall():
            for p, x in ((0.5, median), (0.9, p90), (0.1, p10)):
                below, upto = _ranks(sex, x)
                assert below <= p * n[sex] + 2 * s and upto >= p * n[sex] - 2 * s, (sex, p, x)
            assert 0 <= low <= p10 <= median <= p90 <= high <= 110
            assert _ranks(sex, low)[0] <= 2 * s + 2 * s  # MIN: where the count clears the noise level
            assert _ranks(sex, high)[1] >= n[sex] - 4 * s


def test_median_is_accurate_and_its_interval_covers(hospital):
    truth = dict(duckdb.connect().execute(f"SELECT sex, MEDIAN(a) FROM ({AGES}) GROUP BY sex").fetchall())
    runs, hits, errors = 40, {}, {}
    for _ in range(runs):
        hospital.execute("SELECT sex, MEDIAN(age) AS m FROM patients GROUP BY sex")
        rows = hospital.fetchall()
        for i, (sex, m) in enumerate(rows):
            lo, hi = hospital.dp["ci"]["m"][i]
            hits[sex] = hits.get(sex, 0) + (lo - 110 / QUANTILE_BINS <= truth[sex] <= hi + 110 / QUANTILE_BINS)
            errors.setdefault(sex, []).append(abs(m - truth[sex]))
    for sex, h in hits.items():
        assert stats.binomtest(h, runs, 0.95, alternative="less").pvalue > 1e-6, (sex, h)
    assert sorted(errors["F"])[runs // 2] < 1.0  # median age of ~10,000 women within a year


def test_quantiles_of_heavy_units_and_refusals(hospital):
    hospital.execute("SELECT diagnosis, MEDIAN(cost), MAX(length_of_stay) FROM visits GROUP BY diagnosis")
    rows = hospital.fetchall()
    assert len(rows) == 12 and all(0 <= r[1] <= 50000 and 0 <= r[2] <= 30 for r in rows)
    nulls = 0
    for _ in range(30):  # nothing there: NULL, as in SQL, unless the noise alone clears the level
        hospital.execute("SELECT MEDIAN(age) FROM patients WHERE age > 500")
        nulls += hospital.fetchone() == (None,)
    assert stats.binomtest(nulls, 30, 0.9, alternative="less").pvalue > 1e-6, nulls
    with pytest.raises(dpsql.ProgrammingError, match="insurance is text, and MAX is answered as a DP quantile") as e:
        hospital.execute("SELECT MAX(insurance) FROM patients")  # bounds would not help: no quantile of text
    assert "SELECT insurance, COUNT(*) ... GROUP BY insurance" in e.value.hint
    with pytest.raises(dpsql.ProgrammingError, match="MAX is answered as a DP quantile") as e:
        hospital.execute("SELECT MAX(patient_id) FROM patients")  # a number without bounds: declare them
    assert "columns.patient_id = { lower = ..., upper = ... }" in e.value.hint
    hospital.execute("SET dpsql.planner = 'pld'")
    with pytest.raises(dpsql.ProgrammingError, match="quantiles cannot be PLD-planned"):
        hospital.execute("SELECT MEDIAN(age), COUNT(*) FROM patients")


@pytest.mark.parametrize("epsilon", [50, 200])
def test_count_distinct_counts_no_absent_key_however_small_the_noise(hospital, epsilon):
    """No patient is over 200: no sex is present. With little noise the half-width rounds to 0,
    and absent keys' counts of exactly 0 reached it (the answer grew with epsilon: 3 at 5). At
    these epsilons the discrete noise is 0 but with probability below e^-40: exact answers."""
    hospital.execute(f"SET dpsql.epsilon = {epsilon}")
    hospital.execute("SELECT COUNT(DISTINCT sex) AS s FROM patients WHERE age > 200")
    assert hospital.fetchall() == [(0,)] and hospital.dp["ci"]["s"] == [(0.0, 0.0)]
    hospital.execute("SELECT COUNT(DISTINCT sex) AS s FROM patients")
    assert hospital.fetchall() == [(3,)] and hospital.dp["ci"]["s"] == [(3.0, 3.0)]


def test_count_distinct_over_declared_keys(hospital):
    """Every diagnosis occurs thousands of times: all 12 clear the noise level; the interval holds 12."""
    hospital.execute(
        "SELECT region, COUNT(DISTINCT diagnosis) AS d FROM visits JOIN patients USING (patient_id) GROUP BY region"
    )
    rows = hospital.fetchall()
    assert len(rows) == 10 and all(r[1] == 12 for r in rows)
    assert all(lo <= 12 <= hi for lo, hi in hospital.dp["ci"]["d"])
    with pytest.raises(dpsql.ProgrammingError, match="keys listed in the policy"):
        hospital.execute("SELECT COUNT(DISTINCT ward) FROM visits")
    with pytest.raises(dpsql.ProgrammingError, match="not declared"):
        hospital.execute("SELECT COUNT(DISTINCT insurance) FROM patients")


def test_a_quantile_of_integers_is_an_integer(hospital):
    """age is an integer column: its quantiles are the nearest integers of the histogram's
    points (never a point inside a bin between two integers), their intervals rounded outward;
    a quantile of a non-integral expression is not rounded."""
    for _ in range(5):
        hospital.execute(
            "SELECT sex, MEDIAN(age) AS m, MAX(age) AS h, MEDIAN(age / 3.0) AS t FROM patients "
            "WHERE sex <> 'X' GROUP BY sex"
        )
        rows = [r for r in hospital.fetchall() if r[0] != "X"]  # X: excluded, still released (declared)
        for _, median, high, third in rows:
            assert median == int(median) and high == int(high)
        assert any(third != int(third) for *_, third in rows)
        ci = hospital.dp["ci"]
        assert all(x == int(x) for name in ("m", "h") for interval in ci[name] for x in interval)

"""VAR_POP / VAR_SAMP / STDDEV_POP / STDDEV_SAMP: accurate, with intervals that cover the truth."""

from __future__ import annotations

import duckdb
from scipy import stats

from .conftest import SAMPLE

ALPHA = 1e-6


def test_spread_answers_match_the_truth(hospital):
    truth = dict(
        (r[0], r[1:])
        for r in duckdb.connect()
        .execute(
            "SELECT sex, var_pop(a), var_samp(a), stddev_pop(a), stddev_samp(a) FROM "
            f"(SELECT sex, LEAST(GREATEST(age, 0), 110) AS a FROM '{SAMPLE / 'patients.parquet'}') GROUP BY sex"
        )
        .fetchall()
    )
    runs, hits, errors = 60, {}, {}
    for _ in range(runs):
        hospital.execute(
            "SELECT sex, VAR_POP(age), VAR_SAMP(age), STDDEV_POP(age), STDDEV_SAMP(age) FROM patients GROUP BY sex"
        )
        names = [d[0] for d in hospital.description]
        for row in hospital.fetchall():
            for j, name in enumerate(names[1:], start=1):
                key = (row[0], name)
                lo, hi = hospital.dp["ci"][name][[r[0] for r in hospital._result.rows].index(row[0])]
                hits[key] = hits.get(key, 0) + (lo <= truth[row[0]][j - 1] <= hi)
                errors.setdefault(key, []).append(abs(row[j] - truth[row[0]][j - 1]) / truth[row[0]][j - 1])
    assert names[1:] == ["var_pop", "variance", "stddev_pop", "stddev_samp"]
    for key, h in hits.items():
        assert stats.binomtest(h, runs, 0.95, alternative="less").pvalue > ALPHA, (key, h)
    for sex in ("F", "M"):  # large groups: accurate to a few percent at epsilon = 1
        assert sorted(errors[(sex, "var_pop")])[runs // 2] < 0.05
        assert sorted(errors[(sex, "stddev_samp")])[runs // 2] < 0.03


def test_spread_stays_possible(hospital):
    hospital.execute("SELECT VAR_POP(age), STDDEV_POP(age) FROM patients WHERE age > 200")  # an empty group
    var, std = hospital.fetchone()
    assert 0 <= var <= 55**2 and 0 <= std <= 55

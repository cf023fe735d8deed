"""Per-unit subqueries: one aggregation by the privacy unit feeding a DP aggregate."""

from __future__ import annotations

import duckdb
import pytest
from scipy import stats

import dpsql

from .conftest import SAMPLE

VISITS = SAMPLE / "visits.parquet"
R = 40  # visits: max_rows 10 x max_groups 4 rows of a patient feed its per-unit aggregates


def test_per_unit_average_covers_the_bounded_truth(hospital):
    """The truth under the same bounding: each patient's total of clamped costs, clamped to R rows'
    worth (R x 50,000), under the policy's limits."""
    truth = (
        duckdb.connect()
        .execute(
            f"SELECT AVG(LEAST(s, {R} * 50000)) FROM (SELECT patient_id, SUM(LEAST(GREATEST(cost, 0), 50000)) AS s "
            f"FROM '{VISITS}' GROUP BY patient_id)"
        )
        .fetchone()[0]
    )
    runs, hits, errors, widths = 30, 0, [], []
    hospital.execute("SET dpsql.bounds = policy")
    for _ in range(runs):
        hospital.execute(
            "SELECT AVG(total) AS a FROM (SELECT patient_id, SUM(cost) AS total FROM visits GROUP BY patient_id) AS t"
        )
        ((a,),) = hospital.fetchall()
        lo, hi = hospital.dp["ci"]["a"][0]
        hits += lo <= truth <= hi
        errors.append(abs(a - truth) / truth)
        widths.append((hi - lo) / 2 / truth)
    assert stats.binomtest(hits, runs, 0.95, alternative="less").pvalue > 1e-6
    # The median error beyond the widest half-width means at least 15 of 30 answers outside their
    # own 95 % interval: probability below 1e-10 if the intervals hold. The width itself is set by
    # the noise scale (the policy's bounds and epsilon), not by chance: useful answers need it small.
    assert sorted(errors)[runs // 2] <= max(widths)
    assert max(widths) < 0.15, max(widths)  # 11 % at the sample policy's cost bound of 50,000


def test_group_by_a_per_unit_count_needs_no_delta(hospital):
    hospital.execute("SET dpsql.delta = 0")
    hospital.execute(
        "SELECT n, COUNT(*) FROM (SELECT patient_id, COUNT(*) AS n FROM visits GROUP BY patient_id) s "
        "GROUP BY n ORDER BY n"
    )
    rows = hospital.fetchall()
    assert [r[0] for r in rows] == list(range(0, R + 1))  # the declared domain 0..R, every key shown
    truth = dict(
        duckdb.connect()
        .execute(
            f"SELECT LEAST(n, {R}), COUNT(*) FROM (SELECT patient_id, COUNT(*) AS n FROM '{VISITS}' GROUP BY 1) "
            "GROUP BY 1"
        )
        .fetchall()
    )
    assert abs(rows[4][1] - truth[4]) < 100  # Laplace scale 1 at epsilon 1: off by 100 with p ~ e^-100


def test_per_unit_subqueries_join_and_filter(hospital):
    hospital.execute(
        "SELECT p.sex, AVG(t.n) FROM patients p JOIN (SELECT patient_id, COUNT(*) AS n FROM visits "
        "GROUP BY patient_id HAVING MAX(length_of_stay) > 3) t ON p.patient_id = t.patient_id "
        "GROUP BY p.sex ORDER BY p.sex"
    )
    rows = hospital.fetchall()
    assert [r[0] for r in rows] == ["F", "M", "X"] and all(0 <= r[1] <= R for r in rows)


@pytest.mark.parametrize(
    "sql,fragment",
    [
        (
            "SELECT p.sex, AVG(s.x) FROM patients p "
            "JOIN (SELECT diagnosis, COUNT(*) AS x FROM visits GROUP BY diagnosis) s "
            "ON p.region = s.diagnosis GROUP BY p.sex",
            "group the subquery by the privacy unit only: GROUP BY patient_id",
        ),
        (
            "SELECT AVG(x) FROM (SELECT patient_id, STDDEV(cost) AS x FROM visits GROUP BY patient_id) s",
            "COUNT, COUNT(DISTINCT x), SUM, AVG, MIN and MAX",
        ),
        (
            "SELECT AVG(x) FROM (SELECT patient_id, SUM(LENGTH(p.insurance)) AS x FROM visits v JOIN patients p "
            "USING (patient_id) GROUP BY patient_id) s",
            "cannot bound",
        ),
        (
            "SELECT AVG(x) FROM (SELECT patient_id, diagnosis, COUNT(*) AS x FROM visits GROUP BY patient_id) s",
            "must appear in the GROUP BY clause",
        ),
        ("SELECT AVG(x) FROM (SELECT patient_id, COUNT(*) AS x FROM visits GROUP BY patient_id LIMIT 5) s", "LIMIT"),
        (
            "SELECT patient_id FROM (SELECT patient_id, COUNT(*) AS x FROM visits GROUP BY patient_id) s",
            "selecting rows of a private table",
        ),
        (
            "SELECT AVG(x) FROM (SELECT patient_id, COUNT(*) AS x FROM visits TABLESAMPLE BERNOULLI (10) "
            "GROUP BY patient_id) s",
            "TABLESAMPLE inside",
        ),
    ],
)
def test_per_unit_refusals_are_free(hospital, sql, fragment):
    before = hospital.connection.session.budget()["epsilon"]["spent"]
    with pytest.raises(dpsql.ProgrammingError) as e:
        hospital.execute(sql)
    assert fragment in str(e.value) + (e.value.hint or "")
    assert hospital.connection.session.budget()["epsilon"]["spent"] == before

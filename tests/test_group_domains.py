"""GROUP BY expressions whose key domains follow from the policy: every key shown, no delta."""

from __future__ import annotations

import datetime

import duckdb
import pytest

import dpsql

from .conftest import SAMPLE

VISITS, PATIENTS = SAMPLE / "visits.parquet", SAMPLE / "patients.parquet"


@pytest.mark.parametrize(
    "sql,keys",
    [
        (
            "SELECT date_trunc('month', visit_date) AS m, COUNT(*) FROM visits GROUP BY 1 ORDER BY 1",
            [datetime.datetime(2023 + i // 12, 1 + i % 12, 1) for i in range(24)],
        ),
        ("SELECT EXTRACT(year FROM visit_date) AS y, COUNT(*) FROM visits GROUP BY y ORDER BY y", [2023, 2024]),
        ("SELECT EXTRACT(month FROM visit_date) AS m, COUNT(*) FROM visits GROUP BY m ORDER BY m", list(range(1, 13))),
        (
            "SELECT CASE WHEN age < 18 THEN 'child' WHEN age < 65 THEN 'adult' ELSE 'senior' END AS band, COUNT(*) "
            "FROM patients GROUP BY band ORDER BY band",
            ["adult", "child", "senior"],
        ),
        (
            "SELECT width_bucket(income, 0, 300000, 5) AS b, COUNT(*) FROM patients GROUP BY b ORDER BY b",
            list(range(7)),
        ),
        (
            "SELECT FLOOR(age / 10) * 10 AS decade, COUNT(*) FROM patients GROUP BY decade ORDER BY decade",
            [float(10 * i) for i in range(12)],
        ),
        ("SELECT age, COUNT(*) FROM patients GROUP BY age ORDER BY age", list(range(111))),
    ],
)
def test_derived_domains_show_every_key_without_delta(hospital, sql, keys):
    hospital.execute("SET dpsql.delta = 0")  # partition selection would need delta > 0
    hospital.execute(sql)
    rows = hospital.fetchall()
    assert [r[0] for r in rows] == keys
    assert hospital.dp["cost"]["delta"] == 0


def test_derived_domain_counts_are_accurate(hospital):
    # The bounded truth under Laplace noise: a patient's N visits in all count 40 / N each when
    # N > 40 (max_groups 4 x max_rows 10), whatever months they fall in.
    truth = dict(
        duckdb.connect()
        .execute(
            f"SELECT date_trunc('month', visit_date), SUM(40.0 / GREATEST(n, 40)) FROM (SELECT visit_date, "
            f"COUNT(*) OVER (PARTITION BY patient_id) AS n FROM '{VISITS}') GROUP BY 1"
        )
        .fetchall()
    )
    hospital.execute("SET dpsql.bounds = policy")  # the truth above is bounding at the policy's limits
    hospital.execute("SELECT date_trunc('month', visit_date) AS m, COUNT(*) FROM visits GROUP BY 1")
    # Laplace scale 4 groups x 10 rows / epsilon 1 = 40; P(|noise| > 40 ln(1e9) ~ 830) < 1e-9 per month.
    for month, n in hospital.fetchall():
        assert abs(n - truth[month]) <= 830 + 1, month


def test_cross_product_of_declared_domains(hospital):
    hospital.execute("SET dpsql.delta = 0")
    hospital.execute(
        "SELECT region, EXTRACT(quarter FROM v.visit_date) AS q, COUNT(*) FROM visits v "
        "JOIN patients p USING (patient_id) GROUP BY region, q"
    )
    assert len(hospital.fetchall()) == 10 * 4


def test_undeclared_expression_needs_delta(hospital):
    hospital.execute("SET dpsql.delta = 0")
    with pytest.raises(dpsql.ProgrammingError, match="needs delta > 0"):
        hospital.execute("SELECT LOWER(insurance) AS i, COUNT(*) FROM patients GROUP BY i")

"""GROUP BY expressions whose key domains follow from the policy: every key shown, no delta."""

from __future__ import annotations

import datetime

import duckdb
import pytest

import dpsql
from dpsql.sql import build as b
from dpsql.sql import rewrite
from dpsql.sql.domains import Span

from .conftest import SAMPLE, hospital_policy

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


def test_a_span_is_its_values_without_listing_them():
    days = Span(datetime.date(2024, 2, 27), 4)
    assert list(days) == [datetime.date(2024, 2, d) for d in (27, 28, 29)] + [datetime.date(2024, 3, 1)]
    assert days[-1] == datetime.date(2024, 3, 1) and days[1:3] == (
        datetime.date(2024, 2, 28),
        datetime.date(2024, 2, 29),
    )
    assert len(Span(-5, 11)) == 11 and list(Span(-5, 11)) == list(range(-5, 6))
    with pytest.raises(IndexError):
        Span(0, 3)[3]


@pytest.mark.parametrize("size", [1, 9, 10, 11, 65, 100, 1000, 1001, 73_049])
def test_a_long_span_is_generated_by_the_engine_with_every_value_once(size):
    for first in (-7, datetime.date(1900, 1, 1)):
        span = Span(first, size)
        sql = rewrite._values(span, None)
        relation = b.select([b.col("c", "d")], b.subquery(sql.copy(), "d", ["c"]))
        got = [r[0] for r in duckdb.connect().execute(relation.sql(dialect="duckdb") + " ORDER BY 1").fetchall()]
        assert got == list(span), (first, size)
        if size > rewrite.SPAN_LITERALS:
            assert len(sql.sql()) < 2000  # a few nodes, not a literal per value


def test_a_century_of_days_plans_at_once(tmp_path):
    # Two centuries of declared days: the keys of date_trunc('month', d) are computed by the
    # engine from a generated series, so planning takes no longer than over two years.
    text = hospital_policy(tmp_path).read_text()
    wide = text.replace("lower = 2023-01-01, upper = 2024-12-31", "lower = 1900-01-01, upper = 2099-12-31")
    assert wide != text
    (tmp_path / "wide.toml").write_text(wide)
    conn = dpsql.connect(tmp_path / "wide.toml", user="alice", ledger=tmp_path / "wide.sqlite")
    cur = conn.cursor()
    cur.execute("SET dpsql.delta = 0")
    cur.execute(
        "SELECT date_trunc('month', visit_date) AS m, COUNT(*) FROM visits WHERE visit_date >= '2099-01-01' "
        "GROUP BY 1 ORDER BY 1"
    )
    assert [r[0] for r in cur.fetchall()] == [datetime.datetime(2099, m, 1) for m in range(1, 13)]
    cur.execute("SELECT EXTRACT(year FROM visit_date) AS y, COUNT(*) FROM visits GROUP BY y ORDER BY y")
    assert [r[0] for r in cur.fetchall()] == list(range(1900, 2100))
    conn.close()

"""A corpus of analyst queries over the sample hospital: each answered with the right shape
(column names and row count), or refused with the intended message and nothing charged."""

from __future__ import annotations

import pytest

import dpsql

M = 24  # months in the declared visit_date range
D = 12  # declared diagnoses
R = 10  # declared regions

ANSWERED = [
    # Dashboard tiles
    ("SELECT COUNT(*) FROM patients", ["count"], 1),
    (
        "SELECT COUNT(*) AS visits, SUM(cost) AS revenue, AVG(cost) AS avg_cost FROM visits",
        ["visits", "revenue", "avg_cost"],
        1,
    ),
    ("SELECT COUNT(DISTINCT patient_id) AS patients_seen FROM visits", ["patients_seen"], 1),
    ("SELECT AVG(length_of_stay), MAX(length_of_stay) FROM visits", ["avg", "max"], 1),
    ("SELECT SUM(cost) / COUNT(DISTINCT patient_id) AS cost_per_patient FROM visits", ["cost_per_patient"], 1),
    (
        "SELECT COUNT(*) FILTER (WHERE smoker) AS smokers, COUNT(*) AS everyone FROM patients",
        ["smokers", "everyone"],
        1,
    ),
    ("SELECT 100.0 * COUNT(*) FILTER (WHERE smoker) / COUNT(*) AS pct_smokers FROM patients", ["pct_smokers"], 1),
    # Cohort counts
    ("SELECT sex, COUNT(*) FROM patients GROUP BY sex ORDER BY sex", ["sex", "count"], 3),
    ("SELECT region, COUNT(*) AS n FROM patients GROUP BY region ORDER BY n DESC", ["region", "n"], R),
    ("SELECT region, sex, COUNT(*) FROM patients GROUP BY region, sex", ["region", "sex", "count"], R * 3),
    ("SELECT smoker, COUNT(*) FROM patients WHERE age BETWEEN 40 AND 60 GROUP BY smoker", ["smoker", "count"], 2),
    (
        "SELECT CASE WHEN age < 18 THEN 'child' WHEN age < 65 THEN 'adult' ELSE 'senior' END AS age_band, COUNT(*) "
        "FROM patients GROUP BY age_band ORDER BY age_band",
        ["age_band", "count"],
        3,
    ),
    (
        "SELECT FLOOR(age / 10) * 10 AS decade, COUNT(*) FROM patients GROUP BY decade ORDER BY decade",
        ["decade", "count"],
        12,
    ),
    (
        "SELECT width_bucket(income, 0, 300000, 6) AS income_band, COUNT(*) FROM patients GROUP BY 1 ORDER BY 1",
        ["income_band", "count"],
        8,
    ),
    (
        "SELECT diagnosis, COUNT(DISTINCT patient_id) AS patients FROM visits GROUP BY diagnosis",
        ["diagnosis", "patients"],
        D,
    ),
    (
        "SELECT p.region, COUNT(DISTINCT v.patient_id) FROM visits v JOIN patients p ON v.patient_id = p.patient_id "
        "WHERE v.diagnosis = 'cardiac' GROUP BY p.region",
        ["region", "count"],
        R,
    ),
    (
        "SELECT diagnosis, COUNT(*) FROM visits WHERE cost > 1000 GROUP BY diagnosis HAVING COUNT(*) > 100",
        ["diagnosis", "count"],
        None,
    ),
    ("SELECT age, COUNT(*) FROM patients WHERE age >= 100 GROUP BY age ORDER BY age", ["age", "count"], 11),
    # Averages and sums by group
    (
        "SELECT sex, AVG(age) AS mean_age, AVG(income) AS mean_income FROM patients GROUP BY sex",
        ["sex", "mean_age", "mean_income"],
        3,
    ),
    ("SELECT region, SUM(income) FROM patients GROUP BY region", ["region", "sum"], R),
    (
        "SELECT diagnosis, AVG(cost), AVG(length_of_stay) FROM visits GROUP BY diagnosis ORDER BY 2 DESC LIMIT 5",
        ["diagnosis", "avg", "avg"],
        5,
    ),
    ("SELECT ward, COUNT(*), SUM(cost) FROM visits GROUP BY ward", ["ward", "count", "sum"], 12),
    (
        "SELECT w.floor, COUNT(*) FROM visits v JOIN wards w ON v.ward = w.name GROUP BY w.floor",
        ["floor", "count"],
        None,
    ),
    (
        "SELECT p.insurance, AVG(v.cost) FROM visits v JOIN patients p USING (patient_id) GROUP BY p.insurance",
        ["insurance", "avg"],
        None,
    ),
    (
        "SELECT p.smoker, AVG(v.length_of_stay) FROM visits v JOIN patients p USING (patient_id) "
        "WHERE v.diagnosis IN ('cardiac', 'respiratory') GROUP BY p.smoker",
        ["smoker", "avg"],
        2,
    ),
    ("SELECT sex, VAR_SAMP(age), STDDEV_SAMP(age) FROM patients GROUP BY sex", ["sex", "variance", "stddev_samp"], 3),
    ("SELECT diagnosis, STDDEV(cost) FROM visits GROUP BY diagnosis", ["diagnosis", "stddev"], D),
    (
        "SELECT AVG(cost) AS mean, STDDEV_POP(cost) AS sd, AVG(cost) + 2 * STDDEV_POP(cost) AS upper_band FROM visits",
        ["mean", "sd", "upper_band"],
        1,
    ),
    # BI tools' wrappers: the outer query is post-processing of the inner one's released rows
    ("SELECT AVG(x) FROM (SELECT diagnosis, COUNT(*) AS x FROM visits GROUP BY diagnosis) t", ["avg"], 1),
    (
        "SELECT * FROM (SELECT region, COUNT(*) AS n FROM patients GROUP BY region) AS virtual_table LIMIT 1000",
        ["region", "n"],
        R,
    ),
    # Time series
    (
        "SELECT date_trunc('month', visit_date) AS month, COUNT(*) FROM visits GROUP BY 1 ORDER BY 1",
        ["month", "count"],
        M,
    ),
    (
        "SELECT date_trunc('month', visit_date) AS month, AVG(cost) FROM visits GROUP BY month ORDER BY month",
        ["month", "avg"],
        M,
    ),
    ("SELECT EXTRACT(year FROM visit_date) AS year, SUM(cost) FROM visits GROUP BY year", ["year", "sum"], 2),
    (
        "SELECT EXTRACT(dow FROM visit_date) AS weekday, COUNT(*) FROM visits GROUP BY weekday ORDER BY weekday",
        ["weekday", "count"],
        7,
    ),
    (
        "SELECT EXTRACT(quarter FROM visit_date) AS q, diagnosis, COUNT(*) FROM visits GROUP BY q, diagnosis",
        ["q", "diagnosis", "count"],
        4 * D,
    ),
    (
        "SELECT date_trunc('month', visit_date) AS month, COUNT(DISTINCT patient_id) FROM visits "
        "WHERE visit_date >= DATE '2024-01-01' GROUP BY month ORDER BY month",
        ["month", "count"],
        M // 2,
    ),
    # Filters narrow declared domains (sql/narrow.py): checked on every backend by test_backends
    ("SELECT ward, COUNT(*) FROM visits WHERE ward IN ('Cardiology', 'Oncology') GROUP BY ward", ["ward", "count"], 2),
    (
        "SELECT diagnosis, SUM(cost) FROM visits WHERE diagnosis LIKE 'c%' OR diagnosis ILIKE 'SKIN' "
        "GROUP BY diagnosis",
        ["diagnosis", "sum"],
        3,
    ),
    (
        "SELECT w.building, w.floor, COUNT(*) FROM visits v JOIN wards w ON v.ward = w.name "
        "WHERE v.ward NOT IN ('Radiology') GROUP BY w.building, w.floor",
        ["building", "floor", "count"],
        11,
    ),
    (
        "SELECT date_trunc('quarter', visit_date) AS q, AVG(cost) FROM visits "
        "WHERE visit_date BETWEEN '2023-02-10' AND '2023-08-01' GROUP BY q",
        ["q", "avg"],
        3,
    ),
    # Medians and other quantiles
    ("SELECT MEDIAN(age) FROM patients", ["median"], 1),
    ("SELECT sex, MEDIAN(income) FROM patients GROUP BY sex", ["sex", "median"], 3),
    (
        "SELECT diagnosis, PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY cost) AS median_cost FROM visits "
        "GROUP BY diagnosis",
        ["diagnosis", "median_cost"],
        D,
    ),
    ("SELECT PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY length_of_stay) AS p90 FROM visits", ["p90"], 1),
    ("SELECT QUANTILE(income, 0.25) AS q1, QUANTILE(income, 0.75) AS q3 FROM patients", ["q1", "q3"], 1),
    ("SELECT region, MIN(age), MAX(age) FROM patients GROUP BY region", ["region", "min", "max"], R),
    (
        "SELECT MEDIAN(income) FILTER (WHERE smoker) AS smokers, MEDIAN(income) FILTER (WHERE NOT smoker) AS others "
        "FROM patients",
        ["smokers", "others"],
        1,
    ),
    # Per-unit subqueries
    ("SELECT AVG(total) FROM (SELECT patient_id, SUM(cost) AS total FROM visits GROUP BY patient_id) t", ["avg"], 1),
    ("SELECT MEDIAN(n) FROM (SELECT patient_id, COUNT(*) AS n FROM visits GROUP BY patient_id) t", ["median"], 1),
    (
        "SELECT n, COUNT(*) FROM (SELECT patient_id, COUNT(*) AS n FROM visits GROUP BY patient_id) t GROUP BY n "
        "ORDER BY n",
        ["n", "count"],
        41,
    ),
    (
        "WITH per_patient AS (SELECT patient_id, COUNT(*) AS visits, SUM(cost) AS spend FROM visits "
        "GROUP BY patient_id) SELECT AVG(visits), AVG(spend) FROM per_patient",
        ["avg", "avg"],
        1,
    ),
    (
        "SELECT p.sex, AVG(t.stays) FROM patients p JOIN (SELECT patient_id, SUM(length_of_stay) AS stays FROM visits "
        "GROUP BY patient_id) t ON p.patient_id = t.patient_id GROUP BY p.sex",
        ["sex", "avg"],
        3,
    ),
    (
        "SELECT COUNT(*) FROM (SELECT patient_id FROM visits GROUP BY patient_id HAVING COUNT(*) >= 5) frequent",
        ["count"],
        1,
    ),
    # Row-level subqueries and CTEs
    ("SELECT COUNT(*) FROM (SELECT * FROM patients WHERE age > 80) old", ["count"], 1),
    (
        "WITH adults AS (SELECT patient_id, income FROM patients WHERE age >= 18) SELECT AVG(income) FROM adults",
        ["avg"],
        1,
    ),
    ("SELECT COUNT(*) FROM visits WHERE ward IN (SELECT name FROM wards WHERE floor > 1)", ["count"], 1),
    # Distinct counts
    (
        "SELECT region, COUNT(DISTINCT diagnosis) FROM visits JOIN patients USING (patient_id) GROUP BY region",
        ["region", "count"],
        R,
    ),
    ("SELECT COUNT(DISTINCT sex) FROM patients", ["count"], 1),
    # Sampling and settings
    ("SELECT COUNT(*) FROM visits TABLESAMPLE BERNOULLI (10)", ["count"], 1),
    ("SELECT insurance, COUNT(*) FROM patients GROUP BY insurance", ["insurance", "count"], None),
    # BigQuery syntax
    (
        "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 1, delta = 1e-7, privacy_unit_column = patient_id) "
        "diagnosis, COUNT(*) AS n FROM visits GROUP BY diagnosis",
        ["diagnosis", "n"],
        D,
    ),
    (
        "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 0.5, max_groups_contributed = 2) diagnosis, "
        "AVG(cost, contribution_bounds_per_group => (0, 3000)) AS avg_cost FROM visits GROUP BY diagnosis",
        ["diagnosis", "avg_cost"],
        D,
    ),
    (
        "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 1) sex, SUM(income, contribution_bounds_per_row => "
        "(0, 100000)) AS income FROM patients GROUP BY sex",
        ["sex", "income"],
        3,
    ),
    (
        "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 1, max_rows_contributed = 2) "
        "COUNT(*, contribution_bounds_per_group => (0, 2)) AS n FROM visits",
        ["n"],
        1,
    ),
    # Weights and public tables
    ("/* dpsql: weights 4, 1 */ SELECT COUNT(*), AVG(income) FROM patients", ["count", "avg"], 1),
    ("SELECT name, floor FROM wards ORDER BY name", ["name", "floor"], 12),
    ("SELECT COUNT(*) FROM wards", ["count"], 1),
]

REFUSED = [
    ("SELECT * FROM patients", "selecting rows of a private table"),
    ("SELECT COUNT(*), * FROM patients", "would return raw rows"),
    ("SELECT patient_id, age FROM patients", "selecting rows of a private table"),
    ("SELECT AVG(income) FROM patients WHERE patient_id = 42", None),  # answered: a one-person group gets noise
    ("SELECT MAX(insurance) FROM patients", "MAX is answered as a DP quantile"),
    ("SELECT CORR(age, income) FROM patients", "AVG(x * y)"),
    ("SELECT STRING_AGG(diagnosis, ',') FROM visits", "listing values would reveal them"),
    ("SELECT age, RANK() OVER (ORDER BY income) FROM patients", "window functions"),
    ("SELECT AVG(x) FROM (SELECT diagnosis, COUNT(*) AS x FROM visits GROUP BY diagnosis GROUP BY 1) t", "syntax"),
    ("SELECT COUNT(DISTINCT insurance) FROM patients", "not declared"),
    ("DELETE FROM patients", "not allowed"),
    ("SELECT COUNT(*) FROM read_parquet('/etc/passwd')", "table functions"),
    (
        "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 1, privacy_unit_column = visit_id) COUNT(*) FROM visits",
        "privacy unit here is patient_id",
    ),
]


@pytest.mark.parametrize("sql,names,rows", ANSWERED)
def test_answered(hospital, sql, names, rows):
    hospital.execute(sql)
    got = hospital.fetchall()
    assert [d[0] for d in hospital.description] == names
    if rows is not None:
        assert len(got) == rows
    else:
        assert len(got) >= 1


@pytest.mark.parametrize("sql,fragment", [r for r in REFUSED if r[1] is not None])
def test_refused_and_free(hospital, sql, fragment):
    before = hospital.connection.session.budget()["epsilon"]["spent"]
    with pytest.raises(dpsql.Error) as e:
        hospital.execute(sql)
    assert fragment in str(e.value) + (e.value.hint or ""), str(e.value)
    assert hospital.connection.session.budget()["epsilon"]["spent"] == before


def test_corpus_size():
    assert len(ANSWERED) + len(REFUSED) >= 60

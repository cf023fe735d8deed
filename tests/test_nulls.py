"""NULLs are skipped by every aggregate, as in SQL: GREATEST/LEAST skip NULL arguments, so a
clamp that does not keep NULL would count a NULL as a bound (a regression found in review)."""

from __future__ import annotations

import duckdb
import pytest

from .conftest import SAMPLE

OLD_INCOME = "CASE WHEN age >= 65 THEN income END"


def test_aggregates_skip_nulls(hospital):
    hospital.execute("SET dpsql.epsilon = 1000")  # noise far below the tolerances
    truth = (
        duckdb.connect()
        .execute(
            f"SELECT AVG({OLD_INCOME}), MEDIAN({OLD_INCOME}), STDDEV_POP({OLD_INCOME}), COUNT({OLD_INCOME}) "
            f"FROM '{SAMPLE / 'patients.parquet'}'"
        )
        .fetchone()
    )
    hospital.execute(
        f"SELECT AVG({OLD_INCOME}), MEDIAN({OLD_INCOME}), STDDEV_POP({OLD_INCOME}), "
        f"COUNT(*) FILTER (WHERE age >= 65) FROM patients"
    )
    got = hospital.fetchone()
    assert got[0] == pytest.approx(truth[0], rel=0.01)
    assert abs(got[1] - truth[1]) < 300000 / 64  # within one histogram bin
    assert got[2] == pytest.approx(truth[2], rel=0.02)
    assert got[3] == pytest.approx(truth[3], abs=5)


def test_per_unit_aggregates_skip_nulls(hospital):
    hospital.execute("SET dpsql.epsilon = 1000")
    truth = (
        duckdb.connect()
        .execute(
            f"SELECT AVG(a) FROM (SELECT patient_id, AVG(CASE WHEN cost > 5000 THEN LEAST(cost, 50000) END) AS a "
            f"FROM '{SAMPLE / 'visits.parquet'}' GROUP BY 1) WHERE a IS NOT NULL"
        )
        .fetchone()[0]
    )
    hospital.execute(
        "SELECT AVG(a) FROM (SELECT patient_id, AVG(CASE WHEN cost > 5000 THEN cost END) AS a "
        "FROM visits GROUP BY patient_id) s"
    )
    assert hospital.fetchone()[0] == pytest.approx(truth, rel=0.01)


def test_a_key_made_null_by_the_query_gets_a_notice(conn):
    """A declared domain holds values, not NULL: rows whose key the query itself makes NULL (a
    NULL branch, NULLIF) are in no group, as the NOTICE says; a plain key gets none."""
    cur = conn.cursor()
    cur.execute("SELECT NULLIF(sex, 'F') AS s, COUNT(*) FROM people GROUP BY 1")
    assert [r[0] for r in cur.fetchall()] == ["M"]
    assert "NULLIF(sex, 'F') is NULL are in no group" in cur.dp["notice"]
    cur.execute("SELECT sex, COUNT(*) FROM people GROUP BY sex")
    assert "notice" not in cur.dp

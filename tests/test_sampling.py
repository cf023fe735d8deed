"""Amplification by subsampling: TABLESAMPLE BERNOULLI samples privacy units, charges the
amplified cost, and the answer and its interval stay consistent with the truth."""

from __future__ import annotations

import math
import statistics
from decimal import Decimal, getcontext

import duckdb
import pytest
from scipy import stats

import dpsql

from .conftest import SAMPLE

ALPHA = 1e-6


def amplified(eps: float, q: float) -> Decimal:
    getcontext().prec = 50
    return (1 + Decimal(q) * (Decimal(eps).exp() - 1)).ln()


def test_charged_cost_is_the_amplified_formula(hospital):
    for percent, q in ((10, 0.1), (50, 0.5), (2.5, 0.025)):
        hospital.execute(f"SELECT COUNT(*), AVG(age) FROM patients TABLESAMPLE BERNOULLI ({percent})")
        charged = hospital.dp["cost"]["epsilon"]
        exact = amplified(1.0, q)
        assert Decimal(charged) >= exact - Decimal("1e-16")  # never less than the formula
        assert abs(Decimal(charged) - exact) < Decimal("1e-15")
    session = hospital.connection.session
    spent = session.budget()["epsilon"]["spent"]
    assert spent == sum(h["cost"].epsilon for h in session.ledger.history("alice"))  # exact rationals
    assert float(spent) == pytest.approx(float(amplified(1, 0.1) + amplified(1, 0.5) + amplified(1, 0.025)), rel=1e-12)


def test_sampled_answers_and_intervals_match_the_truth(hospital):
    truth = (
        duckdb.connect()
        .execute(
            f"SELECT COUNT(*), SUM(LEAST(GREATEST(age, 0), 110)), AVG(LEAST(GREATEST(age, 0), 110)) "
            f"FROM '{SAMPLE / 'patients.parquet'}'"
        )
        .fetchone()
    )
    runs = 150
    estimates = {"count": [], "sum": [], "avg": []}
    hits = {"count": 0, "sum": 0, "avg": 0}
    for _ in range(runs):
        hospital.execute("SELECT COUNT(*), SUM(age), AVG(age) FROM patients TABLESAMPLE BERNOULLI (20)")
        row = hospital.fetchone()
        for i, name in enumerate(("count", "sum", "avg")):
            estimates[name].append(row[i])
            lo, hi = hospital.dp["ci"][name][0]
            hits[name] += lo <= truth[i] <= hi
    for i, name in enumerate(("count", "sum", "avg")):
        values = estimates[name]
        mean, sd = statistics.fmean(values), statistics.stdev(values)
        # Horvitz-Thompson is unbiased (AVG, a ratio, nearly so): z-test at 5.5 sigma (FPR ~ 4e-8).
        assert abs(mean - truth[i]) <= 5.5 * sd / math.sqrt(runs), name
        assert sd > 0
        assert stats.binomtest(hits[name], runs, 0.95, alternative="less").pvalue > ALPHA, (name, hits[name])


def test_sampling_refusals(hospital):
    for sql, fragment in [
        ("SELECT COUNT(*) FROM patients TABLESAMPLE BERNOULLI (10) REPEATABLE (1)", "REPEATABLE"),
        ("SELECT COUNT(*) FROM patients TABLESAMPLE SYSTEM (10)", "BERNOULLI"),
        ("SELECT COUNT(*) FROM wards TABLESAMPLE BERNOULLI (10)", "public"),
        ("SELECT COUNT(*) FROM patients TABLESAMPLE BERNOULLI (0)", "above 0"),
    ]:
        with pytest.raises(dpsql.ProgrammingError) as info:
            hospital.execute(sql)
        assert fragment in str(info.value)
    assert hospital.connection.session.budget()["queries"] == 0


def test_units_not_rows_are_sampled(hospital):
    """All of a sampled patient's visits come along: per-unit sampling keeps groups intact."""
    session = hospital.connection.session
    from dpsql.sql.classify import classify
    from dpsql.sql.rewrite import rewrite

    plan, _ = session._prepare(classify("SELECT COUNT(*) FROM visits TABLESAMPLE BERNOULLI (30)").tree)
    sql = session.engine.sql_of(rewrite(plan, None, salt="salt"))
    assert "SHA256('salt' || ':' || CAST(t0.patient_id AS TEXT))" in sql
    threshold = int(0.3 * 2**60)
    coin = "CAST('0x' || SUBSTRING(SHA256('salt:' || CAST(patient_id AS TEXT)), 1, 15) AS BIGINT)"
    con = duckdb.connect()
    kept = con.execute(
        f"SELECT COUNT(DISTINCT patient_id), COUNT(*) FROM '{SAMPLE / 'visits.parquet'}' WHERE {coin} < {threshold}"
    ).fetchone()
    partial = con.execute(
        f"SELECT COUNT(*) FROM (SELECT patient_id, bool_or({coin} < {threshold}) a, "
        f"bool_and({coin} < {threshold}) b FROM '{SAMPLE / 'visits.parquet'}' "
        f"GROUP BY patient_id) WHERE a AND NOT b"
    ).fetchone()[0]
    assert partial == 0
    assert 0.27 < kept[0] / 19506 < 0.33

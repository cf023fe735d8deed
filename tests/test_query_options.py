"""Per-query options: weights, BigQuery's differential privacy clause, dpsql.target_error."""

from __future__ import annotations

import re
from fractions import Fraction

import pytest

import dpsql
from dpsql.sql.classify import classify


def _explain(cur, sql: str) -> list[str]:
    cur.execute("EXPLAIN " + sql)
    return [r[0] for r in cur.fetchall()]


def test_weights_split_epsilon_and_explain_shows_it(hospital):
    hospital.execute("SET dpsql.bounds = policy")  # the scales below are at the policy's limits
    lines = _explain(hospital, "/* dpsql: weights 3, 1 */ SELECT COUNT(*), AVG(cost) FROM visits")
    shares = [line for line in lines if ": epsilon " in line]
    # COUNT(*) takes 3 of 5 shares; AVG's noisy sum and count take 1 each.
    assert shares[0].startswith("COUNT(*): epsilon 0.6,")
    assert "epsilon 0.2," in shares[1] and "epsilon 0.2," in shares[2]
    before = hospital.connection.session.budget()["epsilon"]["spent"]
    hospital.execute("SELECT COUNT(*), AVG(cost) /* dpsql: weights 3, 1 */ FROM visits")
    assert hospital.connection.session.budget()["epsilon"]["spent"] - before == 1  # the query's whole epsilon, exactly
    noise = hospital.dp["noise"]
    assert noise[0]["scale"] == pytest.approx(10 / 0.6, rel=1e-9)  # L1 10 rows / 0.6


def test_weights_skip_group_keys(hospital):
    lines = _explain(hospital, "/* dpsql: weights 2, 1 */ SELECT diagnosis, COUNT(*), SUM(cost) FROM visits GROUP BY 1")
    assert [re.search(r": (epsilon [0-9.]+),", line).group(1) for line in lines if ": epsilon " in line] == [
        f"epsilon {2 / 3:.6g}",
        f"epsilon {1 / 3:.6g}",
    ]


def test_shared_measures_are_paid_once(hospital):
    lines = _explain(hospital, "SELECT COUNT(cost), SUM(cost), AVG(cost) FROM visits")
    assert len([line for line in lines if ": epsilon " in line]) == 2  # one count and one sum serve all three


@pytest.mark.parametrize("comment", ["/* dpsql: weights 0, 1 */", "/* dpsql: weights a, b */"])
def test_bad_weights_are_refused(comment):
    with pytest.raises(dpsql.ProgrammingError, match="weights"):
        classify(f"SELECT COUNT(*) {comment} FROM visits")


def test_too_many_weights_are_refused_and_free(hospital):
    with pytest.raises(dpsql.ProgrammingError, match="3 weights for 1 aggregate select items"):
        hospital.execute("/* dpsql: weights 1, 2, 3 */ SELECT diagnosis, COUNT(*) FROM visits GROUP BY 1")
    assert hospital.connection.session.budget()["epsilon"]["spent"] == 0


BIGQUERY = (
    "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 0.5, delta = 1e-7, max_groups_contributed = 1, "
    "privacy_unit_column = patient_id) diagnosis, COUNT(*, contribution_bounds_per_group => (0, 3)) AS n, "
    "AVG(cost, contribution_bounds_per_group => (0, 2000)) AS avg_cost FROM visits GROUP BY diagnosis"
)


def test_bigquery_clause_maps_onto_the_policy(hospital):
    stmt = classify(BIGQUERY)
    assert stmt.options.epsilon == Fraction(1, 2) and stmt.options.max_groups == 1 and stmt.options.max_rows == 3
    assert "DIFFERENTIAL_PRIVACY" not in stmt.tree.sql() and "LEAST(GREATEST(cost, 0.0), 2000.0)" in stmt.tree.sql()
    lines = _explain(hospital, BIGQUERY)
    assert lines[0].startswith("cost: epsilon=0.5 ")
    assert any(line.startswith("contribution bounds: 3 row(s) per unit in all") for line in lines)  # 1 group x 3 rows
    hospital.execute(BIGQUERY)
    rows = hospital.fetchall()
    assert len(rows) == 12 and all(0 <= r[2] <= 2000 for r in rows)
    assert hospital.dp["cost"]["epsilon"] == pytest.approx(0.5)


def test_bigquery_clause_cannot_loosen_the_policy(hospital):
    hospital.execute(
        "EXPLAIN SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 1, max_groups_contributed = 50) "
        "diagnosis, SUM(cost, contribution_bounds_per_row => (-1e9, 1e9)) FROM visits GROUP BY 1"
    )
    lines = [r[0] for r in hospital.fetchall()]
    assert any(
        line.startswith("contribution bounds: 40 row(s) per unit in all") for line in lines
    )  # 4 x 10, not 50 x 10
    assert any("LEAST(GREATEST(cost, -1000000000.0), 1000000000.0) END, 0, 50000)" in line for line in lines)


@pytest.mark.parametrize(
    "sql,fragment",
    [
        (
            "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 1, privacy_unit_column = visit_id) "
            "COUNT(*) FROM visits",
            "the policy's privacy unit here is patient_id",
        ),
        (
            "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 1, kappa = 2) COUNT(*) FROM visits",
            "kappa is not supported",
        ),
        ("SELECT WITH DIFFERENTIAL_PRIVACY (epsilon = 1) COUNT(*) FROM visits", "expected OPTIONS"),
        (
            "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = 1) AVG(cost, contribution_bounds_per_group => (5, 1)) "
            "FROM visits",
            "above high",
        ),
        ("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS (epsilon = -1) COUNT(*) FROM visits", "greater than 0"),
    ],
)
def test_bigquery_mistakes_are_refused_and_free(hospital, sql, fragment):
    with pytest.raises(dpsql.ProgrammingError) as e:
        hospital.execute(sql)
    assert fragment in str(e.value)
    assert hospital.connection.session.budget()["epsilon"]["spent"] == 0


def test_target_error_picks_the_smallest_epsilon(hospital):
    """At the policy's limits (under dpsql.bounds = auto see test_auto_bounds.py's targets)."""
    hospital.execute("SET dpsql.bounds = policy")
    hospital.execute("SET dpsql.target_error = 50")
    lines = _explain(hospital, "SELECT diagnosis, COUNT(*) FROM visits GROUP BY diagnosis")
    assert any("dpsql.target_error" in line for line in lines)
    eps = float(lines[0].split("epsilon=")[1].split()[0])
    half = float(next(line for line in lines if line.startswith("COUNT(*)")).split("±")[1])
    assert half <= 50
    hospital.execute("SET dpsql.target_error = off")
    hospital.execute(f"SET dpsql.epsilon = {eps * 0.99}")  # a little less epsilon misses the target
    lines = _explain(hospital, "SELECT diagnosis, COUNT(*) FROM visits GROUP BY diagnosis")
    assert float(next(line for line in lines if line.startswith("COUNT(*)")).split("±")[1]) > 50
    hospital.execute("SET dpsql.target_error = 50")
    with pytest.raises(dpsql.ProgrammingError, match="applies to COUNT and SUM"):
        hospital.execute("SELECT AVG(age) FROM patients")

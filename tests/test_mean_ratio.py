"""sql/mean_ratio.py: SUM(x) / COUNT(x) and SUM(x) / COUNT(*) read as the AVG they are, one
estimate with AVG's estimator, equal to the ratio on any data (NULLs included), PostgreSQL's
integer division kept."""

from __future__ import annotations

import duckdb
import pytest
import sqlglot

from dpsql.sql.classify import classify
from dpsql.sql.mean_ratio import as_mean

from .conftest import SAMPLE
from .test_nulls import OLD_INCOME  # NULL for most patients


def _mean(text: str):
    return as_mean(sqlglot.parse_one(f"SELECT {text}", read="postgres").expressions[0])


@pytest.mark.parametrize(
    "text, avg, plain",
    [
        ("SUM(x) / COUNT(x)", "AVG(x)", True),
        ("SUM(x) / COUNT(*)", "AVG(COALESCE(x, 0))", True),
        ("(SUM(x)) / (COUNT(*))", "AVG(COALESCE(x, 0))", True),
        ("SUM(x) / NULLIF(COUNT(x), 0)", "AVG(x)", True),
        ("CAST(SUM(x) AS DOUBLE PRECISION) / COUNT(*)", "AVG(COALESCE(x, 0))", False),
        ("SUM(x)::numeric / COUNT(x)", "AVG(x)", False),
        ("SUM(x) * 1.0 / COUNT(*)", "AVG(COALESCE(x, 0))", False),
        ("1.0 * SUM(x) / NULLIF(COUNT(*), 0)", "AVG(COALESCE(x, 0))", False),
        ("SUM(x) / COUNT(*)::float", "AVG(COALESCE(x, 0))", False),
        ("SUM(x) / CAST(COUNT(*) AS BIGINT)", "AVG(COALESCE(x, 0))", True),
        (
            "SUM(x) FILTER (WHERE y > 1) / COUNT(*) FILTER (WHERE y > 1)",
            "AVG(COALESCE(x, 0)) FILTER(WHERE y > 1)",
            True,
        ),
        ("SUM(a + b) / COUNT(a + b)", "AVG(a + b)", True),
    ],
)
def test_ratios_of_a_sum_and_a_count_are_read_as_means(text, avg, plain):
    mean = _mean(text)
    assert mean is not None
    assert mean.avg.sql(dialect="postgres") == avg
    assert mean.plain is plain


@pytest.mark.parametrize(
    "text",
    [
        "SUM(x) / COUNT(y)",  # other rows counted
        "SUM(x) FILTER (WHERE y > 1) / COUNT(*)",  # other rows counted
        "SUM(x) / COUNT(*) FILTER (WHERE y > 1)",
        "SUM(x) FILTER (WHERE y > 1) / COUNT(*) FILTER (WHERE y > 2)",
        "SUM(DISTINCT x) / COUNT(*)",
        "SUM(x) / COUNT(DISTINCT x)",
        "SUM(x) * 2 / COUNT(*)",  # twice the mean: left as written
        "CAST(SUM(x) AS INTEGER) / COUNT(*)",  # a cast to an integer truncates the sum first
        "COUNT(*) / SUM(x)",
        "AVG(x) / COUNT(*)",
        "SUM(x) / NULLIF(COUNT(*), 1)",
        "SUM(x) + COUNT(*)",
    ],
)
def test_other_divisions_are_left_as_written(text):
    assert _mean(text) is None


def test_a_ratio_is_one_mean_in_the_plan(hospital):
    session = hospital.connection._session
    plan, _ = session._prepare(classify("SELECT ward, SUM(cost) / COUNT(*) AS m FROM visits GROUP BY ward").tree)
    assert [e.func for e in plan.estimates] == ["avg"]
    plan, _ = session._prepare(classify("SELECT ward, SUM(cost) / COUNT(*) * 2 FROM visits GROUP BY ward").tree)
    assert [e.func for e in plan.estimates] == ["avg"]  # inside other arithmetic too
    plan, _ = session._prepare(classify("SELECT ward, SUM(cost), COUNT(*) FROM visits GROUP BY ward").tree)
    assert sorted(e.func for e in plan.estimates) == ["count", "sum"]


def test_the_mean_equals_the_ratio_with_nulls_and_integer_division(hospital):
    """At a large epsilon the answers are the exact ratios (as PostgreSQL computes them), over a
    value NULL for most rows, and an integer ratio is truncated as PostgreSQL's bigint division."""
    hospital.execute("SET dpsql.epsilon = 1000")
    truth = (
        duckdb.connect()
        .execute(
            f"SELECT SUM({OLD_INCOME}) / COUNT(*), SUM({OLD_INCOME}) / COUNT({OLD_INCOME}), "
            f"SUM(age) FILTER (WHERE smoker) // COUNT(*) FILTER (WHERE smoker), "
            f"AVG(age) FILTER (WHERE smoker) "
            f"FROM '{SAMPLE / 'patients.parquet'}'"
        )
        .fetchone()
    )
    hospital.execute(
        f"SELECT SUM({OLD_INCOME}) / COUNT(*), SUM({OLD_INCOME}) * 1.0 / NULLIF(COUNT({OLD_INCOME}), 0), "
        "SUM(age) FILTER (WHERE smoker) / COUNT(*) FILTER (WHERE smoker), "
        "CAST(SUM(age) FILTER (WHERE smoker) AS DOUBLE PRECISION) / COUNT(*) FILTER (WHERE smoker) FROM patients"
    )
    got = hospital.fetchone()
    assert [d[1] for d in hospital.description][2] in ("BIGINT", 20)  # int8, as PostgreSQL's
    assert got[0] == pytest.approx(truth[0], rel=0.01)
    assert got[1] == pytest.approx(truth[1], rel=0.01)
    assert abs(truth[3] - round(truth[3])) > 0.05  # the exact mean is not near a whole number
    assert got[2] == truth[2]
    assert got[3] == pytest.approx(truth[3], rel=0.01)
    assert isinstance(got[2], int) and isinstance(got[3], float)


def test_explain_says_which_ratio_is_read_as_a_mean(hospital):
    hospital.execute("EXPLAIN SELECT ward, SUM(cost) / COUNT(*) AS m FROM visits GROUP BY ward")
    lines = [r[0] for r in hospital.fetchall()]
    assert any(line.startswith("SUM(cost) / COUNT(*) is answered as AVG(COALESCE(cost, 0))") for line in lines)
    hospital.execute("EXPLAIN SELECT ward, AVG(cost) FROM visits GROUP BY ward")
    assert not any("is answered as" in r[0] for r in hospital.fetchall())

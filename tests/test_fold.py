"""A weighted copy's bounded query folded into one SELECT (sql/fold.py) computes exactly what
its stages compute, and the fold leaves alone what it cannot fold without changing a value."""

from __future__ import annotations

import pytest
import sqlglot
from sqlglot import exp

import dpsql.sql.rewrite as rewrite_module
from dpsql.guarantee.bounding import WeightedCopy
from dpsql.sql.classify import classify
from dpsql.sql.fold import fold
from dpsql.sql.rewrite import rewrite

QUERIES = [
    "SELECT sex, COUNT(*) FROM patients GROUP BY sex",
    "SELECT COUNT(*), AVG(age) FROM patients",
    "SELECT region, sex, SUM(income), AVG(age), COUNT(income) FROM patients GROUP BY region, sex",
    "SELECT CASE WHEN age < 40 THEN 'young' ELSE 'old' END AS band, COUNT(*), AVG(income) FROM patients GROUP BY band",
    "SELECT smoker, SUM(age) - COUNT(*) AS x FROM patients GROUP BY smoker HAVING COUNT(*) > 10 ORDER BY 1",
    "SELECT ward, AVG(cost), SUM(length_of_stay) FROM visits GROUP BY ward",
    "SELECT diagnosis, COUNT(*), SUM(cost) FROM visits GROUP BY diagnosis",
    "SELECT date_trunc('month', visit_date) AS m, COUNT(*) FROM visits GROUP BY m",
    "SELECT EXTRACT(year FROM visit_date) AS y, ward, SUM(cost) FROM visits GROUP BY y, ward",
]


def _rows(session, tree: exp.Expression) -> list[tuple]:
    rs = session.engine.execute(session.engine.sql_of(tree, owned=True))
    return sorted(zip(*rs.columns), key=repr)


def test_a_folded_query_computes_what_its_stages_compute(hospital, monkeypatch):
    session = hospital.connection.session
    hospital.execute("SET dpsql.bounds = policy")  # the policy's plans, which read the weighted copies
    folded = 0
    for q in QUERIES:
        plan, _ = session._prepare(classify(q).tree)
        weighting = session._weighting(plan)
        assert isinstance(weighting, WeightedCopy), q
        one = rewrite(plan, plan.literal_domain_size(), None, weighting)
        with monkeypatch.context() as m:
            m.setattr(rewrite_module, "fold", lambda steps, final: None)
            staged = rewrite(plan, plan.literal_domain_size(), None, weighting)
        folded += staged.args.get("with_") is not None and one.args.get("with_") is None
        assert [e.alias_or_name for e in one.expressions] == [e.alias_or_name for e in staged.expressions], q
        got, expected = _rows(session, one), _rows(session, staged)
        assert got == expected and len(expected) > 0, q
    assert folded >= len(QUERIES) - 1  # every grouping folds (a plan of the copy's totals is one SELECT already)


def _steps(sql: str) -> tuple[list[tuple[str, exp.Select]], exp.Select]:
    tree = sqlglot.parse_one(sql, read="duckdb")
    steps = [(cte.alias, cte.this) for cte in tree.args["with_"].expressions]
    tree.set("with_", None)
    return steps, tree


FOLDS = (
    "WITH filtered AS (SELECT t0.sex AS k0, t0.w AS w FROM c AS t0), per_group AS "
    "(SELECT k0, 0 AS units, SUM(w) AS m0 FROM filtered GROUP BY k0) "
    "SELECT g.k0, COALESCE(CAST(g.units AS BIGINT), 0) AS units, COALESCE(CAST(g.m0 AS BIGINT), 0) AS m0 "
    "FROM per_group AS g"
)


def test_the_plain_stages_fold_into_one_select():
    folded = fold(*_steps(FOLDS))
    assert folded.sql(dialect="duckdb") == (
        "SELECT t0.sex AS k0, COALESCE(CAST(0 AS BIGINT), 0) AS units, "
        "COALESCE(CAST(SUM(t0.w) AS BIGINT), 0) AS m0 FROM c AS t0 GROUP BY t0.sex"
    )


@pytest.mark.parametrize(
    "change",
    [
        ("t0.sex AS k0", "sex AS k0"),  # an unqualified column could meet an output's name
        ("FROM c AS t0)", "FROM c AS t0 WHERE units > 0)"),  # in a condition too
        ("t0.w AS w FROM", "SUM(t0.w) OVER () AS w FROM"),  # a window is not moved under a grouping
        ("t0.w AS w FROM", "(SELECT 1) AS w FROM"),  # nor a subquery
        ("FROM c AS t0)", "FROM c AS t0 LIMIT 5)"),  # a limited projection
        ("SELECT t0.sex", "SELECT DISTINCT t0.sex"),  # a distinct one
        ("GROUP BY k0)", "GROUP BY k0 HAVING SUM(w) > 1)"),  # a grouping with a condition of its own
        ("FROM per_group AS g", "FROM per_group AS g WHERE g.m0 > 1"),  # a final step with one
        ("FROM per_group AS g", "FROM per_group AS g ORDER BY 1"),
        ("SUM(w) AS m0", "SUM(x) AS m0"),  # a name the projection does not give
        ("per_group AS (", "per_group2 AS ("),  # other steps
    ],
)
def test_what_could_change_a_value_is_not_folded(change):
    old, new = change
    assert old in FOLDS
    assert fold(*_steps(FOLDS.replace(old, new, 1))) is None

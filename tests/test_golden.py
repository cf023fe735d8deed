"""Golden fixtures of the bounded query, in the style of sqlglot's optimizer fixtures: each
block of tests/fixtures/bounded.sql is a query (with its mechanism) and the bounded SQL dpsql
rewrites it to, one CTE per stage. A change to bounding shows up here as a readable diff.

    DPSQL_UPDATE_GOLDEN=1 pytest tests/test_golden.py    # rewrite the fixture after a deliberate change
"""

from __future__ import annotations

import os
from pathlib import Path

import sqlglot

from dpsql.sql.classify import classify
from dpsql.sql.rewrite import rewrite

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "bounded.sql"
CASES = [
    ("laplace", "SELECT COUNT(*) FROM people"),
    ("laplace", "SELECT sex, COUNT(*), AVG(age) FROM people GROUP BY sex"),
    ("laplace", "SELECT kind, COUNT(*), SUM(amount) FROM events GROUP BY kind"),
    ("gaussian", "SELECT kind, COUNT(*), SUM(amount) FROM events GROUP BY kind"),
    ("laplace", "SELECT kind, COUNT(*) FROM events WHERE amount > 10 GROUP BY kind"),
    ("laplace", "SELECT p.sex, SUM(e.amount) FROM people p JOIN events e ON p.pid = e.pid GROUP BY p.sex"),
    ("laplace", "SELECT city, COUNT(*) FROM people GROUP BY city"),
    ("laplace", "SELECT kind, STDDEV(amount), MEDIAN(amount) FROM events GROUP BY kind"),
    ("laplace", "SELECT COUNT(DISTINCT pid) FROM events TABLESAMPLE BERNOULLI (20)"),
    ("laplace", "SELECT AVG(t) FROM (SELECT pid, SUM(amount) AS t FROM events GROUP BY pid) s"),
    ("laplace", "SELECT CASE WHEN amount < 10 THEN 'low' ELSE 'high' END AS b, COUNT(*) FROM events GROUP BY b"),
    ("laplace", "SELECT g, SUM(v) FROM rows GROUP BY g"),
]


def _render(session) -> str:
    blocks = []
    for mechanism, sql in CASES:
        session.execute(f"SET dpsql.mechanism = '{mechanism}'")
        plan, _ = session._prepare(classify(sql).tree)
        bounded = rewrite(plan, plan.literal_domain_size(), "salt" if plan.sample_rate else None)
        pretty = sqlglot.transpile(bounded.sql(dialect="duckdb"), read="duckdb", write="duckdb", pretty=True)[0]
        blocks.append(f"# mechanism: {mechanism}\n{sql};\n{pretty};\n")
    return "\n".join(blocks)


def test_bounded_sql_matches_the_golden_fixture(session):
    session.execute("SET dpsql.delta = 1e-8")
    got = _render(session)
    if os.environ.get("DPSQL_UPDATE_GOLDEN"):
        FIXTURE.write_text(got)
    assert got == FIXTURE.read_text()

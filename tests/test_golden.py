"""Golden fixtures of the bounded query, in the style of sqlglot's optimizer fixtures: a query
(with its mechanism) and the SQL dpsql builds for it.

- tests/fixtures/bounded.sql: the whole bounded query, one CTE per stage;
- tests/fixtures/bounding/<strategy>.sql: only the stages each bounding strategy writes
  (guarantee/bounding.py), for every case that uses it, so a change to one strategy shows up as a
  readable diff in its own file.

    DPSQL_UPDATE_GOLDEN=1 pytest tests/test_golden.py    # rewrite the fixtures after a deliberate change
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

import pytest
import sqlglot
from sqlglot import exp

from dpsql.config import load_policy
from dpsql.guarantee.bounding import SplitCopy, WeightedCopy
from dpsql.guarantee.measures import Histogram
from dpsql.session import Session
from dpsql.sql.classify import classify
from dpsql.sql.rewrite import rewrite

from .conftest import make_db, write_policy

FIXTURES = Path(__file__).resolve().parent / "fixtures"
STRATEGIES = [
    "row_units",
    "per_group_cap",
    "partition_selection",
    "total_cap",
    "l2_clip",
    "weighted_copy",
    "split_copy",
]
# (policy variant, mechanism, query). "capped": events declare max_contributions = 6;
# "weighted": the plan is rendered over a weighted copy named weights; "totals": over that copy
# with its stored columns (stored<j>) and their totals (weight_totals); "split": the capped
# policy's plan over that copy split by weight.
CASES = [
    ("", "laplace", "SELECT COUNT(*) FROM people"),
    ("", "laplace", "SELECT sex, COUNT(*), AVG(age) FROM people GROUP BY sex"),
    ("", "laplace", "SELECT kind, COUNT(*), SUM(amount) FROM events GROUP BY kind"),
    ("", "gaussian", "SELECT kind, COUNT(*), SUM(amount) FROM events GROUP BY kind"),
    ("", "laplace", "SELECT kind, COUNT(*) FROM events WHERE amount > 10 GROUP BY kind"),
    ("", "laplace", "SELECT p.sex, SUM(e.amount) FROM people p JOIN events e ON p.pid = e.pid GROUP BY p.sex"),
    ("", "laplace", "SELECT city, COUNT(*) FROM people GROUP BY city"),
    ("", "laplace", "SELECT city, MEDIAN(age) FROM people GROUP BY city"),
    ("", "laplace", "SELECT kind, STDDEV(amount), MEDIAN(amount) FROM events GROUP BY kind"),
    ("", "gaussian", "SELECT kind, COUNT(DISTINCT pid), MEDIAN(amount) FROM events GROUP BY kind"),
    ("", "laplace", "SELECT COUNT(DISTINCT pid) FROM events TABLESAMPLE BERNOULLI (20)"),
    ("", "laplace", "SELECT AVG(t) FROM (SELECT pid, SUM(amount) AS t FROM events GROUP BY pid) s"),
    ("", "laplace", "SELECT CASE WHEN amount < 10 THEN 'low' ELSE 'high' END AS b, COUNT(*) FROM events GROUP BY b"),
    ("", "laplace", "SELECT g, SUM(v) FROM rows GROUP BY g"),
    ("", "laplace", "SELECT g, MEDIAN(v) FROM rows GROUP BY g"),
    ("", "laplace", "SELECT r.g, COUNT(*) FROM rows r JOIN places p ON TRUE GROUP BY r.g"),
    # every aggregate under FILTER over declared keys: the rows none reads dropped (sql/reads.py)
    (
        "",
        "laplace",
        "SELECT kind, COUNT(*) FILTER (WHERE amount > 10), AVG(amount) FILTER (WHERE amount > 20) "
        "FROM events GROUP BY kind",
    ),
    ("", "laplace", "SELECT city, COUNT(*) FILTER (WHERE age > 30) FROM people GROUP BY city"),  # undeclared: kept
    ("capped", "gaussian", "SELECT kind, COUNT(*), SUM(amount), MEDIAN(amount) FROM events GROUP BY kind"),
    ("capped", "gaussian", "SELECT COUNT(*), AVG(amount) FROM events"),
    ("weighted", "laplace", "SELECT kind, COUNT(*), SUM(amount), MEDIAN(amount) FROM events GROUP BY kind"),
    ("weighted", "laplace", "SELECT COUNT(*), AVG(age) FROM people"),
    ("totals", "laplace", "SELECT COUNT(*), AVG(age) FROM people"),
    ("totals", "laplace", "SELECT sex, COUNT(*) FROM people GROUP BY sex"),
    (
        "split",
        "laplace",
        "SELECT kind, COUNT(*), SUM(amount), MEDIAN(amount) FROM events WHERE amount > 10 GROUP BY kind",
    ),
    (
        "split",
        "gaussian",
        "SELECT pl.region, COUNT(*), AVG(e.amount) FROM events e JOIN places pl ON e.place = pl.name "
        "GROUP BY pl.region",
    ),
    ("split", "laplace", "SELECT city, COUNT(*), AVG(age) FROM people WHERE sex = 'F' GROUP BY city"),
    ("split", "laplace", "SELECT CAST(amount AS INTEGER) % 7 AS r, COUNT(*) FROM events GROUP BY r"),
]


def _pretty(tree) -> str:
    return sqlglot.transpile(tree.sql(dialect="duckdb"), read="duckdb", write="duckdb", pretty=True)[0]


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z0-9])", "_", name).lower().replace("l_2", "l2")


@pytest.fixture
def sessions(tmp_path):
    make_db(tmp_path / "db.duckdb", [], [])
    plain = write_policy(tmp_path)
    capped_dir = tmp_path / "capped"
    capped_dir.mkdir()
    capped = capped_dir / "policy.toml"
    capped.write_text(
        plain.read_text()
        .replace('database = "db.duckdb"', f'database = "{tmp_path / "db.duckdb"}"')
        .replace("max_rows = 3\n", "max_rows = 3\nmax_contributions = 6\n")
    )
    out = {"": Session(load_policy(plain), "alice"), "capped": Session(load_policy(capped), "alice")}
    out["weighted"] = out["totals"] = out[""]
    out["split"] = out["capped"]
    for s in set(out.values()):
        s.execute("SET dpsql.delta = 1e-8")
    yield out
    for s in set(out.values()):
        s.close()


def _case(sessions, variant: str, mechanism: str, sql: str):
    """A case's session, plan, literal domain size and weighting (None: the plan's own bounding)."""
    session = sessions[variant]
    session.execute(f"SET dpsql.mechanism = '{mechanism}'")
    plan, _ = session._prepare(classify(sql).tree)
    domain = plan.literal_domain_size()
    stored = {j: f"stored{j}" for j, m in enumerate(plan.measures) if m.value is not None}
    copies = {
        "weighted": WeightedCopy(plan.bounding, "weights"),
        "totals": WeightedCopy(plan.bounding, "weights", stored, "weight_totals"),
        "split": SplitCopy(plan.bounding, "weights", plan.bounding.light_rows(domain), plan.needs_selection),
    }
    return session, plan, domain, copies.get(variant)


def _rewritten(plan, domain, weighting):
    return rewrite(plan, domain, "salt" if plan.sample_rate else None, weighting)


def _render(sessions) -> dict[str, str]:
    whole, stages = [], {name: [] for name in STRATEGIES}
    for variant, mechanism, sql in CASES:
        _, plan, domain, weighting = _case(sessions, variant, mechanism, sql)
        bounding = weighting or plan.bounding
        bounded = _rewritten(plan, domain, weighting)
        head = f"# mechanism: {mechanism}{', ' + variant if variant else ''}\n{sql};\n"
        whole.append(f"{head}{_pretty(bounded)};\n")
        if isinstance(weighting, WeightedCopy) and weighting.reads_totals(plan.measures, plan.keys):
            continue  # one SELECT over the totals, no stages
        keys = [f"k{i}" for i in range(len(plan.keys))]
        written = bounding.stages(plan.measures, keys, domain)
        for j, m in enumerate(plan.measures):
            if isinstance(m, Histogram):
                written += bounding.histogram_stages(j, m, keys, domain)
        body = "".join(f"-- {name}\n{_pretty(q)};\n" for name, q in written)
        stages[_snake(type(bounding).__name__)].append(f"{head}{body}")
    out = {"bounded.sql": "\n".join(whole)}
    out.update({f"bounding/{name}.sql": "\n".join(blocks) for name, blocks in stages.items()})
    return out


def _matches_the_fixtures(got: dict[str, str]) -> None:
    """Each rendered text equals its fixture (rewritten first with DPSQL_UPDATE_GOLDEN=1)."""
    if os.environ.get("DPSQL_UPDATE_GOLDEN"):
        for name, text in got.items():
            (FIXTURES / name).parent.mkdir(exist_ok=True)
            (FIXTURES / name).write_text(text)
    for name, text in got.items():
        assert text == (FIXTURES / name).read_text(), name


def test_bounded_sql_matches_the_golden_fixtures(sessions):
    got = _render(sessions)
    assert all(got[f"bounding/{name}.sql"] for name in STRATEGIES), "every strategy has a case"
    _matches_the_fixtures(got)


def _nodes(value) -> list:
    """Every sqlglot node reachable from a plan's fields (dataclasses, lists, dicts, trees)."""
    out, seen, todo = [], set(), [value]
    while todo:
        v = todo.pop()
        if id(v) in seen or v is None or isinstance(v, (str, int, float, bool)):
            continue
        seen.add(id(v))
        if isinstance(v, exp.Expression):
            out.extend(v.walk())
        elif dataclasses.is_dataclass(v) and not isinstance(v, type):
            todo.extend(getattr(v, f.name) for f in dataclasses.fields(v))
        elif isinstance(v, (list, tuple, set, frozenset)):
            todo.extend(v)
        elif isinstance(v, dict):
            todo.extend(v.values())
    return out


def test_bounded_tree_is_owned_by_its_caller(sessions):
    """Engines lower and generate rewrite()'s tree in place (prepare(owned=True)): that is safe
    only if no node of it is also the plan's (cached and reused) or appears twice in it."""
    for variant, mechanism, sql in CASES:
        session, plan, domain, weighting = _case(sessions, variant, mechanism, sql)
        tree = _rewritten(plan, domain, weighting)
        ids = [id(n) for n in tree.walk()]
        assert len(ids) == len(set(ids)), f"a node appears twice in the bounded tree of {sql}"
        assert not set(ids) & {id(n) for n in _nodes(plan)}, f"the bounded tree of {sql} shares nodes with its plan"
        assert session.engine.sql_of(tree, owned=True) == session.engine.sql_of(_rewritten(plan, domain, weighting)), (
            sql
        )


def test_duckdb_lowers_every_function_of_dpsql_even_nested_in_another(sessions):
    """DuckDBEngine.prepare lowers only the nodes that need it, deepest first: the SQL a
    transform of every node gives where nothing is nested, and, unlike that transform (whose
    lowering of a coin or WIDTH_BUCKET copied operands it had not lowered), nothing of dpsql's
    own left where functions nest."""
    from dpsql.engines import duckdb as duck

    engine = next(iter(sessions.values())).engine
    flat = sqlglot.parse_one(
        "SELECT DPSQL_COIN(a, 's') AS c, WIDTH_BUCKET(b, 0, 7, 3) AS w, DPSQL_HASH(1) FROM t "
        "WHERE DPSQL_HASH(a, b) > 0",
        read="duckdb",
    )
    assert engine.sql_of(flat) == flat.transform(duck._lower).sql(dialect=duck.DUCKDB)
    nested = (
        "SELECT DPSQL_COIN(DPSQL_HASH(a, DPSQL_HASH(b)), 's') AS c, "
        "WIDTH_BUCKET(DPSQL_HASH(a) % 7, 0, 7, 3) AS w FROM t WHERE DPSQL_HASH(a) > 0"
    )
    tree = sqlglot.parse_one(nested, read="duckdb")
    lowered = engine.sql_of(tree)
    assert "DPSQL" not in lowered.upper() and lowered.count("HASH(") == 6 and "sha256" in lowered.lower()
    assert engine.sql_of(tree.copy(), owned=True) == lowered
    assert tree.sql(dialect="duckdb") == sqlglot.parse_one(nested, read="duckdb").sql(dialect="duckdb")  # not owned


# (policy variant, query) whose weighted copy the session builds: the copy-building SQL of every
# engine with weighted copies, from the arguments the session gives DuckDB's (tests/fixtures/
# weighted_copy/<engine>.sql). PostgreSQL's and Spark's copies store no sums (weights_store_sums).
COPY_CASES = [
    ("", "SELECT COUNT(*) FROM people"),
    ("capped", "SELECT kind, COUNT(*), SUM(amount) FROM events GROUP BY kind"),
]


def _copy_arguments(sessions) -> list[tuple]:
    """The weighted_copy calls the session makes for COPY_CASES, recorded on DuckDB's engine."""
    calls: list[tuple] = []
    for variant, sql in COPY_CASES:
        session = sessions[variant]
        session.execute("SET dpsql.mechanism = 'laplace'")
        build = session.engine.weighted_copy
        session.engine.weighted_copy = lambda *args: calls.append(args) or build(*args)
        try:
            plan, _ = session._prepare(classify(sql).tree)
            assert session._weighting(plan) is not None, sql
        finally:
            del session.engine.weighted_copy
    return calls


def _render_copies(sessions) -> dict[str, str]:
    from dpsql.engines.duckdb import run_statements, units_statement
    from dpsql.engines.pg_weights import build_sql
    from dpsql.engines.spark import copy_sql

    out: dict[str, list[str]] = {"duckdb": [], "postgres": [], "spark": []}
    for table, unit, limit, bits, sums, per_unit in _copy_arguments(sessions):
        head = f"# {table}, unit {unit}, limit {limit}, {bits} bits\n"
        name = f"__dpsql_w_{table}_{limit}"
        statements = [
            units_statement(name, table, unit, per_unit),
            *run_statements(name, table, unit, limit, bits, sums, per_unit),
        ]
        out["duckdb"].append(head + "".join(f"{s};\n" for s in statements))
        out["postgres"].append(f"{head}{build_sql('dpsql_scratch.copy', 'public', table, unit, limit, bits)};\n")
        out["spark"].append(f"{head}{copy_sql(table, unit, limit, bits)};\n")
    return {f"weighted_copy/{engine}.sql": "\n".join(blocks) for engine, blocks in out.items()}


def test_weighted_copy_sql_matches_the_golden_fixtures(sessions):
    """The SQL each engine runs to build a weighted copy, whose __dpsql_w (guarantee/bounding.py's
    row_weight) carries the total bound: integer division of a BIGINT in every dialect."""
    got = _render_copies(sessions)
    _matches_the_fixtures(got)
    weights = {name: re.findall(r"\S+ AS BIGINT\) (\S+) GREATEST", text) for name, text in got.items()}
    assert {name: set(ops) for name, ops in weights.items()} == {
        "weighted_copy/duckdb.sql": {"//"},
        "weighted_copy/postgres.sql": {"/"},
        "weighted_copy/spark.sql": {"DIV"},
    }

"""Removing one privacy unit moves every pre-noise measure by at most its declared sensitivity.

Hypothesis builds databases with ordinary units plus one target unit that may have far more
rows than max_rows, be spread over more groups than max_groups, carry out-of-bound values or
NULLs. The rewritten query runs on the database with and without the target; the differences
must stay within the L1 (and L2) sensitivities the calibration charges for.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
import tempfile
from fractions import Fraction
from pathlib import Path
from typing import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpsql.config import load_policy
from dpsql.guarantee.bounding import L2Clip, SplitCopy, TotalCap, WeightedCopy
from dpsql.guarantee.calibration import calibrate
from dpsql.guarantee.empty_groups import with_empty_groups
from dpsql.session import Session
from dpsql.session.bounded import key_domain
from dpsql.sql.classify import classify
from dpsql.sql.rewrite import rewrite

from .backends import READER, allow_scratch, duckdb_to_postgres, move_policy
from .conftest import make_db, write_policy

QUERIES = [
    "SELECT COUNT(*) FROM events",
    "SELECT COUNT(amount) FROM events",
    "SELECT SUM(amount) FROM events",
    "SELECT AVG(amount) FROM events",
    "SELECT kind, COUNT(*) FROM events GROUP BY kind",
    "SELECT kind, SUM(amount), AVG(amount) FROM events GROUP BY kind",
    "SELECT place, COUNT(*), SUM(amount) FROM events GROUP BY place",
    "SELECT kind, place, AVG(amount) FROM events GROUP BY kind, place",
    "SELECT kind, COUNT(*) FROM events WHERE amount > 10 GROUP BY kind",
    # the WHERE narrows the summed column's bounds (sql/ranges.py): the clamp and sensitivity follow
    "SELECT kind, SUM(amount), AVG(amount) FROM events WHERE amount < 20 AND 5 <= amount GROUP BY kind",
    "SELECT MEDIAN(amount), STDDEV(amount) FROM events WHERE amount BETWEEN 10 AND 30",
    "SELECT p.sex, COUNT(*), SUM(e.amount) FROM people p JOIN events e ON p.pid = e.pid GROUP BY p.sex",
    "SELECT p.city, COUNT(*), AVG(e.amount) FROM people p JOIN events e ON p.pid = e.pid GROUP BY p.city",
    "SELECT pl.region, SUM(e.amount) FROM events e JOIN places pl ON e.place = pl.name GROUP BY pl.region",
    "SELECT sex, COUNT(*), AVG(age), SUM(age) FROM people GROUP BY sex",
    "SELECT city, SUM(age) FROM people GROUP BY city",
    "SELECT e.place, p.city, COUNT(*) FROM events e JOIN people p ON e.pid = p.pid GROUP BY e.place, p.city",
    "SELECT e.kind, COUNT(*), SUM(e.amount) FROM events e JOIN places pl ON e.place = pl.name GROUP BY e.kind",
    "SELECT g, COUNT(*), SUM(v) FROM rows GROUP BY g",
    "SELECT kind, VAR_POP(amount), STDDEV_SAMP(amount) FROM events GROUP BY kind",
    "SELECT VAR_SAMP(age), STDDEV_POP(age) FROM people",
    "SELECT g, STDDEV(v) FROM rows GROUP BY g",
    "SELECT kind, COUNT(DISTINCT pid), COUNT(*) FROM events GROUP BY kind",
    "SELECT COUNT(DISTINCT e.pid) FROM events e JOIN people p ON e.pid = p.pid WHERE p.age > 30",
    "SELECT city, COUNT(DISTINCT pid) FROM people GROUP BY city",
    "SELECT AVG(v) FROM rows",
    "SELECT MEDIAN(amount) FROM events",
    "SELECT kind, MEDIAN(amount), MAX(amount) FROM events GROUP BY kind",
    "SELECT place, PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY amount), COUNT(*) FROM events GROUP BY place",
    "SELECT p.city, MIN(e.amount) FROM people p JOIN events e ON p.pid = e.pid GROUP BY p.city",
    "SELECT sex, QUANTILE(age, 0.25) FROM people GROUP BY sex",
    "SELECT g, MEDIAN(v) FROM rows GROUP BY g",
    "SELECT AVG(t), SUM(t), MEDIAN(t) FROM (SELECT pid, SUM(amount) AS t FROM events GROUP BY pid) s",
    "SELECT n, COUNT(*) FROM (SELECT pid, COUNT(*) AS n FROM events GROUP BY pid) s GROUP BY n",
    "SELECT p.sex, AVG(s.hi - s.lo) FROM people p JOIN (SELECT pid, MAX(amount) AS hi, MIN(amount) AS lo "
    "FROM events GROUP BY pid HAVING COUNT(*) > 1) s ON p.pid = s.pid GROUP BY p.sex",
    "SELECT e.kind, SUM(s.k) FROM events e JOIN (SELECT pid, COUNT(DISTINCT kind) AS k FROM events GROUP BY pid) s "
    "ON e.pid = s.pid GROUP BY e.kind",
    "SELECT CASE WHEN amount < 10 THEN 'low' ELSE 'high' END AS b, COUNT(*), SUM(amount) FROM events GROUP BY b",
    "SELECT width_bucket(amount, 0, 50, 5) AS b, kind, AVG(amount) FROM events GROUP BY b, kind",
    "SELECT place, COUNT(DISTINCT kind) FROM events GROUP BY place",
    "SELECT COUNT(DISTINCT sex), COUNT(DISTINCT e.kind) FROM events e JOIN people p ON e.pid = p.pid",
    # every aggregate under FILTER: the rows none reads are dropped before bounding (sql/reads.py)
    "SELECT kind, COUNT(*) FILTER (WHERE amount > 10), AVG(amount) FILTER (WHERE amount > 20) FROM events "
    "GROUP BY kind",
    "SELECT COUNT(*) FILTER (WHERE place = 'north'), SUM(amount) FILTER (WHERE amount < 20) FROM events",
    "SELECT place, MEDIAN(amount) FILTER (WHERE amount > 5) FROM events GROUP BY place",
    "SELECT p.city, COUNT(*) FILTER (WHERE e.amount > 10) FROM people p JOIN events e ON p.pid = e.pid GROUP BY p.city",
]

amounts = st.one_of(st.floats(-1e6, 1e6, allow_nan=False), st.sampled_from([0.0, 50.0, 1e9, -1e9]), st.none())
event = st.tuples(st.sampled_from(["a", "b", "c", "zz"]), amounts, st.sampled_from(["north", "south", "east", "west"]))
unit_events = st.lists(event, min_size=0, max_size=4)
target_events = st.one_of(
    st.lists(event, min_size=0, max_size=40),  # heavy and spread
    st.lists(st.tuples(st.just("a"), amounts, st.just("north")), min_size=10, max_size=40),  # heavy in one group
)
person = st.tuples(
    st.floats(-50, 200, allow_nan=False), st.sampled_from(["F", "M", "Q"]), st.sampled_from(["Oslo", "Rome", "Lima"])
)
row = st.tuples(st.floats(-100, 100, allow_nan=False), st.integers(0, 4))


@contextlib.contextmanager
def neighbouring_sessions(units, target, rows):
    """Two sessions over neighbouring databases: with the target unit, and without it."""
    with tempfile.TemporaryDirectory() as d1, tempfile.TemporaryDirectory() as d2:
        a = Session(load_policy(_build(Path(d1), units, target, True, rows)), "alice")
        b = Session(load_policy(_build(Path(d2), units, target, False, rows)), "alice")
        try:
            yield a, b
        finally:
            a.close()
            b.close()


def _build(directory: Path, units, target, include_target: bool, rows, contributions: int | None = None):
    people, events = [], []
    for pid, (p, evs) in enumerate(units, start=1):
        people.append((pid, *p))
        events += [(pid, *e) for e in evs]
    if include_target:
        tp, tevs = target
        tid = len(units) + 1
        people.append((tid, *tp))
        events += [(tid, *e) for e in tevs]
    make_db(directory / "db.duckdb", people, events, places=("north", "south", "east"), rows=rows)
    path = write_policy(directory)
    if contributions is not None:  # a declared limit on a unit's rows in a whole query
        path.write_text(
            path.read_text().replace("max_rows = 3\n", f"max_rows = 3\nmax_contributions = {contributions}\n")
        )
    return path


def _by_group(rs, n_keys: int) -> dict[tuple, tuple]:
    rows = list(zip(*rs.columns)) if rs.row_count else []
    return {tuple(r[:n_keys]): tuple(r[n_keys:]) for r in rows}


def _shape(weighting):
    """A weighting without its table's name (PostgreSQL's names carry the engine's id)."""
    return None if weighting is None else dataclasses.replace(weighting, table="")


def release_moves_within_l1(a: Session, b: Session, plan, label: str) -> None:
    """The plan's pre-noise values on two neighbouring databases differ, per measure and over all
    groups, by at most the L1 its calibration (Laplace, epsilon 1) charges for; under partition
    selection its unit counts by at most the groups per unit its odds are computed for."""
    delta = Fraction(1, 10**8) if plan.needs_selection else Fraction(0)
    cal = calibrate(plan, Fraction(1), delta, "laplace", plan.literal_domain_size())
    n = len(plan.keys)
    ra, rb = _by_group(a.bounded_result(plan), n), _by_group(b.bounded_result(plan), n)
    zero = (0,) * (1 + sum(m.width for m in plan.measures))
    if plan.needs_selection:
        units = sum(abs(ra.get(g, zero)[0] - rb.get(g, zero)[0]) for g in set(ra) | set(rb))
        assert units <= cal.groups_per_unit, (label, units, cal.groups_per_unit)
    at = 1
    for j, mn in enumerate(cal.measures):
        width = plan.measures[j].width
        diff = sum(
            abs(int(ra.get(g, zero)[c] or 0) - int(rb.get(g, zero)[c] or 0))
            for g in set(ra) | set(rb)
            for c in range(at, at + width)
        )
        at += width
        assert diff <= mn.l1, (label, plan.measures[j].describe(), diff, mn.l1)


def _check_neighbours(with_target: Session, without: Session, mechanisms: Sequence[str], queries=QUERIES) -> int:
    """Every query's pre-noise difference between the two databases within its sensitivity under
    each mechanism; returns how many plans read a weighted copy (whole or split). A bounded
    query that two mechanisms' plans share (its SQL on both databases) runs once."""
    weighted = 0
    results: dict[tuple[str, str], tuple[dict, dict]] = {}
    for mechanism in mechanisms:
        with_target.execute(f"SET dpsql.mechanism = '{mechanism}'")
        for q in queries:
            plan, cal = with_target._prepare(classify(q).tree)
            # The SQL the session runs (over a weighted copy of the table under a total bound),
            # with the copy built in both databases: its name depends on the policy only.
            sql = with_target.bounded_sql(plan), without.bounded_sql(plan)
            weighting = with_target._weighting(plan)
            assert _shape(without._weighting(plan)) == _shape(weighting)
            weighted += weighting is not None
            n = len(plan.keys)
            if sql not in results:
                # Each database's own query: on PostgreSQL the weighted tables' names differ per engine.
                results[sql] = (
                    _by_group(with_target.bounded_result(plan), n),
                    _by_group(without.bounded_result(plan), n),
                )
            a, b = results[sql]
            zero = (0,) * (1 + sum(m.width for m in plan.measures))
            groups = set(a) | set(b)
            if plan.needs_selection:  # unit counts are released only through partition selection
                unit_diff = sum(abs(a.get(g, zero)[0] - b.get(g, zero)[0]) for g in groups)
                assert unit_diff <= cal.groups_per_unit, q
            at = 1
            for j, mn in enumerate(cal.measures):
                cols = range(at, at + plan.measures[j].width)  # a histogram has one column per bin
                at += plan.measures[j].width
                diffs = [abs(int(a.get(g, zero)[c] or 0) - int(b.get(g, zero)[c] or 0)) for g in groups for c in cols]
                assert mn.l1 is not None or isinstance(plan.bounding, L2Clip), q  # L1 unbounded only under L2 clipping
                assert mn.l1 is None or sum(diffs) <= mn.l1, (q, plan.measures[j].describe(), diffs, mn.l1)
                assert math.sqrt(sum(x * x for x in diffs)) <= math.sqrt(mn.l2_squared) + 1e-9, (q, mechanism)
    return weighted


_neighbours = dict(
    units=st.lists(st.tuples(person, unit_events), min_size=0, max_size=8),
    target=st.tuples(person, target_events),
    rows=st.lists(row, max_size=15),
    drop_row=st.integers(0, 14),
)


@pytest.mark.slow  # 2 x 18 pairs of neighbouring databases, each a corpus of queries under both mechanisms
@pytest.mark.parametrize("contributions", [None, 4])
@settings(max_examples=18, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(**_neighbours)
def test_removing_one_unit_is_bounded(contributions, units, target, rows, drop_row):
    """Laplace and Gaussian plans on the same pair of databases: where their bounded queries are
    the same (per-group caps), the engine runs it once; under max_contributions Gaussian noise
    clips in L2 (its own query)."""
    with tempfile.TemporaryDirectory() as d1, tempfile.TemporaryDirectory() as d2:
        with_target = Session(load_policy(_build(Path(d1), units, target, True, rows, contributions)), "alice")
        # For the row-unit table, the neighbour drops one row.
        fewer_rows = [r for i, r in enumerate(rows) if i != drop_row]
        without = Session(load_policy(_build(Path(d2), units, target, False, fewer_rows, contributions)), "alice")
        try:
            weighted = _check_neighbours(with_target, without, ("laplace", "gaussian"))
            # The weighted copy, whole or split, serves every query with a per-unit stage.
            assert weighted > 0
        finally:
            with_target.close()
            without.close()


_schemas = itertools.count()


@pytest.mark.parametrize(
    "backend,mechanism,contributions,examples",
    [
        ("postgres", "laplace", None, 6),
        ("postgres", "gaussian", None, 2),
        ("postgres", "gaussian", 4, 2),
        ("postgres-weighted", "laplace", None, 4),
        ("postgres-weighted", "gaussian", 4, 2),
        ("spark", "laplace", None, 1),
        ("spark", "gaussian", 4, 1),
        ("spark-cluster", "laplace", None, 1),
    ],
)
@pytest.mark.backends
@pytest.mark.slow
def test_removing_one_unit_is_bounded_on_every_backend(backend, mechanism, contributions, examples, request):
    """The same property where the rewritten query runs on PostgreSQL and on Spark, fewer
    examples as each costs a round of real queries; with max_contributions and Gaussian noise,
    the L2 clip. `postgres` bounds per unit in every query; `postgres-weighted` reads weighted
    tables that a second role builds ([engine] scratch_url), and a local Spark reads Parquet
    weighted copies in its scratch directory, whole or split; `spark-cluster`, a standalone
    cluster's executors, in its scratch_dir. The cluster runs every third query of the corpus: its
    SQL is local Spark's, which runs all of it; what differs is where executors read the copies."""
    admin = reader = None
    engine = None
    queries = QUERIES[::3] if backend == "spark-cluster" else QUERIES
    if backend == "spark-cluster":
        from .backends import spark_engine
        from .spark_cluster import APP_CONF

        cluster = request.getfixturevalue("spark_cluster")
        engine = spark_engine(cluster.url, {**APP_CONF, "spark.sql.shuffle.partitions": "2"}, cluster.scratch)
    weighted_tables = backend == "postgres-weighted"
    if backend.startswith("postgres"):
        admin = request.getfixturevalue("pg_server").create_database(
            f"sens_{mechanism}_{contributions or 0}{'_w' if weighted_tables else ''}"
        )
        reader = admin.replace("postgres@", f"{READER}@")

    def session(directory: Path, units, target, include, rows) -> Session:
        policy = _build(directory, units, target, include, rows, contributions)
        schema = scratch = None
        if backend.startswith("postgres"):
            schema = f"ex{next(_schemas)}"
            duckdb_to_postgres(directory / "db.duckdb", admin, schema)
            scratch = allow_scratch(admin, schema) if weighted_tables else None
        moved = move_policy(
            policy,
            "postgres" if schema else "spark" if engine else backend,
            reader_url=reader,
            schema=schema,
            scratch_url=scratch,
            engine=engine,
        )
        return Session(load_policy(moved), "alice")

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(**_neighbours)
    def check(units, target, rows, drop_row):
        with tempfile.TemporaryDirectory() as d1, tempfile.TemporaryDirectory() as d2:
            with_target = session(Path(d1), units, target, True, rows)
            without = session(Path(d2), units, target, False, [r for i, r in enumerate(rows) if i != drop_row])
            try:
                weighted = _check_neighbours(with_target, without, (mechanism,), queries)
                assert weighted > 0 if weighted_tables or backend.startswith("spark") else weighted == 0
                if engine is not None:  # the copies were the executors', under the cluster's scratch_dir
                    assert with_target.engine._copies and with_target.engine._scratch.path.parent == cluster.scratch
            finally:
                with_target.close()
                without.close()

    check()


def test_a_heavy_unit_is_truncated(tmp_path):
    """The bound is not vacuous: one unit with 100 events counts max_groups * max_rows = 6 rows
    in all under Laplace noise (total bound), and max_rows = 3 per group under Gaussian; its
    SUM is cut to 6 (or 3) rows' worth of the upper bound."""
    make_db(tmp_path / "db.duckdb", [(1, 30.0, "F", "Oslo")], [(1, "a", 50.0, "north")] * 100)
    s = Session(load_policy(write_policy(tmp_path)), "alice")
    for mechanism, rows in (("laplace", 6), ("gaussian", 3)):
        s.execute(f"SET dpsql.mechanism = '{mechanism}'")
        plan, cal = s._prepare(classify("SELECT kind, COUNT(*), SUM(amount) FROM events GROUP BY kind").tree)
        assert isinstance(plan.bounding, TotalCap) == (mechanism == "laplace")
        exact = s.engine.execute(s.engine.sql_of(rewrite(plan, plan.literal_domain_size())))
        got = _by_group(with_empty_groups(exact, 1, list(zip(*key_domain(s, plan).columns))), 1)
        assert got[("a",)][1] == rows * 2 ** plan.measures[0].bits  # fixed-point count
        # Its SUM: at most its row limit times the bound (50, all its values here), short of it by
        # at most one step of the 2^-10 weight under the total bound.
        limit = rows * 50 * 2 ** plan.measures[1].bits
        assert limit - (100 * 50 * 2 ** plan.measures[1].bits) // 1024 <= got[("a",)][2] <= limit
        assert got[("b",)] == (0, 0, 0)  # declared key, emitted although empty
    s.close()


def test_gaussian_total_bound_clips_in_l2(tmp_path):
    """With max_contributions = 10 and Gaussian noise, a unit with 8 rows in one group and 6 in
    another has L2 norm 10 and keeps all 14 rows (Laplace's L1 clip keeps 10 of them); one with
    16 + 12 rows (norm 20) is halved in each group. The count's L2 sensitivity is 10 rows."""
    events = [(1, "a", 50.0, "north")] * 8 + [(1, "b", 50.0, "north")] * 6
    events += [(2, "a", 50.0, "north")] * 16 + [(2, "c", 50.0, "north")] * 12
    make_db(tmp_path / "db.duckdb", [(1, 30.0, "F", "Oslo"), (2, 40.0, "M", "Rome")], events)
    policy = write_policy(tmp_path)
    policy.write_text(policy.read_text().replace("max_rows = 3\n", "max_rows = 3\nmax_contributions = 10\n"))
    s = Session(load_policy(policy), "alice")
    expected = {
        "gaussian": {"a": 8 + 8, "b": 6, "c": 6},  # within the 2^-10 weight resolution
        "laplace": {"a": 8 * 10 / 14 + 16 * 10 / 28, "b": 6 * 10 / 14, "c": 12 * 10 / 28},
    }
    for mechanism, rows in expected.items():
        s.execute(f"SET dpsql.mechanism = '{mechanism}'")
        plan, cal = s._prepare(classify("SELECT kind, COUNT(*), SUM(amount) FROM events GROUP BY kind").tree)
        assert isinstance(plan.bounding, L2Clip) == (mechanism == "gaussian") and isinstance(plan.bounding, TotalCap)
        got = _by_group(s.bounded_result(plan), 1)
        scale = 2 ** plan.measures[0].bits
        for kind, n in rows.items():
            assert abs(got[(kind,)][1] / scale - n) < 0.05, (mechanism, kind)  # per-row fixed-point floors
        if mechanism == "gaussian":
            assert cal.measures[0].l2_squared == (10 * scale) ** 2
            assert cal.measures[0].l1 == 10 * scale * 2  # ceil(sqrt(3 declared kinds)) = 2
    s.close()


def test_weighted_copy_sums_equal_the_computed_ones(sample_conn):
    """A SUM read from the weighted copy's stored column equals the same SUM computed per row
    in the query (the copy stores the very expression), for AVG and STDDEV measures and counts;
    a SUM's own-norm clipped total (weights from its unit's sum of |value|) equals the per-unit
    path's, which clips by the unit's per-group sums (equal norms for non-negative values), up
    to the truncation of each row's share."""
    s = sample_conn.session
    for q in [
        "SELECT diagnosis, SUM(cost), AVG(length_of_stay), STDDEV(cost) FROM visits GROUP BY diagnosis",
        "SELECT region, SUM(income), AVG(age) FROM patients GROUP BY region",
        "SELECT AVG(income), COUNT(*) FROM patients",
    ]:
        plan, _ = s._prepare(classify(q).tree)
        stored = s.bounded_result(plan)
        weighting = s._weighting(plan)
        assert weighting is not None and weighting.values
        own = {f"m{j}" for j, m in enumerate(plan.measures) if m.own_norm}
        domain = plan.literal_domain_size()
        computed = s.engine.execute(
            s.engine.sql_of(rewrite(plan, domain, None, WeightedCopy(plan.bounding, weighting.table)))
        )
        per_unit = s.engine.execute(s.engine.sql_of(rewrite(plan, domain)))
        keys = len(plan.keys)
        for i, name in enumerate(stored.names):
            by_key = [
                dict(zip(list(zip(*rs.columns[:keys])) if keys else [()], rs.columns[i]))
                for rs in (stored, computed, per_unit)
            ]
            assert len(by_key[0]) == stored.row_count > 0
            if name in own:
                assert all(abs(by_key[0][k] - by_key[2][k]) <= 1e-6 * abs(by_key[2][k]) for k in by_key[0]), (q, name)
            elif name != "units":
                assert by_key[0] == by_key[1], (q, name)


TOTALS_QUERIES = [
    "SELECT COUNT(*) FROM patients",
    "SELECT COUNT(*), SUM(income), AVG(age), COUNT(income) FROM patients",
    "SELECT STDDEV(income), VARIANCE(age), SUM(age) FROM patients",
]


@pytest.mark.parametrize("sql", TOTALS_QUERIES)
def test_an_ungrouped_query_of_stored_sums_reads_the_copys_totals_with_the_scans_values(sample_conn, sql):
    """Without filter or GROUP BY, a query whose measures all sum the weighted copy's stored
    columns (or its weights) reads their totals, built with the copy: one row, the same values
    as the SUMs over the copy's rows it replaces."""
    s = sample_conn.session
    plan, _ = s._prepare(classify(sql).tree)
    weighting = s._weighting(plan)
    assert weighting.reads_totals(plan.measures, plan.keys)
    assert weighting.totals in s.bounded_sql(plan) and weighting.table not in s.bounded_sql(plan)
    scanned = s.engine.execute(
        s.engine.sql_of(rewrite(plan, None, None, WeightedCopy(plan.bounding, weighting.table, weighting.values)))
    )
    assert scanned.row_count == 1 and [list(c) for c in s.bounded_result(plan).columns] == [
        list(c) for c in scanned.columns
    ]


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT SUM(income * 2) FROM patients",
        "SELECT COUNT(*) FROM patients WHERE age > 30",
        "SELECT region, COUNT(*) FROM patients GROUP BY region",
    ],
)
def test_a_query_needing_more_than_stored_sums_scans_the_copy(sample_conn, sql):
    s = sample_conn.session
    plan, _ = s._prepare(classify(sql).tree)
    weighting = s._weighting(plan)
    assert not isinstance(weighting, WeightedCopy) or not weighting.reads_totals(plan.measures, plan.keys)
    assert "_totals" not in s.bounded_sql(plan)


SPLIT_QUERIES = [
    "SELECT kind, COUNT(*), SUM(amount), AVG(amount) FROM events WHERE amount > 10 GROUP BY kind",
    "SELECT COUNT(*), STDDEV(amount), SUM(amount) FROM events WHERE place <> 'east'",
    "SELECT pl.region, COUNT(*), SUM(e.amount) FROM events e JOIN places pl ON e.place = pl.name GROUP BY pl.region",
    "SELECT e.kind, MEDIAN(e.amount), COUNT(amount) FROM events e LEFT JOIN places pl ON pl.name = e.place "
    "WHERE pl.region = 'r0' GROUP BY e.kind",
    "SELECT place, kind, COUNT(*) FROM events WHERE kind IN ('a', 'b') AND amount < 40 GROUP BY place, kind",
    "SELECT CAST(amount AS INTEGER) % 7 AS r, COUNT(*), SUM(amount) FROM events GROUP BY r",
    "SELECT city, COUNT(*), AVG(age) FROM people WHERE sex = 'F' GROUP BY city",
    "SELECT place, COUNT(*) FROM events GROUP BY place",
]


@pytest.mark.parametrize("mechanism,contributions", [("laplace", 4), ("gaussian", 4), ("laplace", None)])
@pytest.mark.parametrize("places", [("north", "south", "east"), ("north", "south", "east", "north")])
def test_split_copy_equals_per_query_bounding(tmp_path, mechanism, contributions, places):
    """Over the weighted copy split by its units' rows, the bounded totals (and partition
    selection's unit counts) equal the strategy's own per-query bounding exactly, under total
    bounds and per-group caps, filters and joins, with units above the limits in the data; a
    join on a public column that is not a unique key (a place listed twice) repeats rows and
    bounds per query instead."""
    people = [(i, 20.0 + i, "FM"[i % 2], ["Oslo", "Rome", "Lima"][i % 3]) for i in range(1, 61)]
    people += [(i, 40.0, "F", "Rome") for i in range(1, 61, 7)]  # a few people with two rows
    events = [
        (i, "abc"[(i + j) % 3], float((i * 7 + j * 11) % 50), ["north", "south", "east", "west"][(i + j) % 4])
        for i in range(1, 61)
        for j in range(i % 13)
    ]  # 0 to 12 rows per unit
    make_db(tmp_path / "db.duckdb", people, events, places=places)
    path = write_policy(tmp_path)
    if contributions:
        path.write_text(
            path.read_text().replace("max_rows = 3\n", f"max_rows = 3\nmax_contributions = {contributions}\n")
        )
    s = Session(load_policy(path), "alice")
    try:
        s.execute(f"SET dpsql.mechanism = '{mechanism}'")
        split = 0
        for q in SPLIT_QUERIES:
            plan, _ = s._prepare(classify(q).tree)
            weighting = s._weighting(plan)
            if plan.weightable():
                assert isinstance(weighting, WeightedCopy), q
                continue
            if len(set(places)) < len(places) and plan.relation.joins:
                assert weighting is None, q
                continue
            assert isinstance(weighting, SplitCopy), q
            split += 1
            domain = plan.literal_domain_size()
            got = s.engine.execute(s.engine.sql_of(rewrite(plan, domain, None, weighting)))
            want = s.engine.execute(s.engine.sql_of(rewrite(plan, domain)))
            if plan.keys and plan.declared:  # as released: the domain's groups, no others
                domain = list(zip(*key_domain(s, plan).columns))
                got, want = (with_empty_groups(rs, len(plan.keys), domain) for rs in (got, want))
            n = len(plan.keys) + (0 if plan.needs_selection else 1)  # unit counts compared where released from
            by_key = [
                dict(zip(list(zip(*rs.columns[: len(plan.keys)])) if plan.keys else [()], zip(*rs.columns[n:])))
                for rs in (got, want)
            ]
            assert by_key[0] == by_key[1] and any(any(v) for v in by_key[1].values()), q
        assert split >= 5
    finally:
        s.close()

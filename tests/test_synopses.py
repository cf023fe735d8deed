"""Synopses (issue 34): policy parsing, sensitivity on neighbouring datasets, least squares and
consistency, routing, free answers, charges (one analyst and everyone), staleness, accuracy
with a stated false-positive rate, the CLI, and end to end through `dpsql serve`."""

from __future__ import annotations

import datetime
import itertools
import math
import subprocess
import sys
import textwrap
from fractions import Fraction
from pathlib import Path

import duckdb
import numpy as np
import pytest
import sqlglot

from dpsql.accounting.cost import Cost
from dpsql.config import load_policy
from dpsql.engines.base import ResultSet
from dpsql.errors import BudgetExceeded, Error, PolicyError
from dpsql.guarantee import guard, mechanisms
from dpsql.guarantee.mechanisms import Noise
from dpsql.prepare import plan_query
from dpsql.session import Session
from dpsql.synopses import axes, budget, reconstruct, store, strategy
from dpsql.synopses import publish as pub
from dpsql.synopses.route import estimator

from .conftest import ROOT

POLICY = """
[engine]
database = "db.duckdb"

[privacy]
filter = "basic"
epsilon = 10
delta = 1e-6
query_epsilon = 0.5
{global_}

[tables.people]
privacy_unit = "pid"
max_groups = 1
max_rows = 1
columns.g = {{ keys = ["a", "b", "c"] }}
columns.flag = {{ keys = [true, false] }}
columns.age = {{ lower = 0, upper = 59 }}
columns.amount = {{ lower = 0, upper = 100 }}
columns.day = {{ lower = 2024-01-01, upper = 2024-12-31 }}

[tables.events]
privacy_unit = "pid"
max_groups = 2
max_rows = 3
columns.kind = {{ keys = ["x", "y", "z"] }}
columns.cost = {{ lower = 0, upper = 10 }}

[tables.places]
public = true

[users.alice]
[users.bob]
epsilon = 2

{synopses}
"""

SYNOPSES = """
[synopses.people_dash]
table = "people"
dimensions = ["g", "flag", { column = "age", width = 10 }, { column = "day", unit = "month" }]
measures = ["count", "sum(amount)", "sum(age)"]
epsilon = 1
charged_to = "alice"

[synopses.events_dash]
table = "events"
dimensions = ["kind"]
measures = ["count", "sum(cost)"]
epsilon = 1
charged_to = "everyone"
"""


def people_rows(n: int = 3000, per_cell: int | None = None) -> list[tuple]:
    rows = []
    for i in range(n):
        rows.append(
            (
                i,
                "abc"[i % 3],
                i % 7 < 3,
                (i * 13) % 60,
                float((i * 31) % 101),
                datetime.date(2024, 1 + i % 12, 1 + i % 28),
            )
        )
    return rows


def event_rows(people: int = 300) -> list[tuple]:
    return [(p, "xyz"[(p + j) % 3], float((p * j) % 11)) for p in range(people) for j in range(p % 9)]


def _values(rows: list[tuple]) -> str:
    def lit(v):
        if isinstance(v, bool):
            return "TRUE" if v else "FALSE"
        if isinstance(v, str):
            return "'" + v.replace("'", "''") + "'"
        if isinstance(v, datetime.date):
            return f"DATE '{v.isoformat()}'"
        return repr(v)

    return ", ".join("(" + ", ".join(lit(v) for v in r) + ")" for r in rows)


def make_world(directory: Path, people=None, events=None, synopses: str = SYNOPSES, global_: str = "") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect(str(directory / "db.duckdb"))
    con.execute("CREATE TABLE people (pid INTEGER, g VARCHAR, flag BOOLEAN, age INTEGER, amount DOUBLE, day DATE)")
    con.execute("CREATE TABLE events (pid INTEGER, kind VARCHAR, cost DOUBLE)")
    con.execute("CREATE TABLE places (name VARCHAR)")
    con.execute(f"INSERT INTO people VALUES {_values(people_rows() if people is None else people)}")
    ev = event_rows() if events is None else events
    if ev:
        con.execute(f"INSERT INTO events VALUES {_values(ev)}")
    con.close()
    path = directory / "policy.toml"
    path.write_text(textwrap.dedent(POLICY.format(synopses=synopses, global_=global_)))
    return path


@pytest.fixture
def world(tmp_path):
    return make_world(tmp_path / "w")


@pytest.fixture
def alice(world):
    s = Session(load_policy(world), "alice")
    s.execute("SET dpsql.cache = off")
    yield s
    s.close()


# Policy ---------------------------------------------------------------------------------------

BAD = [
    ('table = "nope"', "is not a table of the policy"),
    ('table = "places"', "is public"),
    ('dimensions = ["cost"]', "has no declared keys"),
    ('dimensions = [{ column = "amount", unit = "month" }]', "has no date bounds"),
    ('dimensions = [{ column = "g", width = 10 }]', "has no numeric bounds"),
    ('dimensions = [{ column = "age", width = -1 }]', "must be a positive number"),
    ('dimensions = ["g", "g"]', "listed twice"),
    ("dimensions = []", "non-empty list"),
    ('measures = ["avg(amount)"]', "is not count or sum(column)"),
    ('measures = ["sum(g)"]', "has no numeric bounds"),
    ("epsilon = 0", "must be a positive number"),
    ('charged_to = "mallory"', "neither an analyst"),
    ('colour = "red"', "unknown key 'colour'"),
    ('charts = [["nope"]]', "'nope' is not one of the dimensions"),
    ('charts = ["g"]', "is not a list of dimensions"),
    ('charts = [["g", "g"]]', "names a dimension twice"),
    ("charts = []", "charts is empty"),
    ('filters = ["nope"]', "'nope' is not one of the dimensions"),
    ('filters = "g"', "filters must be a list"),
    ('dimensions = ["g", "flag", "age", "amount", "day", "a", "b", "c", "d", "e", "f"]', "11 dimensions, more than 10"),
    ('mechanism = "exponential"', "is not laplace or gaussian"),
    ("delta = 2", "between 0 and 1"),
    ('mechanism = "laplace"\ndelta = 1e-6', "delta is set but the mechanism is laplace"),
    ('dimensions = ["nope.g"]', "'nope' is not a table of the policy"),
    ('dimensions = ["places.name"]', "places is public, not joined through the privacy unit"),
    ('dimensions = ["events.cost"]', "has no declared keys in [tables.events]"),
    ('dimensions = [{ column = "events.kind", width = 2 }]', "has no numeric bounds"),
]


@pytest.mark.parametrize("line,message", BAD)
def test_policy_errors_name_the_place_and_the_fix(tmp_path, line, message):
    key = line.split(" =")[0]
    body = {
        "table": '"people"',
        "dimensions": '["g"]',
        "measures": '["count"]',
        "epsilon": "1",
        "charged_to": '"alice"',
    }
    lines = [f"{k} = {v}" for k, v in body.items() if k != key] + [line]
    path = make_world(tmp_path, synopses="[synopses.s]\n" + "\n".join(lines) + "\n")
    with pytest.raises(PolicyError) as e:
        load_policy(path)
    assert "[synopses.s]" in e.value.message and message in e.value.message
    assert e.value.hint


def test_missing_key_and_the_issue_form(tmp_path):
    path = make_world(tmp_path, synopses='[synopses.s]\ntable = "people"\n')
    with pytest.raises(PolicyError, match="missing dimensions"):
        load_policy(path)
    spec = load_policy(make_world(tmp_path / "ok")).synopses["people_dash"]
    assert [d.describe() for d in spec.dimensions] == ["g", "flag", "age (width 10)", "day (by month)"]
    assert [m.name for m in spec.measures] == ["count", "sum(amount)", "sum(age)"] and spec.epsilon == 1
    sample = load_policy(ROOT / "sample_data" / "dpsql.toml").synopses["patients_dashboard"]
    assert sample.charged_to == "bob" and sample.epsilon == Fraction(1, 2)
    assert sample.charts is None and sample.filters == ()  # the issue's form: the default class of charts


def test_declared_charts_and_filters_tune_the_strategy(tmp_path):
    """charts and filters are optional; declared, they are the class the strategy is tuned to."""
    path = make_world(
        tmp_path,
        synopses="""
[synopses.s]
table = "people"
dimensions = ["g", "flag", { column = "age", width = 10 }]
measures = ["count"]
epsilon = 1
charged_to = "alice"
charts = [["g"], ["flag", "g"], []]
filters = ["AGE"]
""",
    )
    spec = load_policy(path).synopses["s"]
    assert spec.charts == ((0,), (0, 1), ()) and spec.filters == (2,)
    charts = pub.charts_of(spec)
    assert charts == strategy.Charts((1, 3, 0), 4)
    assert strategy.chart_marginals(charts, 3) == {1: 1, 5: 1, 3: 1, 7: 1, 0: 1, 4: 1}
    tuned = strategy.choose((3, 2, 6), charts)
    assert set(tuned.marginals) <= {0, 1, 3, 4, 5, 7} and 7 in tuned.marginals  # the charts' marginals, the cube


SIZES = [(10, 3, 2, 12), (3, 2, 6, 12), (12, 2), (5,), (4, 3, 2, 2, 3)]


@pytest.mark.parametrize("sizes", SIZES)
def test_the_chosen_strategy_is_no_worse_than_the_full_cube_on_its_class(sizes):
    """The strategy's expected error on its class of charts (data-independent) is at most that
    of the full cube alone and of the class's marginals measured alike; its shares are exact,
    positive and sum to 1, and the full cube keeps at least FULL_SHARE."""
    k = len(sizes)
    full = (1 << k) - 1
    classes = [
        strategy.default_charts(k),
        strategy.Charts(strategy.default_charts(k).groupings, full),
        strategy.Charts(tuple(strategy.masks(k)), 0),
        strategy.Charts((1, 0), 0),
    ]
    for charts in classes:
        chosen = strategy.choose(sizes, charts)
        assert sum(chosen.shares) == 1 and all(s > 0 for s in chosen.shares)
        assert full in chosen.marginals
        assert chosen.shares[chosen.marginals.index(full)] >= Fraction(str(strategy.FULL_SHARE)) - Fraction(
            len(chosen.marginals), strategy.DENOMINATOR
        )  # each other share rounded to 1/DENOMINATOR
        error = strategy.expected_error(strategy._dense(chosen, k), sizes, charts)
        for other in strategy.candidates(sizes, charts):
            assert error <= strategy.expected_error(strategy._dense(other, k), sizes, charts) + 1e-12


# Strategy and least squares -----------------------------------------------------------------


def test_variance_formula_matches_the_estimator():
    """The closed-form variance of every marginal's cells equals q^T (A^T W A)^-1 q computed
    from the explicit matrices."""
    sizes = (3, 2, 4)
    st = strategy.choose(sizes)
    precision = {m: float(s) ** 2 / 2 + 0.1 for m, s in zip(st.marginals, st.shares)}
    lam = strategy.eigenvalues(precision, sizes)
    cells = int(np.prod(sizes))
    gram = np.zeros((cells, cells))
    for m, w in precision.items():
        a = np.stack([reconstruct.marginal(e.reshape(sizes), m).ravel() for e in np.eye(cells)], axis=1)
        gram += w * a.T @ a
    inverse = np.linalg.inv(gram)
    for sel in [(1, 1, 1), (3, 2, 4), (1, 2, 4), (2, 1, 3)]:
        q = np.zeros(sizes)
        q[tuple(slice(0, a) for a in sel)] = 1
        assert strategy.variance(lam, sizes, sel) == pytest.approx(q.ravel() @ inverse @ q.ravel(), rel=1e-9)


def _explicit(levels_list, axes_, precision):
    """The explicit Gram matrix of measurements (levels per dimension) over the cube."""
    sizes = tuple(a.size for a in axes_)
    cells = int(np.prod(sizes))
    gram = np.zeros((cells, cells))
    for levels, w in zip(levels_list, precision):
        for combo in itertools.product(*levels):
            cols = []
            for e in np.eye(cells):
                part = axes.released(e.reshape(sizes), axes_, tuple((k,) for k in combo))[combo]
                cols.append(np.ravel(part))
            a = np.stack(cols, axis=1)
            gram += w * a.T @ a
    return gram


def test_hierarchy_variance_and_least_squares_match_the_explicit_estimator():
    """With a hierarchy over a bucketed dimension (blocks of 2 and 4 over 8 buckets) and
    marginals, the closed-form variance of cells, totals and bucket-aligned ranges equals
    q^T (A^T W A)^-1 q from the explicit matrices, and the least-squares cube solves the normal
    equations; non-negativity then gives whole non-negative cells."""
    sizes = (3, 8)
    st = strategy.Strategy(
        (3, 1, 0), (Fraction(1, 2), Fraction(1, 5), Fraction(1, 10)), ((1, axes.Axis((1, 2, 4, 8))),)
    )
    st = strategy.Strategy(st.marginals, st.shares + (Fraction(1, 5),), st.trees)
    axes_ = st.axes(sizes)
    measurements = st.measurements(sizes)
    precision = [float(sh) ** 2 / (2 * axes.partitions(lv) ** 2) for lv, sh in zip(measurements, st.shares)]
    lam = axes.eigenvalues(dict(zip(measurements, precision)), axes_)
    inverse = np.linalg.inv(_explicit(measurements, axes_, precision))
    for q0, q1 in [([0], [5]), (range(3), range(8)), ([1], range(2, 7)), (range(3), range(1, 4)), ([0, 2], [7])]:
        q = np.multiply.outer(axes.picks(axes_[0], q0), axes.picks(axes_[1], q1))
        want = q.ravel() @ inverse @ q.ravel()
        got = axes.variance(lam, axes_, [axes.picks(axes_[0], q0), axes.picks(axes_[1], q1)])
        assert got == pytest.approx(want, rel=1e-9)
    rng = np.random.default_rng(5)
    rhs, noisy = np.zeros(sizes), {}
    for levels, w in zip(measurements, precision):
        for combo, part in axes.released(np.zeros(sizes), axes_, levels).items():
            noisy[levels, combo] = rng.normal(size=part.shape) * 5 + 3
            rhs = rhs + w * axes.spread(noisy[levels, combo], axes_, combo)
    x = reconstruct.least_squares(rhs, lam, axes_)
    gradient = sum(
        w * axes.spread(axes.released(x, axes_, levels)[combo] - noisy[levels, combo], axes_, combo)
        for levels, w in zip(measurements, precision)
        for combo in itertools.product(*levels)
    )
    assert np.max(np.abs(gradient)) < 1e-9
    z = reconstruct.rounded(reconstruct.non_negative(x, lam, axes_))
    assert z.min() >= 0 and np.all(z == np.round(z))


def test_a_hierarchy_is_measured_where_it_lowers_the_range_variance():
    """Over 60 one-year age buckets, charted as a total and by ranges (charts = [[]], ranges
    over a bucketed dimension are in the class), the strategy measures a hierarchy; each
    bucket-aligned range's exact variance (the estimator's formula, tested above) is then lower on
    average than under every flat strategy the choice weighed (the marginals alone, or with more
    on the cells), at the same epsilon. A dimension with no range use (keys) gets none."""
    sizes, charts = (60,), strategy.Charts((0,), 0)
    flat_choice = strategy.choose(sizes, charts)
    chosen = strategy.with_trees(flat_choice, sizes, charts, (0,))
    assert chosen.trees and chosen.describe(["age"]).startswith("2 marginals + a hierarchy over age")
    assert sum(chosen.shares) == 1

    def mean_range_variance(st):
        axes_ = st.axes(sizes)
        lam = axes.eigenvalues(strategy._precisions(st, sizes), axes_)
        spans = strategy.ranges(60)
        return sum(axes.variance(lam, axes_, [axes.picks(axes_[0], range(a, b))]) for a, b in spans) / len(spans)

    tree = mean_range_variance(chosen)
    for flat in [flat_choice, *strategy.flat_alternatives(flat_choice, 1)]:
        assert not flat.trees and tree < mean_range_variance(flat)
    assert not strategy.with_trees(flat_choice, sizes, charts, ()).trees


# Sensitivity on neighbouring datasets ---------------------------------------------------------


def _bounded_cube(s: Session, name: str):
    """A synopsis's cube plan, its exact bounded cube per measure, their L1 sensitivities, sizes."""
    spec = s.policy.synopses[name]
    plan = pub.cube_plan(spec, s.policy, s.engine.schema())
    values = pub.domain_values(s.engine, plan)
    sizes = tuple(len(v) for v in values)
    exact = pub.exact_cubes(plan, s.bounded_result(plan), values, sizes, len(spec.measures))
    cells = int(np.prod(sizes))
    l1 = [plan.bounding.l1(plan.measures[pub.measure_index(plan, j)], cells) for j in range(len(spec.measures))]
    return plan, exact, l1, sizes


def _marginals_move_within_l1(cubes) -> None:
    """Every marginal of the neighbours' exact cubes moves by at most the L1 sensitivity, and one
    moves at all (the test can fail)."""
    (d, l1, sizes), (d_prime, _, _) = cubes
    moved = False
    for j in range(len(d)):
        for mask in strategy.masks(len(sizes)):
            diff = reconstruct.marginal(d[j], mask) - reconstruct.marginal(d_prime[j], mask)
            distance = int(np.sum(np.abs(np.asarray(diff, dtype=object))))
            assert distance <= l1[j]
            moved |= distance > 0
    assert moved


@pytest.mark.parametrize("target", [0, 8, 17, 26, 299])
def test_one_person_moves_every_marginal_by_at_most_the_sensitivity(tmp_path, target):
    """D and D' differ in every row of one person (events: up to 8 rows, over the limits of 2
    groups x 3 rows): each measured marginal of the bounded cube moves by at most the L1
    sensitivity its noise is calibrated to."""
    events = event_rows() + [(target, "x", 1000.0)] * 5
    cubes = []
    for name, rows in (("d", events), ("d-prime", [e for e in events if e[0] != target])):
        policy = load_policy(make_world(tmp_path / name, events=rows))
        s = Session(policy, "alice")
        _, exact, l1, sizes = _bounded_cube(s, "events_dash")
        cubes.append((exact, l1, sizes))
        s.close()
    _marginals_move_within_l1(cubes)


def test_the_guard_refuses_a_scale_below_the_sensitivity(alice):
    spec = alice.policy.synopses["events_dash"]
    plan = pub.cube_plan(spec, alice.policy, alice.engine.schema())
    rs = alice.bounded_result(plan)
    charge = alice.ledger.charge("alice", alice.budget_policy, Cost.pure(Fraction(1)), "test", {})
    l1 = plan.bounding.l1(plan.measures[0], 3)

    def check(draws, result=rs, paid=charge):
        guard.check_synopsis(plan, result, paid, alice.policy, draws, 3)

    def laplace(scale, epsilon=Fraction(1), partitions=1):
        return [guard.SynopsisDraw(0, epsilon, Noise("laplace", float(scale)), partitions, partitions == 1)]

    check(laplace(l1))
    for bad in (laplace(l1 / 2), laplace(l1 / 2, Fraction(2)), laplace(l1, partitions=2)):  # 2: a two-level tree
        with pytest.raises(guard.ReleaseRefused):
            check(bad)
    with pytest.raises(guard.ReleaseRefused):
        check(laplace(l1), ResultSet(rs.names, rs.types, [c[:2] for c in rs.columns]))
    # Gaussian: sigma for the measurement's L2 (the cells: the plan's; a merged partition: the L1)
    rho = mechanisms.rho_for(Fraction(1), Fraction(1, 10**6))
    gaussian = alice.ledger.charge(
        "alice",
        alice.budget_policy,
        budget.cost(budget.Budget("gaussian", Fraction(1), Fraction(1, 10**6), rho), []),
        "t",
        {},
    )
    l2 = plan.bounding.l2_squared(plan.measures[0], 3)
    assert l2 <= l1 * l1
    cells = mechanisms.gaussian_sigma(l2, rho)
    merged = mechanisms.gaussian_sigma(l1 * l1, rho)
    check([guard.SynopsisDraw(0, rho, Noise("gaussian", cells), 1, True)], paid=gaussian)
    check([guard.SynopsisDraw(0, rho, Noise("gaussian", merged), 1, False)], paid=gaussian)
    for bad in (
        [guard.SynopsisDraw(0, rho, Noise("gaussian", merged), 2, False)],  # two levels at one's sigma
        [guard.SynopsisDraw(0, rho * 2, Noise("gaussian", cells / 2), 1, True)],  # more rho than charged
        [guard.SynopsisDraw(0, rho, Noise("laplace", float(l1)), 1, True)],  # Laplace on a Gaussian charge
    ):
        with pytest.raises(guard.ReleaseRefused):
            check(bad, paid=gaussian)
    with pytest.raises(guard.ReleaseRefused):  # a Gaussian draw on a Laplace charge
        check([guard.SynopsisDraw(0, rho, Noise("gaussian", cells), 1, True)])


# Dimensions joined through the privacy unit ------------------------------------------------------

JOINED = """
[synopses.joined_dash]
table = "events"
dimensions = ["kind", "people.g", { column = "people.age", width = 20 }]
measures = ["count", "sum(cost)"]
epsilon = 1
charged_to = "alice"
"""


def test_a_joined_dimension_is_parsed_with_its_table(tmp_path):
    spec = load_policy(make_world(tmp_path, synopses=SYNOPSES + JOINED)).synopses["joined_dash"]
    assert [d.describe() for d in spec.dimensions] == ["kind", "people.g", "people.age (width 20)"]
    assert spec.joined == ("people",) and spec.dimensions[1].table == "people"


@pytest.mark.parametrize("target", [0, 8, 17, 26])
def test_a_joined_synopsis_is_bounded_as_the_per_query_join(tmp_path, target):
    """D and D' differ in every row of one person, in both tables (events: up to 8 rows plus 5
    at a hundred times the bound, past the limits of 2 groups x 3 rows; people: a second row):
    each measured marginal of the joined cube moves by at most the L1 sensitivity its noise is
    calibrated to, and that sensitivity is the one the same join asked as a query gets."""
    events = event_rows() + [(target, "x", 1000.0)] * 5
    people = people_rows(300)
    people = people + [(target, "c", True, 55, 100.0, datetime.date(2024, 5, 5))]
    cubes = []
    for name, ev, pp in (
        ("d", events, people),
        ("d-prime", [e for e in events if e[0] != target], [r for r in people if r[0] != target]),
    ):
        policy = load_policy(make_world(tmp_path / name, people=pp, events=ev, synopses=SYNOPSES + JOINED))
        s = Session(policy, "alice")
        plan, exact, l1, sizes = _bounded_cube(s, "joined_dash")
        cells = int(np.prod(sizes))
        asked = plan_query(
            sqlglot.parse_one(
                "SELECT e.kind, p.g, FLOOR(p.age / 20) * 20, COUNT(*), SUM(e.cost) FROM events e "
                "JOIN people p ON e.pid = p.pid GROUP BY 1, 2, 3",
                read="postgres",
            ),
            policy,
            s.engine.schema(),
            "laplace",
        )
        assert l1 == [asked.bounding.l1(asked.measures[pub.measure_index(asked, j)], cells) for j in range(2)]
        assert asked.relation.unit_rows == plan.relation.unit_rows is not None
        cubes.append((exact, l1, sizes))
        s.close()
    _marginals_move_within_l1(cubes)


JOINED_ROUTES = [
    ("SELECT p.g, COUNT(*), SUM(e.cost) FROM events e JOIN people p ON e.pid = p.pid GROUP BY p.g", True),
    ("SELECT g, COUNT(*) FROM events JOIN people USING (pid) WHERE kind = 'x' GROUP BY g", True),
    ("SELECT COUNT(*) FROM events e, people p WHERE e.pid = p.pid AND p.age >= 20 AND p.age < 60", True),
    ("SELECT kind, AVG(cost) FROM people p JOIN events e ON p.pid = e.pid GROUP BY 1", True),
    ("SELECT COUNT(*) FROM events e JOIN people p ON e.pid = p.pid AND p.g = 'a'", True),
    ("SELECT FLOOR(p.age / 20) * 20 AS b, COUNT(*) FROM events e JOIN people p ON e.pid = p.pid GROUP BY 1", True),
    ("SELECT kind, COUNT(*) FROM events GROUP BY kind", False),  # not joined: other rows, other bounds
    ("SELECT p.g, COUNT(*) FROM events e LEFT JOIN people p ON e.pid = p.pid GROUP BY p.g", False),
    ("SELECT p.g, SUM(p.amount) FROM events e JOIN people p ON e.pid = p.pid GROUP BY p.g", False),
    ("SELECT COUNT(*) FROM events e JOIN people p ON e.pid = p.pid WHERE p.flag", False),
    (
        "SELECT p.g, COUNT(*) FROM events e JOIN people p ON e.pid = p.pid JOIN people q ON p.pid = q.pid GROUP BY 1",
        False,
    ),
]


@pytest.mark.parametrize("sql,routed", JOINED_ROUTES)
def test_joined_query_shapes_route_to_the_joined_synopsis(tmp_path, sql, routed):
    s = Session(load_policy(make_world(tmp_path, synopses=SYNOPSES + JOINED)), "alice")
    s.execute("SET dpsql.cache = off")
    pub.publish(s, "joined_dash")
    spent = s.budget()["epsilon"]["spent"]
    r = s.execute(sql)
    assert (r.dp.get("synopsis") == "joined_dash") == routed, sql
    assert (s.budget()["epsilon"]["spent"] == spent) == routed
    if routed and "GROUP BY" in sql:
        total = s.execute("SELECT COUNT(*) FROM events e JOIN people p ON e.pid = p.pid").rows[0][0]
        if "COUNT(*), SUM" in sql:
            assert sum(row[1] for row in r.rows) == total  # the breakdown adds up to the joined total
    s.close()


# Publishing, charges and consistency ------------------------------------------------------------


def test_publish_is_one_durable_charge_with_its_release_record(alice):
    before = len(alice.ledger.history("alice"))
    done = pub.publish(alice, "people_dash")
    history = alice.ledger.history("alice")
    assert len(history) == before + 1 and history[-1]["sql"] == "SYNOPSIS PUBLISH people_dash"
    assert history[-1]["cost"].epsilon == 1 and history[-1]["released"]["synopsis"] == "people_dash"
    assert done.charge_id == history[-1]["id"]
    assert alice.budget()["epsilon"]["spent"] == 1
    assert alice.ledger.verify() == []


def test_charged_to_everyone_charges_every_analyst_and_the_global_budget_atomically(tmp_path):
    path = make_world(tmp_path, global_="[privacy.global]\nepsilon = 100\n")
    policy = load_policy(path)
    s = Session(policy, "alice")
    pub.publish(s, "events_dash")
    for who in ("alice", "bob"):
        assert s.ledger.spent(who, policy.user(who).budget).epsilon == 1
    from dpsql.ledger.jobs import GLOBAL

    assert s.ledger.spent(GLOBAL, policy.privacy.global_budget).epsilon == 1
    assert s.ledger.verify() == []
    pub.publish(s, "events_dash")  # bob (epsilon 2) has nothing left now: the third is refused for all
    with pytest.raises(BudgetExceeded):
        pub.publish(s, "events_dash")
    assert s.ledger.spent("alice", policy.user("alice").budget).epsilon == 2
    assert s.ledger.spent("bob", policy.user("bob").budget).epsilon == 2
    assert s.ledger.verify() == []
    s.close()


def test_totals_and_breakdowns_agree_exactly(alice):
    pub.publish(alice, "people_dash")
    total = alice.execute("SELECT COUNT(*), SUM(amount) FROM people").rows[0]
    for key in ("g", "flag", "FLOOR(age / 10) * 10", "DATE_TRUNC('month', day)"):
        rows = alice.execute(f"SELECT {key} AS k, COUNT(*), SUM(amount) FROM people GROUP BY 1").rows
        assert sum(r[1] for r in rows) == total[0] and sum(r[2] for r in rows) == total[1]
    by_g = dict(
        (r[0], (r[1], r[2])) for r in alice.execute("SELECT g, COUNT(*), SUM(amount) FROM people GROUP BY g").rows
    )
    for g, (n, amount) in by_g.items():
        rows = alice.execute(f"SELECT flag, COUNT(*), SUM(amount) FROM people WHERE g = '{g}' GROUP BY flag").rows
        assert sum(r[1] for r in rows) == n and sum(r[2] for r in rows) == amount
        assert alice.execute(f"SELECT COUNT(*) FROM people WHERE g = '{g}'").rows[0][0] == n
    two = alice.execute("SELECT COUNT(*) FROM people WHERE g IN ('a', 'b')").rows[0][0]
    assert two == by_g["a"][0] + by_g["b"][0]
    assert all(r[1] >= 0 for r in alice.execute("SELECT g, COUNT(*) FROM people GROUP BY g").rows)


# Routing ------------------------------------------------------------------------------------------

GOLDEN = [
    ("SELECT COUNT(*) FROM people", True),
    ("SELECT COUNT(1) AS n FROM people WHERE flag = false", True),
    ("SELECT g, COUNT(*) FROM people GROUP BY g ORDER BY 2 DESC LIMIT 2", True),
    ("SELECT g, flag, COUNT(*) AS n FROM people WHERE g = 'a' GROUP BY g, flag", True),
    ("SELECT FLOOR(age / 10) * 10 AS band, COUNT(*) FROM people GROUP BY 1", True),
    ("SELECT COUNT(*) FROM people WHERE age >= 20 AND age < 40", True),
    ("SELECT COUNT(*) FROM people WHERE age BETWEEN 20 AND 39", True),
    ("SELECT COUNT(*) FROM people WHERE day >= DATE '2024-03-01' AND day < DATE '2024-05-01'", True),
    ("SELECT DATE_TRUNC('month', day) AS m, SUM(amount) FROM people GROUP BY 1", True),
    ("SELECT g, AVG(amount), DP_INTERVAL_LOW(AVG(amount)) FROM people GROUP BY g", True),
    ("SELECT g, COUNT(*) FROM people WHERE g IN ('a', 'c') AND flag = true GROUP BY g", True),
    ("SELECT g, COUNT(*) FROM people WHERE g <> 'a' GROUP BY g", True),
    ("SELECT g, COUNT(*) * 2 AS twice FROM people GROUP BY g HAVING COUNT(*) > 10", True),
    ("SELECT * FROM (SELECT g, COUNT(*) AS n FROM people GROUP BY g) AS t LIMIT 10", True),
    ("SELECT kind, COUNT(*), SUM(cost) FROM events GROUP BY kind", True),
    ("SELECT SUM(age) FROM people", True),  # an integer column's: an integer
    ("SELECT SUM(cost) FROM events WHERE kind = 'x'", True),
    ("SELECT COUNT(*) FROM people WHERE age >= 25", False),  # cuts a bucket
    ("SELECT age, COUNT(*) FROM people GROUP BY age", False),  # finer than the synopsis
    ("SELECT COUNT(*) FROM people WHERE amount > 50", False),  # not a dimension
    ("SELECT SUM(LEAST(amount, 10)) FROM people", False),  # another clamp
    ("SELECT MEDIAN(amount) FROM people", False),
    ("SELECT COUNT(DISTINCT g) FROM people", False),
    ("SELECT COUNT(amount) FROM people", False),  # NULLs are not counted: not the synopsis's count
    ("SELECT COUNT(*) FROM people WHERE g = 'a' OR flag", False),
    ("SELECT COUNT(*) FROM people p JOIN events e ON p.pid = e.pid", False),
    ("SELECT STDDEV(amount) FROM people", False),
    ("SELECT COUNT(*) FROM people WHERE day >= DATE '2024-03-15'", False),
]


@pytest.mark.parametrize("sql,routed", GOLDEN)
def test_routing_decisions(alice, sql, routed):
    pub.publish(alice, "people_dash")
    pub.publish(alice, "events_dash")
    spent = alice.budget()["epsilon"]["spent"]
    r = alice.execute(sql)
    assert (r.dp.get("synopsis") is not None) == routed, sql
    if routed:
        assert alice.budget()["epsilon"]["spent"] == spent and r.dp["cost"] == {"epsilon": 0.0, "delta": 0.0}
        assert "answered from synopsis" in r.dp["notice"]
    else:
        assert alice.budget()["epsilon"]["spent"] > spent


def test_filters_select_the_right_cells(alice):
    pub.publish(alice, "people_dash")
    by_band = dict(alice.execute("SELECT FLOOR(age / 10) * 10 AS b, COUNT(*) FROM people GROUP BY 1").rows)
    assert (
        alice.execute("SELECT COUNT(*) FROM people WHERE age >= 20 AND age < 40").rows[0][0]
        == by_band[20] + by_band[30]
    )
    assert (
        alice.execute("SELECT COUNT(*) FROM people WHERE age BETWEEN 20 AND 39").rows[0][0] == by_band[20] + by_band[30]
    )
    months = alice.execute("SELECT DATE_TRUNC('month', day) AS m, COUNT(*) FROM people GROUP BY 1").rows
    by_month = {m.month if hasattr(m, "month") else m: n for m, n in months}
    spring = alice.execute("SELECT COUNT(*) FROM people WHERE day >= DATE '2024-03-01' AND day < DATE '2024-05-01'")
    assert spring.rows[0][0] == by_month[3] + by_month[4]
    none = alice.execute("SELECT COUNT(*) FROM people WHERE g = 'zzz'").rows[0][0]
    assert none == 0
    ages = alice.execute("SELECT g, SUM(age) FROM people GROUP BY g").rows
    assert all(isinstance(r[1], int) for r in ages)
    assert sum(r[1] for r in ages) == alice.execute("SELECT SUM(age) FROM people").rows[0][0]


def test_bob_cannot_read_alices_synopsis_and_a_stale_one_is_not_used(world):
    policy = load_policy(world)
    a = Session(policy, "alice")
    pub.publish(a, "people_dash")
    assert a.execute("SELECT COUNT(*) FROM people").dp.get("synopsis") == "people_dash"
    b = Session(policy, "bob")
    assert b.execute("SELECT COUNT(*) FROM people").dp.get("synopsis") is None  # charged to alice: hers alone
    b.close()
    a.close()
    con = duckdb.connect(str(world.parent / "db.duckdb"))  # the data changes
    con.execute("INSERT INTO people VALUES (99999, 'a', true, 1, 1.0, DATE '2024-01-01')")
    con.close()
    store.FRESH_FOR = 0.0
    try:
        a = Session(policy, "alice")
        r = a.execute("SELECT COUNT(*) FROM people")
        assert r.dp.get("synopsis") is None and r.dp["cost"]["epsilon"] > 0
        pub.publish(a, "people_dash")
        assert a.execute("SELECT COUNT(*) FROM people").dp.get("synopsis") == "people_dash"
        assert store.drop(a.ledger, "people_dash") == 2
        assert a.execute("SELECT COUNT(*) FROM people").dp.get("synopsis") is None
        a.close()
    finally:
        store.FRESH_FOR = 1.0


def test_explain_names_the_route_and_both_errors(alice):
    pub.publish(alice, "people_dash")
    lines = [r[0] for r in alice.execute("EXPLAIN SELECT g, COUNT(*) FROM people GROUP BY g").rows]
    assert any(line.startswith("route: synopsis people_dash, free") for line in lines)
    assert any("error within ±" in line and "from the synopsis" in line for line in lines)
    assert any(line.startswith("cost: epsilon=") for line in lines)  # the per-query way's cost and error
    lines = [r[0] for r in alice.execute("EXPLAIN SELECT COUNT(*) FROM people WHERE age > 25").rows]
    assert any(line.startswith("route: per query") for line in lines)
    assert alice.budget()["epsilon"]["spent"] == 1


# Accuracy -------------------------------------------------------------------------------------------


def _laplace_sum_bound(coefficients: list[tuple[float, float, int]], fpr: float) -> float:
    """t with P(|sum c_j Z_j| >= t) <= fpr for independent Z_j ~ Laplace(b_j), given as
    (c, b, how many): E e^{s Z} = 1 / (1 - s^2 b^2) <= e^{2 s^2 b^2} for |s| b <= 1/2, so by
    Chernoff P(S >= t) <= exp(-s t + 2 s^2 V), V = sum c^2 b^2, s <= 1 / (2 max |c| b)."""
    v = sum(n * (c * b) ** 2 for c, b, n in coefficients)
    top = max(abs(c) * b for c, b, _ in coefficients)
    log_tail = math.log(2 / fpr)
    t = math.sqrt(8 * v * log_tail)
    if t / (4 * v) <= 1 / (2 * top):
        return t
    s = 1 / (2 * top)
    return (log_tail + 2 * s * s * v) / s


def test_published_total_is_within_its_bound_fpr_1e6(tmp_path):
    """Every cell holds 150+ people, so no count is clipped (a negative cell would need a noise
    beyond 30 scales, probability < 1e-12 over all cells): the published total is the least-
    squares total, rounded, a linear combination of the marginals' Laplace noises with known
    coefficients. Failing when it lies further than the bound that holds with probability
    1 - 1e-6: a false positive at most once in a million runs."""
    path = make_world(
        tmp_path,
        synopses="""
[synopses.s]
table = "people"
dimensions = ["g", "flag"]
measures = ["count"]
epsilon = 0.5
charged_to = "alice"
""",
    )
    policy = load_policy(path)
    s = Session(policy, "alice")
    pub.publish(s, "s")
    stored = store.current(s.ledger, "s", s.engine.data_version())
    total = s.execute("SELECT COUNT(*) FROM people").rows[0][0]
    truth = 3000
    sizes = tuple(stored.body["sizes"])
    axes_, eigen = estimator(stored.body)
    lam = eigen["count"]
    detail = s.ledger.history("alice")[-1]["detail"]
    coefficients = []
    for mech in detail["mechanisms"]:
        names = [] if mech["marginal"] == "total" else mech["marginal"].split("×")
        mask = sum(1 << i for i, d in enumerate(["g", "flag"]) if d in names)
        b = mech["scale"] / 1024  # the count's integer units (2**10 a row)
        w = 1 / (2 * b * b)
        outside = math.prod(n for i, n in enumerate(sizes) if not mask >> i & 1)
        cells = math.prod(n for i, n in enumerate(sizes) if mask >> i & 1)
        coefficients.append((w * outside / lam[-1, -1], b, cells))  # lambda on the constants
    assert 2 * sum(n * (c * b) ** 2 for c, b, n in coefficients) == pytest.approx(
        axes.variance(lam, axes_, [np.ones(n) for n in sizes]), rel=1e-9
    )
    assert abs(total - truth) <= _laplace_sum_bound(coefficients, 1e-6) + 0.5  # + rounding
    s.close()


def _binomial_threshold(n: int, p: float, fpr: float) -> int:
    """The least t with P(Binomial(n, p) > t) <= fpr."""
    tail = 1.0
    for t in range(n + 1):
        tail -= math.comb(n, t) * p**t * (1 - p) ** (n - t)
        if tail <= fpr:
            return t
    return n


def test_intervals_cover_the_truth_through_least_squares_and_non_negativity_fpr_1e6():
    """The whole pipeline after the bounded cube (discrete Laplace on each measured marginal of a
    tuned strategy and on a hierarchy's levels, least squares, non-negativity, rounding) on a cube with empty and small
    cells, 120 independent runs; for each of six queries and two confidences, its interval (the
    route's, from the estimator's variance) misses the truth in at most as many runs as a
    Binomial(120, 1 - confidence) exceeds with probability 1e-6 / 12 (union bound over the 12:
    a false positive at most once in a million runs)."""
    from dpsql.guarantee.mechanisms import add_noise, laplace_scale
    from dpsql.synopses.route import _half

    sizes = (3, 2, 4)
    truth = np.array(
        [[[40, 0, 25, 3], [12, 30, 0, 55]], [[8, 2, 0, 60], [35, 1, 20, 9]], [[0, 0, 44, 17], [5, 26, 3, 70]]]
    )
    chosen = strategy.choose(sizes, strategy.Charts((1, 2, 3, 4, 0), 1))
    assert len(chosen.marginals) > 1  # a combination of measurements, not one
    h = Fraction(1, 5)  # and a hierarchy over the last dimension (pairs of buckets)
    chosen = strategy.Strategy(
        chosen.marginals, tuple(s * (1 - h) for s in chosen.shares) + (h,), ((2, axes.Axis((1, 2, 4))),)
    )
    axes_ = chosen.axes(sizes)
    measurements = chosen.measurements(sizes)
    noises = [Noise("laplace", laplace_scale(axes.partitions(lv), s)) for lv, s in zip(measurements, chosen.shares)]
    precision = {lv: 1 / (2 * n.scale**2) for lv, n in zip(measurements, noises)}
    lam = axes.eigenvalues(precision, axes_)
    every = slice(None)
    queries = [
        ((range(3), range(2), range(4)), (every, every, every)),
        (([0], range(2), range(4)), (0, every, every)),
        (([2], [1], range(4)), (2, 1, every)),
        (([0], [0], [1]), (0, 0, 1)),
        ((range(3), range(2), [3]), (every, every, 3)),
        (([1], [1], range(1, 3)), (1, 1, slice(1, 3))),
    ]
    runs, confidences = 120, (0.5, 0.95)
    misses = {(q, c): 0 for q in range(len(queries)) for c in confidences}
    for _ in range(runs):
        rhs = np.zeros(sizes)
        for lv, n in zip(measurements, noises):
            for combo, part in axes.released(truth, axes_, lv).items():
                noisy = np.array(add_noise([int(v) for v in np.ravel(part)], n), dtype=float).reshape(np.shape(part))
                rhs = rhs + precision[lv] * axes.spread(noisy, axes_, combo)
        cube = reconstruct.rounded(reconstruct.non_negative(reconstruct.least_squares(rhs, lam, axes_), lam, axes_))
        for q, (cells, at) in enumerate(queries):
            error = abs(float(np.sum(cube[at])) - float(np.sum(truth[at])))
            std = math.sqrt(axes.variance(lam, axes_, [axes.picks(a, c) for a, c in zip(axes_, cells)]))
            for c in confidences:
                misses[q, c] += error > _half(std, c)
    for (q, c), missed in misses.items():
        assert missed <= _binomial_threshold(runs, 1 - c, 1e-6 / len(misses)), (queries[q], c, missed)
    assert sum(misses[q, 0.5] for q in range(len(queries))) > 0  # the check can fail: misses happen


# CLI and the server ---------------------------------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dpsql.cli", *args], capture_output=True, text=True, cwd=ROOT)


def test_cli_publish_list_drop(world):
    out = _cli("synopsis", "list", "--policy", str(world))
    assert "people_dash: people by g, flag, age (width 10), day (by month)" in out.stdout
    assert "not published" in out.stdout
    out = _cli("synopsis", "publish", "--policy", str(world), "people_dash")
    assert out.returncode == 0 and "charged epsilon 1" in out.stdout, out.stderr
    out = _cli("synopsis", "list", "--policy", str(world))
    assert "people_dash" in out.stdout and ": published" in out.stdout
    out = _cli("synopsis", "drop", "--policy", str(world), "people_dash")
    assert "dropped synopsis people_dash (1 published version(s))" in out.stdout
    out = _cli("synopsis", "publish", "--policy", str(world), "nope")
    assert out.returncode == 1 and "ERROR [42704]" in out.stderr and "HINT" in out.stderr


def test_end_to_end_through_dpsql_serve(world):
    psycopg = pytest.importorskip("psycopg")
    from .server_fixture import Serve

    out = _cli(
        "synopsis", "publish", "--policy", str(world), "--ledger", str(world.parent / "ledger.sqlite"), "people_dash"
    )
    assert out.returncode == 0, out.stderr
    server = Serve(world, world.parent / "ledger.sqlite")
    try:
        notices = []
        with psycopg.connect(server.dsn("alice"), autocommit=True) as conn:
            conn.add_notice_handler(lambda d: notices.append(d.message_primary))
            cur = conn.cursor()
            cur.execute("SHOW dpsql.budget")
            before = cur.fetchone()[3]
            cur.execute("SELECT g, COUNT(*) FROM people GROUP BY g ORDER BY g")
            rows = cur.fetchall()
            cur.execute("SELECT COUNT(*) FROM people WHERE g = %s", ("a",))
            assert cur.fetchone()[0] == rows[0][1]
            cur.execute("SHOW dpsql.budget")
            assert cur.fetchone()[3] == before == 1.0
        assert any("answered from synopsis people_dash" in n for n in notices)
    finally:
        server.stop()


def test_analysts_publish_their_own_synopses_from_python(world):
    import dpsql

    conn = dpsql.connect(world, user="bob")
    with pytest.raises(Error) as e:
        conn.publish_synopsis("people_dash")  # charged to alice
    assert e.value.sqlstate == "42501"
    conn.close()
    conn = dpsql.connect(world, user="alice")
    assert conn.publish_synopsis("people_dash").epsilon == 1
    cur = conn.cursor()
    cur.execute("SELECT g, COUNT(*) FROM people GROUP BY g")
    assert cur.connection.session.budget()["epsilon"]["spent"] == 1
    conn.close()


def test_errors_before_the_charge_cost_nothing(alice):
    with pytest.raises(Error) as e:
        pub.publish(alice, "missing")
    assert e.value.sqlstate == "42704"
    assert alice.budget()["epsilon"]["spent"] == 0


TREE = """
[synopses.ages]
table = "people"
dimensions = ["g", { column = "age", width = 1 }]
measures = ["count"]
epsilon = 1
charged_to = "alice"
charts = [[]]
"""


def test_a_published_hierarchy_answers_ranges_consistently_and_says_so(tmp_path, capsys):
    """A synopsis charted by its total and by age ranges measures a hierarchy over the 60 ages:
    the ledger, the list and EXPLAIN say so, range queries are answered from it, free, and
    every range is the sum of its buckets."""
    s = Session(load_policy(make_world(tmp_path, synopses=SYNOPSES + TREE)), "alice")
    s.execute("SET dpsql.cache = off")
    done = pub.publish(s, "ages")
    assert "hierarchy over age" in done.measured
    detail = s.ledger.history("alice")[-1]["detail"]
    assert any(m["marginal"].startswith("hierarchy over age") for m in detail["mechanisms"])
    rows = store.status(s.policy.synopses, store.listed(s.ledger), s.engine.data_version())
    assert "hierarchy over age" in next(r for r in rows if r["name"] == "ages")["measured"]
    spent = s.budget()["epsilon"]["spent"]
    by_age = dict(s.execute("SELECT FLOOR(age / 1) * 1 AS a, COUNT(*) FROM people GROUP BY 1").rows)
    r = s.execute("SELECT COUNT(*) FROM people WHERE age >= 13 AND age < 41")
    assert r.dp["synopsis"] == "ages" and r.rows[0][0] == sum(by_age[a] for a in range(13, 41))
    lines = [x[0] for x in s.execute("EXPLAIN SELECT COUNT(*) FROM people WHERE age BETWEEN 13 AND 40").rows]
    assert any("synopsis ages" in line and "hierarchy over age" in line for line in lines)
    assert s.budget()["epsilon"]["spent"] == spent
    s.close()


def test_under_a_zcdp_filter_a_synopsis_is_gaussian_charged_its_rho_and_within_its_bound_fpr_1e6(tmp_path):
    """Every payer's filter is zcdp: the synopsis is measured with Gaussian noise, charged as one
    Gaussian part (rho from its epsilon and the policy's per-query delta), which the filter
    accounts by rho. The published total (every cell holds 400+ people, so non-negativity
    moves nothing but with negligible probability; rounding moves it by 0.5) is a linear
    combination of discrete Gaussian noises, sub-Gaussian with at most the estimator's variance:
    P(|error| > t) <= 2 exp(-t^2 / 2 Var), t for 1e-6. Answers are routed, free."""
    synopses = """
[synopses.s]
table = "people"
dimensions = ["g", "flag"]
measures = ["count", "sum(amount)"]
epsilon = 0.5
charged_to = "alice"
"""
    path = make_world(tmp_path, synopses=synopses)
    path.write_text(path.read_text().replace('filter = "basic"', 'filter = "zcdp"'))
    policy = load_policy(path)
    assert budget.mechanism_of(policy.synopses["s"], policy) == "gaussian"
    s = Session(policy, "alice")
    done = pub.publish(s, "s")
    assert done.measured.endswith("gaussian noise")
    charge = s.ledger.history("alice")[-1]
    (part,) = charge["cost"].parts
    rho = mechanisms.rho_for(Fraction(1, 2), policy.privacy.default_query_delta)
    assert part.kind == "gaussian" and part.rho == rho and part.epsilon == Fraction(1, 2)
    assert {m["kind"] for m in charge["detail"]["mechanisms"]} == {"gaussian"}
    assert sum(Fraction(m["rho"]) for m in charge["detail"]["mechanisms"]) == pytest.approx(float(rho))
    stored = store.current(s.ledger, "s", s.engine.data_version())
    axes_, eigen = estimator(stored.body)
    r = s.execute("SELECT COUNT(*) FROM people")
    assert r.dp["synopsis"] == "s" and r.dp["cost"]["epsilon"] == 0
    std = math.sqrt(axes.variance(eigen["count"], axes_, [np.ones(n) for n in stored.body["sizes"]]))
    assert abs(r.rows[0][0] - 3000) <= std * math.sqrt(2 * math.log(2 / 1e-6)) + 0.5
    assert s.ledger.verify() == []
    s.close()
    explicit = make_world(tmp_path / "basic", synopses=synopses + 'mechanism = "gaussian"\ndelta = 1e-7\n')
    s = Session(load_policy(explicit), "alice")  # the basic filter: charged the pair (0.5, 1e-7)
    pub.publish(s, "s")
    assert s.budget()["epsilon"]["spent"] == 0.5 and s.budget()["delta"]["spent"] == pytest.approx(1e-7)
    s.close()


@pytest.mark.parametrize(
    "scales,kinds,gaussian",
    [
        ([1.0, 2.0], ["count", "sum"], False),
        ([1.0, 2.0], ["count", "sum"], True),
        ([1.0, 2.0, 5.0], ["count", "sum", "sum"], False),
        ([3.0, 2.0], ["sum", "sum"], True),
    ],
)
def test_the_measure_split_minimises_the_declared_measures_error(scales, kinds, gaussian):
    """The shares sum to 1 exactly, and no nearby split (nor the equal one) has a lower expected
    relative error of the measures and their AVGs (the objective is convex)."""
    shares = budget.measure_shares(scales, kinds, gaussian)
    assert sum(shares) == 1 and all(s > 0 for s in shares)
    best = budget.split_error(np.array([float(s) for s in shares]), scales, kinds, gaussian)
    equal = np.full(len(scales), 1 / len(scales))
    assert best <= budget.split_error(equal, scales, kinds, gaussian) + 1e-12
    for i in range(len(scales)):
        for j in range(len(scales)):
            if i != j:
                moved = np.array([float(s) for s in shares])
                moved[i] += 0.005
                moved[j] -= 0.005
                assert best <= budget.split_error(moved, scales, kinds, gaussian) + 1e-9


def test_publishing_splits_count_and_sum_by_their_public_scales(alice):
    """events_dash: count and sum(cost) with cost in [0, 10]: a = 1 and 2, so 0.4 and 0.6 of
    its epsilon under Laplace, recorded in the charge and used for every noise."""
    pub.publish(alice, "events_dash")
    detail = alice.ledger.history("alice")[-1]["detail"]
    assert detail["measure_shares"] == {"count": 0.4, "sum(cost)": 0.6}
    by_measure = {}
    for m in detail["mechanisms"]:
        by_measure[m["measure"]] = by_measure.get(m["measure"], 0) + m["epsilon"]
    assert by_measure == pytest.approx({"count": 0.4, "sum(cost)": 0.6})

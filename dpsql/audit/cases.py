"""What the audit attacks: neighbouring datasets and the queries run on them.

Each World is a pair of databases D and D' that differ in every row of one person, the
*target* (pid 0): D holds the background rows and the target's rows, D' the background only.
The target is as influential as the policy allows, and then some: more rows than max_rows
and max_groups admit, values far outside the declared bounds, alone in a group. If dpsql
failed to bound any of that, the released values would move further apart than the charged
epsilon permits, and the threshold test would show it.

Each Case is one query on one World, the settings it runs under, and which released value
the test looks at (for grouped queries: the target's group).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

Rows = Sequence[tuple]
Observe = Callable[[Rows], float]

TARGET = 0  # the differing person's privacy unit


@dataclass(frozen=True)
class Table:
    """One table: its columns (DuckDB DDL), its [tables.NAME] policy body, the rows both
    datasets share, and the target's rows (in D only)."""

    columns: str
    policy: str
    background: Rows
    target: Rows


@dataclass(frozen=True)
class World:
    name: str
    tables: Mapping[str, Table]
    synopses: str = ""  # [synopses.NAME] sections of its policy


@dataclass(frozen=True)
class Case:
    """A query to audit. `runs` is the number of executions per dataset in the full audit,
    `quick_runs` in the quick one (None: not part of it)."""

    name: str
    world: World
    sql: str
    observe: Observe
    settings: Mapping[str, str] = field(default_factory=dict)
    runs: int = 5000
    quick_runs: int | None = None
    publish: str | None = None  # a synopsis published (and charged) before every run; `sql` is answered from it
    # statements run before `sql` in each run, from a session with no kept profiles and no cached
    # answers (dpsql.cache on): `sql` may reuse the profile their queries released; the run's
    # charge is every query's in it
    before: tuple[str, ...] = ()


# Observations: a released result -> one ordered number. A missing value (NULL, a group not
# released) is -inf, below every real value, so "released or not" is a threshold test too.


def _number(value: object) -> float:
    return -math.inf if value is None else float(value)


def scalar(rows: Rows) -> float:
    """The single value of an ungrouped one-aggregate query."""
    return _number(rows[0][-1]) if rows else -math.inf


def group(key: object) -> Observe:
    """The last column of the row whose first column is `key` (-inf when that group is absent)."""

    def observe(rows: Rows) -> float:
        return next((_number(r[-1]) for r in rows if r[0] == key), -math.inf)

    return observe


def released(key: object) -> Observe:
    """1 when a row for group `key` was released, else 0 (partition selection)."""

    def observe(rows: Rows) -> float:
        return 1.0 if any(r[0] == key for r in rows) else 0.0

    return observe


def groups_released(rows: Rows) -> float:
    """How many groups were released (partition selection over a target's several groups)."""
    return float(len(rows))


# Worlds -------------------------------------------------------------------------------------

PEOPLE_COLUMNS = "pid INTEGER, income DOUBLE, sex VARCHAR, city VARCHAR"
PEOPLE_POLICY = """\
privacy_unit = "pid"
max_groups = 1
max_rows = 1
columns.income = { lower = 0, upper = 100 }
columns.sex = { keys = ["F", "M"] }
"""
# city has no declared keys: grouping by it goes through partition selection.

VISITS_COLUMNS = "pid INTEGER, amount DOUBLE, kind VARCHAR"
VISITS_POLICY = """\
privacy_unit = "pid"
max_groups = 2
max_rows = 3
columns.amount = { lower = 0, upper = 50 }
columns.kind = { keys = ["a", "b", "c"] }
"""

# The target: four copies of its row where one is allowed, income ten times the upper bound,
# a city of its own; twenty visits (the limit is 3 per group, 2 groups) at twenty times the bound.
TARGET_PEOPLE = tuple((TARGET, 1000.0, "F", "Zed") for _ in range(4))
TARGET_VISITS = tuple((TARGET, 1000.0, "abc"[i % 3]) for i in range(20))

HOSPITAL = World(
    "hospital",
    {
        # 20 people at income 0 (the target's value is as far from them as the bounds allow),
        # half F, in four cities of five.
        "people": Table(
            PEOPLE_COLUMNS,
            PEOPLE_POLICY,
            tuple((p, 0.0, "F" if p <= 10 else "M", f"c{p % 4}") for p in range(1, 21)),
            TARGET_PEOPLE,
        ),
        "visits": Table(
            VISITS_COLUMNS, VISITS_POLICY, tuple((p, 0.0, "a") for p in range(1, 21) for _ in range(2)), TARGET_VISITS
        ),
    },
)

# 30 people at the lower bound and 29 at the upper one: the target (at the upper bound) tips
# the median from one end of the range to the other.
SPLIT = World(
    "split",
    {
        "people": Table(
            PEOPLE_COLUMNS,
            PEOPLE_POLICY,
            tuple((p, 0.0 if p <= 30 else 100.0, "M", "c") for p in range(1, 60)),
            TARGET_PEOPLE,
        ),
    },
)

# The target alone: D' is empty, so only sampling and noise hide the target.
ALONE = World(
    "alone",
    {
        "people": Table(PEOPLE_COLUMNS, PEOPLE_POLICY, (), TARGET_PEOPLE),
    },
)


# Light background (50 people with one small visit each) and a target with twenty visits at
# twenty times the bound: with the target, the profile sees a heavy person and large values, so
# the limits chosen per query (dpsql.bounds = auto) differ between D and D'.
SKEWED = World(
    "skewed",
    {
        "visits": Table(
            VISITS_COLUMNS, VISITS_POLICY, tuple((p, 1.0, "abc"[p % 3]) for p in range(1, 51)), TARGET_VISITS
        ),
    },
)


# A population at the edge of small (auto_bounds.extra): 600 people with one small visit each, so
# that at epsilon 1 the profile's noisy count of units (two histograms of scale 20) falls below
# TRUST (30) scales in about half the runs, which then release the value histogram again
# from the release's part; the target's twenty visits at twenty times the bound move the profile,
# so whether and how much is spent again and the clamp chosen from it.
SMALL_EDGE = World(
    "small_edge",
    {
        "visits": Table(
            VISITS_COLUMNS, VISITS_POLICY, tuple((p, 1.0, "abc"[p % 3]) for p in range(1, 601)), TARGET_VISITS
        ),
    },
)


# Limits chosen per query over undeclared keys (a total bound with partition selection,
# bounding.SelectedTotalCap): 40 people with one small visit of kind "a", kinds not declared;
# the target's twenty visits at twenty times the bound, over three kinds, move the profile (the
# total bound C and the clamp chosen) and through C the groups a unit keeps, min(C, 2), and so
# partition selection's odds. Kind "b" exists only with the target.
SKEWED_UNDECLARED = World(
    "skewed_undeclared",
    {
        "visits": Table(
            VISITS_COLUMNS,
            VISITS_POLICY.replace('columns.kind = { keys = ["a", "b", "c"] }\n', ""),
            tuple((p, 1.0, "a") for p in range(1, 41)),
            TARGET_VISITS,
        ),
    },
)


# The hospital's people with a synopsis over them, charged to the auditor: every run publishes
# it afresh (the charge), then reads the target's group from it (least squares, non-negativity
# and rounding included). Its declared chart (the total) makes the strategy measure two
# marginals (the total, and the cube at its least share), so every answer combines both.
SYNOPSIS = World(
    "synopsis",
    {"people": HOSPITAL.tables["people"]},
    """
[synopses.audit]
table = "people"
dimensions = ["sex"]
measures = ["count", "sum(income)"]
epsilon = 1
charged_to = "auditor"
charts = [[]]
""",
)


# The hospital's visits with a synopsis whose dimension is the person's sex, from people joined
# through the privacy unit: the target moves both tables (four people rows where one is allowed,
# twenty visits at twenty times the bound), and the cube is bounded as the per-query join is.
JOINED_SYNOPSIS = World(
    "joined_synopsis",
    HOSPITAL.tables,
    """
[synopses.audit_joined]
table = "visits"
dimensions = ["kind", "people.sex"]
measures = ["count", "sum(amount)"]
epsilon = 1
charged_to = "auditor"
charts = [["people.sex"], []]
""",
)


# A synopsis charted by its total and by ranges of an age in 64 one-year buckets, which the
# strategy measures with a hierarchy over the buckets (blocks of several buckets, each level
# a partition charged at the cube's sensitivity): the target (four rows, one allowed, at the
# top of the range) against twenty people at age 5; the query reads a range of the top buckets.
AGES = World(
    "ages",
    {
        "people": Table(
            "pid INTEGER, age INTEGER",
            'privacy_unit = "pid"\nmax_groups = 1\nmax_rows = 1\ncolumns.age = { lower = 0, upper = 63 }\n',
            tuple((p, 5) for p in range(1, 21)),
            tuple((TARGET, 62) for _ in range(4)),
        ),
    },
    """
[synopses.audit_ages]
table = "people"
dimensions = [{ column = "age", width = 1 }]
measures = ["count"]
epsilon = 1
charged_to = "auditor"
charts = [[]]
""",
)


# The synopsis world's people measured with Gaussian noise (zCDP, its rho from epsilon and
# delta): as for the gaussian_count case, an epsilon of 4 makes the bound say something.
GAUSSIAN_SYNOPSIS = World(
    "gaussian_synopsis",
    SYNOPSIS.tables,
    SYNOPSIS.synopses.replace("[synopses.audit]", "[synopses.audit_gaussian]").replace("epsilon = 1", "epsilon = 4")
    + 'mechanism = "gaussian"\ndelta = 1e-5\n',
)


# Cases --------------------------------------------------------------------------------------

POLICY_LIMITS = {"dpsql.bounds": "policy"}
EPSILON = {"dpsql.epsilon": "1", **POLICY_LIMITS}
AUTO = {"dpsql.epsilon": "1", "dpsql.bounds": "auto"}

CASES: tuple[Case, ...] = (
    Case("count", HOSPITAL, "SELECT COUNT(*) FROM people", scalar, EPSILON, quick_runs=1000),
    Case("sum", HOSPITAL, "SELECT SUM(income) FROM people", scalar, EPSILON),
    Case("avg", HOSPITAL, "SELECT AVG(income) FROM people", scalar, EPSILON),
    Case("group_declared", HOSPITAL, "SELECT sex, COUNT(*) FROM people GROUP BY sex", group("F"), EPSILON),
    Case(
        "join_limit",
        HOSPITAL,
        "SELECT COUNT(*) FROM people p JOIN visits v ON p.pid = v.pid",
        scalar,
        EPSILON,
        quick_runs=1000,
    ),
    Case("stddev", HOSPITAL, "SELECT STDDEV(income) FROM people", scalar, EPSILON),
    # A quantile noises 64 histogram bins, about ten times slower per query, and its noisy rank
    # hides one person at epsilon 1 (bound about 0); at 4 the bound is about 1.5 from 400 runs.
    Case(
        "median", SPLIT, "SELECT MEDIAN(income) FROM people", scalar, {"dpsql.epsilon": "4", **POLICY_LIMITS}, runs=1500
    ),
    Case("count_distinct", HOSPITAL, "SELECT COUNT(DISTINCT pid) FROM visits", scalar, EPSILON),
    # An (epsilon, delta) Gaussian spends most of its epsilon in the far tails, which a few
    # thousand runs never see: at epsilon 1 the bound stays near 0, at 4 it is about 1 from 1000
    # runs and 1.5 from 5000.
    Case(
        "gaussian_count",
        HOSPITAL,
        "SELECT COUNT(*) FROM people",
        scalar,
        {"dpsql.epsilon": "4", "dpsql.mechanism": "'gaussian'", "dpsql.delta": "1e-5", **POLICY_LIMITS},
        quick_runs=1000,
    ),
    # A large delta makes the test sensitive: the target's group may be released with
    # probability delta at most; a selection twice too lax shows up in the full audit, three
    # times too lax in the quick one.
    Case(
        "partition_selection",
        HOSPITAL,
        "SELECT city, COUNT(*) FROM people GROUP BY city",
        released("Zed"),
        {**EPSILON, "dpsql.delta": "0.05"},
        quick_runs=1000,
    ),
    # Sampling persons with a secret salt: charged the amplified ln(1 + q(e^epsilon - 1)), which is
    # exact for a person alone, so this bound comes close to its charge. A fresh salt re-prepares
    # the bounded query on every run: about four times slower per query.
    Case("sampled_count", ALONE, "SELECT COUNT(*) FROM people TABLESAMPLE BERNOULLI (50)", scalar, EPSILON, runs=4000),
    # Limits chosen per query: the profile (a tenth of epsilon) and the release at the limits it
    # chose, both charged; the target moves the profile, so D and D' are released under different
    # limits (a total bound on rows, a clamp of amount).
    Case("auto_sum", SKEWED, "SELECT SUM(amount) FROM visits", scalar, AUTO, quick_runs=600),
    Case("auto_avg", SKEWED, "SELECT kind, AVG(amount) FROM visits GROUP BY kind", group("a"), AUTO),
    Case("auto_count", SKEWED, "SELECT COUNT(*) FROM visits", scalar, AUTO),
    # A mean's sum centred at the profile's mean with 9/10 of the mean's share (auto_mean.py, the
    # audit's filter being basic): the target's rows at twenty times the bound move the profile's
    # mean, so D and D' centre the sum (and bound it, max(U - c, c - L)) differently.
    Case("auto_avg_scalar", SKEWED, "SELECT AVG(amount) FROM visits", scalar, AUTO),
    # A spread under chosen limits: the background's values are all 1; the target's twenty rows at
    # twenty times the bound move the profile, so the distribution of the chosen clamp (over 200
    # runs each: none, the policy's 50, 49 times with the target and 40 without; 1.5625, 8 and 18
    # times), hence the centred sum's and the squares' sensitivities, both in the charge.
    Case("auto_stddev", SKEWED, "SELECT kind, STDDEV(amount) FROM visits GROUP BY kind", group("a"), AUTO),
    # A spread's count is fixed point at FINE_COUNT_BITS where a unit's shares are scaled (the
    # target's twenty rows over three kinds, two groups allowed): at the policy's limits, and under
    # the total bound the choice makes (each of its rows weighing C / 20); a variance, unrooted.
    Case("spread_var_scaled", SKEWED, "SELECT kind, VAR_POP(amount) FROM visits GROUP BY kind", group("a"), EPSILON),
    Case("auto_var_pop", SKEWED, "SELECT kind, VAR_POP(amount) FROM visits GROUP BY kind", group("a"), AUTO),
    # A quantile's histogram is clamped too (auto_bounds.columns: its value is profiled as q{j}):
    # the target's large values move the clamp, and so the range the median's bins cover.
    Case("auto_median", SKEWED, "SELECT kind, MEDIAN(amount) FROM visits GROUP BY kind", group("a"), AUTO),
    # Without keys a unit's shares are not scaled over groups: under the total bound the choice
    # makes (C = 1 for a quantile), the histogram's cells are fixed point (sql/analyze.py, cell_bits).
    Case("auto_median_scalar", SKEWED, "SELECT MEDIAN(amount) FROM visits", scalar, AUTO),
    # A WHERE on the summed column narrows its range before the choice (sql/ranges.py), to
    # [0.5, 50] here; the target (twenty rows at twenty times the bound) moves the profile, and so
    # the total bound and the clamp chosen within that range.
    Case(
        "auto_avg_filtered",
        SKEWED,
        "SELECT kind, AVG(amount) FROM visits WHERE amount >= 0.5 GROUP BY kind",
        group("a"),
        AUTO,
    ),
    # Undeclared keys under chosen limits, at a large delta so that selection releases the groups
    # often: the value of the background's group, and how many groups are released (the
    # target's own are the only others: which it keeps, of min(C, 2), is up to the hash).
    Case(
        "auto_undeclared_sum",
        SKEWED_UNDECLARED,
        "SELECT kind, SUM(amount) FROM visits GROUP BY kind",
        group("a"),
        {**AUTO, "dpsql.delta": "0.05"},
    ),
    Case(
        "auto_undeclared_selection",
        SKEWED_UNDECLARED,
        "SELECT kind, COUNT(*) FROM visits GROUP BY kind",
        groups_released,
        {**AUTO, "dpsql.delta": "0.05"},
    ),
    # A per-unit subquery under chosen limits (auto_bounds.eligible): the derived table has one row
    # per person, its total clamped to R = 6 rows' worth, [0, 300]; the background's totals are 1,
    # the target's 20 x 1000 clamped to 300, alone in the profile's top octave, so it moves the
    # clamp of the totals chosen from the profile and the outer SUM's sensitivity with it.
    Case(
        "auto_per_unit_sum",
        SKEWED,
        "SELECT SUM(t) FROM (SELECT pid, SUM(amount) AS t FROM visits GROUP BY pid) s",
        scalar,
        AUTO,
        runs=2000,
    ),
    Case(
        "auto_per_unit_avg",
        SKEWED,
        "SELECT AVG(t) FROM (SELECT pid, SUM(amount) AS t FROM visits GROUP BY pid) s",
        scalar,
        AUTO,
        runs=2000,
    ),
    # A per-unit count summed by the outer query (auto_bounds.unit_count): the target's twenty
    # visits, past the cap R = 6, are alone in the profile's bins above it (profiled up to the
    # reach, 24) and move E = Σ min(n, reach) - min(n, R) by 14 of its sensitivity 18, so the
    # factor the sum is scaled by, and the choice of correcting at all and of the reach.
    Case(
        "auto_per_unit_count",
        SKEWED,
        "SELECT SUM(n) FROM (SELECT pid, COUNT(*) AS n FROM visits GROUP BY pid) s",
        scalar,
        AUTO,
        runs=2000,
    ),
    # A count under chosen limits is corrected for truncation: the target (twenty rows) moves the
    # chosen total bound, the rows it keeps and those it cuts, and so the factor every group is
    # scaled by; all three are in the charge.
    Case("auto_count_by_kind", SKEWED, "SELECT kind, COUNT(*) FROM visits GROUP BY kind", group("a"), AUTO),
    # The correction's reach is chosen from the profile too (auto_choice.reaches): under a filter
    # the background has one row each, so without the target a reach just above the chosen bound
    # is best, and with it (twenty rows, past the policy's six) the widest; E is noised for the
    # reach chosen, so D and D' are corrected at different sensitivities.
    Case(
        "auto_count_reach",
        SKEWED,
        "SELECT kind, COUNT(*) FROM visits WHERE kind <> 'c' GROUP BY kind",
        group("a"),
        AUTO,
    ),
    # A profile released before is reused (session/auto.piece_keys): the first query (an AVG at
    # epsilon 2) releases the rows' and the amounts' histograms, which the target moves; the SUM
    # at epsilon 1 then reuses both free (kept at twice its own share: auto_bounds.fresh) and is
    # charged its release only, 0.9. Its answer depends on D through the first query's profile:
    # the run's charge (2 + 0.9) covers both; what the SUM's answer spends is 0.2 + 0.9.
    Case(
        "auto_reuse",
        SKEWED,
        "SELECT SUM(amount) FROM visits",
        scalar,
        AUTO,
        before=("SET dpsql.epsilon = 2", "SELECT AVG(amount) FROM visits", "SET dpsql.epsilon = 1"),
    ),
    # The same at one epsilon: the SUM releases both histograms again and combines them with the
    # AVG's (auto_bounds.combined); charged 1 + 1.
    Case(
        "auto_reuse_combined",
        SKEWED,
        "SELECT SUM(amount) FROM visits",
        scalar,
        AUTO,
        before=("SELECT AVG(amount) FROM visits",),
    ),
    # Aggregates under FILTER read only the rows their condition keeps, and the others are dropped
    # before bounding (sql/reads.py): the background's visits (amount 1) are never read, so the
    # profile, the total bound's weights and the release see the target's twenty visits alone in D
    # and no row at all in D'.
    Case(
        "auto_filter_count",
        SKEWED,
        "SELECT kind, COUNT(*) FILTER (WHERE amount > 10) FROM visits GROUP BY kind",
        group("a"),
        AUTO,
    ),
    # A small population's value histogram released again (auto_bounds.extra) from the release's one
    # part, charged before the profile: whether and how much is spent again moves with the profile.
    Case("auto_small_again", SMALL_EDGE, "SELECT SUM(amount) FROM visits", scalar, AUTO, runs=1000),
    # People per group under auto: the policy's limits, corrected for the groups max_groups cuts
    # (the target is in all three kinds, two allowed).
    Case("auto_units_by_kind", SKEWED, "SELECT kind, COUNT(DISTINCT pid) FROM visits GROUP BY kind", group("a"), AUTO),
    # A synopsis: one charge of epsilon 1 for its marginals of both measures; each run publishes
    # it again (about ten times slower per run than a query: full audit only).
    Case(
        "synopsis_count",
        SYNOPSIS,
        "SELECT sex, COUNT(*) FROM people GROUP BY sex",
        group("F"),
        runs=1500,
        publish="audit",
    ),
    Case("synopsis_sum", SYNOPSIS, "SELECT SUM(income) FROM people", scalar, runs=1500, publish="audit"),
    Case(
        "synopsis_joined",
        JOINED_SYNOPSIS,
        "SELECT p.sex, COUNT(*) FROM visits v JOIN people p ON v.pid = p.pid GROUP BY p.sex",
        group("F"),
        runs=1500,
        publish="audit_joined",
    ),
    Case(
        "synopsis_gaussian",
        GAUSSIAN_SYNOPSIS,
        "SELECT sex, COUNT(*) FROM people GROUP BY sex",
        group("F"),
        runs=1500,
        publish="audit_gaussian",
    ),
    Case(
        "synopsis_hierarchy",
        AGES,
        "SELECT COUNT(*) FROM people WHERE age >= 32 AND age < 64",
        scalar,
        runs=1500,
        publish="audit_ages",
    ),
)

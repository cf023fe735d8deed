"""Partition selection by release odds (guarantee/selection.py): the table is private by its
exact check and never releases a group less often than the discrete Laplace threshold it
replaces; the vector of OpenDP bits is as long as the groups and aligned with them, end to end.

False-positive rates: every statistical assertion fails with probability below 1e-6 (stated at
each)."""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from pathlib import Path

import duckdb
import numpy as np
import pytest

import dpsql
from dpsql.guarantee.mechanisms import PARALLEL_DRAWS, selection_threshold
from dpsql.guarantee.selection import ODDS_LIMIT, odds_private, release_odds, select

SETTINGS = [
    (Fraction(1, 2), Fraction(1, 10**5)),
    (Fraction(1, 20), Fraction(1, 10**7)),
    (Fraction(3), Fraction(1, 3)),
    (Fraction(50), Fraction(1, 10**9)),
    (Fraction(1, 100), Fraction(1, 10**6)),
]


def _laplace_release(units: int, epsilon: Fraction, delta: Fraction) -> float:
    """P(units + Z >= tau) for the discrete Laplace threshold at scale 1/epsilon."""
    b = float(1 / epsilon)
    tau = selection_threshold(b, delta)
    k = tau - units  # released iff Z >= k
    r = math.exp(-1 / b)
    return r**k / (1 + r) if k >= 1 else 1 - r ** (1 - k) / (1 + r)


@pytest.mark.parametrize("epsilon,delta", SETTINGS)
def test_odds_are_private_monotone_and_release_at_least_as_often_as_laplace(epsilon, delta):
    odds = release_odds(epsilon, delta)
    assert odds is not None and odds_private(odds)
    q = [odds.probability(c) for c in range(0, odds.certain + 2)]
    assert q[0] == 0 and 0 < q[1] <= delta and q[odds.certain] == 1
    assert all(a <= b for a, b in zip(q, q[1:]))
    e = Fraction(math.exp(float(epsilon)))  # e^epsilon to a float's precision
    for a, b in zip(q, q[1:]):  # the inequalities of a step, once more, exactly
        assert b <= e * a + delta and 1 - a <= e * (1 - b) + delta
    for c in range(1, odds.certain + 2):
        assert float(q[c]) >= _laplace_release(c, epsilon, delta) * (1 - 1e-8), c
    assert odds.even <= odds.certain and odds.probability(odds.even) >= Fraction(1, 2)


def test_odds_edited_or_beyond_their_limit_fail():
    odds = release_odds(Fraction(1, 2), Fraction(1, 10**5))
    flips = list(odds.flips)
    flips[0] *= 2  # a one-unit group released with twice delta
    assert not odds_private(dataclasses.replace(odds, flips=tuple(flips)))
    assert not odds_private(dataclasses.replace(odds, flips=odds.flips[:-3], ones=odds.ones[:-3]))  # certain too soon
    assert not odds_private(dataclasses.replace(odds, ones=odds.ones[:-1]))
    assert not odds_private(dataclasses.replace(odds, delta=odds.delta / 2))
    assert not odds_private(dataclasses.replace(odds, epsilon=odds.epsilon / 2))
    # an epsilon per group so small that more than ODDS_LIMIT counts are uncertain: the Laplace fallback
    assert release_odds(Fraction(2, ODDS_LIMIT) / 100, Fraction(1, 10**6)) is None
    assert release_odds(Fraction(1), Fraction(0)) is None


def _low_and_high(odds, tail):
    """A count released with probability <= tail and one with probability >= 1 - tail."""
    low = next(c for c in range(1, odds.certain) if odds.probability(c) <= tail)
    high = next(c for c in range(odds.certain - 1, 0, -1) if 1 - odds.probability(c) <= tail)
    return low, high


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 2 * PARALLEL_DRAWS + 3])
def test_selection_has_one_decision_per_group_aligned_with_its_count(n):
    """Counts almost never released, almost always released and certain, shuffled: the decisions
    match them one for one (bits drawn per count, and in parts, land on their own groups).
    False positive: at most 3n decisions of probability <= 1e-12 each (n <= 8195): < 1e-7."""
    odds = release_odds(Fraction(1, 2), Fraction(1, 10**12))
    low, high = _low_and_high(odds, Fraction(1, 10**12))
    rng = np.random.default_rng(n)
    counts = rng.permutation(np.repeat([low, high, odds.certain + 4], n))[: 3 * n if n else 0]
    kept = select(counts.tolist(), odds)
    assert kept.shape == (len(counts),) and kept.dtype == bool
    assert (kept == (counts >= high)).all()
    # two uncertain counts, each drawn in parts on two cores where long enough
    big = np.repeat([low, high], 2 * PARALLEL_DRAWS + 5)
    assert (select(big.tolist(), odds) == (big >= high)).all()


def test_selection_draws_each_uncertain_group_at_its_probability():
    """A count near even odds over 200,003 groups (not a whole number of bytes): its release rate
    and each half's are within Hoeffding's bound at 1e-7 each of its exact probability."""
    odds = release_odds(Fraction(1, 2), Fraction(1, 10**5))
    c = odds.even
    p = float(odds.probability(c))
    n = 200_003
    kept = select([c] * n, odds)
    for part in (kept, kept[: n // 2], kept[n // 2 :]):
        t = math.sqrt(math.log(2e7) / (2 * len(part)))
        assert abs(part.mean() - p) <= t, (part.mean(), p)


def test_groups_asked_a_few_at_a_time_are_drawn_at_their_probability():
    """Small requests come from a pool of OpenDP bits: 30,000 requests of one to three groups of
    a count near even odds and one near 1e-12 (never pooled into each other): the rates are
    within Hoeffding's bound at 1e-7, and the rare count is never released (3e-8)."""
    odds = release_odds(Fraction(1, 2), Fraction(1, 10**12))
    c = odds.even
    p = float(odds.probability(c))
    low, _ = _low_and_high(odds, Fraction(1, 10**12))
    kept = []
    for _ in range(10_000):
        for k in (1, 2, 3):
            out = select([low] + [c] * k, odds)
            assert not out[0]
            kept.extend(out[1:].tolist())
    t = math.sqrt(math.log(2e7) / (2 * len(kept)))
    assert abs(np.mean(kept) - p) <= t


def test_released_keys_carry_their_own_counts(tmp_path):
    """End to end on DuckDB: groups from 1 unit to well past `certain`, shuffled in the table;
    every group with at least `certain` units is released with its own count (noise at this
    epsilon is 0 with probability 1 - 1e-100), none with 1 unit (each at most delta / 2 = 5e-10:
    false positive < 1e-7)."""
    db = tmp_path / "k.duckdb"
    con = duckdb.connect(str(db))
    con.execute(
        "CREATE TABLE t AS SELECT pid, 'k' || CAST(g AS VARCHAR) AS key FROM "
        "(SELECT range AS pid, CASE WHEN range < 200 THEN 1000 + range ELSE (range - 200) % 40 END AS g "
        "FROM range(200 + 40 * 30)) ORDER BY hash(pid)"
    )
    truth = dict(con.execute("SELECT key, COUNT(*) FROM t GROUP BY key").fetchall())
    con.close()
    policy = tmp_path / "p.toml"
    policy.write_text(
        f'[engine]\ndatabase = "{db.name}"\n[privacy]\nepsilon = 100000\ndelta = 1e-5\nbounds = "policy"\n'
        '[tables.t]\nprivacy_unit = "pid"\n[users.a]\n'
    )
    conn = dpsql.connect(policy, user="a", ledger=tmp_path / "l.sqlite")
    cur = conn.cursor()
    cur.execute("SET dpsql.epsilon = 1000")
    cur.execute("SET dpsql.delta = 1e-9")
    cur.execute("SELECT key, COUNT(*) FROM t GROUP BY key")
    released = dict(cur.fetchall())
    conn.close()
    assert all(truth[k] == 30 for k in released)  # keys and counts aligned; no one-unit group
    assert len(released) == 40


def test_explain_and_console_describe_the_odds_and_the_fallback(tmp_path):
    """EXPLAIN states the odds (even from, certain from) or, at an epsilon per group too small for
    them, the Laplace threshold; the console's page says the same in words."""
    from jinja2 import Environment, FileSystemLoader

    from dpsql.console import charts
    from dpsql.sql.classify import classify

    db = tmp_path / "k.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE t AS SELECT range AS pid, 'k' || CAST(range % 7 AS VARCHAR) AS key FROM range(100)")
    con.close()
    policy = tmp_path / "p.toml"
    policy.write_text(
        f'[engine]\ndatabase = "{db.name}"\n[privacy]\nepsilon = 100\ndelta = 1e-5\nbounds = "policy"\n'
        '[tables.t]\nprivacy_unit = "pid"\n[users.a]\n'
    )
    conn = dpsql.connect(policy, user="a", ledger=tmp_path / "l.sqlite")
    cur = conn.cursor()
    infos = []
    for eps, expected in (("1", "even from 30 units, always from 60"), ("0.0001", "noisy unit count (laplace scale")):
        cur.execute(f"SET dpsql.epsilon = {eps}")
        cur.execute("EXPLAIN SELECT key, COUNT(*) FROM t GROUP BY key")
        text = "\n".join(str(r[0]) for r in cur.fetchall())
        assert expected in text, text
        infos.append(conn.session.explain_plan(classify("SELECT key, COUNT(*) FROM t GROUP BY key").tree))
    conn.close()
    env = Environment(loader=FileSystemLoader(Path(dpsql.__file__).parent / "console" / "templates"))
    env.filters["number"] = charts.number
    template = env.get_template("explain_info.html")
    odds, laplace = (template.render(info=info) for info in infos)
    assert "even from 30, certain from 60" in odds
    assert "only when their noisy count of people reaches" in laplace

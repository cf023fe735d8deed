"""Filters admit exactly what their conditions allow (DESIGN §5), with exact running sums."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from fractions import Fraction

import pytest

from dpsql.accounting.cost import Cost, Part
from dpsql.accounting.filters import Totals, make_filter, simulate
from dpsql.accounting.zcdp import epsilon_from_rho

EXPECTED = {  # (1.0, 1e-6) budget, Laplace queries of 0.001 / 0.01 / 0.1
    "basic": (1000, 100, 10),
    "advanced": (14799, 147, 1),
    "whitehouse": (34937, 349, 3),
    "zcdp": (48711, 487, 4),
}


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_budget_simulate_reproduces_the_literature(kind):
    got = []
    for eps in ("0.001", "0.01", "0.1"):
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "dpsql.cli",
                "budget",
                "simulate",
                "--filter",
                kind,
                "--epsilon",
                "1",
                "--delta",
                "1e-6",
                "--query-epsilon",
                eps,
                "--json",
                "--delta-reserve",
                "0",
            ],  # the literature keeps all of delta for the filter
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        got.append(json.loads(out.stdout)["queries"])
    assert tuple(got) == EXPECTED[kind]


def test_filters_stop_at_the_boundary_one_by_one():
    """Charging one query at a time admits exactly the simulated number (no float drift)."""
    for kind, expected in (("basic", 1000), ("zcdp", 48711), ("whitehouse", 34937), ("advanced", 14799)):
        f = make_filter(kind, Fraction(1), Fraction(1, 10**6))
        cost = Cost.pure(Fraction(1, 1000))
        inc = f.usage(cost)
        totals = Totals()
        n = 0
        while f.admits(totals.plus(inc)):
            totals = totals.plus(inc)
            n += 1
            if kind in ("zcdp", "whitehouse", "advanced") and n == 1:
                # jump close to the boundary, then walk exactly (the walk is what is tested)
                totals = Totals({k: v * (expected - 5) for k, v in inc.items()}, expected - 5)
                n = expected - 5
        assert n == expected, kind


def test_rdp_and_gdp():
    rdp = make_filter("rdp", Fraction(1), Fraction(1, 10**6))
    assert rdp.rdp_order == 29
    assert simulate(rdp, Cost.pure(Fraction(1, 100))) == 354  # discrete Laplace: randomized response's RDP
    gdp = make_filter("gdp", Fraction(1), Fraction(1, 10**6))
    assert simulate(gdp, Cost.pure(Fraction(1, 100))) == 356  # Laplace through its mu(epsilon)-GDP
    rho = Fraction(1, 2 * 100**2)  # sigma = 100, sensitivity 1
    gauss = Cost.of([Part("gaussian", Fraction(1, 100), Fraction(1, 10**8), rho=rho, noise_multiplier=100.0)])
    n = simulate(gdp, gauss)
    mu = gdp.mu
    assert n == int(mu**2 / (1 / 100**2)) or n == int(mu**2 / (1 / 100**2)) - 1


def test_zcdp_budget_is_the_optimal_conversion():
    f = make_filter("zcdp", Fraction(1), Fraction(1, 10**6))
    assert epsilon_from_rho(float(f.rho), 1e-6) <= 1.0
    assert epsilon_from_rho(float(f.rho) * 1.001, 1e-6) > 1.0


def _connect_with_filter(small_policy, tmp_path, kind: str):
    """A connection whose budget is (1, delta) under the filter `kind`, 0.1 per query."""
    import dpsql

    policy = small_policy.parent / f"{kind}.toml"
    policy.write_text(
        small_policy.read_text()
        .replace('filter = "basic"', f'filter = "{kind}"')
        .replace("epsilon = 1000.0", "epsilon = 1.0")
        .replace("query_epsilon = 1.0", "query_epsilon = 0.1")
    )
    return dpsql.connect(policy, user="alice", ledger=tmp_path / f"{kind}.sqlite")


def test_a_halting_filter_refuses_with_its_numbers(small_policy, tmp_path):
    import dpsql

    conn = _connect_with_filter(small_policy, tmp_path, "zcdp")
    cur = conn.cursor()
    cur.execute("SET dpsql.cache = off")
    answered = 0
    with pytest.raises(dpsql.BudgetExceeded) as info:
        for _ in range(100):
            cur.execute("SELECT COUNT(*) FROM people")
            answered += 1
    assert answered == 4  # as simulate says for 0.1 under (1, 1e-6)
    assert "zcdp filter" in str(info.value) and "rho=" in str(info.value)
    conn.close()


def test_grant_and_history(small_policy, tmp_path):
    led = tmp_path / "g.sqlite"
    base = [sys.executable, "-m", "dpsql.cli"]
    common = ["--policy", str(small_policy), "--ledger", str(led)]
    q = subprocess.run(
        base + ["query", *common, "--user", "bob", "SELECT COUNT(*) FROM people"], capture_output=True, text=True
    )
    assert q.returncode == 0, q.stderr
    g = subprocess.run(base + ["budget", "grant", *common, "bob", "--epsilon", "0.5"], capture_output=True, text=True)
    assert g.returncode == 0 and "granted epsilon=0.5" in g.stdout, g.stderr
    s = subprocess.run(base + ["budget", "show", *common, "bob", "--json"], capture_output=True, text=True)
    b = json.loads(s.stdout)[0]
    assert b["epsilon"]["total"] == 2.5 and b["epsilon"]["spent"] == 1.0
    s = subprocess.run(base + ["budget", "show", *common, "bob"], capture_output=True, text=True)
    assert s.stdout.rstrip().endswith(", 1 query"), s.stdout
    h = subprocess.run(base + ["budget", "history", *common, "bob"], capture_output=True, text=True)
    assert "SELECT COUNT(*) FROM people" in h.stdout and "[released]" in h.stdout and "(1 release)" in h.stdout


def test_global_filter_bounds_all_analysts_together(small_policy, tmp_path):
    import dpsql

    policy = small_policy.parent / "global.toml"
    text = small_policy.read_text().replace("query_epsilon = 1.0", "query_epsilon = 0.1")
    text = text.replace("[tables.people]", "[privacy.global]\nepsilon = 0.3\n\n[tables.people]")
    policy.write_text(text)
    a = dpsql.connect(policy, user="alice", ledger=tmp_path / "g.sqlite").cursor()
    b = dpsql.connect(policy, user="bob", ledger=tmp_path / "g.sqlite").cursor()
    a.execute("SELECT COUNT(*) FROM people")
    b.execute("SELECT COUNT(*) FROM people")
    a.execute("SELECT COUNT(*) FROM events")
    with pytest.raises(dpsql.BudgetExceeded) as info:
        b.execute("SELECT COUNT(*) FROM events")
    assert "global budget shared by all analysts" in str(info.value)
    assert b.connection.session.budget()["queries"] == 1  # bob's own budget was not charged either


@pytest.mark.parametrize("eps", ["0.000001", "0.001", "0.01", "0.1", "0.5", "1", "2", "5", "20"])
def test_gdp_mu_of_a_pure_release_is_an_upper_bound(eps):
    """mu(eps) = -2 Phi^-1(1 / (1 + e^eps)) (Dong, Roth, Su), rounded up by at most 1e-9."""
    from scipy.special import erfinv, ndtri

    from dpsql.accounting.filters import gdp_mu

    e = float(eps)
    # mu = 2 sqrt(2) erfinv(tanh(eps / 2)): the same, without losing digits near 1/2 for small eps
    exact = 2 * math.sqrt(2) * erfinv(math.tanh(e / 2)) if e < 1 else -2 * ndtri(1 / (1 + math.exp(e)))
    got = float(gdp_mu(Fraction(eps)))
    assert exact * (1 - 1e-10) <= got <= exact * (1 + 1e-9)


@pytest.mark.parametrize("query_eps, budget_eps", [("0.01", 1.0), ("0.1", 1.0), ("0.05", 2.0)])
def test_gdp_admits_laplace_within_the_exact_composition(query_eps, budget_eps):
    """However many Laplace releases the GDP filter admits, their composition is within the
    budget: k releases of eps0-DP are dominated by k randomized responses at eps0 (Kairouz, Oh,
    Viswanath), whose delta at the budget's epsilon is computed exactly here."""
    from .test_findings import _rr_delta

    gdp = make_filter("gdp", Fraction(budget_eps), Fraction(1, 10**6))
    k = simulate(gdp, Cost.pure(Fraction(query_eps)))
    assert k > 0
    assert _rr_delta(k, float(query_eps), budget_eps) <= 1e-6


def test_gdp_filter_answers_laplace_and_refuses_partition_selection_with_the_reason(small_policy, tmp_path):
    import dpsql

    conn = _connect_with_filter(small_policy, tmp_path, "gdp")
    cur = conn.cursor()
    cur.execute("SET dpsql.epsilon = 0.05")
    cur.execute("SELECT sex, COUNT(*) FROM people GROUP BY sex")  # Laplace over declared keys: admitted
    assert cur.fetchall() and cur.dp["cost"]["epsilon"] == 0.05
    before = conn.session.budget()
    with pytest.raises(dpsql.Error) as e:
        cur.execute("SELECT city, COUNT(*) FROM people GROUP BY city")  # partition selection: delta > 0
    assert "Gaussian DP (gdp) filter" in str(e.value) and "declare the group keys" in e.value.hint
    assert conn.session.budget() == before
    conn.close()


MIXED_COSTS = [
    Cost.pure(Fraction(1, 10)),
    Cost.of([Part("gaussian", Fraction(3, 10), Fraction(1, 10**8), rho=Fraction(1, 50))]),
    Cost.of([Part("laplace", Fraction(1, 20)), Part("selection", Fraction(1, 20), Fraction(1, 10**9))]),
    Cost.of([Part("approx", Fraction(1, 5), Fraction(1, 10**8))]),
]


@pytest.mark.parametrize("kind", ["basic", "advanced", "whitehouse", "zcdp", "rdp", "gdp"])
def test_admits_cost_from_the_totals_a_filter_reads_agrees_with_every_total(kind):
    """`admits_cost` adds up only the filter's `reads`: it must decide exactly as the whole usage
    does, at every point of a budget's life (up to and past its end), for every kind of part; and
    `usage` keeps every total the ledger stores."""
    from dpsql.accounting.filters import USAGE_KEYS

    f = make_filter(kind, Fraction(2), Fraction(1, 10**5), reserve=Fraction(0 if kind == "basic" else 1, 10**6))
    decisions = set()
    for cost in MIXED_COSTS:
        assert set(f.usage(cost)) == set(USAGE_KEYS)
        totals = Totals()
        for _ in range(60):
            expected = f.admits(totals.plus(f.usage(cost)))
            assert f.admits_cost(totals, cost) == expected
            decisions.add(expected)
            for probe in (Fraction(1, 1000), Fraction(1, 3), Fraction(3, 2)):
                assert f.admits_cost(totals, Cost.pure(probe)) == f.admits(totals.plus(f.usage(Cost.pure(probe))))
            totals = totals.plus(f.usage(cost))
    assert decisions == {True, False}  # both sides of the boundary were checked


def test_plus_keeps_every_key_and_exact_sums():
    """A zero increment leaves a total as it was (and creates it at zero), as adding it did."""
    f = make_filter("zcdp", Fraction(1), Fraction(1, 10**6), reserve=Fraction(1, 10**7))
    cost = Cost.pure(Fraction(1, 10))
    totals = Totals()
    for _ in range(7):
        totals = totals.plus(f.usage(cost))
    assert set(totals.sums) == set(f.usage(cost))
    assert totals.epsilon == Fraction(7, 10) and totals.get("rho") == 7 * Fraction(1, 200)
    assert totals.delta == 0 and totals.get("non_gaussian") == 0 and totals.queries == 7


def test_a_budgets_constants_are_computed_once(monkeypatch):
    """`remaining` asks `admits` some fifty times per answer: the zcdp filter's ρ_g (a bisection)
    is computed once per budget, not per question; and a huge budget's `remaining` needs no
    e^ε of the probe (which overflowed 60-digit arithmetic) when the filter does not read it."""
    import dpsql.accounting.filters as filters

    calls = []
    real = filters.rho_from_epsilon
    monkeypatch.setattr(filters, "rho_from_epsilon", lambda e, d: calls.append(e) or real(e, d))
    f = make_filter("zcdp", Fraction(7, 3), Fraction(1, 10**6), reserve=Fraction(1, 10**7))
    totals = Totals().plus(f.usage(Cost.pure(Fraction(1, 10))))
    for _ in range(3):
        left = f.remaining(totals)
    assert len(calls) == 1 and 0 < left["epsilon"] < Fraction(7, 3)
    huge = make_filter("zcdp", Fraction(10**12), Fraction(1, 10**6), reserve=Fraction(1, 10**7))
    assert huge.remaining(Totals())["epsilon"] > 10**6


REMAINING_FILTERS = [
    ("advanced", {}),
    ("whitehouse", {"reserve": Fraction(1, 10**7)}),
    ("zcdp", {"reserve": Fraction(1, 10**7)}),
    ("rdp", {"reserve": Fraction(1, 10**7), "rdp_order": Fraction(8)}),
    ("rdp", {"reserve": Fraction(1, 10**7), "rdp_order": Fraction(2000)}),
    ("gdp", {}),
]


@pytest.mark.parametrize("kind,extra", REMAINING_FILTERS)
@pytest.mark.parametrize("budget", [Fraction(1, 3), Fraction(10), Fraction(600)])
def test_remaining_on_floats_is_admitted_and_as_tight_as_the_exact_bisection(kind, extra, budget):
    """`remaining` bisects a float form of the filter's admission, then checks it exactly: at
    every point of a budget's life it is admitted in exact arithmetic, within 1e-9 of what the
    exact bisection finds, and 1e-9 of it and 2^-40 of the budget more is refused."""
    from dpsql.accounting.filters import _bisect

    f = make_filter(kind, budget, Fraction(1, 10**6), **extra)
    assert f._probe(Totals()) is not None  # the float form is what is tested here
    totals, seen = Totals(), 0
    for _ in range(40):
        left = f.remaining(totals)["epsilon"]
        exact = Fraction(_bisect(lambda x: f.admits_cost(totals, Cost.pure(Fraction(x))), float(budget)))
        assert abs(left - exact) <= exact * Fraction(1, 10**9)
        if left:
            seen += 1
            assert f.admits_cost(totals, Cost.pure(left))
            more = left * (1 + Fraction(1, 10**9)) + budget / 2**40
            if more < budget:
                assert not f.admits_cost(totals, Cost.pure(more))
        totals = totals.plus(f.usage(Cost.pure(budget / 12)))
    assert f.remaining(totals)["epsilon"] == 0  # the budget's end was checked, and its start:
    assert seen or budget < 1  # (a third of an epsilon is all spent on rdp's and gdp's delta)


def test_remaining_checks_the_float_search_exactly(monkeypatch):
    """A float form that admits everything (a wrong one) must not make `remaining` tell more
    than the filter admits: its answer is checked exactly, and bisected exactly when refused;
    one that raises (out of its domain) must not fail the answer."""
    from dpsql.accounting.filters import AdvancedFilter

    f = make_filter("advanced", Fraction(10), Fraction(1, 10**6))
    totals = Totals().plus(f.usage(Cost.pure(Fraction(1, 2))))
    honest = f.remaining(totals)["epsilon"]
    assert 0 < honest < 10
    monkeypatch.setattr(AdvancedFilter, "_probe", lambda self, totals: lambda x: True)
    told = f.remaining(totals)["epsilon"]
    assert told == honest and f.admits_cost(totals, Cost.pure(told))
    monkeypatch.setattr(AdvancedFilter, "_probe", lambda self, totals: lambda x: math.sqrt(-x) < 1)
    assert f.remaining(totals)["epsilon"] == honest  # a float form that fails: the exact search


def test_a_costs_kept_hash_is_its_values():
    """Cost keeps its hash (the filters' caches key on it every charge): equal costs built apart,
    a copy through pickle (a worker's charge crossing to its supervisor) and one read back from
    the ledger's JSON hash alike and find one cache entry; a different cost is another key."""
    import pickle

    from dpsql.accounting.filters import usage

    a = Cost.of(
        [
            Part("laplace", Fraction(1, 10), rho=Fraction(1, 200)),
            Part("gaussian", Fraction(1, 3), Fraction(1, 10**9), Fraction(1, 7)),
        ]
    )
    b = Cost.of(
        [
            Part("laplace", Fraction(1, 10), rho=Fraction(1, 200)),
            Part("gaussian", Fraction(1, 3), Fraction(1, 10**9), Fraction(1, 7)),
        ]
    )
    hash(a)
    copies = [b, pickle.loads(pickle.dumps(a)), Cost.from_json(a.to_json())]
    assert all(c == a and hash(c) == hash(a) for c in copies)
    assert {a: "kept"}[copies[1]] == "kept" and len({a, *copies}) == 1
    other = Cost.of([Part("laplace", Fraction(1, 10), rho=Fraction(1, 200))])
    assert other != a and {a: 1, other: 2}[Cost.of(list(other.parts))] == 2
    assert usage(a) == usage(copies[1]) == usage(copies[2])
    # pickled by another process, whose strings hash otherwise (its hash computed and kept there)
    child = (
        "import pickle, sys; from fractions import Fraction; from dpsql.accounting.cost import Cost, Part; "
        "c = Cost.of([Part('laplace', Fraction(1, 10), rho=Fraction(1, 200))]); hash(c); "
        "sys.stdout.write(pickle.dumps(c).hex())"
    )
    out = subprocess.run(
        [sys.executable, "-c", child],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "1"},
    )
    crossed = pickle.loads(bytes.fromhex(out.stdout))
    assert crossed == other and hash(crossed) == hash(other) and {other: "kept"}[crossed] == "kept"

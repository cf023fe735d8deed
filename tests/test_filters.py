"""Filters admit exactly what their conditions allow (DESIGN §5), with exact running sums."""

from __future__ import annotations

import json
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
        out = subprocess.run([sys.executable, "-m", "dpsql.cli", "budget", "simulate", "--filter", kind,
                              "--epsilon", "1", "--delta", "1e-6", "--query-epsilon", eps, "--json",
                              "--delta-reserve", "0"],  # the literature keeps all of delta for the filter
                             capture_output=True, text=True, timeout=60)
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
    assert simulate(gdp, Cost.pure(Fraction(1, 100))) == 0  # Laplace is not Gaussian-DP
    rho = Fraction(1, 2 * 100**2)  # sigma = 100, sensitivity 1
    gauss = Cost.of([Part("gaussian", Fraction(1, 100), Fraction(1, 10**8), rho=rho, noise_multiplier=100.0)])
    n = simulate(gdp, gauss)
    mu = gdp.mu
    assert n == int(mu**2 / (1 / 100**2)) or n == int(mu**2 / (1 / 100**2)) - 1


def test_zcdp_budget_is_the_optimal_conversion():
    f = make_filter("zcdp", Fraction(1), Fraction(1, 10**6))
    assert epsilon_from_rho(float(f.rho), 1e-6) <= 1.0
    assert epsilon_from_rho(float(f.rho) * 1.001, 1e-6) > 1.0


def test_a_halting_filter_refuses_with_its_numbers(small_policy, tmp_path):
    import dpsql

    policy = small_policy.parent / "zcdp.toml"
    policy.write_text(small_policy.read_text().replace('filter = "basic"', 'filter = "zcdp"')
                      .replace("epsilon = 1000.0", "epsilon = 1.0").replace("query_epsilon = 1.0", "query_epsilon = 0.1"))
    conn = dpsql.connect(policy, user="alice", ledger=tmp_path / "z.sqlite")
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
    q = subprocess.run(base + ["query", *common, "--user", "bob", "SELECT COUNT(*) FROM people"], capture_output=True, text=True)
    assert q.returncode == 0, q.stderr
    g = subprocess.run(base + ["budget", "grant", *common, "bob", "--epsilon", "0.5"], capture_output=True, text=True)
    assert g.returncode == 0 and "granted epsilon=0.5" in g.stdout, g.stderr
    s = subprocess.run(base + ["budget", "show", *common, "bob", "--json"], capture_output=True, text=True)
    b = json.loads(s.stdout)[0]
    assert b["epsilon"]["total"] == 2.5 and b["epsilon"]["spent"] == 1.0
    h = subprocess.run(base + ["budget", "history", *common, "bob"], capture_output=True, text=True)
    assert "SELECT COUNT(*) FROM people" in h.stdout and "[released]" in h.stdout and "(1 releases)" in h.stdout


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

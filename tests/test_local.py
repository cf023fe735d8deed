"""Randomized-response releases (dpsql/local.py): one randomized row per person, charged once
at its epsilon, with debiased estimates whose mean and variance are checked against the closed
form at a false-positive rate of 1e-6 per test."""

from __future__ import annotations

import math
import subprocess
import sys
from fractions import Fraction

import duckdb
import pytest
from scipy.stats import chi2, norm

import dpsql
from dpsql import local
from dpsql.ledger import Ledger

from .conftest import make_db, write_policy

ALPHA = 1e-6


def _people(directory, n_f: int, n_m: int, extra: int = 0):
    """n_f persons F and n_m M (each with 1-3 rows of their own sex); `extra` persons with a
    NULL sex."""
    people = [(i, 30.0, "F", "Oslo") for i in range(n_f)] + [(n_f + i, 40.0, "M", "Rome") for i in range(n_m)]
    people += [(n_f + n_m + i, 50.0, None, "Lima") for i in range(extra)]
    make_db(directory / "db.duckdb", people, [])
    return write_policy(directory, epsilon=100000.0)


def _draws(conn, runs: int, **kw):
    return [conn.session.randomized_response("people", ["sex"], **kw) for _ in range(runs)]


def test_krr_estimates_are_unbiased_with_the_closed_form_variance(tmp_path):
    n_f, n_m, runs = 250, 150, 120
    conn = dpsql.connect(_people(tmp_path, n_f, n_m), user="alice", ledger=tmp_path / "l.sqlite")
    # epsilon_size large: the number of rows is almost always exact, so the closed form applies
    releases = _draws(conn, runs, epsilon=6, epsilon_size=5, method="krr")
    spec = releases[0].spec
    assert spec.k == 3 and spec.method == "krr"
    f = [r.estimates()[0]["estimate"] for r in releases]  # category F
    var = spec.variance(n_f + n_m, n_f)
    z = norm.ppf(1 - ALPHA / 2)
    mean = sum(f) / runs
    assert abs(mean - n_f) <= z * math.sqrt(var / runs) + 1.0, (mean, var)
    s2 = sum((x - mean) ** 2 for x in f) / (runs - 1)
    lo, hi = chi2.ppf(ALPHA / 2, runs - 1) / (runs - 1), chi2.ppf(1 - ALPHA / 2, runs - 1) / (runs - 1)
    assert lo * var <= s2 <= hi * var * 1.05, (s2, var)  # 5 %: the rare inexact row counts
    assert conn.session.budget()["epsilon"]["spent"] == 6 * runs  # each release charged once
    conn.close()


def test_oue_estimates_are_unbiased(tmp_path):
    conn = dpsql.connect(_people(tmp_path, 60, 40), user="alice", ledger=tmp_path / "l.sqlite")
    runs = 40
    releases = _draws(conn, runs, epsilon=3, epsilon_size=2, method="oue")
    spec = releases[0].spec
    assert spec.method == "oue" and spec.p_q[0] == 0.5
    z = norm.ppf(1 - ALPHA / 2)
    for i, truth in enumerate([60, 40, 0]):
        got = sum(r.estimates()[i]["estimate"] for r in releases) / runs
        assert abs(got - truth) <= z * math.sqrt(spec.variance(100, truth) / runs) + 1.0, (i, got)
    conn.close()


def test_the_coin_flip_example(tmp_path):
    """Truth with probability 1/2, else a fair coin: p = 3/4, q = 1/4 (epsilon ln 3 for the
    rows), and the debiased share is (observed share - 0.25) / 0.5."""
    conn = dpsql.connect(_people(tmp_path, 300, 100), user="alice", ledger=tmp_path / "l.sqlite")
    size = Fraction(1, 2)
    eps = Fraction(math.log(3)) + size
    rel = conn.session.randomized_response("people", ["sex"], eps, "krr", size, null_category=False)
    p, q = rel.spec.p_q
    assert rel.spec.k == 2 and abs(p - 0.75) < 1e-12 and abs(q - 0.25) < 1e-12
    est = rel.estimates()[0]
    n = len(rel.rows)
    assert abs(est["estimate"] / n - (est["observed"] / n - 0.25) / 0.5) < 1e-9
    conn.close()


def test_charged_once_refused_beyond_the_budget_and_free_when_refused(tmp_path):
    make_db(tmp_path / "db.duckdb", [(i, 30.0, "F", "Oslo") for i in range(20)], [])
    conn = dpsql.connect(write_policy(tmp_path, epsilon=1.0), user="alice", ledger=tmp_path / "l.sqlite")
    rel = conn.session.randomized_response("people", ["sex"], 0.5)
    assert rel.receipt > 0 and conn.session.budget()["epsilon"]["spent"] == Fraction(1, 2)
    with pytest.raises(dpsql.BudgetExceeded):
        conn.session.randomized_response("people", ["sex"], 0.6)
    with pytest.raises(dpsql.Error, match="no declared keys"):
        conn.session.randomized_response("people", ["city"], 0.1)
    with pytest.raises(dpsql.Error, match="not a private table"):
        conn.session.randomized_response("places", ["name"], 0.1)
    assert conn.session.budget()["epsilon"]["spent"] == Fraction(1, 2)
    history = conn.session.ledger.history("alice")
    assert [h["sql"] for h in history] == ["RANDOMIZED RESPONSE people (sex) [krr]"]
    conn.close()


def test_one_value_per_person_by_the_documented_rule():
    spec = local.spec("t", ["c"], [["a", "b", "c"]], Fraction(1))
    assert local.person_category([(("b",), 2), (("a",), 2), (("zz",), 5)], spec) == 0  # tie: key order
    assert local.person_category([(("c",), 3), (("a",), 1)], spec) == 2
    assert local.person_category([((None,), 4)], spec) == 3  # only undeclared values: the NULL category


def test_cli_writes_registers_and_the_rows_are_public(tmp_path):
    policy = _people(tmp_path, 30, 20, extra=5)
    out = tmp_path / "rr.parquet"
    run = [
        sys.executable,
        "-m",
        "dpsql.cli",
        "release",
        "-p",
        str(policy),
        "-U",
        "alice",
        "people",
        "sex",
        "--epsilon",
        "100",
        "--out",
        str(out),
        "--register",
        "people_rr",
    ]
    done = subprocess.run(run, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "released" in done.stdout and "registered" in done.stdout
    rows = duckdb.sql(f"SELECT COUNT(*), COUNT(DISTINCT sex) FROM '{out}'").fetchall()[0]
    # 55 persons; the noisy row count's discrete Laplace has scale 1/10 at epsilon_size = 10, so
    # fewer than 31 rows has probability about e^-250 (at --epsilon 1 it was about 4 %)
    assert rows[0] > 30 and rows[1] <= 2
    conn = dpsql.connect(policy, user="alice")  # the ledger beside the policy, as the CLI used
    spent = conn.session.budget()["epsilon"]["spent"]
    assert spent == 100
    cur = conn.cursor()
    cur.execute("SELECT sex, estimate, ci_low, ci_high FROM people_rr_estimates ORDER BY sex")
    assert len(cur.fetchall()) == 3
    cur.execute("SELECT * FROM people_rr LIMIT 3")  # row by row: public
    assert len(cur.fetchall()) == 3
    assert conn.session.budget()["epsilon"]["spent"] == spent  # free
    conn.close()
    again = subprocess.run(run, capture_output=True, text=True, timeout=120)  # the name is taken: refused, free
    assert again.returncode != 0 and "nothing was charged" in again.stderr and "Traceback" not in again.stderr
    assert Ledger(tmp_path / "policy.ledger.sqlite").verify() == []

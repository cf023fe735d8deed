"""PLD planning of batches: joint calibration, one charge, certified by an independent check."""

from __future__ import annotations

import subprocess
import sys

import pytest

import dpsql
from dpsql.accounting.pld import BatchMember, batch_epsilon, joint_multiplier, verify
from dpsql.sql.classify import classify

from .conftest import write_policy


def test_100_laplace_counts_at_1_and_1e_6():
    """Calibrated for OpenDP's discrete Laplace (randomized response at shift 1 dominates it): 0.418
    of the basic-composition scale; the continuous Laplace's PLD gave 0.415, under-charging."""
    mechs = [BatchMember("laplace")] * 100
    m = joint_multiplier(mechs, 1.0, 1e-6)
    assert abs(m - 41.844) / 41.844 < 1e-3
    assert m / 100 == pytest.approx(0.418, abs=5e-4)  # of the basic-composition scale 100
    assert verify(mechs, m, 1e-6) <= 1.0  # independent PLD accountant
    assert batch_epsilon(mechs, m * 0.99, 1e-6) > 1.0  # and it is the smallest such scale (within 1 %)


def test_batch_is_charged_once_and_noised_as_planned(small_policy, tmp_path):
    policy = write_policy(small_policy.parent, epsilon=1.0, query_epsilon=0.01)
    conn = dpsql.connect(policy, user="alice", ledger=tmp_path / "b.sqlite")
    cur = conn.cursor()
    sqls = [f"SELECT COUNT(*) FROM people WHERE age > {i}" for i in range(100)]
    rows = cur.execute_batch(sqls, epsilon=1.0, delta=1e-6)
    assert len(rows) == 100
    assert cur.dp["cost"] == {"epsilon": 1.0, "delta": 1e-6}
    assert abs(cur.dp["noise"][0]["scale"] - 41.844) / 41.844 < 1e-3
    budget = conn.session.budget()
    assert budget["queries"] == 1 and budget["epsilon"]["spent"] == 1
    n = 1
    while cur.nextset():
        n += 1
        assert cur.rowcount == 1
    assert n == 100
    conn.close()


def test_weights_give_less_noise(conn):
    cur = conn.cursor()
    cur.execute_batch(
        ["SELECT COUNT(*) FROM people", "SELECT COUNT(*) FROM events"], epsilon=1, delta=1e-6, weights=[4, 1]
    )
    first = cur.dp["noise"][0]["scale"]
    cur.nextset()
    second = cur.dp["noise"][0]["scale"]
    per_group_events = 3  # max_rows of events, per coordinate
    assert first * 4 == pytest.approx(second / per_group_events, rel=1e-9)


def test_tiny_delta_is_refused_and_free(conn):
    cur = conn.cursor()
    with pytest.raises(dpsql.ProgrammingError) as info:
        cur.execute_batch(["SELECT COUNT(*) FROM people"] * 3, epsilon=1, delta=1e-13)
    assert "1e-12" in str(info.value)
    assert conn.session.budget()["queries"] == 0


def test_selection_cannot_be_planned(conn):
    with pytest.raises(dpsql.ProgrammingError) as info:
        conn.cursor().execute_batch(["SELECT city, COUNT(*) FROM people GROUP BY city"], epsilon=1, delta=1e-6)
    assert "partition selection" in str(info.value)


def test_pld_planner_for_one_query(conn):
    cur = conn.cursor()
    cur.execute("SET dpsql.planner = 'pld'")
    cur.execute("SET dpsql.delta = 0")
    with pytest.raises(dpsql.ProgrammingError):
        cur.execute("SELECT COUNT(*), SUM(age) FROM people")
    cur.execute("SET dpsql.delta = 1e-6")
    cur.execute("SELECT COUNT(*), SUM(age), AVG(age) FROM people")
    assert cur.dp["cost"] == {"epsilon": 1.0, "delta": 1e-6}
    plan, cal = conn.session._prepare(classify("SELECT COUNT(*), SUM(age), AVG(age) FROM people").tree)
    multipliers = {round(mn.noise.scale / (mn.l1 or 1), 6) for mn in cal.measures}
    assert len(multipliers) == 1  # one common noise multiplier across the query's measures


def test_dpsql_plan_reports_the_saving(small_policy, tmp_path):
    f = tmp_path / "batch.sql"
    f.write_text(";\n".join(f"SELECT COUNT(*) FROM people WHERE age > {i}" for i in range(100)))
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "dpsql.cli",
            "plan",
            "--policy",
            str(small_policy),
            "--user",
            "alice",
            "--ledger",
            str(tmp_path / "p.sqlite"),
            "--epsilon",
            "1",
            "--delta",
            "1e-6",
            str(f),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "planned scales are 0.418 of the one-by-one scales" in out.stdout
    assert "each query would get epsilon=0.01" in out.stdout


def test_a_script_of_dp_queries_is_one_planned_batch(conn):
    session = conn.session
    session.execute("SET dpsql.delta = 1e-6")
    results = session.execute_script("SELECT COUNT(*) FROM people; SELECT sex, AVG(age) FROM people GROUP BY sex;")
    assert len(results) == 2 and results[1].status == "SELECT 2"
    assert session.budget()["queries"] == 1  # charged once
    assert results[0].dp["cost"] == {"epsilon": 1.0, "delta": 1e-6}
    mixed = session.execute_script("SET dpsql.epsilon = 0.5; SELECT COUNT(*) FROM people")
    assert [r.status for r in mixed] == ["SET", "SELECT 1"] and mixed[1].dp["cost"]["epsilon"] == 0.5
    with pytest.raises(dpsql.ProgrammingError):
        session.execute_script("SELECT COUNT(*) FROM people; COPY people TO '/tmp/x'")

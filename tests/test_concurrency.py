"""Racing sessions never overspend; a killed process leaves every released answer charged.

Each test runs on SQLite and on a throwaway PostgreSQL server. The budget admits exactly 10
queries (epsilon = 1, query_epsilon = 0.1, basic filter, cache off).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import dpsql
from dpsql.config import load_policy
from dpsql.engines.duckdb import DuckDBEngine
from dpsql.session import Session

from .conftest import ROOT, write_policy


@pytest.fixture(params=["sqlite", "postgres"])
def race_policy(request, small_policy, tmp_path) -> Path:
    if request.param == "postgres":
        url = request.getfixturevalue("pg_ledger_url")
        extra = f'\n[ledger]\nurl = "{url}"\n'
    else:
        extra = f'\n[ledger]\npath = "{tmp_path / "race.sqlite"}"\n'
    return write_policy(small_policy.parent, epsilon=1.0, query_epsilon=0.1, extra=extra)


def race(open_session, threads: int = 64, tries: int = 3) -> tuple[int, int]:
    """`threads` analysts, each with the session `open_session()` gives, send `tries` COUNT
    queries at once; (answered, refused). Any other error fails the test."""
    answered, refused, errors = [], [], []
    start = threading.Barrier(threads, timeout=120)

    def analyst() -> None:
        try:
            session = open_session()
        except Exception as e:
            errors.append(e)
            start.abort()
            return
        session.execute("SET dpsql.cache = off")
        start.wait()
        try:
            for _ in range(tries):
                try:
                    session.execute("SELECT COUNT(*) FROM people")
                    answered.append(1)
                except dpsql.BudgetExceeded:
                    refused.append(1)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)
        finally:
            session.close()  # its own ledger connection; a shared engine or ledger stays open

    workers = [threading.Thread(target=analyst) for _ in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(120)
    assert not errors, errors[:3]
    return len(answered), len(refused)


def test_64_threads_get_exactly_10_answers(race_policy):
    policy = load_policy(race_policy)
    engine = DuckDBEngine(policy)
    # 64 first opens of one new ledger at once
    assert race(lambda: Session(policy, "alice", engine=engine)) == (10, 64 * 3 - 10)
    check = Session(policy, "alice", engine=engine)
    assert check.budget()["queries"] == 10 and check.budget()["epsilon"]["spent"] == 1
    engine.close()


RACER = """
import sys, dpsql
conn = dpsql.connect(sys.argv[1], user="alice")
cur = conn.cursor()
cur.execute("SET dpsql.cache = off")
n = 0
while True:
    try:
        cur.execute("SELECT COUNT(*) FROM people")
        n += 1
    except dpsql.BudgetExceeded:
        break
print(n)
"""


def test_4_processes_get_exactly_10_answers(race_policy, tmp_path):
    script = tmp_path / "racer.py"
    script.write_text(RACER)
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(race_policy)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        for _ in range(4)
    ]
    counts = []
    for p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err
        counts.append(int(out.strip()))
    assert sum(counts) == 10, counts


STREAM = """
import sys, dpsql
conn = dpsql.connect(sys.argv[1], user="alice")
cur = conn.cursor()
cur.execute("SET dpsql.cache = off")
cur.execute("SET dpsql.epsilon = 0.000001")
while True:
    cur.execute("SELECT COUNT(*) FROM people")
    print("answer", cur.fetchone()[0], flush=True)
"""


def test_sigkill_leaves_every_released_answer_charged(race_policy, tmp_path):
    script = tmp_path / "stream.py"
    script.write_text(STREAM)
    p = subprocess.Popen(
        [sys.executable, str(script), str(race_policy)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    seen = 0
    for line in p.stdout:
        if line.startswith("answer"):
            seen += 1
        if seen >= 40:
            p.send_signal(signal.SIGKILL)
            break
    p.wait(30)
    seen += sum(1 for line in p.stdout if line.startswith("answer"))
    assert p.returncode == -signal.SIGKILL
    policy = load_policy(race_policy)
    session = Session(policy, "alice")
    history = session.ledger.history("alice")
    totals = session.ledger.spent("alice", session.budget_policy)
    assert len(history) >= seen  # every answer that left was charged first
    assert len(history) <= seen + 1  # at most the one in flight was charged without an answer
    assert totals.queries == len(history)  # charge and running totals are one transaction
    assert totals.epsilon == sum(h["cost"].epsilon for h in history)
    released = [h for h in history if h["released"] is not None]
    assert len(released) >= seen  # recorded before the answer was printed

"""Private files stay private: every file dpsql creates that holds the ledger (logins' verifiers,
queries, answers), its key, a backup or a release is its owner's only (0600, directories 0700),
whatever the umask; `dpsql ledger verify` and `dpsql serve` warn about an older ledger's open modes.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from dpsql import owner_only
from dpsql.accounting.cost import Cost
from dpsql.config import BudgetPolicy
from dpsql.ledger import Ledger, PostgresLedger
from dpsql.ledger.integrity import identity_file

from .conftest import ROOT
from .server_fixture import Serve

BUDGET = BudgetPolicy("basic", Fraction(10), Fraction(1, 10**6))
FIXTURE = ROOT / "tests" / "fixtures" / "ledger_v1.sqlite"  # the shipped ledger format 1


@pytest.fixture(params=[0o022, 0o000, 0o277], ids=["umask022", "umask000", "umask277"])
def umask(request):
    """The usual umask, none at all, and one that takes the owner's own write and search bits:
    the modes come out the same under each."""
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def _spend(ledger, n=3):
    for i in range(n):
        ledger.charge("alice", BUDGET, Cost.pure(Fraction(1, 10)), f"SELECT {i}", {})


def _entries(root: Path) -> set[Path]:
    return set(root.rglob("*"))


def _open_modes(paths) -> dict[str, str]:
    """The paths that are not exactly 0600 (files) or 0700 (directories), with their modes."""
    wrong = {}
    for p in paths:
        mode = stat.S_IMODE(p.lstat().st_mode)
        if mode != (0o700 if p.is_dir() else 0o600):
            wrong[str(p)] = f"{mode:04o}"
    return wrong


def _names(paths) -> set[str]:
    return {p.name for p in paths}


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dpsql.cli", *args], capture_output=True, text=True, timeout=120, cwd=ROOT
    )


def test_a_new_ledger_its_backup_and_their_logs_are_owner_only(tmp_path, umask):
    """Before: the ledger, its -wal and -shm and the backup came out 0644 (0666 under umask 0),
    and the directories dpsql created for the ledger 0755."""
    path = tmp_path / "var" / "dpsql" / "ledger.sqlite"  # both directories are dpsql's to create
    led = Ledger(path)
    _spend(led)
    backup = tmp_path / "backup.sqlite"
    led.backup(backup)
    journal = sqlite3.connect(backup, isolation_level=None)  # a write on the copy in rollback mode: its -journal
    journal.execute("PRAGMA journal_mode=DELETE")
    journal.execute("BEGIN IMMEDIATE")
    journal.execute("INSERT INTO events VALUES (0, 'login', 'alice', '127.0.0.1', '')")
    created = _entries(tmp_path)  # with the ledger still open: its -wal and -shm are there
    wrong = _open_modes(created)
    journal.execute("ROLLBACK")
    journal.close()
    led.close()
    assert {
        "var",
        "dpsql",
        "ledger.sqlite-wal",
        "ledger.sqlite-shm",
        "ledger.sqlite-writers",
        "ledger.sqlite.id",
        "backup.sqlite",
        "backup.sqlite.id",
        "backup.sqlite-journal",
    } <= _names(created)
    assert wrong == {}


def test_a_migrated_ledger_s_backups_are_owner_only(tmp_path, umask):
    """The copy taken before migrating a format-1 ledger (and of its -wal) was shutil.copyfile's
    0644. The old ledger's own mode is its owner's choice: left as it was."""
    path = tmp_path / "old.sqlite"
    shutil.copyfile(FIXTURE, path)
    os.chmod(path, 0o640)
    writer = sqlite3.connect(path)  # a -wal not yet checkpointed, as a running dpsql of format 1 leaves it
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.execute("INSERT INTO cache VALUES ('alice', 'k', '[]', 0)")
    writer.commit()
    Ledger(path).close()
    writer.close()
    copies = [tmp_path / "old.sqlite.v1.backup", tmp_path / "old.sqlite.v1.backup-wal", identity_file(path)]
    assert _open_modes(copies) == {}
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_a_randomized_response_release_is_owner_only(small_policy, umask):
    """`dpsql release`: DuckDB's COPY replaces its target with a file of the umask's mode."""
    before = _entries(small_policy.parent)
    out = small_policy.parent / "rr.parquet"
    done = _cli(
        "release", "-p", str(small_policy), "-U", "alice", "people", "sex", "--epsilon", "100", "--out", str(out)
    )
    assert done.returncode == 0, done.stderr
    created = _entries(small_policy.parent) - before
    assert {"rr.parquet", "rr_estimates.parquet", "policy.ledger.sqlite", "policy.ledger.sqlite.id"} <= _names(created)
    assert _open_modes(created) == {}


def test_owner_only_output_leaves_nothing_behind_on_failure(tmp_path):
    target = tmp_path / "r.csv"
    with pytest.raises(RuntimeError):
        with owner_only.output(target) as inside:
            inside.write_text("half")
            raise RuntimeError("the writer failed")
    assert list(tmp_path.iterdir()) == []


def test_postgres_backup_is_owner_only(pg_ledger_url, tmp_path, umask):  # a short name: one database each
    """The snapshot of a PostgreSQL ledger into a SQLite file was sqlite3.connect's 0644."""
    led = PostgresLedger(pg_ledger_url, identity_file(tmp_path / "policy.ledger.sqlite"))
    _spend(led)
    led.backup(tmp_path / "snapshot.sqlite")
    led.close()
    created = _entries(tmp_path)
    assert {"policy.ledger.sqlite.id", "snapshot.sqlite", "snapshot.sqlite.id"} <= _names(created)
    assert _open_modes(created) == {}


def test_verify_warns_about_a_ledger_others_can_read(small_policy):
    ledger = small_policy.parent / "policy.ledger.sqlite"
    assert _cli("ledger", "init", "--policy", str(small_policy)).returncode == 0
    os.chmod(ledger, 0o644)
    verified = _cli("ledger", "verify", "--policy", str(small_policy))
    assert verified.returncode == 0 and "verified" in verified.stdout  # a warning, not a failure
    warnings = [line for line in verified.stderr.splitlines() if line.startswith("WARNING")]
    assert (
        f"WARNING: ledger file {ledger} has mode 0644: users other than its owner can read it; "
        f"make it private with: chmod 600 {ledger}" in warnings
    )
    for line in warnings:  # SQLite gave the -wal and -shm it created the ledger's mode: named too
        assert line.startswith(f"WARNING: ledger file {ledger}") and " has mode 0644: " in line, line
    for p in ledger.parent.glob(ledger.name + "*"):
        os.chmod(p, 0o600)
    verified = _cli("ledger", "verify", "--policy", str(small_policy))
    assert verified.returncode == 0 and "WARNING" not in verified.stderr


def test_verify_names_every_ledger_file_others_can_use(tmp_path):
    led = Ledger(tmp_path / "l.sqlite")
    _spend(led)
    files = led.private_files()
    for p in files:
        if p.exists():
            os.chmod(p, 0o664 if p.name.endswith("-writers") else 0o604)
    warned = " ".join(owner_only.loose(files))
    led.close()
    for name in ("l.sqlite", "l.sqlite-wal", "l.sqlite-shm", "l.sqlite-writers", "l.sqlite.id"):
        assert f"{tmp_path / name} has mode" in warned, name
    assert "0664: users other than its owner can read and write it" in warned


@pytest.mark.parametrize("workers", ["1", "2"])  # one process, or a supervisor's
def test_serve_warns_at_start_and_serves(small_policy, tmp_path, workers):
    ledger = tmp_path / "ledger.sqlite"
    assert _cli("ledger", "init", "--policy", str(small_policy), "--ledger", str(ledger)).returncode == 0
    os.chmod(identity_file(ledger), 0o644)
    server = Serve(small_policy, ledger, "--workers", workers)
    try:
        server.wait_for("serving")
        assert f"WARNING: ledger file {identity_file(ledger)} has mode 0644" in server.output()
        assert f"chmod 600 {identity_file(ledger)}" in server.output()
    finally:
        server.stop()


def test_the_engines_scratch_is_owner_only(small_policy, umask):
    """DuckDB's scratch (weighted copies of private tables, spills): its directories 0700 and the
    files dpsql and DuckDB create there 0600, from the moment the engine opens (before: the
    copies' database file and the owner file came out 0644 inside the 0700 directory, and the
    spill directory 0755). Spill files DuckDB creates during a query take the umask's mode, inside
    those directories, which no other user can enter."""
    import dpsql

    conn = dpsql.connect(small_policy, user="alice")
    try:
        root = conn.session.engine._scratch.path
        opened = _entries(root) | {root}
        assert {"weights.duckdb", "owner.pid", "spill"} <= _names(opened)
        assert _open_modes(opened) == {}
        cur = conn.cursor()
        cur.execute("SET dpsql.bounds = policy")
        cur.execute("SELECT kind, SUM(amount) FROM events GROUP BY kind")  # builds a weighted copy
        built = _entries(root) | {root}
        assert _open_modes(built) == {}
    finally:
        conn.close()
    assert not root.exists()  # removed on close

"""A spent budget stays spent: the ledger's identity, tamper evidence, migrations and failures."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from fractions import Fraction

import pytest

import dpsql
from dpsql.accounting.cost import Cost
from dpsql.config import BudgetPolicy
from dpsql.ledger import Ledger, LedgerError, PostgresLedger
from dpsql.ledger.integrity import identity_file

from .conftest import ROOT, SAMPLE

BUDGET = BudgetPolicy("basic", Fraction(10), Fraction(1, 10**6))
FIXTURE = ROOT / "tests" / "fixtures" / "ledger_v1.sqlite"  # built by the code that shipped ledger format 1


def _spend(ledger, user="alice", n=3):
    for i in range(n):
        ledger.charge(user, BUDGET, Cost.pure(Fraction(1, 10)), f"SELECT {i}", {})


def _cli(*args, policy):
    return subprocess.run(
        [sys.executable, "-m", "dpsql.cli", *args, "--policy", str(policy)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


def test_a_deleted_or_truncated_ledger_is_a_start_up_error(small_policy, tmp_path):
    """Before: the next start created a fresh ledger and every exhausted analyst was answered again."""
    ledger = small_policy.parent / "policy.ledger.sqlite"
    conn = dpsql.connect(small_policy, user="alice")
    conn.cursor().execute("SELECT COUNT(*) FROM people")
    conn.close()
    saved = tmp_path / "saved.sqlite"
    shutil.copy(ledger, saved)
    for damage in ("delete", "empty", "truncate"):
        for suffix in ("-wal", "-shm"):
            (ledger.parent / (ledger.name + suffix)).unlink(missing_ok=True)
        if damage == "delete":
            ledger.unlink()
        elif damage == "empty":
            ledger.write_bytes(b"")
        else:
            ledger.write_bytes(saved.read_bytes()[:1000])
        with pytest.raises(dpsql.OperationalError) as err:
            dpsql.connect(small_policy, user="alice")
        assert err.value.sqlstate == "XX001" and "backup" in err.value.hint, damage
        served = subprocess.run(
            [sys.executable, "-m", "dpsql.cli", "serve", "--policy", str(small_policy), "--port", "0"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
        assert served.returncode != 0 and "XX001" in served.stderr + served.stdout, damage
        shutil.copy(saved, ledger)
    conn = dpsql.connect(small_policy, user="alice")  # restored: the spending is still there
    assert conn.session.budget()["queries"] == 1
    conn.close()


def test_a_foreign_ledger_is_refused(tmp_path):
    a, b = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
    Ledger(a).close()
    Ledger(b).close()
    shutil.copy(b, a)
    with pytest.raises(LedgerError, match="not .* which"):
        Ledger(a)


def test_verify_detects_edits_and_deletions(tmp_path):
    path = tmp_path / "l.sqlite"
    led = Ledger(path)
    _spend(led, "alice", 4)
    _spend(led, "bob", 2)
    led.grant("bob", Fraction(1), Fraction(0))
    assert led.verify() == []
    edits = {
        "edited cost": "UPDATE charges SET cost = replace(cost, '1/10', '1/1000') WHERE id = 2",
        "middle charge deleted": "DELETE FROM charges WHERE id = 2",
        "last charge and its totals rolled back": "DELETE FROM charges WHERE id = 4; "
        "UPDATE totals SET queries = 3, sums = replace(sums, '2/5', '3/10') WHERE user_name = 'alice'; "
        "UPDATE heads SET count = 3, last = (SELECT chain FROM charges WHERE id = 3) "
        "WHERE user_name = 'alice' AND kind = 'charge'",
        "spent lowered": "UPDATE totals SET sums = replace(sums, '1/5', '0') WHERE user_name = 'bob'",
        "grant raised": "UPDATE grants SET epsilon = '100' WHERE user_name = 'bob'",
        "a charge forged": "INSERT INTO charges (user_name, segment, at, sql, cost, detail, chain) "
        "SELECT user_name, segment, at, sql, cost, detail, chain FROM charges WHERE id = 1",
    }
    clean = tmp_path / "clean.sqlite"
    led.backup(clean)
    led.close()
    for what, sql in edits.items():
        shutil.copy(clean, path)
        con = sqlite3.connect(path)
        con.executescript(sql)
        con.close()
        led = Ledger(path)
        assert led.verify(), what
        led.close()


def test_cli_verify_and_backup_while_serving(serve, small_policy, tmp_path):
    import psycopg

    with psycopg.connect(serve.dsn()) as c:
        c.execute("SELECT COUNT(*) FROM people").fetchall()
        backup = tmp_path / "backup.sqlite"
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "dpsql.cli",
                "ledger",
                "backup",
                "--policy",
                str(small_policy),
                "--ledger",
                str(serve.ledger),
                str(backup),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        c.execute("SELECT AVG(age) FROM people").fetchall()  # still serving
    verified = subprocess.run(
        [sys.executable, "-m", "dpsql.cli", "ledger", "verify", "--policy", str(small_policy), "--ledger", str(backup)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert verified.returncode == 0 and "verified" in verified.stdout
    con = sqlite3.connect(serve.ledger)
    con.execute("DELETE FROM charges WHERE id = 1")
    con.commit()
    con.close()
    verified = subprocess.run(
        [
            sys.executable,
            "-m",
            "dpsql.cli",
            "ledger",
            "verify",
            "--policy",
            str(small_policy),
            "--ledger",
            str(serve.ledger),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert verified.returncode == 1 and "PROBLEM" in verified.stderr


def test_ledger_init_is_deliberate(small_policy):
    first = _cli("ledger", "init", policy=small_policy)
    assert first.returncode == 0 and "created" in first.stdout
    again = _cli("ledger", "init", policy=small_policy)
    assert again.returncode != 0 and "already exists" in again.stderr
    assert identity_file(small_policy.parent / "policy.ledger.sqlite").stat().st_mode & 0o077 == 0


def test_the_shipped_ledger_format_migrates_forward(tmp_path):
    path = tmp_path / "old.sqlite"
    shutil.copy(FIXTURE, path)
    before = sqlite3.connect(path).execute("SELECT user_name, sums, queries FROM totals ORDER BY 1, 2").fetchall()
    led = Ledger(path)
    assert (tmp_path / "old.sqlite.v1.backup").exists() and identity_file(path).exists()
    assert led.verify() == []
    after = sqlite3.connect(path).execute("SELECT user_name, sums, queries FROM totals ORDER BY 1, 2").fetchall()
    assert before == after and len(led.history("alice")) == 3
    _spend(led, "alice", 1)
    assert led.verify() == []
    led.close()
    conn = dpsql.connect(_sample_policy(tmp_path), user="alice", ledger=path)
    assert conn.session.budget()["queries"] == 4  # the shipped spending still counts
    conn.close()


def _sample_policy(tmp_path):
    text = (SAMPLE / "dpsql.toml").read_text().replace('source = "', f'source = "{SAMPLE}/')
    p = tmp_path / "hospital.toml"
    p.write_text(text)
    return p


def test_a_full_disk_refuses_the_query_and_releases_nothing(small_policy):
    """An injected SQLITE_FULL: the charge cannot be written, so nothing runs or leaves."""
    conn = dpsql.connect(small_policy, user="alice")
    cur = conn.cursor()
    cur.execute("SET dpsql.cache = off")
    cur.execute("SELECT COUNT(*) FROM people")
    ledger = conn.session.ledger
    con = ledger._con()
    pages = con.execute("PRAGMA page_count").fetchone()[0]
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    # on the connection that writes charges: the ledger's writer thread's
    ledger._writer.submit([], lambda writer: writer.execute(f"PRAGMA max_page_count = {pages}").fetchone())
    with pytest.raises(dpsql.OperationalError) as err:
        for i in range(200):  # until the file must grow
            cur.execute(f"SELECT COUNT(*) FROM people WHERE age > {i} /* {'x' * 2000} */")
    assert "nothing was charged and nothing was released" in str(err.value)
    ledger._writer.submit([], lambda writer: writer.execute("PRAGMA max_page_count = 1073741823").fetchone())
    charged = conn.session.budget()["queries"]
    assert len(conn.session.ledger.history("alice")) == charged and conn.session.ledger.verify() == []
    conn.close()


def test_postgres_ledger_identity_and_verify(pg_ledger_url, tmp_path):
    marker = tmp_path / "policy.ledger.sqlite"
    led = PostgresLedger(pg_ledger_url, identity_file(marker))
    _spend(led, "alice", 3)
    led.grant("alice", Fraction(1), Fraction(0))
    assert led.verify() == []
    copy = tmp_path / "pg-backup.sqlite"  # a snapshot into a SQLite ledger with the same identity
    led.backup(copy)
    restored = Ledger(copy)
    assert restored.verify() == [] and len(restored.history("alice")) == 3
    restored.close()
    con = led._con()
    con.execute("UPDATE charges SET sql = 'SELECT 42' WHERE id = 2")
    assert led.verify()
    led.close()
    other = tmp_path / "other"
    other.mkdir()
    with pytest.raises(LedgerError, match="no identity file"):  # not the identity it was created with
        PostgresLedger(pg_ledger_url, identity_file(other / "policy.ledger.sqlite"))
    import psycopg

    with psycopg.connect(pg_ledger_url, autocommit=True) as pg:
        for table in ("totals", "grants", "charges", "users", "cache", "meta", "heads"):
            pg.execute(f"DROP TABLE {table}")
    with pytest.raises(LedgerError, match="no tables"):
        PostgresLedger(pg_ledger_url, identity_file(marker))


V1_POSTGRES = [  # the shipped format 1, as the previous code created it on PostgreSQL
    "CREATE TABLE totals (user_name TEXT NOT NULL, segment INTEGER NOT NULL, sums TEXT NOT NULL, "
    "queries INTEGER NOT NULL, PRIMARY KEY (user_name, segment))",
    "CREATE TABLE grants (user_name TEXT NOT NULL, seq INTEGER NOT NULL, epsilon TEXT NOT NULL, delta TEXT NOT NULL, "
    "at DOUBLE PRECISION NOT NULL, PRIMARY KEY (user_name, seq))",
    "CREATE TABLE charges (id BIGSERIAL PRIMARY KEY, user_name TEXT NOT NULL, segment INTEGER NOT NULL, "
    "at DOUBLE PRECISION NOT NULL, sql TEXT NOT NULL, cost TEXT NOT NULL, detail TEXT NOT NULL, released TEXT)",
    "CREATE TABLE users (user_name TEXT PRIMARY KEY, verifier TEXT NOT NULL, role TEXT NOT NULL, "
    "created DOUBLE PRECISION NOT NULL)",
    "CREATE TABLE cache (user_name TEXT NOT NULL, key TEXT NOT NULL, answer TEXT NOT NULL, "
    "at DOUBLE PRECISION NOT NULL, PRIMARY KEY (user_name, key))",
]


def test_the_shipped_format_migrates_forward_on_postgres(pg_ledger_url, tmp_path):
    import psycopg

    old = sqlite3.connect(FIXTURE)
    with psycopg.connect(pg_ledger_url, autocommit=True) as pg:
        for ddl in V1_POSTGRES:
            pg.execute(ddl)
        for table in ("totals", "grants", "charges", "users", "cache"):
            rows = old.execute(f"SELECT * FROM {table}").fetchall()
            if rows:
                marks = ", ".join(["%s"] * len(rows[0]))
                pg.cursor().executemany(f"INSERT INTO {table} VALUES ({marks})", rows)
        pg.execute("SELECT setval('charges_id_seq', (SELECT max(id) FROM charges))")
    old.close()
    marker = identity_file(tmp_path / "policy.ledger.sqlite")
    led = PostgresLedger(pg_ledger_url, marker)
    assert marker.exists() and led.verify() == [] and len(led.history("alice")) == 3
    _spend(led, "alice", 1)
    assert led.verify() == []
    with psycopg.connect(pg_ledger_url) as pg:
        assert pg.execute("SELECT count(*) FROM charges_v1_backup").fetchone()[0] == 4
    led.close()

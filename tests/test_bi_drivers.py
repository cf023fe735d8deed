"""The drivers BI tools use: pgjdbc (Debian's libpostgresql-jdbc-java) and psqlODBC through pyodbc."""

from __future__ import annotations

import getpass
import glob
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from .server_fixture import PASSWORD

pytestmark = [pytest.mark.clients, pytest.mark.slow]  # pgjdbc (javac, java) and psqlODBC against a dpsql serve each

JDBC_JAR = Path("/usr/share/java/postgresql.jar")


@pytest.fixture(autouse=True, scope="module")
def _no_driver_logs_left():
    """psqlODBC writes /tmp/psqlodbc_<program>_<user><pid>.log when it disconnects, whatever
    CommLog says; the tests leave nothing behind."""
    yield
    for log in glob.glob(f"/tmp/psqlodbc_*_{getpass.getuser()}{os.getpid()}.log"):
        os.unlink(log)


@pytest.mark.skipif(
    not JDBC_JAR.exists() or shutil.which("javac") is None, reason="pgjdbc and a JDK are installed by tests/setup.sh"
)
def test_pgjdbc_metadata_and_prepared_statement(serve, tmp_path):
    src = Path(__file__).parent / "jdbc" / "Probe.java"
    subprocess.run(["javac", "-d", str(tmp_path), str(src)], check=True, capture_output=True, timeout=120)
    out = subprocess.run(
        [
            "java",
            "-cp",
            f"{tmp_path}:{JDBC_JAR}",
            "Probe",
            f"jdbc:postgresql://127.0.0.1:{serve.port}/dpsql?sslmode=disable",
            "alice",
            PASSWORD,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert {line.split()[1] for line in lines if line.startswith("table ")} == {"people", "events", "places", "rows"}
    assert [line for line in lines if line.startswith("column ")] == [
        "column pid int4",
        "column age float8",
        "column sex text",
        "column city text",
    ]
    assert int(next(line for line in lines if line.startswith("types ")).split()[1]) > 10
    assert "schema public" in lines
    assert len([line for line in lines if line.startswith("count ")]) == 6
    assert "queries 6" in lines  # six executions with six parameters: six charges


def test_psqlodbc_through_pyodbc(serve):
    pyodbc = pytest.importorskip("pyodbc")
    if "PostgreSQL Unicode" not in pyodbc.drivers():
        pytest.skip("psqlODBC is installed by tests/setup.sh")
    conn = pyodbc.connect(
        f"Driver={{PostgreSQL Unicode}};Server=127.0.0.1;Port={serve.port};Database=dpsql;"
        f"Uid=alice;Pwd={PASSWORD};SSLMode=disable;CommLog=0;Debug=0",
        autocommit=True,
    )
    try:
        cur = conn.cursor()
        tables = {r.table_name for r in cur.tables(schema="public", tableType="TABLE")}
        assert tables == {"people", "events", "places", "rows"}
        columns = [(r.column_name, r.type_name) for r in cur.columns(table="people")]
        assert [c[0] for c in columns] == ["pid", "age", "sex", "city"]
        cur.execute("SELECT sex, COUNT(*) AS n FROM people WHERE age > ? GROUP BY sex ORDER BY sex", 30)
        rows = cur.fetchall()
        assert [r[0] for r in rows] == ["F", "M"]
    finally:
        conn.close()


def test_psqlodbc_use_declare_fetch(serve):
    """Power BI and Excel's psqlODBC setting UseDeclareFetch: the driver wraps each query in a
    cursor (BEGIN; DECLARE ... CURSOR; FETCH n ...) and the query is charged once."""
    pyodbc = pytest.importorskip("pyodbc")
    if "PostgreSQL Unicode" not in pyodbc.drivers():
        pytest.skip("psqlODBC is installed by tests/setup.sh")
    conn = pyodbc.connect(
        f"Driver={{PostgreSQL Unicode}};Server=127.0.0.1;Port={serve.port};Database=dpsql;"
        f"Uid=alice;Pwd={PASSWORD};SSLMode=disable;UseDeclareFetch=1;Fetch=2;CommLog=0;Debug=0"
    )
    try:
        cur = conn.cursor()
        cur.execute("SELECT kind, COUNT(*) AS n FROM events GROUP BY kind ORDER BY kind")
        assert [r[0] for r in cur.fetchall()] == ["a", "b", "c"]  # three rows through fetches of two
        cur.execute("SELECT queries FROM dpsql_budget")
        assert cur.fetchall()[0][0] == 1
        conn.commit()
    finally:
        conn.close()


HIKARI_JAR = Path("/usr/share/java/HikariCP.jar")


@pytest.mark.skipif(
    not (JDBC_JAR.exists() and HIKARI_JAR.exists()) or shutil.which("javac") is None,
    reason="pgjdbc, HikariCP and a JDK are installed by tests/setup.sh",
)
def test_hikaricp_pool_validation_and_reset(serve, tmp_path):
    """HikariCP's borrow (validated by isValid(), an empty query, or by a connectionTestQuery) and
    return (rollback, read-only and autocommit reset) around a prepared DP query: every answer
    delivered, each charged once (the second pool's repeats come from the cache, free)."""
    src = Path(__file__).parent / "jdbc" / "HikariCheck.java"
    classpath = f"{tmp_path}:{HIKARI_JAR}:{JDBC_JAR}:/usr/share/java/slf4j-api.jar"
    subprocess.run(
        ["javac", "-cp", classpath, "-d", str(tmp_path), str(src)], check=True, capture_output=True, timeout=120
    )
    for test_query in ("", "SELECT 1"):
        out = subprocess.run(
            [
                "java",
                "-Dcom.zaxxer.hikari.aliveBypassWindowMs=0",
                "-cp",
                classpath,
                "HikariCheck",
                f"jdbc:postgresql://127.0.0.1:{serve.port}/dpsql?sslmode=disable",
                "alice",
                PASSWORD,
                test_query,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr[-3000:]
        lines = out.stdout.splitlines()
        assert len([line for line in lines if line.startswith("count ")]) == 4
        assert "queries 4" in lines and "connections 1" in lines

"""The same policy on DuckDB, PostgreSQL and Spark: identical pre-noise values for every query
of the corpus, answers charged once, and each backend's own lockdown."""

from __future__ import annotations

import dataclasses
import os
import re
import time
from decimal import Decimal
from pathlib import Path

import pytest

import dpsql
from dpsql.config import load_policy
from dpsql.engines import open_engine
from dpsql.errors import OperationalError, PolicyError, UnsupportedQuery
from dpsql.session import Session
from dpsql.sql.analyze import PublicQuery
from dpsql.sql.options import QueryOptions
from dpsql.sql.wrappers import released_subquery

from .backends import READER, SAMPLE, load_into_postgres, postgres_policy, spark_policy
from .test_corpus import ANSWERED

pytestmark = [pytest.mark.backends, pytest.mark.slow]  # Spark starts per module; a Spark comparison ran 400-600 s

SALTED = "TABLESAMPLE"  # a fresh secret salt per execution: each engine hashes differently, by design


@pytest.fixture(scope="module")
def clinic(pg_server):
    admin = pg_server.create_database("clinic")
    reader = admin.replace("postgres@", f"{READER}@")
    load_into_postgres(admin)
    return admin, reader


@pytest.fixture(scope="module")
def policies(clinic, tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("backends")
    return {"duckdb": SAMPLE / "dpsql.toml", "postgres": postgres_policy(d, clinic[1]), "spark": spark_policy(d)}


@pytest.fixture(scope="module")
def sessions(policies, tmp_path_factory):
    d = tmp_path_factory.mktemp("ledgers")
    out = {
        name: Session(load_policy(path, ledger_path=d / f"{name}.sqlite"), "alice") for name, path in policies.items()
    }
    for name in ("duckdb", "spark"):
        out[f"{name}-weighted"] = Session(load_policy(policies[name], ledger_path=d / f"{name}-w.sqlite"), "alice")
    # Per-unit bounding in every query, as PostgreSQL without scratch_url does.
    for name in ("duckdb", "spark"):
        engine = out[name].engine
        engine.capabilities = dataclasses.replace(engine.capabilities, weighted_copy=False)
    # Spark's weighted copies hold the weight only, as PostgreSQL's weighted tables do.
    engine = out["duckdb-weighted"].engine
    engine.capabilities = dataclasses.replace(engine.capabilities, weights_store_sums=False)
    yield out
    for s in out.values():
        s.close()


def _planned(session: Session, sql: str):
    """The query's plan and calibration; for a BI wrapper, its inner DP query's."""
    stmt = session._classify(sql)
    wrapped = released_subquery(stmt.tree, session.policy)
    return session._prepare(wrapped[0] if wrapped is not None else stmt.tree, stmt.options)


def _rows(session: Session, sql: str) -> list[tuple]:
    plan, cal = _planned(session, sql)
    if isinstance(plan, PublicQuery):
        rs = session.engine.execute(session.engine.sql_of(plan.tree))
    else:
        rs = session.bounded_result(plan)
    rows = [
        tuple(float(v) if isinstance(v, (int, float, Decimal)) and not isinstance(v, bool) else v for v in r)
        for r in zip(*rs.columns)
    ]  # PostgreSQL's NUMERIC and EXTRACT, DuckDB's BIGINT: one number
    if not isinstance(plan, PublicQuery) and plan.keys and cal.selection is None:
        # Without partition selection the units column is read by nothing (guarantee/release.py), and a
        # weighted copy split into light and heavy units counts only the heavy ones there.
        k = len(plan.keys)
        rows = [r[:k] + r[k + 1 :] for r in rows]
    return sorted(rows, key=lambda r: tuple((v is None, repr(v)) for v in r))


def _reads_copies(session: Session, sql: str) -> bool:
    """Whether the query's plan reads weighted copies where the engine has them (Plan.weightable)."""
    plan, _ = _planned(session, sql)
    return not isinstance(plan, PublicQuery) and plan.weightable()


def _same_rows(want: list[tuple], got: list[tuple]) -> bool:
    """Equal, but for the last place of a fixed-point total: a row's value is rounded once to an
    integer from a DOUBLE in DuckDB and Spark and from a NUMERIC in PostgreSQL (pg_nonfailing.py), so
    the square of a fractional cost may round to the neighbouring integer, and a total of n rows
    may differ by up to n units. Allowed: 1e-9 of the total, far below one row's share (a lost or
    doubled row moves a total of fewer than 1e9 rows by more than that)."""
    if len(want) != len(got):
        return False
    for a, b in zip(want, got):
        if len(a) != len(b):
            return False
        for x, y in zip(a, b):
            if isinstance(x, float) and isinstance(y, float):
                if abs(x - y) > 1e-9 * max(abs(x), abs(y)):
                    return False
            elif x != y:
                return False
    return True


def test_same_rows_allows_only_the_last_places():
    assert _same_rows([("a", 684481281078.0)], [("a", 684481281082.0)])
    assert not _same_rows([("a", 684481281078.0)], [("a", 684481281078.0 * (1 + 1e-6))])
    assert not _same_rows([("a", 1.0)], [("b", 1.0)])
    assert not _same_rows([("a", 1.0)], [("a", 1.0), ("b", 2.0)])
    assert not _same_rows([("a", 3.0)], [("a", 4.0)])


@pytest.mark.parametrize(
    "backend,reference", [("postgres", "duckdb"), ("spark", "duckdb"), ("spark-weighted", "duckdb-weighted")]
)
def test_same_pre_noise_values_as_duckdb(backend, reference, sessions):
    """Every answered corpus query's bounded query (before noise) returns the same rows: per unit
    in every query, and over weighted copies (Spark's Parquet ones, DuckDB's). A query whose plan
    cannot read a weighted copy runs the same per-unit SQL in both sessions of an engine, which
    the per-unit comparison checks: the weighted one checks only the queries that read copies."""
    checked, different = 0, []
    weighted = backend.endswith("-weighted")
    for sql, *_ in ANSWERED:
        if SALTED in sql or (weighted and not _reads_copies(sessions[backend], sql)):
            continue
        want, got = _rows(sessions[reference], sql), _rows(sessions[backend], sql)
        checked += 1
        if not _same_rows(want, got):
            different.append((sql, want[:2], got[:2]))
    assert checked >= (25 if weighted else 55)
    assert not different, different
    if weighted:
        assert sessions[backend].engine._copies  # the copies were read, not per-unit bounding


@pytest.mark.parametrize("spark", ["spark", "spark-weighted"])
def test_a_filter_value_from_a_template_is_the_text_planned_in_full_on_spark(spark, sessions):
    """Spark writes a literal apart from a query too, so a shape's third text takes its template
    (sql/slots.py): its bounded SQL and calibration are those of the text planned in full."""
    from dpsql.plan_cache import Template

    s = sessions[spark]
    shape = (
        "SELECT diagnosis, COUNT(*), AVG(cost) FROM visits WHERE visit_date >= DATE '{}' AND cost < {} "
        "GROUP BY diagnosis"
    )
    texts = [shape.format(day, cost) for day, cost in (("2023-03-01", 900), ("2023-06-01", 5000), ("2024-01-01", 99))]
    for text in texts:
        s.execute(text)
    assert any(isinstance(e, Template) for e in s._plans._templates.values())
    for text in texts:
        stmt = s._classify(text)
        plan, cal = s._plans.plan(s._plan_key(stmt.tree, stmt.options or QueryOptions(), text))
        full, full_cal = s._prepare(stmt.tree, stmt.options)
        assert s.bounded_sql(plan) == s.bounded_sql(full) and cal == full_cal


@pytest.mark.parametrize("backend", ["duckdb", "postgres", "spark"])
def test_answered_and_charged_once(backend, policies, tmp_path):
    conn = dpsql.connect(policies[backend], user="bob", ledger=tmp_path / "ledger.sqlite")
    cur = conn.cursor()
    cur.execute("SELECT diagnosis, COUNT(*) AS n, AVG(cost) AS avg_cost FROM visits GROUP BY diagnosis")
    rows = cur.fetchall()
    assert [d[0] for d in cur.description] == ["diagnosis", "n", "avg_cost"]
    assert len(rows) == 12 and all(r[1] >= 0 and 0 <= r[2] <= 50000 for r in rows)  # noisy counts may be 0
    assert conn.session.budget()["queries"] == 1
    cur.execute("SELECT floor, COUNT(*) FROM wards GROUP BY floor")  # a public table: no charge
    assert cur.fetchall() and conn.session.budget()["queries"] == 1
    cur.execute("EXPLAIN SELECT sex, COUNT(*) FROM patients GROUP BY sex")
    assert any("epsilon" in r[0] for r in cur.fetchall())
    conn.close()


def test_postgres_refuses_what_could_fail_on_a_row(policies, tmp_path):
    """PostgreSQL raises where DuckDB's TRY gives NULL: such queries are refused, uncharged."""
    conn = dpsql.connect(policies["postgres"], user="bob", ledger=tmp_path / "ledger.sqlite")
    cur = conn.cursor()
    for sql, fragment in [
        ("SELECT COUNT(*) FROM patients WHERE CAST(sex AS INTEGER) > 0", "cast from VARCHAR to INT"),
        ("SELECT COUNT(*) FROM patients WHERE SQRT(age) > 3", "SQRT can raise"),
    ]:
        with pytest.raises(UnsupportedQuery) as info:
            cur.execute(sql)
        assert fragment in str(info.value) and "nothing was charged" in (info.value.hint or "")
    assert conn.session.budget()["queries"] == 0
    # Arithmetic that would overflow or divide by zero in PostgreSQL runs in NUMERIC, NULL-safe.
    cur.execute("SELECT COUNT(*) FROM patients WHERE income / (age - age) > 1 OR age * 1e300 * 1e300 > 0")
    assert cur.fetchone()[0] is not None
    assert conn.session.budget()["queries"] == 1
    conn.close()


def test_postgres_role_and_connection_are_locked_down(clinic, policies, tmp_path):
    admin, reader = clinic
    text = policies["postgres"].read_text()
    superuser = tmp_path / "super.toml"
    superuser.write_text(text.replace(reader, admin))
    with pytest.raises(PolicyError, match="superuser"):
        open_engine(load_policy(superuser))
    import psycopg

    with psycopg.connect(admin, autocommit=True) as pg:
        pg.execute("DO $$ BEGIN CREATE ROLE dpsql_writer LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$")
        pg.execute("GRANT SELECT, INSERT ON patients, visits, wards TO dpsql_writer")
    writer = tmp_path / "writer.toml"
    writer.write_text(text.replace(READER, "dpsql_writer"))
    with pytest.raises(PolicyError, match="may write table"):
        open_engine(load_policy(writer))

    slow = tmp_path / "slow.toml"
    slow.write_text(re.sub(r"(?m)^url = (.*)$", r"url = \1\nstatement_timeout = 0.5", text))
    engine = open_engine(load_policy(slow))
    try:
        with pytest.raises(OperationalError, match="failed while running"):
            engine.execute("CREATE TABLE stolen (a int)")  # read-only transactions
        started = time.monotonic()
        with pytest.raises(OperationalError) as info:
            engine.execute("SELECT pg_sleep(5)")
        assert info.value.sqlstate == "57014" and time.monotonic() - started < 4
        assert engine.execute("SELECT current_setting('search_path')").columns[0] == ["public"]
    finally:
        engine.close()


def test_spark_keeps_ansi_off_and_files_unreadable(policies, tmp_path):
    text = policies["spark"].read_text()
    ansi = tmp_path / "ansi.toml"
    ansi.write_text(text.replace("conf = { ", 'conf = { "spark.sql.ansi.enabled" = "true", '))
    with pytest.raises(PolicyError, match="spark.sql.ansi.enabled"):
        open_engine(load_policy(ansi))
    engine = open_engine(load_policy(policies["spark"]))
    try:
        with pytest.raises(OperationalError):
            engine.execute(f"SELECT COUNT(*) FROM parquet.`{SAMPLE / 'patients.parquet'}`")
        # ANSI off: a failing cast or a division by zero is NULL, not an error
        assert engine.execute("SELECT CAST('x' AS INT) AS a, 1 / 0 AS b").columns == [[None], [None]]
    finally:
        engine.close()


def test_spark_statement_timeout_cancels_the_running_job(tmp_path):
    """statement_timeout stops a Spark job that runs on (SQLSTATE 57014) within about a second."""
    policy = spark_policy(tmp_path)
    policy.write_text(
        policy.read_text().replace('master = "local[2]"\n', 'master = "local[2]"\nstatement_timeout = 3\n')
    )
    engine = open_engine(load_policy(policy))
    try:
        started = time.monotonic()
        with pytest.raises(OperationalError) as info:  # about 20 s of hashing on local[2]
            engine.execute("SELECT SUM(CAST(sha2(CAST(id AS STRING), 256) < 'a' AS INT)) FROM range(0, 200000000)")
        assert info.value.sqlstate == "57014" and time.monotonic() - started < 8
        assert engine.execute("SELECT 1 AS a").columns == [[1]]  # the engine goes on
    finally:
        engine.close()


@pytest.fixture(scope="module")
def spark_connect_url(tmp_path_factory):
    """A Spark Connect server of pyspark's own distribution, in the foreground on a free port."""
    from .server_fixture import free_port
    from .spark_cluster import connect_server, stop_group

    port = free_port()
    proc = connect_server("local[2]", port, tmp_path_factory.mktemp("connect") / "server.log")
    yield f"sc://127.0.0.1:{port}"
    stop_group(proc)


_CONNECT_CHECK = """
import json, sys
from dpsql.config import load_policy
from dpsql.session import Session
from tests.test_backends import _rows
session = Session(load_policy(sys.argv[1], ledger_path=sys.argv[2]), "alice")
out = [repr(_rows(session, sql)) for sql in json.loads(sys.argv[3])]
result = session.execute("SELECT sex, COUNT(*) FROM patients GROUP BY sex")
print(json.dumps({"rows": out, "answer_rows": len(result.rows), "charged": session.budget()["queries"]}))
session.close()
"""


def test_spark_connect_gives_the_same_values(spark_connect_url, sessions, policies, tmp_path):
    """The same queries through Spark Connect (in a process of its own: pyspark allows one kind
    of session per process) give DuckDB's pre-noise values, and an answer is charged once."""
    got = through_connect(policies["spark"], spark_connect_url, CONNECT_QUERIES, tmp_path)
    assert got["rows"] == [repr(_rows(sessions["duckdb"], sql)) for sql in CONNECT_QUERIES]
    assert got["answer_rows"] == 3 and got["charged"] == 1


CONNECT_QUERIES = [
    "SELECT diagnosis, COUNT(*), AVG(cost) FROM visits GROUP BY diagnosis",
    "SELECT p.sex, AVG(v.length_of_stay) FROM visits v JOIN patients p USING (patient_id) GROUP BY p.sex",
    "SELECT MEDIAN(age) FROM patients",
]


def through_connect(spark_policy: Path, url: str, queries: list[str], tmp_path: Path) -> dict:
    """_CONNECT_CHECK on a Spark policy turned to `remote = url`: the queries' pre-noise rows,
    and one answer's rows and charge."""
    import json
    import subprocess
    import sys

    remote = tmp_path / "connect.toml"
    text = spark_policy.read_text()
    remote.write_text(re.sub(r"(?m)^master = .*\n(scratch_dir = .*\n)?conf = .*\n", f'remote = "{url}"\n', text))
    done = subprocess.run(
        [sys.executable, "-c", _CONNECT_CHECK, str(remote), str(tmp_path / "ledger.sqlite"), json.dumps(queries)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_repeated_and_evicted_query_texts_keep_their_own_results(tmp_path):
    """Prepared statements per cursor (engines/duckdb.py): a text's second run goes through its
    prepared statement; more texts than the cursor remembers evict the oldest, and no eviction
    may replace the result of the query that caused it."""
    from dpsql.config import load_policy
    from dpsql.engines import duckdb as engine_module
    from dpsql.engines.duckdb import DuckDBEngine

    from .conftest import default_events, default_people, make_db, write_policy

    make_db(tmp_path / "db.duckdb", default_people(), default_events())
    engine = DuckDBEngine(load_policy(write_policy(tmp_path)))
    try:
        texts = [
            f"SELECT {i} AS a, {i} + 1 AS b, COUNT(*) AS c FROM people"
            for i in range(engine_module.PREPARED_PER_CURSOR + 20)
        ]
        for _ in range(2):  # each text prepared on its second run, the oldest prepared ones then evicted
            for sql in texts[:10] * 2 + texts[10:]:
                rs = engine.execute(sql)
                i = texts.index(sql)
                assert rs.names == ["a", "b", "c"] and rs.columns == [[i], [i + 1], [200]]
    finally:
        engine.close()


def _listening(pid: int) -> list[str]:
    """The addresses (hex, as /proc/net/tcp* spells them) process `pid` listens on."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # state LISTEN
                out.append(fields[1].split(":")[0])
    return out


def test_a_local_spark_listens_on_loopback_only(policies):
    """The driver's RPC and block manager, and no web UI: nothing on an outside interface."""
    engine = open_engine(load_policy(policies["spark"]))
    try:
        assert engine._spark.conf.get("spark.driver.host") == "127.0.0.1"
        assert engine._spark.conf.get("spark.ui.enabled") == "false"
        addresses = _listening(engine._spark.sparkContext._gateway.proc.pid)
        loopback = {"0100007F", "0000000000000000FFFF00000100007F", "00000000000000000000000001000000"}
        assert addresses and set(addresses) <= loopback, addresses
        # shuffle files and blocks hold rows: they go to a private directory dpsql sweeps
        engine.execute("SELECT sex, COUNT(*) FROM patients GROUP BY sex")
        local = Path(engine._spark.sparkContext.getConf().get("spark.local.dir"))
        assert local.name.startswith("dpsql-engine-") and os.stat(local).st_mode & 0o777 == 0o700
        assert list(local.glob("blockmgr-*"))
    finally:
        engine.close()


def test_spark_weighted_copies_are_private_follow_their_files_and_leave_nothing(small_policy):
    """A local Spark's weighted copy: Parquet in the engine's 0700 scratch directory, the same
    pre-noise COUNT as DuckDB's copy, rebuilt when its source file changes (+3: a new person's
    five rows capped at max_rows), and gone, files and directory, when the engine closes."""
    import duckdb

    from .backends import move_policy

    def pre_noise(session: Session, sql: str) -> int:
        plan, _ = session._prepare(session._classify(sql).tree)
        return session.bounded_result(plan).columns[-1][0]

    sql = "SELECT COUNT(*) FROM events"
    reference = Session(load_policy(small_policy), "alice")
    spark = Session(load_policy(move_policy(small_policy, "spark")), "alice")
    try:
        assert pre_noise(spark, sql) == pre_noise(reference, sql)
        scratch = spark.engine._scratch.path
        ((_, _, files),) = spark.engine._copies.values()
        assert files.parent == scratch and list(files.glob("*.parquet"))
        assert os.stat(scratch).st_mode & 0o777 == 0o700
        before = pre_noise(spark, sql)
        events = small_policy.parent / "events.parquet"
        con = duckdb.connect()
        con.execute(
            f"COPY (SELECT * FROM '{events}' UNION ALL SELECT 999, 'a', 1.0, 'north' FROM range(5)) "
            f"TO '{events}.new' (FORMAT parquet)"
        )
        con.close()
        os.replace(f"{events}.new", events)
        assert pre_noise(spark, sql) == before + 3
        ((_, _, rebuilt),) = spark.engine._copies.values()
        assert rebuilt != files
    finally:
        spark.close()
        reference.close()
    assert not scratch.exists()


_TWO_CONTEXTS = """
import os, stat, sys, tempfile
from pathlib import Path
from dpsql.config import load_policy
from dpsql.engines.scratch import PREFIX
from dpsql.session import Session
for _ in range(2):  # the second SparkContext starts in the JVM the first one left running
    session = Session(load_policy(sys.argv[1]), "alice")
    assert session.execute("SELECT COUNT(*) FROM events").rows
    session.close()
    for d in Path(tempfile.gettempdir()).glob(PREFIX + "*"):
        print(oct(stat.S_IMODE(os.stat(d).st_mode)), sorted(p.name for p in d.iterdir()))
"""


def test_spark_local_dir_stays_private_across_contexts_and_leaves_nothing(small_policy, tmp_path):
    """The JVM keeps its first context's spark.local.dir for life: a second context in the same
    process writes there. That directory must still be dpsql's 0700 one, emptied when a context
    stops (only its owner file left), and gone when the process exits."""
    import subprocess
    import sys

    from .backends import move_policy

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    policy = move_policy(small_policy, "spark")
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run(
        [sys.executable, "-c", _TWO_CONTEXTS, str(policy)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 2  # one directory, listed after each context stopped
    assert all(line == "0o700 ['owner.pid']" for line in lines), lines
    assert not list(tmp.glob("dpsql-engine-*"))


# The clock and PostgreSQL's formatting functions (sql/clock.py, sql/pgfunctions.py): pinned at
# one instant inside the sample's dates, every engine must compute the same groups and values.
AT = __import__("datetime").datetime(2024, 6, 15, 13, 45, 7, 250000, tzinfo=__import__("datetime").timezone.utc)
CLOCKED = [
    "SELECT COUNT(*) FROM visits WHERE visit_date >= CAST(NOW() + INTERVAL '-30 day' AS date)",
    "SELECT COUNT(*) FROM visits WHERE visit_date >= CURRENT_DATE - 7",
    "SELECT COUNT(*) FROM visits WHERE visit_date >= date_trunc('month', now()) AND visit_date < LOCALTIMESTAMP",
    "SELECT COUNT(*) FROM visits WHERE visit_date >= date_trunc('week', CURRENT_DATE) - INTERVAL '7 days'",
    "SELECT diagnosis, COUNT(*) FROM visits WHERE visit_date > transaction_timestamp() - INTERVAL '90 days' "
    "GROUP BY diagnosis",
    "SELECT TO_CHAR(visit_date, 'YYYY-MM') AS m, COUNT(*) FROM visits GROUP BY 1",
    "SELECT TO_CHAR(visit_date, 'FMMonth YYYY, Dy \"Q\"Q DDD IW D WW W HH12 AM') AS m, COUNT(*) FROM visits "
    "WHERE visit_date < DATE '2023-03-01' GROUP BY 1",
    "SELECT EXTRACT(dow FROM visit_date) AS d, date_part('month', visit_date) AS m, COUNT(*) FROM visits GROUP BY 1, 2",
    "SELECT TO_CHAR(now(), 'YYYY-MM-DD HH24:MI:SS') AS t, format('%s|%I|%L', 1, 'A b', 'it''s') AS f",
    "SELECT replace(name, 'a', 'b') AS r, split_part(name, 'o', 1) AS s, lpad(name, 12, '*') AS p, "
    "format('%I', name) AS i FROM wards",
]


@pytest.mark.parametrize("backend", ["postgres", "spark"])
def test_clock_and_formatting_functions_agree_with_duckdb(backend, sessions):
    from dpsql.sql.clock import pinned

    def rows(session: Session, sql: str) -> list[tuple]:
        stmt = session._classify(sql)
        plan, _ = session._prepare(pinned(stmt.tree, AT), stmt.options)
        rs = (
            session.engine.execute(session.engine.sql_of(plan.tree))
            if isinstance(plan, PublicQuery)
            else session.bounded_result(plan)
        )
        out = [
            tuple(float(v) if isinstance(v, (int, float, Decimal)) and not isinstance(v, bool) else v for v in r)
            for r in zip(*rs.columns)
        ]
        return sorted(out, key=repr)

    different = []
    for sql in CLOCKED:
        want, got = rows(sessions["duckdb"], sql), rows(sessions[backend], sql)
        assert want, sql
        if want != got:
            different.append((sql, want[:3], got[:3]))
    assert not different, different

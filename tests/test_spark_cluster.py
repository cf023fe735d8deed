"""dpsql on a Spark standalone cluster (a master and two workers on 127.0.0.1, executors in
JVMs of their own; tests/spark_cluster.py): the driver in this process with `master =
"spark://..."`, and behind a Spark Connect server whose master is the cluster. The same
pre-noise values as DuckDB (which a local Spark matches, tests/test_backends.py) per unit and
over weighted copies in a scratch_dir every executor reads; answers charged once; a worker
killed mid-query, after the charge: Spark runs the lost tasks again elsewhere or the query fails
with a SQLSTATE, one charge either way and nothing released twice; and every worker killed: the
statement timeout cancels the waiting job (57014), charged, nothing released."""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from pathlib import Path

import duckdb
import pytest

import dpsql
from dpsql.config import load_policy
from dpsql.engines import open_engine
from dpsql.errors import OperationalError, PolicyError
from dpsql.session import Session

from .backends import SAMPLE, move_policy, spark_engine, spark_policy
from .conftest import default_people, make_db, write_policy
from .spark_cluster import APP_CONF
from .test_backends import CONNECT_QUERIES, SALTED, _listening, _reads_copies, _rows, through_connect
from .test_corpus import ANSWERED

pytestmark = [pytest.mark.backends, pytest.mark.slow]

QUERIES = [sql for sql, *_ in ANSWERED if SALTED not in sql][::5]  # 14 of the corpus's shapes
LOOPBACK = {"0100007F", "0000000000000000FFFF00000100007F", "00000000000000000000000001000000"}


@pytest.fixture(scope="module")
def cluster_sessions(spark_cluster, tmp_path_factory):
    """DuckDB's sample; the cluster bounding per unit in every query; the cluster over weighted
    copies in its scratch_dir (Spark's copies hold the weight only, so DuckDB's are told so)."""
    d = tmp_path_factory.mktemp("cluster")
    weighted = spark_policy(
        d, engine=spark_engine(spark_cluster.url, APP_CONF, spark_cluster.scratch), name="cluster-weighted"
    )
    per_unit = spark_policy(d, engine=spark_engine(spark_cluster.url, APP_CONF), name="cluster")
    out = {
        name: Session(load_policy(path, ledger_path=d / f"{name}.sqlite"), "alice")
        for name, path in (
            ("duckdb", SAMPLE / "dpsql.toml"),
            ("duckdb-weighted", SAMPLE / "dpsql.toml"),
            ("cluster", per_unit),
            ("cluster-weighted", weighted),
        )
    }
    engine = out["duckdb"].engine  # per unit in every query, as the cluster without scratch_dir
    engine.capabilities = dataclasses.replace(engine.capabilities, weighted_copy=False)
    engine = out["duckdb-weighted"].engine
    engine.capabilities = dataclasses.replace(engine.capabilities, weights_store_sums=False)
    assert not out["cluster"].engine.capabilities.weighted_copy  # a cluster without scratch_dir
    assert out["cluster-weighted"].engine.capabilities.weighted_copy
    yield out
    for s in out.values():
        s.close()


@pytest.mark.parametrize("backend,reference", [("cluster", "duckdb"), ("cluster-weighted", "duckdb-weighted")])
def test_the_cluster_gives_local_pre_noise_values(backend, reference, cluster_sessions, spark_cluster):
    """Every fifth corpus query's bounded query returns DuckDB's rows, with executors on both
    workers; over weighted copies, Parquet the executors wrote under scratch_dir (the queries
    that read copies: the others run the per-unit SQL the first parameter checks)."""
    different = []
    weighted = backend == "cluster-weighted"
    for sql in QUERIES:
        if weighted and not _reads_copies(cluster_sessions[backend], sql):
            continue
        want, got = _rows(cluster_sessions[reference], sql), _rows(cluster_sessions[backend], sql)
        if want != got:
            different.append((sql, want[:2], got[:2]))
    assert not different, different
    assert spark_cluster.executors(0) and spark_cluster.executors(1)  # the application's executors, one per worker
    engine = cluster_sessions[backend].engine
    assert engine._spark.sparkContext.master == spark_cluster.url
    if backend == "cluster-weighted":
        assert engine._copies
        for _, _, files in engine._copies.values():
            assert files.parent == engine._scratch.path and engine._scratch.path.parent == spark_cluster.scratch
            parts = list(files.glob("part-*.parquet"))  # written by executors: the driver runs no task
            assert parts and all(os.stat(p).st_mode & 0o777 == 0o600 for p in parts)
        assert os.stat(engine._scratch.path).st_mode & 0o777 == 0o700
    else:
        assert not engine._copies


def test_the_cluster_answers_and_charges_once(spark_cluster, tmp_path):
    policy = spark_policy(tmp_path, engine=spark_engine(spark_cluster.url, APP_CONF, spark_cluster.scratch))
    conn = dpsql.connect(policy, user="bob", ledger=tmp_path / "ledger.sqlite")
    try:
        cur = conn.cursor()
        cur.execute("SELECT diagnosis, COUNT(*) AS n, AVG(cost) AS avg_cost FROM visits GROUP BY diagnosis")
        rows = cur.fetchall()
        assert len(rows) == 12 and all(r[1] >= 0 and 0 <= r[2] <= 50000 for r in rows)
        assert conn.session.budget()["queries"] == 1
        cur.execute("SELECT floor, COUNT(*) FROM wards GROUP BY floor")  # a public table: no charge
        assert cur.fetchall() and conn.session.budget()["queries"] == 1
        scratch = conn.session.engine._scratch.path
        assert scratch.parent == spark_cluster.scratch and list(scratch.iterdir())
    finally:
        conn.close()
    assert not scratch.exists()  # the copies go with the engine


def test_spark_connect_on_the_cluster_gives_the_same_values(spark_cluster, cluster_sessions, tmp_path):
    """A Spark Connect server whose master is the cluster: DuckDB's pre-noise values, one charge."""
    from .server_fixture import free_port
    from .spark_cluster import connect_server, stop_group

    port = free_port()
    server = connect_server(spark_cluster.url, port, tmp_path / "connect.log")
    try:
        policy = spark_policy(tmp_path, engine=spark_engine(spark_cluster.url, APP_CONF))
        got = through_connect(policy, f"sc://127.0.0.1:{port}", CONNECT_QUERIES, tmp_path)
        assert len(spark_cluster.status()["activeapps"]) == 2  # this process's driver's, the server's
    finally:
        stop_group(server)
    assert got["rows"] == [repr(_rows(cluster_sessions["duckdb"], sql)) for sql in CONNECT_QUERIES]
    assert got["answer_rows"] == 3 and got["charged"] == 1


def test_the_cluster_listens_on_loopback_only(spark_cluster, cluster_sessions):
    """Master, workers (and their web UIs), executors and the driver: loopback only."""
    cluster_sessions["cluster"].execute("SELECT sex, COUNT(*) FROM patients GROUP BY sex")
    engine = cluster_sessions["cluster"].engine
    pids = spark_cluster.pids() + [engine._spark.sparkContext._gateway.proc.pid]
    addresses = [a for pid in pids for a in _listening(pid)]
    assert len(addresses) >= 6 and set(addresses) <= LOOPBACK, addresses


def test_a_second_master_in_one_process_is_refused(cluster_sessions, tmp_path):
    """One SparkContext per process: a local policy beside the cluster's is refused, not quietly
    run on the cluster's context."""
    with pytest.raises(PolicyError, match="already runs Spark with master") as info:
        open_engine(load_policy(spark_policy(tmp_path)))  # master = "local[2]"
    assert "one master per process" in (info.value.hint or "")
    assert cluster_sessions["cluster"].execute("SELECT COUNT(*) FROM wards").rows  # the cluster's context lives on


def _big_events(directory: Path, rows: int) -> Path:
    """The small policy's tables with `rows` events over 200 people, as Parquet for Spark."""
    make_db(directory / "db.duckdb", default_people(), [])
    con = duckdb.connect(str(directory / "db.duckdb"))
    con.execute(
        f"INSERT INTO events SELECT 1 + i % 200, ['a', 'b', 'c'][1 + i % 3], (i * 7) % 50, "
        f"['north', 'south', 'east'][1 + i % 3] FROM range({rows}) t(i)"
    )
    con.close()
    return write_policy(directory)


@pytest.fixture(scope="module")
def big_events(spark_cluster, tmp_path_factory) -> Path:
    """6M events over 200 people on the cluster, bounded per unit in every query: a query of
    15-25 s on the two 1-core executors, loaded machine or not."""
    d = tmp_path_factory.mktemp("big")
    return move_policy(_big_events(d, 6_000_000), "spark", engine=spark_engine(spark_cluster.url, APP_CONF))


def _killed_mid_query(
    spark_cluster, policy: Path, tmp_path: Path, workers: list[int], timeout: float | None = None
) -> tuple[dict[str, object], list[dict]]:
    """A grouped query over the big events, its workers `workers` SIGKILLed (their executors
    with them) while its tasks run after its charge; what the client saw, and the ledger's
    charges. The killed workers are started again afterwards."""
    if timeout is not None:
        text = policy.read_text().replace("[engine]\n", f"[engine]\nstatement_timeout = {timeout}\n", 1)
        policy = policy.parent / "timed.toml"
        policy.write_text(text)
    conn = dpsql.connect(policy, user="alice", ledger=tmp_path / "ledger.sqlite")
    conn.session.engine._spark.conf.set("spark.sql.files.maxPartitionBytes", "2m")  # many tasks, on both executors
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            cur = conn.cursor()
            cur.execute("SELECT kind, COUNT(*), SUM(amount) FROM events GROUP BY kind")
            outcome["rows"] = cur.fetchall()
        except Exception as e:  # noqa: BLE001 - the test reads what the client would see
            outcome["error"] = e

    try:
        context = conn.session.engine._spark.sparkContext
        tracker = context.statusTracker()
        # An executor on each worker, registered with the driver (the driver counts as one),
        # before the query starts: a worker started again gets its executor only seconds later.
        spark_cluster.wait_for(
            lambda: (
                context._jsc.sc().statusTracker().getExecutorInfos().__len__() >= 3
                and all(spark_cluster.executors(i) for i in (0, 1))
            ),
            "an executor on each worker",
        )
        query = threading.Thread(target=run)
        query.start()
        deadline = time.monotonic() + 120
        while not (
            _charges(tmp_path / "ledger.sqlite")
            and tracker.getActiveStageIds()
            and all(spark_cluster.executors(i) for i in workers)
        ):  # the bounded query, after its charge
            assert query.is_alive() and time.monotonic() < deadline, f"the query ended first: {outcome}"
            time.sleep(0.05)
        time.sleep(0.5)  # tasks running on the executors
        assert query.is_alive(), "the query ended before the worker was killed: make it longer"
        for i in workers:
            spark_cluster.kill_worker(i)
        query.join(timeout=300)
        assert not query.is_alive()
        return outcome, conn.session.ledger.history("alice")
    finally:
        conn.close()
        for i in workers:  # for the tests after this one
            spark_cluster.start_worker(i)
        spark_cluster.wait_for(lambda: spark_cluster.alive_workers() == 2, "the restarted workers")


def _charges(ledger: Path) -> int:
    """Charges in the ledger file, read apart from the session (SQLite, WAL)."""
    import sqlite3

    con = sqlite3.connect(f"file:{ledger}?mode=ro", uri=True)
    try:
        return con.execute("SELECT COUNT(*) FROM charges").fetchone()[0]
    except sqlite3.Error:
        return 0
    finally:
        con.close()


def _failed_once(outcome: dict[str, object], history: list[dict]) -> OperationalError:
    """A failure the client saw with a SQLSTATE, and one charge recorded as failed, nothing released."""
    error = outcome["error"]
    assert isinstance(error, OperationalError) and error.sqlstate, error
    assert len(history) == 1
    assert history[0]["released"] == {
        "failed": {
            "sqlstate": error.sqlstate,
            "reason": history[0]["released"]["failed"]["reason"],
            "resource_limit": history[0]["released"]["failed"]["resource_limit"],
        }
    }
    return error


def test_a_worker_killed_mid_query_is_retried_or_fails_once_charged(spark_cluster, big_events, tmp_path):
    """One worker JVM (and with it its executor) SIGKILLed while a query's tasks run on it:
    Spark runs the lost tasks again on the other worker and the answer is released once, or
    the query fails with a SQLSTATE and nothing released. Either way the ledger holds one charge
    (a failure after the charge stays charged: whether it fails can depend on the data)."""
    outcome, history = _killed_mid_query(spark_cluster, big_events, tmp_path, [1])
    if "rows" in outcome:  # retried: one release, the three groups
        assert sorted(r[0] for r in outcome["rows"]) == ["a", "b", "c"]
        assert len(history) == 1 and "failed" not in history[0]["released"]
        assert len(history[0]["released"]["rows"]) == 3
    else:
        _failed_once(outcome, history)
    print(f"\nworker killed mid-query: {'retried, answered' if 'rows' in outcome else outcome['error']!r}")


def test_every_worker_killed_mid_query_fails_at_the_timeout_once_charged(spark_cluster, big_events, tmp_path):
    """Both workers killed mid-query: no executor is left to run the tasks again, the job waits
    for one until the statement timeout cancels it (57014), and the charge stays, recorded as
    failed, nothing released."""
    outcome, history = _killed_mid_query(spark_cluster, big_events, tmp_path, [0, 1], timeout=25)
    assert _failed_once(outcome, history).sqlstate == "57014"

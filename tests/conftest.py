"""Shared fixtures: small real databases (DuckDB files, Parquet, CSV) with a policy beside them."""

from __future__ import annotations

import contextlib
import tempfile
import textwrap
import threading
from pathlib import Path

import duckdb
import pytest

import dpsql
from dpsql.config import load_policy
from dpsql.duck_rows import insert_rows
from dpsql.session import Session

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_data"

POLICY = """
[engine]
database = "db.duckdb"

[privacy]
filter = "basic"
epsilon = {epsilon}
delta = 1e-6
query_epsilon = {query_epsilon}
mechanism = "laplace"

[tables.people]
privacy_unit = "pid"
max_groups = 1
max_rows = 1
columns.age = {{ lower = 0, upper = 100 }}
columns.sex = {{ keys = ["F", "M"] }}

[tables.events]
privacy_unit = "pid"
max_groups = 2
max_rows = 3
columns.amount = {{ lower = 0, upper = 50 }}
columns.kind = {{ keys = ["a", "b", "c"] }}
columns.place = {{ keys_from = "places.name" }}

[tables.places]
public = true

[tables.rows]
privacy_unit = "row"
columns.v = {{ lower = -10, upper = 10 }}
columns.g = {{ keys = [1, 2, 3] }}

[users.alice]
[users.bob]
epsilon = 2.0
"""


@contextlib.contextmanager
def sample_session(user: str = "alice"):
    """A Session on the sample policy whose ledger lives in a temporary directory: never beside
    the policy in sample_data/, where a default ledger would outlive the run."""
    with tempfile.TemporaryDirectory(prefix="dpsql-sample-") as d:
        session = Session(load_policy(SAMPLE / "dpsql.toml", ledger_path=Path(d) / "ledger.sqlite"), user)
        try:
            yield session
        finally:
            session.close()


def make_db(path: Path, people, events, places=("north", "south", "east"), rows=()) -> None:
    """Write a DuckDB file: people(pid, age, sex, city), events(pid, kind, amount, place), places(name), rows(v, g)."""
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE people (pid INTEGER, age DOUBLE, sex VARCHAR, city VARCHAR)")
    con.execute("CREATE TABLE events (pid INTEGER, kind VARCHAR, amount DOUBLE, place VARCHAR)")
    con.execute("CREATE TABLE places (name VARCHAR, region VARCHAR)")
    con.execute("CREATE TABLE rows (v DOUBLE, g INTEGER)")
    # insert_rows, not executemany: one INSERT per row took over a second for these 400 rows,
    # and hundreds of tests build this database.
    insert_rows(con, "people", list(people), 4)
    insert_rows(con, "events", list(events), 4)
    insert_rows(con, "places", [(p, "r" + str(i % 2)) for i, p in enumerate(places)], 2)
    insert_rows(con, "rows", list(rows), 2)
    con.close()


def write_policy(directory: Path, *, epsilon: float = 1000.0, query_epsilon: float = 1.0, extra: str = "") -> Path:
    path = directory / "policy.toml"
    path.write_text(textwrap.dedent(POLICY.format(epsilon=epsilon, query_epsilon=query_epsilon)) + extra)
    return path


def default_people():
    cities = ["Oslo", "Rome", "Lima", "Pune"]
    return [(i, 20 + (i * 7) % 60, "F" if i % 2 else "M", cities[i % 4]) for i in range(1, 201)]


def default_events():
    out = []
    for i in range(1, 201):
        for j in range(i % 5):
            out.append((i, "abc"[j % 3], float((i * j) % 50), ["north", "south", "east"][(i + j) % 3]))
    return out


@pytest.fixture
def small_policy(tmp_path: Path) -> Path:
    make_db(
        tmp_path / "db.duckdb",
        default_people(),
        default_events(),
        rows=[((i % 21) - 10.0, 1 + i % 3) for i in range(300)],
    )
    return write_policy(tmp_path)


@pytest.fixture
def session(small_policy: Path) -> Session:
    s = Session(load_policy(small_policy), "alice")
    yield s
    s.close()


@pytest.fixture
def conn(small_policy: Path):
    c = dpsql.connect(small_policy, user="alice")
    yield c
    c.close()


@pytest.fixture
def sample_conn(tmp_path: Path):
    c = dpsql.connect(SAMPLE / "dpsql.toml", user="alice", ledger=tmp_path / "ledger.sqlite")
    yield c
    c.close()


@pytest.fixture(scope="session")
def pg_server():
    from .pgserver import PgServer

    server = PgServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def spark_cluster():
    """A Spark standalone master and two workers on 127.0.0.1 (tests/spark_cluster.py), stopped
    at the end however the tests went."""
    from .spark_cluster import SparkCluster

    cluster = SparkCluster().start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def pg_ledger_url(pg_server, request):
    name = "ledger_" + "".join(c if c.isalnum() else "_" for c in request.node.name.lower())[:50]
    return pg_server.create_database(name)


@pytest.fixture
def serve(small_policy, tmp_path):
    """A running `dpsql serve` on the small policy, with logins for alice and bob."""
    from .server_fixture import Serve

    s = Serve(small_policy, tmp_path / "ledger.sqlite")
    yield s
    s.stop()


def hospital_policy(directory: Path, epsilon: float = 100000.0) -> Path:
    """The sample hospital's policy in `directory` (its sources by absolute path), alice's budget `epsilon`."""
    text = (SAMPLE / "dpsql.toml").read_text().replace('source = "', f'source = "{SAMPLE}/')
    policy = directory / "hospital.toml"
    policy.write_text(text.replace("epsilon = 10.0", f"epsilon = {epsilon}"))
    return policy


@pytest.fixture
def hospital(tmp_path):
    """A cursor on the sample hospital with a large budget, epsilon 1 per query, cache off."""
    conn = dpsql.connect(hospital_policy(tmp_path), user="alice", ledger=tmp_path / "hospital.sqlite")
    cur = conn.cursor()
    cur.execute("SET dpsql.cache = off")
    cur.execute("SET dpsql.epsilon = 1")
    yield cur
    conn.close()


def pytest_collection_modifyitems(config, items):
    """Tests on PostgreSQL or Spark (marked `backends`) first, in their files' order: xdist hands
    out tests in this order, and these are the longest (a Spark property test runs for minutes), so
    they start while the other worker has plenty left to do, never as one worker's tail at the end."""
    items.sort(key=lambda item: item.get_closest_marker("backends") is None)


_PREFETCH: list[tuple[threading.Event, threading.Thread]] = []  # this run's (stop, thread), if any


def pytest_configure(config):
    """A whole run (no paths named, clients not deselected) builds the missing tools'
    environments in the background from its start (tests/tool_envs.py: prefetch), in the
    process that hands out the tests (xdist's controller, or the only one)."""
    whole = config.args_source == pytest.Config.ArgsSource.TESTPATHS
    marks = config.option.markexpr or ""
    if hasattr(config, "workerinput") or not whole or "not slow" in marks or "not clients" in marks:
        return
    from .tool_envs import prefetch

    stop = threading.Event()
    _PREFETCH.append((stop, prefetch(stop)))


def pytest_unconfigure(config):
    """Stops the prefetch after the build under way (each build's own timeouts bound it)."""
    while _PREFETCH:
        stop, thread = _PREFETCH.pop()
        stop.set()
        thread.join()

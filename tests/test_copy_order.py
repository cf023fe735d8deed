"""A weighted copy built without DuckDB keeping insertion order inside each append (its
preserve_insertion_order is off: a third of a large build's time) still stores its three runs
in order (units of one row, then those within the limit, then the others: a split's tail skips
the row groups before it), and its rows are the source's rows, each with its unit's count; built
in parts (by a hash of the unit, when a run's units would not fit the memory limit's join), it
is the same copy."""

from __future__ import annotations

import duckdb

from dpsql.config import load_policy
from dpsql.engines import duckdb as duckdb_engine
from dpsql.engines import open_engine

from .conftest import write_policy

LIMIT = 6


def _events(tmp_path, units: int = 120000) -> int:
    """600,000 events over five row groups (at 120,000 units); unit i has 1 + i % 9 rows (one row,
    within the limit of 6, beyond it), interleaved in the source so that no run is already in
    order. Returns the rows."""
    con = duckdb.connect(str(tmp_path / "db.duckdb"))
    con.execute("CREATE TABLE people (pid INTEGER, age DOUBLE, sex VARCHAR, city VARCHAR)")
    con.execute("CREATE TABLE places (name VARCHAR, region VARCHAR)")
    con.execute("CREATE TABLE rows (v DOUBLE, g INTEGER)")
    con.execute(
        "CREATE TABLE events AS SELECT CAST(pid AS INTEGER) AS pid, 'a' AS kind, CAST(pid % 7 AS DOUBLE) AS amount, "
        f"'north' AS place FROM (SELECT range % {units} AS pid, range // {units} AS j FROM range({units * 9})) "
        "WHERE j < 1 + pid % 9 ORDER BY hash(pid, j)"
    )
    rows = con.execute("SELECT COUNT(*) FROM events").fetchone()[0]
    con.close()
    return rows


def _runs(engine, copy: str) -> list[tuple]:
    """(run, first rowid, last rowid, rows) of each of the copy's runs."""
    return engine._con.execute(
        f"SELECT CASE WHEN __dpsql_n = 1 THEN 0 WHEN __dpsql_n <= {LIMIT} THEN 1 ELSE 2 END AS run, "
        f"MIN(rowid), MAX(rowid), COUNT(*) FROM {copy} GROUP BY run ORDER BY run"
    ).fetchall()


def test_the_copy_keeps_its_three_runs_in_order_over_many_row_groups(tmp_path):
    rows = _events(tmp_path)
    engine = open_engine(load_policy(write_policy(tmp_path)))
    try:
        assert engine._con.execute("SELECT current_setting('preserve_insertion_order')").fetchone()[0] is False
        copy = engine.weighted_copy("events", "pid", LIMIT, 10)
        runs = _runs(engine, copy)
        assert [r[0] for r in runs] == [0, 1, 2]
        assert runs[0][2] < runs[1][1] and runs[1][2] < runs[2][1]  # run after run, nothing interleaved
        assert sum(r[3] for r in runs) == rows
        wrong = engine._con.execute(
            f"SELECT COUNT(*) FROM {copy} AS c JOIN (SELECT pid, COUNT(*) AS n FROM main.events GROUP BY pid) AS s "
            "ON c.pid = s.pid WHERE c.__dpsql_n <> s.n"
        ).fetchone()[0]
        assert wrong == 0
    finally:
        engine.close()


def test_parts_keep_each_join_within_half_the_memory_limit():
    assert duckdb_engine.copy_parts(0, 1 << 30, 1) == 1
    per_part = (1 << 29) // (duckdb_engine.UNIT_BYTES + 16)
    assert duckdb_engine.copy_parts(per_part, 1 << 30, 1) == 1
    assert duckdb_engine.copy_parts(per_part + 1, 1 << 30, 1) == 2
    assert duckdb_engine.copy_parts(19_300_000, 1 << 30, 1) == 3  # the within-limit run at 100M rows
    assert duckdb_engine.copy_parts(10**6, 1 << 30, 3) == 1 < duckdb_engine.copy_parts(10**7, 1 << 30, 3)
    assert duckdb_engine._bytes("953.6 MiB") == int(953.6 * 2**20) and duckdb_engine._bytes("1.5 GiB") == 3 << 29
    assert duckdb_engine._bytes("200MB") == 200 * 10**6 and duckdb_engine._bytes("512 bytes") == 512


def test_a_copy_built_in_parts_is_the_same_copy(tmp_path, monkeypatch):
    """Each run split into several parts by a hash of the unit (as a large table's would be under
    a small memory limit): the same rows with the same counts, weights and weighted sums, in the
    same three runs."""
    rows = _events(tmp_path, units=20000)
    copies = []
    for parts in (None, 3):
        if parts is not None:
            monkeypatch.setattr(duckdb_engine, "copy_parts", lambda units, memory, aggregates: parts)
        engine = open_engine(load_policy(write_policy(tmp_path)))
        try:
            sums = {"s": "CAST(amount AS BIGINT) * __dpsql_w // GREATEST(norm, 1)"}
            copy = engine.weighted_copy("events", "pid", LIMIT, 10, sums, {"norm": "SUM(amount)"})
            runs = _runs(engine, copy)
            assert [r[0] for r in runs] == [0, 1, 2] and runs[0][2] < runs[1][1] and runs[1][2] < runs[2][1]
            copies.append(engine._con.execute(f"SELECT * FROM {copy} ORDER BY ALL").fetchall())
        finally:
            engine.close()
    assert len(copies[0]) == rows and copies[0] == copies[1]
    assert len({r[-1] for r in copies[0]}) > 1  # the weighted sums differ from unit to unit

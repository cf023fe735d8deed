"""A weighted copy built without DuckDB keeping insertion order inside each append (its
preserve_insertion_order is off: a third of a large build's time) still stores its three runs
in order (units of one row, then those within the limit, then the others: a split's tail skips
the row groups before it), and its rows are the source's rows, each with its unit's count."""

from __future__ import annotations

import duckdb

from dpsql.config import load_policy
from dpsql.engines import open_engine

from .conftest import write_policy

LIMIT = 6


def test_the_copy_keeps_its_three_runs_in_order_over_many_row_groups(tmp_path):
    con = duckdb.connect(str(tmp_path / "db.duckdb"))
    # 600,000 events over five row groups; unit i has 1 + i % 9 rows (one row, within the
    # limit of 6, beyond it), interleaved in the source so that no run is already in order.
    con.execute("CREATE TABLE people (pid INTEGER, age DOUBLE, sex VARCHAR, city VARCHAR)")
    con.execute("CREATE TABLE places (name VARCHAR, region VARCHAR)")
    con.execute("CREATE TABLE rows (v DOUBLE, g INTEGER)")
    con.execute(
        "CREATE TABLE events AS SELECT CAST(pid AS INTEGER) AS pid, 'a' AS kind, 1.0 AS amount, 'north' AS place "
        "FROM (SELECT range % 120000 AS pid, range // 120000 AS j FROM range(1080000)) WHERE j < 1 + pid % 9 "
        "ORDER BY hash(pid, j)"
    )
    rows = con.execute("SELECT COUNT(*) FROM events").fetchone()[0]
    con.close()
    engine = open_engine(load_policy(write_policy(tmp_path)))
    try:
        assert engine._con.execute("SELECT current_setting('preserve_insertion_order')").fetchone()[0] is False
        copy = engine.weighted_copy("events", "pid", LIMIT, 10)
        runs = engine._con.execute(
            f"SELECT CASE WHEN __dpsql_n = 1 THEN 0 WHEN __dpsql_n <= {LIMIT} THEN 1 ELSE 2 END AS run, "
            f"MIN(rowid), MAX(rowid), COUNT(*) FROM {copy} GROUP BY run ORDER BY run"
        ).fetchall()
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

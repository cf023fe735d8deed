"""Seeded benchmark data, the same for every system: a private table of events, several per
person, and a small public table.

    events(uid, grp, value, day)   uid: the person (rows / 5 of them, Poisson-like multiplicity);
                                   grp: 10 keys g0..g9, 80 % of a person's rows in their home key;
                                   value: lognormal (median ~20, long right tail); day: in 2024
    groups(grp, region)            public: g0..g9 -> r0..r2

Generated inside DuckDB from hash(row, seed), so the data depend on the seed only (not on
threads), and written both as a DuckDB file and as Parquet.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

KEYS = [f"g{i}" for i in range(10)]
REGIONS = ["r0", "r1", "r2"]
VALUE_BOUNDS = (0.0, 500.0)
MAX_GROUPS, MAX_ROWS = 2, 5  # per person: groups per query, rows per group (10 rows in all)


def generate(directory: Path, rows: int, seed: int = 7, parquet: bool = True) -> Path:
    """Write bench_<rows>.duckdb and (with `parquet`) events_<rows>.parquet under directory
    (kept if present)."""
    directory.mkdir(parents=True, exist_ok=True)
    db = directory / f"bench_{rows}.duckdb"
    if db.exists():
        return db
    units = max(1, rows // 5)
    tmp = db.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    con = duckdb.connect(str(tmp))
    con.execute(f"""
        CREATE TABLE events AS
        SELECT CAST(hash(i, {seed}) % {units} AS BIGINT) AS uid,
               'g' || CAST(CASE WHEN hash(i, {seed + 1}) % 10 < 8 THEN hash(hash(i, {seed}) % {units}, {seed + 2}) % 10
                                ELSE hash(i, {seed + 3}) % 10 END AS VARCHAR) AS grp,
               exp(3 + sqrt(-2 * ln((hash(i, {seed + 4}) % 1000000 + 1) / 1000001.0))
                       * cos(2 * pi() * (hash(i, {seed + 5}) % 1000000) / 1000000.0)) AS value,
               DATE '2024-01-01' + CAST(hash(i, {seed + 6}) % 366 AS INTEGER) AS day
        FROM range({rows}) AS t(i)
    """)
    con.execute(
        "CREATE TABLE groups AS SELECT 'g' || CAST(i AS VARCHAR) AS grp, 'r' || CAST(i % 3 AS VARCHAR) AS region "
        "FROM range(10) AS t(i)"
    )
    if parquet:
        con.execute(f"COPY events TO '{directory / f'events_{rows}.parquet'}' (FORMAT parquet)")
    con.close()
    tmp.rename(db)
    return db


def policy_text(db: Path) -> str:
    """The dpsql policy for the benchmark data: the bounds every system gets."""
    keys = ", ".join(f'"{k}"' for k in KEYS)
    return f"""
[engine]
database = "{db}"

[privacy]
filter = "basic"
epsilon = 1e12
delta = 0.5
query_epsilon = 1
bounds = "policy"  # the bounding machinery at fixed limits: what a plain engine is compared with

[tables.events]
privacy_unit = "uid"
max_groups = {MAX_GROUPS}
max_rows = {MAX_ROWS}
max_contributions = {MAX_GROUPS * MAX_ROWS}
columns.value = {{ lower = {VALUE_BOUNDS[0]}, upper = {VALUE_BOUNDS[1]} }}
columns.grp = {{ keys = [{keys}] }}

[tables.groups]
public = true

[users.alice]
"""

"""Python rows into DuckDB (duck_rows.py): the appender and the chunked multi-row INSERT it
falls back to store the same values, with the types executemany would give them."""

from __future__ import annotations

import datetime
import decimal

import duckdb
import pytest

from dpsql import duck_rows
from dpsql.duck_rows import insert_in_chunks, insert_rows

ROWS = [
    (
        i,
        f"k{i}" if i % 7 else None,
        decimal.Decimal(i) / 4,
        datetime.date(2020, 1, 1 + i % 28),
        float(i) / 3 if i % 5 else float("nan"),
    )
    for i in range(1234)
]
SCHEMA = "(n BIGINT, s VARCHAR, d DECIMAL(10, 2), day DATE, x DOUBLE)"


def _stored(con: duckdb.DuckDBPyConnection, table: str) -> list[tuple]:
    return con.execute(f"SELECT * FROM {table} ORDER BY n").fetchall()


@pytest.mark.parametrize("how", ["insert_rows", "chunks"])
def test_rows_arrive_as_executemany_would_store_them(how):
    con = duckdb.connect(":memory:")
    con.execute(f"CREATE TEMP TABLE expected {SCHEMA}")
    con.executemany("INSERT INTO expected VALUES (?, ?, ?, ?, ?)", [list(r) for r in ROWS])
    con.execute(f'CREATE TEMP TABLE "odd ""name" {SCHEMA}')
    (insert_rows if how == "insert_rows" else insert_in_chunks)(con, '"odd ""name"', ROWS, 5)
    expected, got = _stored(con, "expected"), _stored(con, '"odd ""name"')
    assert len(got) == len(ROWS) > duck_rows.CHUNK * 2
    assert repr(got) == repr(expected)  # repr: NaN compares unequal to itself


def test_nothing_to_insert_runs_nothing():
    con = duckdb.connect(":memory:")
    insert_rows(con, "no_such_table", [], 3)

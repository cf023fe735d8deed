"""Python rows into a DuckDB table.

executemany runs one INSERT per row, about a millisecond each (200 rows took 156 ms, and a
post-processed result of thousands of groups took seconds). An appender buffers the rows and
applies them in one statement; where the DuckDB build has none, multi-row INSERTs of CHUNK rows
with parameters do the same job. Values convert as executemany's parameters would.
"""

from __future__ import annotations

from typing import Any, Sequence

import duckdb

CHUNK = 500


def insert_rows(con: duckdb.DuckDBPyConnection, table: str, rows: Sequence[Sequence[Any]], width: int) -> None:
    """Append `rows` (each `width` values) to `table`, a name as SQL spells it (quoted, qualified)."""
    if not rows:
        return
    appender = getattr(con, "appender", None)
    if appender is not None:
        with appender(table) as ap:
            ap.append_rows(rows)
        return
    insert_in_chunks(con, table, rows, width)


def insert_in_chunks(con: duckdb.DuckDBPyConnection, table: str, rows: Sequence[Sequence[Any]], width: int) -> None:
    marks = "(" + ", ".join("?" * width) + ")"
    for start in range(0, len(rows), CHUNK):
        part = rows[start : start + CHUNK]
        con.execute(f"INSERT INTO {table} VALUES {', '.join([marks] * len(part))}", [v for r in part for v in r])

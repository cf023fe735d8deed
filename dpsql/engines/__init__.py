"""Backends that run the rewritten query. Only this package (and the ledger) touch data."""

from __future__ import annotations

import sqlglot

from ..config import Policy
from .base import Engine, ResultSet


def open_engine(policy: Policy) -> Engine:
    """The engine the policy names, opened and locked down (backends import lazily: psycopg
    and pyspark are needed only by those who use them)."""
    kind = policy.engine.kind
    engine: Engine
    if kind == "postgres":
        from .postgres import PostgresEngine

        engine = PostgresEngine(policy)
    elif kind == "spark":
        from .spark import SparkEngine

        engine = SparkEngine(policy)
    else:
        from .duckdb import DuckDBEngine

        engine = DuckDBEngine(policy)
    # Parse and generate once before any server thread does: sqlglot sets up a dialect on its
    # first use, and 64 first queries arriving at once once failed to parse (a ParseError seen
    # once in tests/test_scale_out.py, not reproduced since).
    engine.prepare(sqlglot.parse_one("SELECT 1 AS one", read="duckdb"))
    return engine


__all__ = ["Engine", "ResultSet", "open_engine"]

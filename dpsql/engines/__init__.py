"""Backends that run the rewritten query. Only this package (and the ledger) touch data."""

from __future__ import annotations

import sqlglot

from ..config import Policy
from . import duckdb, postgres, spark  # noqa: F401  (each registers its engine; psycopg and pyspark load on open)
from .base import ENGINES, Capabilities, Engine, ResultSet


def open_engine(policy: Policy) -> Engine:
    """The engine the policy names (its registered class), opened and locked down."""
    engine = ENGINES[policy.engine.kind](policy)
    # Parse and generate once before any server thread does: sqlglot sets up a dialect on its
    # first use, and 64 first queries arriving at once once failed to parse (a ParseError seen
    # once in tests/test_scale_out.py, not reproduced since).
    engine.sql_of(sqlglot.parse_one("SELECT 1 AS one", read="duckdb"))
    return engine


__all__ = ["ENGINES", "Capabilities", "Engine", "ResultSet", "open_engine"]

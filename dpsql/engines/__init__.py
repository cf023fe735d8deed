"""Backends that run the rewritten query. Only this package (and the ledger) touch data."""

from __future__ import annotations

from ..config import Policy
from .base import Engine, ResultSet


def open_engine(policy: Policy) -> Engine:
    """The engine the policy names, opened and locked down (backends import lazily: psycopg
    and pyspark are needed only by those who use them)."""
    kind = policy.engine.kind
    if kind == "postgres":
        from .postgres import PostgresEngine

        return PostgresEngine(policy)
    if kind == "spark":
        from .spark import SparkEngine

        return SparkEngine(policy)
    from .duckdb import DuckDBEngine

    return DuckDBEngine(policy)


__all__ = ["Engine", "ResultSet", "open_engine"]

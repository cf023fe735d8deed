"""What a backend offers the session: a dialect, the schema, and execution of rewritten SQL."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Sequence


@dataclass(frozen=True)
class ResultSet:
    """Columnar result of one engine query: names, engine type names, and one list per column."""

    names: Sequence[str]
    types: Sequence[str]
    columns: Sequence[Sequence[Any]]

    @property
    def row_count(self) -> int:
        return len(self.columns[0]) if self.columns else 0


class Engine(Protocol):
    dialect: str

    def schema(self) -> Mapping[str, Mapping[str, str]]:
        """table -> column -> type name, for the policy's tables only."""

    def execute(self, sql: str) -> ResultSet:
        """Run a query built by dpsql (never the analyst's text)."""

    def describe(self, sql: str) -> tuple[list[str], list[str]]:
        """Names and types of a query's result, without executing it."""

    def interrupt(self, thread_ident: int) -> None:
        """Cancel the query running on that thread, if any."""

    def data_version(self) -> str:
        """Changes whenever the underlying data may have changed (keys the answer cache)."""

    # Optional: weighted_copy(table, unit, limit, bits) -> a relation name holding the table's
    # rows with __dpsql_w = floor(limit * 2^bits / max(rows of the unit, limit)), kept per data
    # version. Engines without it bound contributions with a per-unit aggregation instead.

    def close(self) -> None: ...

"""What a writer's own connection last read and wrote of the budgets (the filter in force, the
running totals, the chain's heads, the last charge id), kept while no other connection has
committed to the ledger since: a charge then skips reading them back. The writer thread (or a
supervisor's) is almost always the only writer, and the backend tells when it is not (SQLite's
`PRAGMA data_version` changes whenever another connection commits); a transaction of its own
that rolls back forgets everything (`clear`), since the database forgets those writes too."""

from __future__ import annotations

from typing import Any, TypeVar

from ..accounting.filters import Filter, Totals

K = TypeVar("K")
V = TypeVar("V")
LIMIT = 4096  # entries of each kind; emptied when full (analysts x segments)


class Current:
    """The cache itself, one per connection; valid only inside that connection's write
    transaction, once `seen(version)` has been told the database's version there."""

    def __init__(self) -> None:
        self.version: Any = None
        self.segments: dict[str, tuple[Any, Any, int, Filter]] = {}  # who: (budget, window start, segment, filter)
        self.totals: dict[tuple[str, int], Totals] = {}
        self.heads: dict[tuple[str, str], tuple[int, str]] = {}
        self.last_id: int | None = None  # the last charge id this connection wrote

    def seen(self, version: Any) -> None:
        """The database's version now: anything another connection committed clears the cache."""
        if version != self.version:
            self.clear()
            self.version = version

    def clear(self) -> None:
        self.segments, self.totals, self.heads, self.last_id = {}, {}, {}, None


def keep(table: dict[K, V], key: K, value: V) -> None:
    """`table[key] = value` in one of a Current's tables, emptied first when full."""
    if len(table) >= LIMIT:
        table.clear()
    table[key] = value

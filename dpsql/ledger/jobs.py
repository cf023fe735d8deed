"""The ledger's hot writes as plain values: a charge, and a statement written lazily (a release
record, a cached answer). A value, unlike a closure, can be handed to the writer of another
process: `dpsql serve --workers N` sends its workers' jobs to one writer in the supervisor
(dpsql/ledger/remote_writer.py), so that one transaction and one fsync cover the charges of
every worker and no worker waits for another's lock. The ledger applies a job (Ledger._apply)
wherever its writer runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..accounting.cost import Cost
from ..config import BudgetPolicy

GLOBAL = "*global*"  # the global budget's name in the ledger: its lock is taken before any analyst's


@dataclass(frozen=True)
class ChargeJob:
    """Check the analyst's filters (and the global budget's) and record the charge; refused
    (BudgetExceeded, nothing written) when a filter would halt. `detail` is JSON text."""

    user: str
    budget: BudgetPolicy
    cost: Cost
    sql: str
    detail: str
    global_budget: BudgetPolicy | None = None
    # Other analysts charged the same cost in the same transaction, each with a charge record of
    # their own (a synopsis charged to "everyone"): all admitted, or none charged.
    others: tuple[tuple[str, BudgetPolicy], ...] = ()
    durable = True

    @property
    def users(self) -> list[str]:
        """The analysts whose locks the charge's transaction holds, the global budget's first and
        the others' in name order (so that two such charges never wait for each other)."""
        return ([GLOBAL] if self.global_budget is not None else []) + sorted({self.user, *(u for u, _ in self.others)})


@dataclass(frozen=True)
class StatementJob:
    """One statement of the ledger's own SQL (`?` placeholders), committed without waiting for
    the disk: the next durable commit covers it."""

    sql: str
    params: tuple[Any, ...]
    durable = False
    users: tuple[str, ...] = ()

"""The charge and the engine side by side: an engine failure told with what happened to the
budget, a failure after the charge recorded as such, and the engine started while the ledger
admits a charge, stopped if it refuses (`overlapping`, `Stopper`)."""

from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING, Any, Iterator, NoReturn

from ..accounting.cost import Cost
from ..errors import Error, OperationalError
from ..ledger import Charge, PendingCharge

if TYPE_CHECKING:
    from .pipeline import Session


STOP_TRIES = 10_000  # interrupts, a millisecond apart, of a query stopped by a refused charge


class Stopper:
    """What a refused (or unrecordable) charge does, from the ledger's writer thread, to the
    query this thread started meanwhile: `stop` keeps it from starting, and interrupts end it,
    so the refusal comes when the ledger decides, whatever the query would have taken. An
    interrupt that reaches DuckDB just before the query begins is lost, so they are repeated
    on a thread of their own until the engine call has returned (`ended`), at most STOP_TRIES
    times; the writer thread never waits for them."""

    def __init__(self, engine: Any):
        self.engine, self.ident = engine, threading.get_ident()
        self.stop, self.ended = threading.Event(), threading.Event()

    def __call__(self) -> None:
        self.stop.set()
        threading.Thread(target=self._interrupt, name="dpsql-stop", daemon=True).start()

    def _interrupt(self) -> None:
        for _ in range(STOP_TRIES):
            self.engine.interrupt(self.ident)
            if self.ended.wait(0.001):
                return


@contextlib.contextmanager
def charge_told(status: str) -> Iterator[None]:
    """An engine failure's hint, completed with what happened to the budget: the engine does
    not know whether the statement was charged."""
    try:
        yield
    except OperationalError as e:
        if e.sqlstate not in ("XX000", "42883", "57014", "53100", "53200"):  # cancelled, out of memory or disk
            raise
        raise OperationalError(
            e.message, sqlstate=e.sqlstate, hint=f"{e.hint}; {status}" if e.hint else status
        ) from None


def overlapping(session: Session, cost: Cost) -> bool:
    """Whether the engine may start while the ledger admits the charge (saving the admission's
    time, a fifth to a third of a small query's): only when the engine can be stopped by a
    refusal and this session's last admitted charge left room for this one (for a repeated
    cost, judged while that charge's commit reached the disk). So a refusal
    the session can foresee (the budget spent, a query past it, the first query, any query
    after a refusal) always comes before any engine work; one it cannot (the budget spent
    meanwhile by another connection of the analyst, or the global budget by others) stops
    the query, and the next one waits for its admission again."""
    if session._headroom is None or not session.engine.capabilities.overlaps_admission:
        return False
    last, room = session._headroom
    return room if cost is last.cost or cost == last.cost else last.filter.admits_cost(last.totals, cost)


def charging(session: Session, cost: Cost, sql: str, detail_text: str, stopper: Stopper | None = None) -> PendingCharge:
    """The session's charge of `cost` for `sql`, sent to the ledger: to the analyst's filter and
    the global budget the session charges to; admitted (or refused) when it is awaited."""
    return session.ledger.charging(
        session.user.name, session.budget_policy, cost, sql, detail_text, session.global_budget, stopper
    )


@contextlib.contextmanager
def charged_work(session: Session, pending: PendingCharge, charge: Charge, status: str) -> Iterator[None]:
    """Data-dependent work between a charge's admission and its answer: a failure stays
    charged and is recorded as such (_failed); an interrupt is raised once the charge is
    durable."""
    try:
        yield
    except Exception as e:
        pending.durable()
        failed(session, charge, e, status)
    except BaseException:
        pending.durable()
        raise


def failed(
    session: Session,
    charge: Charge,
    failure: BaseException,
    status: str = "the query's cost stays charged, because whether a query fails can depend on the data",
) -> NoReturn:
    """A query that fails after its charge (the engine's memory or time limit, a cancel, an
    engine error): the charge stays, as whether it fails can depend on the data; its release
    record says it failed and why (dpsql's own words), and the client gets the error with
    its SQLSTATE and what happened to the budget."""
    error = failure if isinstance(failure, Error) else None
    session.ledger.record_failure(
        charge.id, error.sqlstate if error else "XX000", error.message if error else "internal error"
    )
    with charge_told(status):
        raise failure

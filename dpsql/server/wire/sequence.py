"""The message loop's sequencing without I/O: given each message type the client sends, what the
loop does with it (hand it to its handler, ignore it, answer ReadyForQuery, flush, end), and
the transaction status ReadyForQuery reports ("I" idle, "T" in a transaction block, "E" in a
failed one). As PostgreSQL: an error in the extended protocol ignores every message up to the
client's next Sync; Sync answers ReadyForQuery and flushes; a simple query answers
ReadyForQuery at its end, error or not; the extended protocol's answers wait for Sync or Flush.
The status moves with the transaction control statements (begin, commit, rollback,
rollback_to, savepoint: the connection calls them as its routing names a statement; the wire
reads no SQL) and with errors (failed): an error in a block fails it, and a failed block runs
nothing but COMMIT, ROLLBACK or ROLLBACK TO SAVEPOINT (admit).
The connection (server/messages.py, server/app.py) reads, dispatches and writes; this class only
decides."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ...errors import Error
from .codes import Frontend

Status = Literal["I", "T", "E"]

BUFFERED = frozenset({Frontend.PARSE, Frontend.BIND, Frontend.DESCRIBE, Frontend.EXECUTE, Frontend.CLOSE})
"""The extended protocol's messages: their answers wait for Sync or Flush."""

IGNORED = frozenset({Frontend.COPY_DATA, Frontend.COPY_DONE, Frontend.COPY_FAIL})
"""CopyData, CopyDone and CopyFail outside COPY FROM: ignored, as PostgreSQL does (a client sends
them right behind a COPY FROM STDIN that was refused; answering them desynchronised asyncpg)."""


@dataclass(frozen=True)
class Step:
    """What the loop does now: hand the message to its handler (process), then send
    ReadyForQuery with this status (ready, None for none), then flush; or end the session."""

    process: bool = False
    ready: Status | None = None
    flush: bool = False
    end: bool = False


PROCESS = Step(process=True)
NOTHING = Step()
FLUSH = Step(flush=True)
END = Step(end=True)


class Sequence:
    """One session's sequencing state: the transaction status and whether messages are being
    skipped up to the next Sync. receive() says what to do with a message; once a processed
    message is answered, done() or failed() says what follows. Within a message, each statement
    is admitted (admit) and a transaction control statement moves the status as it is answered."""

    def __init__(self) -> None:
        self.status: Status = "I"
        self.skipping = False

    def receive(self, kind: bytes) -> Step:
        if kind == Frontend.TERMINATE:
            return END
        if kind == Frontend.SYNC:
            self.skipping = False
            return Step(ready=self.status, flush=True)
        if kind == Frontend.FLUSH:
            return FLUSH
        if self.skipping or kind in IGNORED:
            return NOTHING
        return PROCESS

    def done(self, kind: bytes) -> Step:
        """A processed message answered without error."""
        return Step(ready=self.status if kind == Frontend.QUERY else None, flush=kind not in BUFFERED)

    def failed(self, kind: bytes) -> Step:
        """A processed message answered with an ErrorResponse: a transaction block fails, and
        in the extended protocol the rest up to the client's Sync is skipped."""
        if self.status == "T":
            self.status = "E"
        if kind == Frontend.QUERY:
            return Step(ready=self.status, flush=True)
        self.skipping = True
        return Step(flush=kind not in BUFFERED)

    # Transaction control, one statement at a time (a simple query may hold several) ------------
    def admit(self, ends_block: bool) -> None:
        """Before a statement runs: in a failed block only what ends it (`ends_block`: COMMIT,
        ROLLBACK, ROLLBACK TO SAVEPOINT) runs; anything else is refused (25P02)."""
        if self.status == "E" and not ends_block:
            raise Error(
                "current transaction is aborted, commands ignored until end of transaction block",
                sqlstate="25P02",
                hint="ROLLBACK (or ROLLBACK TO SAVEPOINT) ends the failed transaction block",
            )

    def begin(self) -> bool:
        """BEGIN answered: in a block; True when it opened one (it was idle)."""
        opened = self.status == "I"
        self.status = "T"
        return opened

    def commit(self) -> bool:
        """COMMIT answered: idle; False when the block had failed (its COMMIT is a ROLLBACK)."""
        committed = self.status != "E"
        self.status = "I"
        return committed

    def rollback(self) -> None:
        """ROLLBACK answered: idle."""
        self.status = "I"

    def rollback_to(self) -> None:
        """ROLLBACK TO SAVEPOINT: back in a block that has not failed (a failed one recovers)."""
        self.savepoint("ROLLBACK TO SAVEPOINT")
        self.status = "T"

    def savepoint(self, statement: str) -> None:
        """SAVEPOINT, RELEASE SAVEPOINT or ROLLBACK TO SAVEPOINT (`statement`): only inside a
        block (25P01, as PostgreSQL)."""
        if self.status == "I":
            raise Error(
                f"{statement} can only be used in transaction blocks",
                sqlstate="25P01",
                hint="BEGIN a transaction block first",
            )

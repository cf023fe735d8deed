"""What ties one `dpsql serve --workers` process to the others: the listening sockets they all
accept on, the pipes that carry a cancel request to the worker serving that connection, the
lifeline that ends a worker when its supervisor is gone, the pipe that says it is ready, and the
socket pair to the supervisor's ledger writer, which writes every worker's charges.

A backend's process id (BackendKeyData) says which worker it lives on (pid mod count), since a
client sends its CancelRequest on a new connection, which any worker may accept. Everything
here is file descriptors inherited from the supervisor: nothing is written to disk."""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import struct
from dataclasses import dataclass

_CANCEL = struct.Struct("!ii")  # (pid, key): 8 bytes, written atomically into a pipe


def new_pid(index: int = 0, count: int = 1) -> int:
    """A random positive int32 that names worker `index` of `count` (pid mod count)."""
    return (secrets.randbelow((2**31 - 1 - index) // count - 1) + 1) * count + index


@dataclass(frozen=True)
class WorkerLink:
    index: int
    count: int
    listen_fds: tuple[int, ...]
    cancel_read: int  # this worker's end of its cancel pipe
    cancel_writes: tuple[int, ...]  # every worker's other end, by index
    lifeline: int  # read end; end of file once the supervisor has exited
    ready: int  # write end; -1 when nobody waits (a restarted worker)
    ledger: int = -1  # this worker's end of the socket pair to the supervisor's ledger writer; -1: none

    def new_pid(self) -> int:
        return new_pid(self.index, self.count)

    def owns(self, pid: int) -> bool:
        return pid % self.count == self.index

    def forward_cancel(self, pid: int, key: int) -> None:
        """Best effort, like PostgreSQL's own cancel: a full pipe drops the request."""
        try:
            os.write(self.cancel_writes[pid % self.count], _CANCEL.pack(pid, key))
        except OSError:
            pass

    def read_cancels(self) -> list[tuple[int, int]]:
        """The cancel requests waiting in this worker's pipe (non-blocking)."""
        try:
            data = os.read(self.cancel_read, 64 * _CANCEL.size)
        except (BlockingIOError, InterruptedError):
            return []
        return [_CANCEL.unpack_from(data, i) for i in range(0, len(data) - _CANCEL.size + 1, _CANCEL.size)]

    def say_ready(self, detail: dict) -> None:
        if self.ready < 0:
            return
        try:
            os.write(self.ready, (json.dumps(detail) + "\n").encode())
            os.close(self.ready)
        except OSError:
            pass

    def fds(self) -> tuple[int, ...]:
        return (
            *self.listen_fds,
            self.cancel_read,
            *self.cancel_writes,
            self.lifeline,
            *((self.ready,) if self.ready >= 0 else ()),
            *((self.ledger,) if self.ledger >= 0 else ()),
        )

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "WorkerLink":
        return cls(**{**data, "listen_fds": tuple(data["listen_fds"]), "cancel_writes": tuple(data["cancel_writes"])})

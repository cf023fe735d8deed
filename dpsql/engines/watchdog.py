"""A statement timeout for engines that only offer an interrupt (DuckDB): one thread per
engine, asleep until the earliest deadline, interrupts what outlives it.

Every query gets the same timeout, so a new deadline is never earlier than those already
waiting: registering one wakes the thread only when nothing was waiting. A query costs a lock,
a dict entry and, at most, one notify; no thread or timer is started per query.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from typing import Callable, Iterator

IDLE_EXIT = 60.0  # seconds without a query after which the thread ends

class Watchdog:
    def __init__(self, seconds: float):
        self.seconds = seconds
        self._cond = threading.Condition()
        self._due: dict[int, tuple[float, Callable[[], None]]] = {}  # in registration order: earliest first
        self._expired: set[int] = set()
        self._tokens = itertools.count()
        self._thread: threading.Thread | None = None
        self._closed = False

    @contextlib.contextmanager
    def timed(self, interrupt: Callable[[], None]) -> Iterator[Callable[[], bool]]:
        """Within the block, `interrupt` is called once the timeout has passed; yields a
        function that tells whether it was (the block's interrupt was the timeout's)."""
        token = next(self._tokens)
        with self._cond:
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._run, name="dpsql-statement-timeout", daemon=True)
                self._thread.start()
            self._due[token] = (time.monotonic() + self.seconds, interrupt)
            if len(self._due) == 1:
                self._cond.notify()
        try:
            yield lambda: token in self._expired
        finally:
            with self._cond:
                self._due.pop(token, None)
                self._expired.discard(token)

    def _run(self) -> None:
        with self._cond:
            while not self._closed:
                now = time.monotonic()
                for token, (deadline, interrupt) in list(self._due.items()):
                    if deadline > now:
                        break
                    del self._due[token]
                    self._expired.add(token)
                    interrupt()  # DuckDB's interrupt only sets a flag: quick, and safe under the lock
                first = next(iter(self._due.values()), None)
                if first is None and not self._cond.wait(IDLE_EXIT) and not self._due:
                    break  # nothing to time for a while (an engine nobody closed, say): the next query starts one
                if first is not None:
                    self._cond.wait(max(first[0] - now, 0.001))
            self._thread = None

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()

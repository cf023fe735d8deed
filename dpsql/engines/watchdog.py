"""A statement timeout for engines that only offer an interrupt (DuckDB): one thread per
engine, asleep until the earliest deadline, interrupts what outlives it.

Every query gets the same timeout, so a new deadline is never earlier than those already
waiting: registering one wakes the thread only when it sleeps without a deadline, or until a
later one. While queries follow one another, the thread sleeps until the earliest deadline it
last saw (a query since finished, perhaps), then until the next: one wake per timeout period,
not one per query. A query costs a lock and a dict entry; no thread or timer is started per
query.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
import time
from typing import Callable, Iterator

IDLE_EXIT = 60.0  # seconds without a query after which the thread ends
CLOSE_WAIT = 5.0  # seconds close() waits for the thread


class Watchdog:
    def __init__(self, seconds: float):
        self.seconds = seconds
        self._tokens = itertools.count()
        self._closed = False
        self._start_afresh()

    def _start_afresh(self) -> None:
        """A new lock, no deadline and no thread, in this process. Also what a child of fork()
        does first: the parent's thread does not exist there, and its lock may have been held by
        that thread at the fork, and so would stay held for ever."""
        self._cond = threading.Condition()
        self._due: dict[int, tuple[float, Callable[[], None]]] = {}  # in registration order: earliest first
        self._expired: set[int] = set()
        self._thread: threading.Thread | None = None
        self._wakes_at: float | None = None  # when the thread's sleep ends (None: no deadline)
        self.wakeups = 0  # times the thread woke (tests/test_resource_limits.py counts them)
        self._pid = os.getpid()

    @contextlib.contextmanager
    def timed(self, interrupt: Callable[[], None]) -> Iterator[Callable[[], bool]]:
        """Within the block, `interrupt` is called once the timeout has passed; yields a
        function that tells whether it was (the block's interrupt was the timeout's)."""
        token = next(self._tokens)
        if self._pid != os.getpid():
            self._start_afresh()
        with self._cond:
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._run, name="dpsql-statement-timeout", daemon=True)
                self._thread.start()
            deadline = time.monotonic() + self.seconds
            self._due[token] = (deadline, interrupt)
            if self._wakes_at is None or self._wakes_at > deadline:
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
                self._interrupt_expired()
                first = next(iter(self._due.values()), None)
                self._wakes_at = None if first is None else first[0]
                wait = None if first is None else max(first[0] - time.monotonic(), 0.001)
                del first  # no interrupt (a bound method of an engine's cursor) is held while asleep
                if wait is None and not self._cond.wait(IDLE_EXIT) and not self._due:
                    break  # nothing to time for a while (an engine nobody closed, say): the next query starts one
                if wait is not None:
                    self._cond.wait(wait)
                self.wakeups += 1
            self._thread = None
            self._wakes_at = None

    def _interrupt_expired(self) -> None:
        """Interrupt what has outlived its deadline (under the lock). A function of its own so
        that the interrupts it touches are released when it returns: a cursor whose last
        reference ended on this thread while the interpreter exits would be destroyed where
        DuckDB cannot take the GIL back, and the process would abort."""
        now = time.monotonic()
        for token, (deadline, interrupt) in list(self._due.items()):
            if deadline > now:
                break
            del self._due[token]
            self._expired.add(token)
            interrupt()  # DuckDB's interrupt only sets a flag: quick, and safe under the lock

    def close(self) -> None:
        """Stop the thread and wait (briefly) until it has ended, so that it ends before the
        engine it watches is torn down, never during the interpreter's exit."""
        with self._cond:
            self._closed = True
            self._due.clear()
            self._cond.notify()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(CLOSE_WAIT)

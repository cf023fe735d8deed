"""The server's threads for blocking work (statements, the console's calls), the most recently
idle first.

concurrent.futures.ThreadPoolExecutor wakes whichever idle thread its queue wakes, so a few
clients' statements rotate over every thread the pool ever started (sixteen), each with its own
DuckDB cursor, prepared statements and Python thread state, all cold by the time their turn
comes again (one client's 2000 statements ran on eleven threads). Here jobs wait in one queue,
as there, and a thread that ends its job takes the oldest; but an idle thread waits on a queue
of its own, and a new job wakes the thread that became idle last: one client's statements stay
on one warm thread, eight clients' on about eight. Paired runs of benchmarks.perquery's grouped
COUNT against ThreadPoolExecutor: the served process's CPU per statement 7-19 % lower at 1 and
8 clients (median of rounds; more under a loaded host).

A thread goes back on the stack before its job's result is set, so that the event loop's next
job finds it idle instead of starting another. Threads are not daemons: as with
ThreadPoolExecutor, the interpreter's exit wakes the idle ones and waits for those still
running a job (one inside DuckDB when the interpreter tears down would abort the process).
"""

from __future__ import annotations

import collections
import concurrent.futures
import queue
import threading
import weakref
from typing import Any, Callable

Job = tuple[concurrent.futures.Future, Callable[..., Any], tuple, dict]

_pools: weakref.WeakSet[StackPool] = weakref.WeakSet()
_exiting = False


def _at_exit() -> None:
    """Before the interpreter joins its threads: every pool's idle threads end."""
    global _exiting
    _exiting = True
    for pool in list(_pools):
        pool.shutdown(wait=False)


threading._register_atexit(_at_exit)  # as concurrent.futures does: before non-daemon threads are joined


class StackPool(concurrent.futures.Executor):
    def __init__(self, max_workers: int, thread_name_prefix: str = "dpsql"):
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        self._max, self._prefix = max_workers, thread_name_prefix
        self._lock = threading.Lock()
        self._jobs: collections.deque[Job] = collections.deque()  # waiting, oldest first
        self._idle: list[_Worker] = []  # the most recently idle last
        self._threads: list[threading.Thread] = []
        self._shutdown = False
        _pools.add(self)

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        """Queue the job and wake the most recently idle thread (or start one): a thread that
        ends its job meanwhile may take it first, as in ThreadPoolExecutor, and the woken one
        goes back to the stack."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            if self._shutdown or _exiting:
                raise RuntimeError("cannot schedule new futures after shutdown")
            self._jobs.append((future, fn, args, kwargs))
            if self._idle:
                self._idle.pop().wake()
            elif len(self._threads) < self._max:
                worker = _Worker(self)
                thread = threading.Thread(target=worker.run, name=f"{self._prefix}_{len(self._threads)}")
                self._threads.append(thread)
                thread.start()
        return future

    def _next(self, worker: _Worker) -> Job | None | bool:
        """What a thread does next: the oldest waiting job, None (the pool is shut down: end),
        or True (it is on the idle stack: wait to be woken)."""
        with self._lock:
            if self._jobs:
                return self._jobs.popleft()
            if self._shutdown:
                return None
            self._idle.append(worker)
            return True

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shutdown = True
            if cancel_futures:
                while self._jobs:
                    self._jobs.popleft()[0].cancel()
            idle, self._idle = self._idle, []
            threads = list(self._threads)
        for worker in idle:
            worker.wake()
        if wait:
            for thread in threads:
                if thread is not threading.current_thread():
                    thread.join()


class _Worker:
    """One thread of a StackPool, woken through a queue of its own (at most one wake-up in it:
    a thread is woken only when taken off the idle stack)."""

    def __init__(self, pool: StackPool):
        self._pool = pool
        self._wakes: queue.SimpleQueue[None] = queue.SimpleQueue()

    def wake(self) -> None:
        self._wakes.put(None)

    def run(self) -> None:
        following = self._pool._next(self)
        while following is not None:
            if following is True:
                self._wakes.get()
                following = self._pool._next(self)
                continue
            future, fn, args, kwargs = following
            del following
            if not future.set_running_or_notify_cancel():
                result, error = None, None
            else:
                try:
                    result, error = fn(*args, **kwargs), None
                except BaseException as e:  # noqa: BLE001 - handed to the future, as ThreadPoolExecutor does
                    result, error = None, e
            following = self._pool._next(self)  # on the stack (or given the next job) before the result is told
            if future.running():
                if error is None:
                    future.set_result(result)
                else:
                    future.set_exception(error)
            del future, fn, args, kwargs, result, error

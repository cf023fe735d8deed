"""dpsql/server/pool.py: the server's threads for blocking work, the most recently idle first."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dpsql.server.pool import StackPool


@pytest.fixture
def pool_of():
    """StackPool(n), shut down after the test."""
    made: list[StackPool] = []

    def make(n: int) -> StackPool:
        made.append(StackPool(n))
        return made[-1]

    yield make
    for pool in made:
        pool.shutdown()


def test_results_and_errors_reach_their_futures(pool_of):
    pool = pool_of(4)
    assert pool.submit(lambda a, b=0: a + b, 2, b=3).result(5) == 5
    with pytest.raises(ZeroDivisionError):
        pool.submit(lambda: 1 / 0).result(5)
    assert pool.submit(lambda: "after an error").result(5) == "after an error"


def test_statements_one_after_another_stay_on_one_thread(pool_of):
    """The point of the pool: a client's statements, each submitted once the last has been
    answered, run on the same (warm) thread, never rotating over the pool."""
    pool = pool_of(16)
    assert len({pool.submit(threading.get_ident).result(5) for _ in range(200)}) == 1
    assert len(pool._threads) == 1


def test_concurrent_jobs_get_threads_up_to_the_limit_then_wait_their_turn(pool_of):
    pool = pool_of(3)
    release = threading.Event()
    started: list[int] = []
    lock = threading.Lock()

    def job(i: int) -> int:
        with lock:
            started.append(i)
        release.wait(10)
        return i

    futures = [pool.submit(job, i) for i in range(5)]
    deadline = time.monotonic() + 10
    while len(started) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)
    assert sorted(started) == [0, 1, 2] and len(pool._threads) == 3  # two wait in the backlog
    release.set()
    assert [f.result(10) for f in futures] == [0, 1, 2, 3, 4]
    assert len(pool._threads) == 3


def test_shutdown_cancels_waiting_jobs_and_ends_the_threads(pool_of):
    pool = pool_of(1)
    release = threading.Event()
    running = pool.submit(release.wait, 10)
    deadline = time.monotonic() + 10
    while not running.running() and time.monotonic() < deadline:
        time.sleep(0.01)
    waiting = pool.submit(lambda: "never")
    pool.shutdown(wait=False, cancel_futures=True)
    assert waiting.cancelled()
    with pytest.raises(RuntimeError):
        pool.submit(lambda: None)
    release.set()
    assert running.result(10) is True
    pool.shutdown(wait=True)  # joins: the idle and the finished threads have ended
    assert not any(t.is_alive() for t in pool._threads)


def test_a_cancelled_job_does_not_run(pool_of):
    pool = pool_of(1)
    release = threading.Event()
    ran: list[int] = []
    first = pool.submit(release.wait, 10)
    second = pool.submit(ran.append, 1)  # waits: the one thread is busy
    assert second.cancel()
    release.set()
    first.result(10)
    assert pool.submit(lambda: "next").result(10) == "next" and ran == []


def test_the_interpreter_exits_with_idle_threads_never_shut_down():
    """Threads are not daemons (one killed inside DuckDB at exit would abort the process), so
    the interpreter's exit must wake the idle ones itself, as ThreadPoolExecutor's does."""
    root = Path(__file__).resolve().parent.parent
    code = (
        "from dpsql.server.pool import StackPool\n"
        "p = StackPool(4)\n"
        "print([p.submit(abs, -i).result() for i in range(3)])"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "[0, 1, 2]", done.stderr

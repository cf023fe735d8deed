"""One ledger writer for all the processes of `dpsql serve --workers N`.

Each worker that wrote its own charges took the ledger's write lock in turn with the others, and
held it while its thread waited for its own process's GIL: with two workers, a quarter of the
machine sat idle while queries queued behind the lock. Instead the supervisor, which serves no
connection, runs one writer thread for every worker (WriterService): a worker sends each charge,
release record and cached answer as a job (jobs.py) over a private socket pair; the thread reads
every worker's jobs and commits them in batches (group_commit.commit_batch), and answers as the
local writer tells its own threads: a charge's "ran" once it ran in the open transaction
(admitted, or refused with nothing written), and every job's "done" once its batch committed (on
disk, for a charge). A worker waits for "done" before any answer leaves, so a charge is durable
before its answer, as in one process.

The messages are pickles of dpsql's own values between a supervisor and the workers it started,
on a socket pair whose ends only they hold (nothing listens on any address). An error that
cannot be pickled travels as an OperationalError with its text.
"""

from __future__ import annotations

import functools
import itertools
import logging
import pickle
import selectors
import socket
import struct
import threading
from typing import Any, Callable

from ..errors import OperationalError
from .group_commit import Pending, _Job, _tell_failed, commit_batch
from .jobs import GLOBAL, ChargeJob, StatementJob

_LENGTH = struct.Struct("!I")
log = logging.getLogger("dpsql")


def _frame(message: Any) -> bytes:
    """A message as it crosses: its length, then its pickle."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _LENGTH.pack(len(data)) + data


def _send(sock: socket.socket, lock: threading.Lock, message: Any) -> None:
    frame = _frame(message)
    with lock:
        sock.sendall(frame)


def _receive(sock: socket.socket) -> Any | None:
    """The next message, or None at the end of the stream."""
    head = _read_exact(sock, _LENGTH.size)
    if head is None:
        return None
    body = _read_exact(sock, _LENGTH.unpack(head)[0])
    if body is None:
        return None
    return pickle.loads(body)


def _read_exact(sock: socket.socket, n: int) -> bytes | None:
    chunks, left = [], n
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _portable(error: BaseException | None) -> BaseException | None:
    """`error` as it can cross to a worker: itself when it pickles, else its text."""
    if error is None:
        return None
    try:
        pickle.dumps(error)
        return error
    except Exception:  # noqa: BLE001 - a driver's error that does not pickle
        return OperationalError(str(error))


class RemoteWriter:
    """A worker's end: `start(job, failed)` sends the job and returns a Pending that the replies
    resolve (on this end's reader thread, which also runs `failed` before telling)."""

    def __init__(self, sock: socket.socket):
        self._sock = sock
        self._send_lock = threading.Lock()
        self._lock = threading.Lock()
        self._jobs: dict[int, _Job] = {}
        self._ids = itertools.count(1)
        self._gone: OperationalError | None = None
        self._reader = threading.Thread(target=self._read, name="dpsql-ledger-link", daemon=True)
        self._reader.start()

    def start(self, job: ChargeJob | StatementJob, failed: Callable[[], None] | None = None) -> Pending:
        local = _Job(list(job.users), _remote_only, job.durable, failed)
        with self._lock:
            gone = self._gone
            if gone is None:
                ident = next(self._ids)
                self._jobs[ident] = local
        if gone is None:
            try:
                _send(self._sock, self._send_lock, (ident, job))
            except OSError as e:
                self._fail_all(OperationalError(f"the server's ledger writer cannot be reached: {e}"))
        else:
            _fail(local, gone)
        return Pending(local)

    def close(self) -> None:
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()

    def _read(self) -> None:
        try:
            while True:
                message = _receive(self._sock)
                if message is None:
                    break
                ident, phase, result, error = message
                with self._lock:
                    job = self._jobs.get(ident) if phase == "ran" else self._jobs.pop(ident, None)
                if job is not None:
                    _resolve(job, phase, result, error)
        except OSError:
            pass
        finally:
            self._fail_all(
                OperationalError(
                    "the server's ledger writer stopped",
                    hint="nothing was charged; the server is restarting or shutting down",
                )
            )

    def _fail_all(self, error: OperationalError) -> None:
        with self._lock:
            self._gone = self._gone or error
            jobs, self._jobs = list(self._jobs.values()), {}
        for job in jobs:
            _fail(job, error)


def _remote_only(con: Any) -> None:
    raise RuntimeError("a job sent to the supervisor's writer runs there")


def _resolve(job: _Job, phase: str, result: Any, error: BaseException | None) -> None:
    if error is not None and not job.done.is_set():
        job.error, job.result = error, None
        _tell_failed(job)
    elif phase == "ran" and error is None:
        job.result = result
    if phase == "ran":
        job.ran.set()
    else:
        job.ran.set()
        job.done.set()


def _fail(job: _Job, error: OperationalError) -> None:
    if not job.done.is_set():
        _resolve(job, "done", None, error)


class WriterService:
    """The supervisor's end: one thread reads its workers' jobs, applies each batch of them in
    one transaction of `ledger` (group commit, on this same thread: no hand-off to a writer
    thread), and answers each job as it runs and once its batch has committed."""

    def __init__(self, ledger: Any):
        self.ledger = ledger
        self._selector = selectors.DefaultSelector()
        self._added: list[socket.socket] = []
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = socket.socketpair()
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._thread = threading.Thread(target=self._run, name="dpsql-ledger-writer", daemon=True)
        self._thread.start()

    def serve(self, sock: socket.socket) -> None:
        """Take one worker's jobs from now on, until the worker closes its end."""
        with self._lock:
            self._added.append(sock)
        try:
            self._wake_w.send(b"x")
        except OSError:  # the writer has stopped: the worker sees its end closed, and charges nothing
            sock.close()

    def close(self) -> None:
        """Stop after the batch under way (the workers have stopped: nothing more comes)."""
        self._wake_w.close()
        self._thread.join()

    def running(self) -> bool:
        """False once the writer has stopped: its workers can charge nothing any more."""
        return self._thread.is_alive()

    def _run(self) -> None:
        try:
            while True:
                batch: list[_Job] = []
                links: list[_Link] = []
                for key, _ in self._selector.select():
                    if key.data is None:
                        if not self._wake_r.recv(4096):
                            return  # close()
                        self._register()
                    elif key.data.read(batch):
                        links.append(key.data)
                    else:
                        self._selector.unregister(key.fileobj)
                        key.data.close()
                if batch:
                    commit_batch(self.ledger._write, GLOBAL, batch, ran=lambda: _flush(links))
                    _flush(links)
                batch, links = [], []  # an idle writer holds no job's result or error
        except Exception:
            log.exception("the ledger writer for the workers stopped")
        finally:
            for key in list(self._selector.get_map().values()):
                if key.data is not None:
                    key.data.close()
            self._selector.close()
            self._wake_r.close()
            self.ledger._close_connection()  # this thread's own

    def _register(self) -> None:
        with self._lock:
            added, self._added = self._added, []
        for sock in added:
            self._selector.register(sock, selectors.EVENT_READ, _Link(sock, self.ledger))


class _Link:
    """One worker's socket as the service reads it: bytes in, jobs out, replies back, gathered
    into one write before the COMMIT (the charges' "ran", so the worker's queries run while the
    batch reaches the disk) and one after it ("done"). A lazy statement's submitter waits for
    "done" alone, so it is told nothing else."""

    def __init__(self, sock: socket.socket, ledger: Any):
        self.sock, self.ledger = sock, ledger
        self._buffer = bytearray()
        self._out: list[bytes] = []
        self._refused: set[int] = set()  # jobs whose "ran" reply carried their error

    def read(self, batch: list[_Job]) -> bool:
        """Append the jobs that arrived to `batch`; False once the worker has closed its end."""
        try:
            chunk = self.sock.recv(1 << 16)
        except OSError:
            return False
        if not chunk:
            return False
        self._buffer += chunk
        while len(self._buffer) >= _LENGTH.size:
            n = _LENGTH.unpack_from(self._buffer)[0]
            if len(self._buffer) < _LENGTH.size + n:
                break
            try:
                ident, job = pickle.loads(bytes(self._buffer[_LENGTH.size : _LENGTH.size + n]))
            except Exception as e:  # noqa: BLE001 - not a worker of this supervisor: drop the link
                log.warning("a worker's ledger link sent what is not a job: %s", e)
                return False
            del self._buffer[: _LENGTH.size + n]
            if not isinstance(job, (ChargeJob, StatementJob)):
                log.warning("a worker's ledger link sent %s, not a job", type(job).__name__)
                return False
            batch.append(
                _Job(
                    list(job.users),
                    functools.partial(self.ledger._apply, job=job),
                    job.durable,
                    None,
                    functools.partial(self.tell, ident=ident),
                )
            )
        return True

    def tell(self, job: _Job, phase: str, ident: int) -> None:
        error = job.error
        if phase == "ran" and not job.durable:
            return
        if phase == "ran" and error is not None:
            self._refused.add(ident)
        elif phase == "done" and ident in self._refused:
            self._refused.discard(ident)
            error = None  # told once, as a local job's error is raised once
        result = job.result if phase == "ran" and error is None else None
        self._out.append(_frame((ident, phase, result, _portable(error))))

    def flush(self) -> None:
        if self._out:
            frames, self._out = b"".join(self._out), []
            self._send(frames)

    def _send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError:  # the worker is gone; its jobs' effects stand, as a client's would
            pass

    def close(self) -> None:
        self.sock.close()


def _flush(links: list[_Link]) -> None:
    """Send each link's buffered replies to its worker."""
    for link in links:
        link.flush()

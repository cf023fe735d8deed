"""`dpsql serve --workers N`: N server processes, so that one server uses every core (a single
process is bound by Python's GIL). The supervisor opens no engine and no session: it binds the
listening sockets (a set per worker on the one port, which the kernel spreads connections
over), starts the workers, restarts one that dies, and stops them all on SIGTERM or Ctrl-C. It
also writes every worker's charges, release records and cached answers, with one ledger writer
for all of them (ledger/remote_writer.py): one transaction per batch, so the budget holds
across workers as it does across one process's connections, and no worker waits for
another's lock."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

from ..ledger import Ledger
from ..ledger.remote_writer import WriterService
from .launch import ServeOptions
from .listener import Limits, cannot_listen
from .worker_link import WorkerLink

READY_SECONDS = 120.0  # a worker opens its engine (no weighted copy yet) well within this
RESTARTS = 5  # workers that may die within RESTART_WINDOW before the server gives up
RESTART_WINDOW = 60.0
STOP_GRACE = 15.0  # beyond the drain timeout, before a worker that does not stop is killed
BACKLOG = 512


def listen(host: str, port: int, count: int) -> list[list[socket.socket]]:
    """`count` sets of listening sockets for HOST:PORT, one set per worker, with SO_REUSEPORT: the
    kernel spreads new connections evenly over the workers (a pool's connections, opened at
    once, do not all land on whichever worker woke first), and a restarted worker takes up the
    connections queued on its own sockets, which the supervisor keeps open. Every address the
    name has is bound, as asyncio would (IPv6 sockets take IPv6 only); port 0 picks one free port
    for all of them."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    addresses = list(dict.fromkeys((family, kind, proto, address) for family, kind, proto, _, address in infos))
    groups: list[list[socket.socket]] = [[] for _ in range(count)]
    chosen = port
    try:
        for family, kind, proto, address in addresses:
            for group in groups:
                s = socket.socket(family, kind, proto)
                group.append(s)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                if family == socket.AF_INET6:
                    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                s.bind((address[0], chosen, *address[2:]))
                chosen = chosen or s.getsockname()[1]  # port 0: the first socket's free port, for all
                s.listen(BACKLOG)
    except OSError as e:
        for s in (s for group in groups for s in group):
            s.close()
        raise cannot_listen(host, port, e) from None
    return groups


@dataclass
class _Worker:
    index: int
    proc: subprocess.Popen
    ready: int = -1  # read end of its ready pipe while starting


@dataclass
class Supervisor:
    """`ledger`: the shared ledger, whose one writer thread here writes every worker's charges,
    release records and cached answers (ledger/remote_writer.py); None: each worker writes
    its own."""

    options: ServeOptions
    count: int
    say: Callable[[str], None] = print
    ledger: Ledger | None = None
    workers: list[_Worker] = field(default_factory=list)
    _stopping: bool = False

    def run(self, announce: Callable[[int, str | None], None]) -> int:
        """Serve until SIGTERM or SIGINT; `announce(port, console_url)` once every worker is
        ready. The exit status: 0 when stopped, 1 when the workers could not start or kept dying."""
        groups = listen(self.options.host, self.options.port, self.count)
        self._cancel = [os.pipe() for _ in range(self.count)]
        self._lifeline = os.pipe()
        self._groups = groups
        self._secret = os.urandom(32)
        self._service = WriterService(self.ledger) if self.ledger is not None else None
        previous = {sig: signal.signal(sig, self._stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            self.workers = [self._spawn(i, wait=True) for i in range(self.count)]
            console = self._await_ready()
            if console is False:
                return 1
            announce(groups[0][0].getsockname()[1], console)
            return self._watch()
        finally:
            self._stop_all()
            if self._service is not None:
                self._service.close()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            for s in (s for group in groups for s in group):
                s.close()
            for r, w in [*self._cancel, self._lifeline]:
                os.close(r)
                os.close(w)

    def _stop(self, signum, frame) -> None:
        self._stopping = True

    def _spawn(self, index: int, wait: bool) -> _Worker:
        ready_r, ready_w = os.pipe() if wait else (-1, -1)
        mine, theirs = socket.socketpair() if self._service is not None else (None, None)
        link = WorkerLink(
            index,
            self.count,
            tuple(s.fileno() for s in self._groups[index]),
            self._cancel[index][0],
            tuple(w for _, w in self._cancel),
            self._lifeline[0],
            ready_w,
            theirs.fileno() if theirs is not None else -1,
        )
        spec = {"options": self.options.to_json(), "link": link.to_json(), "secret": self._secret.hex()}
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "dpsql.server.worker"], stdin=subprocess.PIPE, pass_fds=link.fds()
            )
        except BaseException:
            if mine is not None:
                mine.close()
            raise
        finally:
            if theirs is not None:
                theirs.close()
        if mine is not None:
            self._service.serve(mine)  # ends when the worker's end closes (it exits or dies)
        if wait:
            os.close(ready_w)
        try:
            proc.stdin.write((json.dumps(spec) + "\n").encode())
            proc.stdin.close()
        except BrokenPipeError:  # it died at once: its ready pipe or the watch says so
            pass
        return _Worker(index, proc, ready_r)

    def _await_ready(self) -> str | None | bool:
        """The console's URL (None: no console) once every worker says it is ready; False when
        one fails first (it has printed why), when it takes too long, or on SIGTERM/SIGINT."""
        deadline = time.monotonic() + READY_SECONDS
        waiting = {w.ready: w for w in self.workers}
        lines: dict[int, bytes] = {fd: b"" for fd in waiting}
        console = None
        try:
            while waiting and not self._stopping and time.monotonic() < deadline:
                readable, _, _ = select.select(list(waiting), [], [], 0.2)
                for fd in readable:
                    chunk = os.read(fd, 4096)
                    lines[fd] += chunk
                    if chunk and not lines[fd].endswith(b"\n"):
                        continue
                    worker = waiting.pop(fd)
                    if not chunk:
                        self.say(f"worker {worker.index} did not start")
                        return False
                    console = console or json.loads(lines[fd]).get("console")
            if waiting and not self._stopping:
                self.say(f"{len(waiting)} worker(s) did not start within {READY_SECONDS:.0f} s")
            return False if waiting else console
        finally:
            for w in self.workers:
                if w.ready >= 0:
                    os.close(w.ready)
                    w.ready = -1

    def _watch(self) -> int:
        """Restart a worker that dies (its connections are lost; its clients reconnect), unless
        workers keep dying."""
        deaths: list[float] = []
        while not self._stopping:
            time.sleep(0.2)
            if self._service is not None and not self._service.running():
                self.say("the ledger writer stopped (see the log above), stopping: no worker could charge a query")
                return 1
            for i, w in enumerate(self.workers):
                code = w.proc.poll()
                if code is None or self._stopping:
                    continue
                now = time.monotonic()
                deaths = [t for t in deaths if now - t < RESTART_WINDOW] + [now]
                if len(deaths) > RESTARTS:
                    self.say(
                        f"worker {w.index} exited with status {code}; {len(deaths)} workers died within "
                        f"{RESTART_WINDOW:.0f} s, stopping"
                    )
                    return 1
                self.say(f"worker {w.index} exited with status {code}; restarting it")
                self.workers[i] = self._spawn(w.index, wait=False)
        return 0

    def _stop_all(self) -> None:
        """SIGTERM to every worker: each stops accepting, lets running statements finish (up to
        the drain timeout) and removes its scratch copies; a worker still running after that is
        killed (the next start's sweep removes what it left)."""
        alive = [w.proc for w in self.workers if w.proc.poll() is None]
        for p in alive:
            p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + Limits().drain_timeout + STOP_GRACE
        for p in alive:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

"""`dpsql serve`'s listener: the listening sockets (or a supervisor's, in a worker), accepting
connections, the caps on pending and ungreeted ones, cancel requests, services beside the wire
(the web console), and an orderly shutdown. Each connection is served by app.Connection."""

from __future__ import annotations

import asyncio
import gc
import os
import secrets
import signal
import socket
import ssl
import struct
from dataclasses import dataclass
from typing import Callable, Protocol

from ..config import Policy
from ..engines import open_engine
from ..errors import OperationalError
from .app import Connection
from .catalog import Catalog
from .pool import StackPool
from .throttle import LoginThrottle
from .worker_link import WorkerLink, new_pid


@dataclass
class Limits:
    max_connections: int = 200  # authenticated sessions
    max_pending: int = 64  # connections still starting up or authenticating, counted apart
    max_pending_per_address: int = 16  # of those, from one client address
    # A pending connection that has sent no complete message for this long may be dropped for a
    # newcomer: a client logging in answers each message within a round trip, so this one is a
    # half-open socket, a stalled client, or a failed login held by the throttle.
    pending_idle: float = 1.0
    max_message: int = 16 * 1024 * 1024
    login_timeout: float = 10.0  # from connect to authenticated
    drain_timeout: float = 30.0


class Service(Protocol):
    """Something served beside the wire protocol on the same event loop (the web console):
    started once the wire listens, stopped first on shutdown."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


UNGREETED_SHARE = 4  # ungreeted connections allowed, as a multiple of the pending caps


class Server:
    def __init__(
        self,
        policy: Policy,
        host: str = "127.0.0.1",
        port: int = 5433,
        tls: ssl.SSLContext | None = None,
        require_tls: bool = False,
        limits: Limits | None = None,
        workers: int = 16,
        link: WorkerLink | None = None,
        secret: bytes | None = None,
    ):
        self.policy = policy
        self.link = link  # one of `dpsql serve --workers` processes
        self.host, self.port = host, port
        self.tls, self.require_tls = tls, require_tls
        self.limits = limits or Limits()
        self.engine = open_engine(policy)
        self.catalog = Catalog(policy, self.engine.schema())
        self.executor = StackPool(max_workers=workers, thread_name_prefix="dpsql")  # the warmest idle thread first
        self.connections: dict[int, "Connection"] = {}  # authenticated
        self.pending: dict[int, "Connection"] = {}  # not yet authenticated: a cap of their own
        self.ungreeted: dict[int, "Connection"] = {}  # connected, first message not yet whole
        self.throttle = LoginThrottle()
        # Shared by every worker: the mock verifiers of unknown users must not differ between them.
        self.secret = secret or secrets.token_bytes(32)
        self.services: list[Service] = []
        self._server: asyncio.base_events.Server | None = None
        self._more: list[asyncio.base_events.Server] = []  # a worker's further listening sockets
        self._closing = False
        from ..ledger import open_ledger

        self.ledger = open_ledger(policy.ledger_path, policy.ledger_url, identity=policy.ledger_identity)
        if link is not None and link.ledger >= 0:  # the supervisor's writer: one for every worker
            from ..ledger.remote_writer import RemoteWriter

            self.ledger.use_writer(RemoteWriter(socket.socket(fileno=link.ledger)))
        else:
            self.ledger.group_commit()  # every connection's charges share transactions: one fsync a batch
        self.local_ledger = policy.ledger_url is None
        self.log_statements = False  # operators' view of what tools send: text and outcome, never values

    def new_pid(self) -> int:
        return new_pid() if self.link is None else self.link.new_pid()

    async def start(self) -> None:
        if self.link is None:
            try:
                self._server = await asyncio.start_server(self._accept, self.host, self.port, limit=2**16)
            except OSError as e:
                raise cannot_listen(self.host, self.port, e) from None
        else:  # the supervisor's listening sockets, on which every worker accepts
            socks = [socket.socket(fileno=fd) for fd in self.link.listen_fds]
            self._server = await asyncio.start_server(self._accept, sock=socks[0], limit=2**16)
            self._more = [await asyncio.start_server(self._accept, sock=s, limit=2**16) for s in socks[1:]]
        sock = self._server.sockets[0].getsockname()
        self.port = sock[1]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = Connection(self, reader, writer)
        await conn.run()

    async def serve_forever(self, ready: Callable[[], None] | None = None) -> None:
        """Listen, start the services, call `ready` (the port is bound: `self.port` is the real one),
        then serve until SIGTERM or SIGINT."""
        await self.start()
        for service in self.services:
            await service.start()
        if ready is not None:
            ready()
        settle_heap()
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        # A worker stops on SIGTERM from its supervisor; Ctrl-C goes to the supervisor alone.
        for sig in (signal.SIGTERM,) if self.link is not None else (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, stop.set)
            except (NotImplementedError, RuntimeError):
                pass
        if self.link is not None:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            os.set_blocking(self.link.cancel_read, False)
            loop.add_reader(self.link.cancel_read, self._read_cancels)
            loop.add_reader(self.link.lifeline, stop.set)  # end of file: the supervisor is gone
            self.link.say_ready({"console": self.console_url()})
        await stop.wait()
        if self.link is not None:
            loop.remove_reader(self.link.cancel_read)
            loop.remove_reader(self.link.lifeline)
        await self.shutdown()

    def console_url(self) -> str | None:
        """The web console's address, when one is served beside the wire."""
        return next((s.url for s in self.services if hasattr(s, "url")), None)

    def _read_cancels(self) -> None:
        for pid, key in self.link.read_cancels():
            self.cancel(pid, key)

    async def shutdown(self) -> None:
        """Stop accepting, let running statements finish (up to drain_timeout), close."""
        self._closing = True
        for service in self.services:
            await service.stop()
        for listening in ([self._server] if self._server is not None else []) + self._more:
            listening.close()
            await listening.wait_closed()
        deadline = asyncio.get_running_loop().time() + self.limits.drain_timeout
        while any(c.busy for c in self.connections.values()) and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
        for c in list(self.connections.values()):
            c.close()
        self.close()

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.engine.close()  # removes its scratch copies of private tables
        self.ledger.close()

    def make_room(self, newcomer: "Connection") -> str | None:
        """Room among the pending connections for a newcomer, or why there is none. When the
        pool, or the newcomer's address's share of it, is full, the oldest connection in the way
        that has not sent its first message whole is dropped, else the one idle longest
        (`Limits.pending_idle`): half-open sockets cannot shut the door, and one address cannot
        take the whole pool. Refused only when every pending connection in the way is active."""
        mine = [c for c in self.pending.values() if c.address == newcomer.address]
        if len(mine) >= self.limits.max_pending_per_address:
            crowd, where = mine, " from this address"
        elif len(self.pending) >= self.limits.max_pending:
            crowd, where = list(self.pending.values()), ""
        else:
            return None
        now = asyncio.get_running_loop().time()
        # A connection that has not sent its first message whole (a client sends it as soon as
        # it connects) is a half-open socket: given up first, however young, so that fresh ones
        # opened faster than they go idle cannot shut the door either.
        idle = [c for c in crowd if not c.greeted] or [c for c in crowd if now - c.heard >= self.limits.pending_idle]
        if not idle:
            return f"sorry, too many connections are logging in{where}; try again shortly"
        min(idle, key=lambda c: c.heard).drop(now)
        return None

    def admit_ungreeted(self, newcomer: "Connection") -> None:
        """A connection counts as pending only once its first message has come whole. Before
        that it is one of the ungreeted, capped apart (`UNGREETED_SHARE` times the pending caps):
        over a cap the oldest ungreeted one in the way is dropped, however young, so half-open
        sockets opened as fast as a client can open them never shut the door, while a burst of
        real clients, whose startup packets arrive at once, is never dropped for them."""
        mine = [c for c in self.ungreeted.values() if c.address == newcomer.address]
        if len(mine) >= UNGREETED_SHARE * self.limits.max_pending_per_address:
            crowd = mine
        elif len(self.ungreeted) >= UNGREETED_SHARE * self.limits.max_pending:
            crowd = list(self.ungreeted.values())
        else:
            crowd = []
        if crowd:
            min(crowd, key=lambda c: c.heard).drop(asyncio.get_running_loop().time())
        self.ungreeted[newcomer.pid] = newcomer

    def cancel(self, pid: int, key: int) -> None:
        if self.link is not None and not self.link.owns(pid):
            self.link.forward_cancel(pid, key)  # another worker serves that connection
            return
        conn = self.connections.get(pid)
        if conn is not None and secrets.compare_digest(struct.pack("!i", conn.key), struct.pack("!i", key)):
            conn.cancel()


def settle_heap() -> None:
    """Move what start-up allocated (modules, the catalog, the policy) out of the garbage
    collector's view: a full collection otherwise walks it all, a pause of 50-150 ms in which
    every connection waits (the tail of a 32-client load). Collected first, so only live
    objects are kept."""
    gc.collect()
    gc.freeze()


def tls_context(cert: str, key: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    return ctx


def cannot_listen(host: str, port: int, e: OSError) -> OperationalError:
    """The wire's port cannot be bound (in use, a privileged port, an address not on this host)."""
    return OperationalError(
        f"cannot listen on {host}:{port}: {os.strerror(e.errno) if e.errno else e}",
        hint=f"choose another --port (e.g. --port {port + 1 if 0 < port < 65535 else 5434}) or --host, "
        "or stop what is using it; clients then connect to that port",
    )


def run(server: Server, ready: Callable[[], None] | None = None) -> None:
    asyncio.run(server.serve_forever(ready))


__all__ = ["Server", "Service", "Limits", "cannot_listen", "run", "tls_context"]

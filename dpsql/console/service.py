"""The console served by uvicorn on the wire server's own event loop: `dpsql serve --http`.

The socket is bound when the service is made (so a port in use is a start-up error, said
plainly), uvicorn serves on it from a task of the wire's loop, and the wire server stops it
first when it shuts down; the console's logins and their Sessions are closed then."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import Iterator

import uvicorn

from ..errors import OperationalError
from ..server.listener import Server
from .app import LOOPBACK_NAMES, create_app
from .logins import close
from .web import log

SHUTDOWN_SECONDS = 5.0


class _Embedded(uvicorn.Server):
    """uvicorn without its own signal handlers: the wire server's loop owns SIGINT and SIGTERM
    and stops the console itself."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class ConsoleService:
    """The web console beside a wire Server (dpsql.server.listener.Service)."""

    def __init__(self, server: Server, host: str, port: int, certfile: str | None = None, keyfile: str | None = None):
        self.server = server
        try:
            self.socket = socket.create_server((host, port), reuse_port=False)
        except OSError as e:
            raise OperationalError(
                f"cannot serve the console on {host}:{port}: {e.strerror}", hint="choose another --http address or port"
            ) from None
        self.host, self.port = host, self.socket.getsockname()[1]
        loopback = host in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")
        self.app = create_app(server, secure=certfile is not None, hosts=LOOPBACK_NAMES if loopback else None)
        config = uvicorn.Config(
            self.app,
            host=host,
            port=self.port,
            log_level="warning",
            lifespan="off",
            ssl_certfile=certfile,
            ssl_keyfile=keyfile,
            server_header=False,
            proxy_headers=False,
            timeout_graceful_shutdown=SHUTDOWN_SECONDS,
        )
        self.uvicorn = _Embedded(config)
        self._task: asyncio.Task | None = None

    @property
    def url(self) -> str:
        scheme = "https" if self.uvicorn.config.ssl_certfile else "http"
        return f"{scheme}://{self.host}:{self.port}/"

    async def start(self) -> None:
        self._task = asyncio.create_task(self.uvicorn.serve(sockets=[self.socket]), name="dpsql-console")
        self._task.add_done_callback(_report)

    async def stop(self) -> None:
        """Stop serving (open requests get SHUTDOWN_SECONDS), then close every login's Session."""
        if self._task is not None:
            self.uvicorn.should_exit = True
            with contextlib.suppress(Exception, asyncio.CancelledError):  # _report has logged it
                await self._task
            self._task = None
        self.socket.close()
        loop = asyncio.get_running_loop()
        for login in self.app.state.console.logins.drain():
            await loop.run_in_executor(self.server.executor, close, login)


def _report(task: asyncio.Task) -> None:
    """The console stopping on its own is an operator's concern; the wire server goes on."""
    if not task.cancelled() and task.exception() is not None:
        log.error("the console stopped", exc_info=task.exception())

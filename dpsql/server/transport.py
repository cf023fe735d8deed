"""A connection's byte stream: whole messages read, answers queued and written in one piece at
each flush, a pending connection dropped for a newcomer, blocking work run on the server's
threads. A mixin of app.Connection."""

from __future__ import annotations

import asyncio
import logging
import struct
import threading
from typing import Any, Callable

from .wire import codec

log = logging.getLogger("dpsql.server")


class Transport:
    """Reading and writing messages."""

    async def _read_exact(self, n: int) -> bytes:
        if self._batching:
            return await self.reader.readexactly(n)
        self._write()  # start-up and authentication: every answer before the next read
        data = await self.reader.readexactly(n)
        self.heard = asyncio.get_running_loop().time()
        return data

    async def read_message(self) -> tuple[bytes, bytes]:
        head = await self._read_exact(5)
        kind, length = head[:1], struct.unpack("!i", head[1:])[0]
        if length < 4 or length > self.server.limits.max_message:
            raise codec.ProtocolError("invalid message length")
        return kind, await self._read_exact(length - 4)

    def send(self, data: bytes) -> None:
        """Queue a message: written in one piece at the next flush (Sync, Flush, the end of a
        simple query, as PostgreSQL does), or once 64 kB are queued."""
        self._out.append(data)
        self._queued += len(data)
        if self._queued >= 65536:
            self._write()

    def _write(self) -> None:
        if self._out:
            self.writer.write(b"".join(self._out))
            self._out.clear()
            self._queued = 0

    async def flush(self) -> None:
        self._write()
        await self.writer.drain()

    def close(self) -> None:
        try:
            self._write()
            self.writer.close()
        except Exception:  # noqa: BLE001 - closing a broken transport
            pass

    def drop(self, now: float) -> None:
        """Give this pending connection up for a newcomer: a FATAL 53300 unless it is in a TLS
        handshake, then close. A login refusal it was held for is never sent."""
        self.server.pending.pop(self.pid, None)
        self.server.ungreeted.pop(self.pid, None)
        self._dropped.set()
        log.info("dropped pending connection %s from %s, idle %.1f s", self.pid, self.address, now - self.heard)
        if not self._handshaking:
            self._out.clear()
            self.send(
                codec.error_response(
                    "53300",
                    "terminating connection: too many connections are logging in and this one sent nothing "
                    f"for {now - self.heard:.1f} s",
                    "reconnect and answer the server promptly",
                    severity="FATAL",
                )
            )
        self.close()

    def cancel(self) -> None:
        if self.busy and self.thread is not None:
            self.server.engine.interrupt(self.thread)

    async def run_blocking(self, fn: Callable, *args) -> Any:
        loop = asyncio.get_running_loop()

        def call():
            self.thread = threading.get_ident()
            try:
                return fn(*args)
            finally:
                self.thread = None

        self.busy = True
        try:
            return await loop.run_in_executor(self.server.executor, call)
        finally:
            self.busy = False


def _peer(writer: asyncio.StreamWriter) -> str:
    """The client's address, which the login throttle and the pending caps count by."""
    peer = writer.get_extra_info("peername")
    return str(peer[0]) if isinstance(peer, tuple) and peer else "local"

"""A loopback TCP proxy that makes a network hostile: it throttles bytes to a rate, or it kills
a connection as soon as any WebSocket message in it is over a cap (as API gateways and
corporate proxies do), and it counts connections (a reconnect loop shows as many).

    async with NetProxy(server.port, rate=256 * 1024) as proxy:
        url = f"ws://127.0.0.1:{proxy.port}/ws"

It parses WebSocket framing only to measure messages (RFC 6455: 2-14 byte headers, client
frames masked); it never changes a byte.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from types import TracebackType


class _MessageMeter:
    """Follows one direction's WebSocket frames; ``feed`` returns the largest message so far."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._in_handshake = True
        self._skip = 0  # payload bytes of the current frame still to pass
        self._message = 0  # bytes of the message being assembled
        self.largest = 0

    def feed(self, data: bytes) -> int:
        self._buffer += data
        if self._in_handshake:
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                return self.largest
            del self._buffer[: end + 4]
            self._in_handshake = False
        while self._buffer:
            if self._skip:
                taken = min(self._skip, len(self._buffer))
                del self._buffer[:taken]
                self._skip -= taken
                continue
            header = self._header()
            if header is None:
                break
            size, length, fin, control = header
            del self._buffer[:size]
            self._skip = length
            if control:
                continue
            self._message += length
            self.largest = max(self.largest, self._message)
            if fin:
                self._message = 0
        return self.largest

    def _header(self) -> tuple[int, int, bool, bool] | None:
        b = self._buffer
        if len(b) < 2:
            return None
        fin, opcode = bool(b[0] & 0x80), b[0] & 0x0F
        masked, length, size = bool(b[1] & 0x80), b[1] & 0x7F, 2
        if length == 126:
            if len(b) < 4:
                return None
            length, size = int.from_bytes(b[2:4], "big"), 4
        elif length == 127:
            if len(b) < 10:
                return None
            length, size = int.from_bytes(b[2:10], "big"), 10
        size += 4 if masked else 0
        if len(b) < size:
            return None
        return size, length, fin, opcode >= 0x8


class NetProxy:
    def __init__(
        self,
        target_port: int,
        *,
        rate: int | None = None,
        max_message_bytes: int | None = None,
    ) -> None:
        self.target_port = target_port
        self.rate = rate  # bytes per second, each direction
        self.max_message_bytes = max_message_bytes
        self.port = 0
        self.connections = 0
        self.killed = 0  # connections closed for a message over the cap
        self.largest_message = 0  # server → client, over all connections
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> NetProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        try:
            pumps = [
                asyncio.ensure_future(self._pump(reader, up_writer, _MessageMeter(), False)),
                asyncio.ensure_future(self._pump(up_reader, writer, _MessageMeter(), True)),
            ]
            try:
                await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for pump in pumps:
                    pump.cancel()
                    with contextlib.suppress(BaseException):
                        await pump
        finally:
            for w in (writer, up_writer):
                w.transport.abort()  # like a proxy that drops the connection: no close frame
            self._tasks.discard(task)

    async def _pump(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        meter: _MessageMeter,
        from_server: bool,
    ) -> None:
        started = time.monotonic()
        sent = 0
        while True:
            data = await reader.read(16 * 1024)
            if not data:
                return
            largest = meter.feed(data)
            if from_server:
                self.largest_message = max(self.largest_message, largest)
            if self.max_message_bytes is not None and largest > self.max_message_bytes:
                self.killed += 1
                return
            writer.write(data)
            await writer.drain()
            sent += len(data)
            if self.rate is not None:
                # Rate limiting, not synchronisation: hold each direction to ``rate``.
                ahead = sent / self.rate - (time.monotonic() - started)
                if ahead > 0:
                    await asyncio.sleep(ahead)

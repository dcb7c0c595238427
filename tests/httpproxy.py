"""A loopback HTTP proxy that behaves like the hostile middleboxes the HTTP fallback is for.

It refuses every WebSocket upgrade with 403 (as corporate proxies do), records each request
line (to show no token travels in a URL), and with ``buffer_responses`` holds each response
until it is complete, as buffering proxies and virus scanners do: a stream then never shows a
first byte, a long poll arrives whole. One request per connection: it asks the server for
``Connection: close`` so the end of a response is the end of the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from types import TracebackType

_REFUSAL = (
    b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: 27\r\n"
    b"Connection: close\r\n\r\nWebSockets are not allowed\n"
)


class LoopbackProxy:
    def __init__(
        self,
        upstream_port: int,
        *,
        buffer_responses: bool = False,
        refuse_upgrades: bool = True,
        kill_upgrades_after: float | None = None,
    ) -> None:
        self.upstream_port = upstream_port
        self.buffer_responses = buffer_responses
        # False: WebSockets pass; with kill_upgrades_after they are cut that many seconds
        # after they open (a proxy that kills long-lived connections).
        self.refuse_upgrades = refuse_upgrades
        self.kill_upgrades_after = kill_upgrades_after
        self.killed_upgrades = 0
        self.request_lines: list[str] = []
        self.refused_upgrades = 0
        self.port = 0
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"

    async def start(self) -> LoopbackProxy:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def aclose(self) -> None:
        for task in list(self._handlers):
            task.cancel()
        for task in list(self._handlers):
            with contextlib.suppress(BaseException):
                await task
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    async def __aenter__(self) -> LoopbackProxy:
        return await self.start()

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            await self._relay(reader, writer)
        finally:
            self._handlers.discard(task)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            writer.close()
            return
        lines = head.split(b"\r\n")
        self.request_lines.append(lines[0].decode("latin-1"))
        upgrade = any(line.lower().startswith(b"upgrade:") for line in lines[1:])
        if upgrade and not self.refuse_upgrades:
            await self._tunnel(head, reader, writer)
            return
        if upgrade:
            self.refused_upgrades += 1
            writer.write(_REFUSAL)
            with contextlib.suppress(ConnectionError):
                await writer.drain()
            writer.close()
            return
        kept = [line for line in lines[1:] if not line.lower().startswith(b"connection:")]
        head = b"\r\n".join([lines[0], b"Connection: close", *kept])
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            writer.close()
            return
        up_writer.write(head)
        upload = asyncio.ensure_future(_pump(reader, up_writer))
        try:
            if self.buffer_responses:
                whole = await up_reader.read(-1)
                writer.write(whole)
                await writer.drain()
            else:
                await _pump(up_reader, writer)
        except ConnectionError:
            pass
        finally:
            upload.cancel()
            with contextlib.suppress(BaseException):
                await upload
            for w in (writer, up_writer):
                w.close()

    async def _tunnel(
        self, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """A WebSocket passed through as it is, cut after kill_upgrades_after if set."""
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            writer.close()
            return
        up_writer.write(head)
        pumps = [
            asyncio.ensure_future(_pump(reader, up_writer)),
            asyncio.ensure_future(_pump(up_reader, writer)),
        ]
        try:
            done, _ = await asyncio.wait(
                pumps, timeout=self.kill_upgrades_after, return_when=asyncio.FIRST_COMPLETED
            )
            if not done:
                self.killed_upgrades += 1  # the middlebox's own timer: no close frame, RST-like
        finally:
            for pump in pumps:
                pump.cancel()
            for w in (writer, up_writer):
                w.close()


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError):
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()


class ThreadedProxy:
    """The proxy on its own event loop thread, for sync tests (the browser test)."""

    def __init__(self, upstream_port: int, **options: bool) -> None:
        self.proxy = LoopbackProxy(upstream_port, **options)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def __enter__(self) -> LoopbackProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.proxy.start(), self._loop).result(10)
        return self.proxy

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.proxy.aclose(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

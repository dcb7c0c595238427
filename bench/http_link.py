"""A lean HTTP-fallback link for ``tether bench sync --transport http``: raw HTTP/1.1 on asyncio
streams (one keep-alive connection for POSTs, one for the event stream), the same surface as
``protocol.clients.http_client.HttpLink`` (``open``, ``send``, iterate, ``close``).

Why not the product client: with 50 editors in one benchmark process, httpx's per-request cost
(about 2 ms of CPU here, part of it a failed ``import sniffio`` per request) made the *driver*
the bottleneck, and the latency measured was the driver's queue, not the server's. The
``/ws`` side of the bench likewise speaks raw ``websockets``, not ``TetherClient``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

from tether.protocol.wire.http_wire import (
    ACK_HEADER,
    BATCH_TYPE,
    RESUME_HEADER,
    SESSION_HEADER,
    CloseEvent,
    EventParser,
    encode_batch,
)

ACK_INTERVAL = 1.0


class _Connection:
    """One keep-alive HTTP/1.1 connection: a request, then its whole answer."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, host: str, port: int) -> _Connection:
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer)

    def request(self, method: str, path: str, headers: dict[str, str], body: bytes = b"") -> None:
        lines = [f"{method} {path} HTTP/1.1", "Host: bench", f"Content-Length: {len(body)}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)

    async def answer_head(self) -> tuple[int, dict[str, str]]:
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        return status, headers

    async def answer(self) -> tuple[int, bytes]:
        status, headers = await self.answer_head()
        if headers.get("transfer-encoding") == "chunked":
            body = b"".join([chunk async for chunk in self.chunks()])
        else:
            body = await self.reader.readexactly(int(headers.get("content-length", "0")))
        return status, body

    async def chunks(self) -> AsyncIterator[bytes]:
        while True:
            size = int((await self.reader.readuntil(b"\r\n"))[:-2].split(b";")[0], 16)
            if size == 0:
                await self.reader.readuntil(b"\r\n")
                return
            data = await self.reader.readexactly(size)
            await self.reader.readexactly(2)
            yield data

    def close(self) -> None:
        self.writer.close()


class BenchHttpLink:
    def __init__(self, host: str, port: int, session: str, up: _Connection) -> None:
        self._host, self._port = host, port
        self._session = session
        self._up = up
        self._down: _Connection | None = None
        self._pending: list[bytes] = []
        self._wake = asyncio.Event()
        self._last_seq = 0
        self._acked = 0
        self._closing = False
        self._writer = asyncio.ensure_future(self._write())

    @classmethod
    async def open(cls, base_url: str, token: str) -> BenchHttpLink:
        parts = urlsplit(base_url)
        host, port = parts.hostname or "127.0.0.1", parts.port or 80
        up = await _Connection.open(host, port)
        up.request("POST", "/http/session", {"Authorization": f"Bearer {token}"})
        status, body = await up.answer()
        if status != 201:
            up.close()
            raise ConnectionError(f"HTTP session refused ({status}): {body[:200]!r}")
        return cls(host, port, json.loads(body)["session"], up)

    async def send(self, frame: bytes) -> None:
        self._pending.append(frame)
        self._wake.set()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        self._down = down = await _Connection.open(self._host, self._port)
        down.request("GET", "/http/events", {SESSION_HEADER: self._session, RESUME_HEADER: "0"})
        status, _ = await down.answer_head()
        if status != 200:
            raise ConnectionError(f"HTTP stream refused ({status})")
        parser = EventParser()
        try:
            async for chunk in down.chunks():
                for event in parser.feed(chunk):
                    if isinstance(event, CloseEvent):
                        return
                    self._last_seq = event.seq
                    yield event.frame
        except (asyncio.IncompleteReadError, ConnectionError):
            if not self._closing:
                raise

    async def close(self) -> None:
        self._closing = True
        self._writer.cancel()
        with contextlib.suppress(BaseException):
            await self._writer
        for connection in (self._up, self._down):
            if connection is not None:
                connection.close()

    async def _write(self) -> None:
        """One POST at a time with whatever is queued; an ack at least every ACK_INTERVAL."""
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(ACK_INTERVAL):
                    await self._wake.wait()
            self._wake.clear()
            if not self._pending and self._last_seq == self._acked:
                continue
            frames, self._pending = self._pending, []
            acked = self._last_seq
            headers = {
                SESSION_HEADER: self._session,
                ACK_HEADER: str(acked),
                "Content-Type": BATCH_TYPE,
            }
            self._up.request("POST", "/http/send", headers, encode_batch(frames))
            status, _ = await self._up.answer()
            self._acked = acked
            if status != 204:
                raise ConnectionError(f"HTTP send refused ({status})")

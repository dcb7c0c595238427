"""A raw HTTP-fallback test peer: ``MuxPeer`` (tests/rawpeer.py) over ``/http/*`` instead of a
socket, so tests drive the same frames and see every one the server sends, and control the
down direction by hand: drop the stream, resume from an id, poll, never acknowledge.

    async with await HttpMuxPeer.connect(server.http_url, token) as peer:
        doc = await peer.open("notes", token)
        await doc.append("hi")
        await doc.wait_acked()
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any

import httpx
from websockets.exceptions import ConnectionClosed

from tests.rawpeer import MuxPeer
from tether.protocol.wire.http_wire import (
    ACK_HEADER,
    BATCH_TYPE,
    RESUME_HEADER,
    SESSION_HEADER,
    CloseEvent,
    EventParser,
    FrameEvent,
    encode_batch,
)


@dataclass
class _CloseFrame:
    code: int
    reason: str


class _Protocol:
    """What MuxPeer reads after its loop ends (``ws.protocol.close_rcvd``)."""

    close_rcvd: _CloseFrame | None = None


@dataclass(eq=False)
class HttpSocket:
    """The WebSocket-shaped face of one HTTP session, as MuxPeer uses a socket."""

    http: httpx.AsyncClient
    session: str
    created: dict[str, Any]
    ack: bool = True  # send Tether-Ack on POSTs (a peer that never acknowledges: False)
    poll: bool = False
    events: list[FrameEvent] = field(default_factory=list)  # every event, in arrival order
    last_seq: int = 0
    down_requests: int = 0
    protocol: _Protocol = field(default_factory=_Protocol)
    _frames: asyncio.Queue[bytes | None] = field(default_factory=asyncio.Queue)
    _down: asyncio.Task[None] | None = None
    _down_done: asyncio.Event = field(default_factory=asyncio.Event)
    _opened: asyncio.Event = field(default_factory=asyncio.Event)
    _acking: asyncio.Task[None] | None = None
    _acked: int = 0

    def headers(self, **extra: str) -> dict[str, str]:
        return {SESSION_HEADER: self.session, **extra}

    async def send(self, frame: bytes) -> None:
        await self.send_batch([frame])

    async def send_batch(self, frames: list[bytes]) -> None:
        await self.post_raw(encode_batch(frames))

    async def post_raw(
        self, body: bytes, content_type: str = BATCH_TYPE, *, check: bool = True
    ) -> httpx.Response:
        """POST a body; a session the server closed (404, 410) raises ConnectionClosed unless
        ``check`` is False."""
        headers = self.headers(**{"Content-Type": content_type})
        if self.ack:
            headers[ACK_HEADER] = str(self.last_seq)
        reply = await self.http.post("/http/send", content=body, headers=headers)
        if check and reply.status_code in (404, 410):
            raise ConnectionClosed(None, None)
        return reply

    # ---- down --------------------------------------------------------------------------------

    def start_down(self, after: int | None = None) -> None:
        """Start reading (a stream, or polls back to back) after ``after`` (default: the last
        event we have)."""
        self._opened.clear()
        self._down_done.clear()
        self._down = asyncio.ensure_future(self._read_down(after))

    async def wait_down_open(self, timeout: float = 10.0) -> None:
        async with asyncio.timeout(timeout):
            await self._opened.wait()

    async def drop_down(self) -> None:
        """Cut the down request mid-stream, as a proxy or a flaky link would."""
        if self._down is not None:
            self._down.cancel()
            with contextlib.suppress(BaseException):
                await self._down
            self._down = None

    async def _read_down(self, after: int | None) -> None:
        resume = self.last_seq if after is None else after
        try:
            while True:
                self.down_requests += 1
                params = {"mode": "poll"} if self.poll else None
                headers = self.headers(**{RESUME_HEADER: str(resume)})
                parser = EventParser()
                async with self.http.stream(
                    "GET", "/http/events", params=params, headers=headers
                ) as reply:
                    if reply.status_code != 200:
                        self._finish(_CloseFrame(1006, f"HTTP {reply.status_code}"))
                        return
                    self._opened.set()
                    async for chunk in reply.aiter_raw():
                        for event in parser.feed(chunk):
                            if isinstance(event, CloseEvent):
                                self._finish(_CloseFrame(event.code, event.reason))
                                return
                            self.events.append(event)
                            if event.seq > self.last_seq:
                                self.last_seq = event.seq
                                self._frames.put_nowait(event.frame)
                        if self.ack and not self.poll:
                            self._acknowledge()
                if not self.poll:
                    return  # the server ended the stream (replaced by another)
                resume = self.last_seq
        finally:
            self._down_done.set()

    def _acknowledge(self) -> None:
        """Tell the server what arrived (an empty POST), one at a time, as a real client does."""
        if self._acking is None or self._acking.done():
            self._acking = asyncio.ensure_future(self._post_ack())

    async def _post_ack(self) -> None:
        with contextlib.suppress(httpx.HTTPError, ConnectionClosed):
            while self._acked < self.last_seq:
                seq = self.last_seq
                await self.post_raw(b"")
                self._acked = seq

    def _finish(self, close: _CloseFrame) -> None:
        self.protocol.close_rcvd = close
        self._frames.put_nowait(None)

    async def __aiter__(self) -> Any:
        while (frame := await self._frames.get()) is not None:
            yield frame

    async def close(self) -> None:
        await self.drop_down()
        if self._acking is not None:
            self._acking.cancel()
        with contextlib.suppress(httpx.HTTPError):
            await self.http.delete("/http/session", headers=self.headers())
        self._frames.put_nowait(None)
        await self.http.aclose()


async def create_session(
    http_url: str,
    token: str,
    *,
    source: str | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[httpx.AsyncClient, httpx.Response]:
    """POST /http/session; ``source``: a loopback address to connect from (127.0.0.2, ...),
    so one machine can look like several clients."""
    transport = httpx.AsyncHTTPTransport(local_address=source) if source else None
    http = httpx.AsyncClient(
        base_url=http_url, timeout=httpx.Timeout(10, read=None), transport=transport
    )
    sent = {**(headers or {}), "Authorization": f"Bearer {token}"}
    reply = await http.post("/http/session", headers=sent)
    return http, reply


class HttpMuxPeer(MuxPeer):
    ws: HttpSocket  # type: ignore[assignment]

    @classmethod
    async def connect(  # type: ignore[override]
        cls,
        http_url: str,
        token: str,
        *,
        answer_pings: bool = True,
        ack: bool = True,
        poll: bool = False,
        start: bool = True,
        headers: dict[str, str] | None = None,
    ) -> HttpMuxPeer:
        http, reply = await create_session(http_url, token, headers=headers)
        if reply.status_code != 201:
            await http.aclose()
            raise PermissionError(f"session refused: {reply.status_code} {reply.text}")
        created = reply.json()
        socket = HttpSocket(http, created["session"], created, ack=ack, poll=poll)
        if start:
            socket.start_down()
            await socket.wait_down_open()
        return cls(socket, answer_pings=answer_pings)  # type: ignore[arg-type]

    async def __aenter__(self) -> HttpMuxPeer:
        return self

"""A raw ASGI WebSocket as the ``Transport`` the connection loops speak; knows no documents,
no auth and no Starlette."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence

from starlette.types import Receive, Scope, Send

from tether.protocol.protocol_errors import DecodeError

from .raw_frames import MessageSink, raw_frames_of


class AsgiWebSocket:
    """The sync hot path sends one message per editor per edit; going straight to the server's
    ASGI ``send`` skips Starlette's per-message wrappers (measured in ``tether bench sync``).
    """

    __slots__ = ("_raw", "_receive", "_send")

    def __init__(self, receive: Receive, send: Send, scope: Scope | None = None) -> None:
        self._receive = receive
        self._send = send
        # tether serve's uvicorn protocol (collab.transport.raw_frames), offering pre-framed
        # synchronous writes and a receive fast path; None under a host app's server: plain ASGI.
        self._raw = raw_frames_of(scope)

    @property
    def write_now(self) -> Callable[[Sequence[bytes]], bool] | None:
        return None if self._raw is None else self._raw.write_frames

    @property
    def wait_drained(self) -> Callable[[], Awaitable[None]] | None:
        return None if self._raw is None else self._raw.wait_drained

    def set_message_sink(self, sink: MessageSink | None) -> None:
        """Messages go to ``sink.on_message`` as they arrive, where the server can."""
        if self._raw is not None:
            self._raw.message_sink = sink

    async def handshake(self) -> bool:
        """Consume ``websocket.connect``; False if the client left first."""
        message = await self._receive()
        return message["type"] == "websocket.connect"

    async def accept(self) -> None:
        await self._send({"type": "websocket.accept"})

    async def refuse(self, code: int, reason: str) -> None:
        """Close before accepting: the client sees the HTTP upgrade fail with 403."""
        await self._send({"type": "websocket.close", "code": code, "reason": reason})

    async def deny(self, status: int, reason: str, scope: Scope) -> None:
        """Refuse the upgrade with an HTTP status and a JSON body where the server supports
        it (the ASGI websocket.http.response extension); a plain 403 otherwise."""
        if "websocket.http.response" not in scope.get("extensions", {}):
            await self.refuse(1008, reason)
            return
        body = json.dumps({"error": reason}).encode()
        await self._send(
            {
                "type": "websocket.http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await self._send({"type": "websocket.http.response.body", "body": body})

    async def receive(self) -> bytes | None:
        message = await self._receive()
        if message["type"] == "websocket.disconnect":
            return None
        data = message.get("bytes")
        if data is None:
            raise DecodeError("text frames are not part of the protocol")
        return data

    def send(self, data: bytes) -> Awaitable[None]:
        return self._send({"type": "websocket.send", "bytes": data})

    async def close(self, code: int, reason: str) -> None:
        await self._send({"type": "websocket.close", "code": code, "reason": reason})

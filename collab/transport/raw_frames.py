"""Pre-framed writes for the fan-out path, and a receive fast path: an ASGI extension offered by
a small subclass of uvicorn's sans-I/O WebSocket protocol.

Server-to-client WebSocket frames are not masked, so a binary message's frame is just a header
and the payload: built here in one join and written to the transport synchronously, several
frames in one ``transport.write`` (one syscall). That skips, per frame and per peer, the ASGI
message dict, ``websockets``' frame objects and the drain task's wake-up.

The app finds the protocol itself as ``scope["extensions"]["tether.raw_frames"]``; under any
other server (a host app's) the key is absent and the app sends through plain ASGI messages.
``write_frames`` refuses (returns False) whenever a plain send would have to wait or fail:
before the handshake, once a close frame is queued or sent, while the transport is closing or paused
(back-pressure: the transport's buffer is past its high-water mark). The caller then keeps the
frames in its own bounded queue and sends them the ordinary way, so ordering with the close
frame and the send-queue bounds are unchanged.

Receiving, the editor's one frame per edit (masked, final, binary) is found and unmasked by
``collab.transport.client_frames`` instead of the ``websockets`` parser, and handed to the app's
``message_sink`` (``on_message(data) -> bool``) right away, inside ``data_received``: no ASGI
message, no receive queue, no task switch, no pause and resume of reading. The sink takes it only
when its receive loop waits with nothing queued (so order holds) and the message needs no
``await``; otherwise it goes the ordinary way, through the queue. Every other frame (control
frames, text, fragments, anything malformed) is handed whole to ``websockets``, which judges it
as before; the fast path runs only while ``websockets``' parser sits idle between frames, the
connection is open and no fragmented message is under way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator, Sequence
from typing import Any, Protocol

from websockets.protocol import State

from .client_frames import BINARY, INCOMPLETE, TOO_BIG, next_frame, unmask
from .ws_protocol import SlimWebSocketsProtocol

EXTENSION = "tether.raw_frames"

_BINARY_FIN = 0x82


# The headers of payloads under 126 bytes (most Yjs updates and acks), made once.
_SHORT_HEADERS = [bytes((_BINARY_FIN, length)) for length in range(126)]


def binary_frame_header(length: int) -> bytes:
    """RFC 6455 5.2 header of one unmasked, final, binary frame carrying ``length`` bytes."""
    if length < 126:
        return _SHORT_HEADERS[length]
    if length < 1 << 16:
        return bytes((_BINARY_FIN, 126)) + length.to_bytes(2, "big")
    return bytes((_BINARY_FIN, 127)) + length.to_bytes(8, "big")


def raw_frames_of(scope: Any) -> RawFramesProtocol | None:
    """The connection's protocol, if its server is ``tether serve``'s."""
    if scope is None:
        return None
    offered = scope.get("extensions", {}).get(EXTENSION)
    return offered if isinstance(offered, RawFramesProtocol) else None


class MessageSink(Protocol):
    def on_message(self, data: bytes) -> bool:
        """Handle one received binary message now; False: queue it for the receive loop."""
        ...


class RawFramesProtocol(SlimWebSocketsProtocol):
    """``tether serve``'s WebSocket protocol: the slim one (collab.transport.ws_protocol), offering
    ``write_frames`` and a receive fast path to the app."""

    # Slots like the slim protocol's: no instance dict per socket.
    __slots__ = ("_partial", "message_sink")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The start of a frame the fast path has not seen the end of; None while websockets'
        # parser may be inside a frame (it parsed the handshake, or was handed bytes that need
        # not end on a frame boundary): the fast path waits until it is not.
        self._partial: bytes | None = None
        self.message_sink: MessageSink | None = None

    def data_received(self, data: bytes) -> None:
        if not self._fast():
            super().data_received(data)
            return
        if self._partial:  # not None: _fast() said so
            data = self._partial + data
            self._partial = b""
        conn = self.conn
        max_size = conn.max_message_size
        if max_size is None:
            max_size = 1 << 63  # uvicorn always sets ws_max_size; no limit: frames still end
        if conn.max_fragment_size is not None:
            max_size = min(max_size, conn.max_fragment_size)
        pos = 0
        size = len(data)
        while pos < size:
            kind, start, end = next_frame(data, pos, max_size)
            if kind == BINARY:
                self._deliver(unmask(data, start, end))
            elif kind == INCOMPLETE:
                # Bounded: a frame's header says how long it is, and TOO_BIG is refused below.
                self._partial = data[pos:]
                return
            elif kind == TOO_BIG:
                self._hand_over(data[pos:])  # websockets refuses it (1009), as before
                return
            else:
                super().data_received(data[pos:end])  # a whole frame: its parser ends idle
            pos = end
            if pos < size and not self._fast():  # a close, an error, a fragmented message
                self._hand_over(data[pos:])
                return

    def _fast(self) -> bool:
        """Whether received bytes may take the fast path now."""
        conn = self.conn
        if (
            self.close_sent
            or not self.handshake_complete
            or self.initial_response is not None
            or conn.state is not State.OPEN
            or conn.current_size is not None  # inside a fragmented message: websockets' job
        ):
            return False
        if self._partial is None:
            if conn.reader.buffer or not _parser_idle(conn.parser):
                return False
            self._partial = b""
        return True

    def _hand_over(self, data: bytes) -> None:
        """Bytes that need not end on a frame boundary, to websockets' parser."""
        self._partial = None
        super().data_received(data)

    def _deliver(self, data: bytes) -> None:
        """A binary message: to the app's sink now, or the ordinary way (uvicorn's)."""
        sink = self.message_sink
        queue = self.queue
        if sink is not None and queue.empty() and sink.on_message(data):
            return
        queue.put_nowait({"type": "websocket.receive", "bytes": data})
        if not self.read_paused:
            self.read_paused = True
            self.transport.pause_reading()

    def handle_connect(self, event: Any) -> None:
        # Here, where uvicorn builds the scope and starts the app's task (which runs later), not
        # in an ``async def run_asgi`` wrapper: that would be one more coroutine frame (0.2 KB)
        # under every socket for its whole life.
        super().handle_connect(event)
        scope = getattr(self, "scope", None)
        if scope is None:
            return  # the handshake was refused: no scope, no app
        extensions: dict[str, Any] = scope.setdefault("extensions", {})  # type: ignore[assignment]
        # The protocol itself, not the usual dict of extension data: one object less per socket
        # (only tether's app reads this key).
        extensions[EXTENSION] = self

    async def wait_drained(self) -> None:
        """Until the transport's buffer is below its high-water mark (or the connection is
        gone): a big frame handed to it is not taken by the peer before then."""
        await self.writable.wait()

    def write_frames(self, payloads: Sequence[bytes]) -> bool:
        """All of ``payloads`` as frames in one write, or nothing (False: send them the
        ordinary way, later)."""
        transport: asyncio.Transport = self.transport
        if (
            self.close_sent
            or not self.handshake_complete
            or self.conn.state is not State.OPEN
            or not self.writable.is_set()
            or transport.is_closing()
        ):
            return False
        if len(payloads) == 1:  # the common case: one update or ack this turn
            payload = payloads[0]
            length = len(payload)
            if length < 126:
                transport.write(_SHORT_HEADERS[length] + payload)
            else:
                transport.write(binary_frame_header(length) + payload)
            return True
        parts: list[bytes] = []
        for payload in payloads:
            parts.append(binary_frame_header(len(payload)))
            parts.append(payload)
        transport.write(b"".join(parts))
        return True


def _parser_idle(parser: Generator[None, None, None]) -> bool:
    """websockets' parser waits for the first byte of a frame (not inside one): its innermost
    generator is ``StreamReader.at_eof``, where ``Protocol.parse`` waits between frames."""
    inner: Any = parser
    while True:
        nested = getattr(inner, "gi_yieldfrom", None)
        if nested is None:
            break
        inner = nested
    return getattr(getattr(inner, "gi_code", None), "co_name", "") == "at_eof"

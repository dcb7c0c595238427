"""Pre-framed writes for the fan-out path: an ASGI extension offered by a small subclass of
uvicorn's sans-I/O WebSocket protocol.

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
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from websockets.protocol import State

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


def raw_frame_writer(scope: Any) -> Callable[[Sequence[bytes]], bool] | None:
    """The connection's ``write_frames``, if its server offers one."""
    if scope is None:
        return None
    offered = scope.get("extensions", {}).get(EXTENSION)
    return None if offered is None else offered.write_frames


class RawFramesProtocol(SlimWebSocketsProtocol):
    """``tether serve``'s WebSocket protocol: the slim one (collab.ws_protocol), offering
    ``write_frames`` to the app."""

    __slots__ = ()  # keeps the slim protocol's slots: no instance dict per socket

    async def run_asgi(self) -> None:
        extensions: dict[str, Any] = self.scope.setdefault("extensions", {})  # type: ignore[assignment]
        # The protocol itself, not the usual dict of extension data: one object less per socket
        # (only tether's app reads this key).
        extensions[EXTENSION] = self
        await super().run_asgi()

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

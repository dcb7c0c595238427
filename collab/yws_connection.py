"""One ``/yjs/{doc}`` socket: the plain y-websocket protocol, one document, token in the URL.

Knows nothing of Starlette. ``authorize`` runs before the WebSocket is accepted: a refusal is an
HTTP 403 on the upgrade, which y-websocket 3 retries with exponential backoff (a 44xx close
after accepting makes it reconnect every 100 ms).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from protocol.errors import ProtocolError
from protocol.yws import (
    YAwareness,
    YPermissionDenied,
    YQueryAwareness,
    YSync,
    decode_yws_frame,
)

from .auth import AuthError, Grant
from .close_codes import GOING_AWAY, close_for
from .context import ServerContext, Transport, valid_document_name
from .outbox import Outbox, SlowConsumer
from .peer import Peer
from .room import InvalidUpdate, Room

log = logging.getLogger(__name__)

# An awareness update with no entries: a no-op for the client that still proves we are alive
# (y-websocket reconnects after 30 s without any message).
KEEPALIVE_FRAME = b"\x01\x01\x00"


def authorize(ctx: ServerContext, document: str, token: str) -> Grant:
    """The grant for opening ``document`` with ``token``; raises AuthError."""
    if not valid_document_name(document):
        raise AuthError("invalid document name")
    grant = ctx.authenticator.verify(token)
    ctx.authenticator.check(grant, document)
    return grant


class YwsConnection:
    def __init__(
        self, transport: Transport, ctx: ServerContext, document: str, grant: Grant
    ) -> None:
        self._transport = transport
        self._ctx = ctx
        self._document = document
        self._grant = grant
        self._outbox = Outbox(transport.send, ctx.settings.send_queue_frames)

    async def run(self) -> None:
        grant = self._grant
        metrics = self._ctx.metrics
        metrics.connections.labels("yjs").inc()
        writer = asyncio.ensure_future(self._outbox.drain_forever())
        room = await self._ctx.rooms.acquire(self._document)
        peer = Peer(self._outbox, grant, grant.scope, None)
        room.attach(peer)
        monitor = asyncio.ensure_future(self._monitor())
        close: tuple[int, str] | None = None
        try:
            await self._receive_loop(room, peer)
        except (ProtocolError, InvalidUpdate) as exc:
            close = close_for(exc)
        except Exception as exc:
            log.exception("y-websocket connection failed")
            close = close_for(exc)
        finally:
            monitor.cancel()
            room.detach(peer)
            metrics.connections.labels("yjs").dec()
            self._outbox.close()
            if close is not None:
                metrics.closes.labels(close[1].split(":")[0]).inc()
                with contextlib.suppress(Exception):
                    await self._transport.close(*close)
            writer.cancel()
            with contextlib.suppress(BaseException):
                await writer

    async def _receive_loop(self, room: Room, peer: Peer) -> None:
        limit = self._ctx.settings.max_frame_bytes
        while True:
            data = await self._transport.receive()
            if data is None:
                return
            message = decode_yws_frame(data, max_frame_bytes=limit)
            if isinstance(message, YSync):
                room.handle_sync(peer, message.message)
            elif isinstance(message, YAwareness):
                room.handle_awareness(peer, message.update)
            elif isinstance(message, YQueryAwareness):
                peer.send(peer.awareness_header + room.awareness_snapshot())
            elif isinstance(message, YPermissionDenied):
                pass  # meaningless from a client; ignore rather than punish

    async def _monitor(self) -> None:
        interval = self._ctx.settings.ping_interval
        overflow = asyncio.ensure_future(self._outbox.overflowed.wait())
        try:
            while True:
                done, _ = await asyncio.wait({overflow}, timeout=interval)
                if done:
                    with contextlib.suppress(Exception):
                        await self._transport.close(*close_for(SlowConsumer()))
                    return
                self._outbox.put(KEEPALIVE_FRAME)
        finally:
            overflow.cancel()

    async def shutdown(self) -> None:
        with contextlib.suppress(Exception):
            await self._transport.close(GOING_AWAY, "server shutting down")

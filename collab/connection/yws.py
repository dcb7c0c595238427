"""One ``/yjs/{doc}`` socket: the plain y-websocket protocol, one document, token in the URL.

Knows nothing of Starlette. ``authorize`` runs before the WebSocket is accepted: a refusal is an
HTTP 403 on the upgrade, which y-websocket 3 retries with exponential backoff (a 44xx close
after accepting makes it reconnect every 100 ms).
"""

from __future__ import annotations

import logging
import time

from tether.protocol.wire.lib0 import write_var_uint
from tether.protocol.wire.sync_payloads import SyncStep1
from tether.protocol.wire.yws_frames import (
    YWS_SYNC,
    YAwareness,
    YPermissionDenied,
    YQueryAwareness,
    YSync,
    decode_yws_frame,
)

from ..auth.tokens import AuthError, Grant
from ..hooks import ConnectionInfo
from ..rooms.room import Room
from ..rooms.room_peer import Peer
from ..runtime.limits import refuse
from ..runtime.loop_watch import done, note
from ..transport.timer_wheel import ConnectionTimer
from ..updates.update_reads import reads_off_loop
from .close_codes import DOCUMENT_DELETED, TOKEN_EXPIRED
from .grants import authenticate
from .lifecycle import (
    CloseConnection,
    detach_each,
    outgoing,
    run_connection,
    send_timed_out,
)
from .server_context import ServerContext, Transport, valid_document_name

log = logging.getLogger(__name__)

# An awareness update with no entries: a no-op for the client that still proves we are alive
# (y-websocket reconnects after 30 s without any message).
KEEPALIVE_FRAME = b"\x01\x01\x00"
YWS_SYNC_BYTE = write_var_uint(YWS_SYNC)


async def authorize(
    ctx: ServerContext, document: str, token: str, connection: ConnectionInfo | None = None
) -> Grant:
    """The grant for opening ``document`` with ``token``; raises AuthError."""
    if not valid_document_name(document):
        raise AuthError("invalid document name")
    return await authenticate(ctx, token, document, connection)


class YwsConnection:
    def __init__(
        self, transport: Transport, ctx: ServerContext, document: str, grant: Grant
    ) -> None:
        self._transport = transport
        self._ctx = ctx
        self._document = document
        self._grant = grant
        self._outbox, self._initial_sync, self._end = outgoing(transport, ctx)
        # Keepalives and the token's expiry: one timer, no task per socket (memory).
        self._timer = ConnectionTimer(self._on_timer)
        self._next_keepalive = time.monotonic() + ctx.settings.ping_interval

    def _revoke(self, reason: str) -> None:
        """The room ended this socket's attachment (its document was deleted)."""
        self._end.close(CloseConnection(DOCUMENT_DELETED, reason))

    async def run(self) -> None:
        metrics = self._ctx.metrics
        metrics.connections.labels("yjs").inc()
        try:
            room = await self._ctx.rooms.acquire(self._document)
            peer = Peer(self._outbox, self._grant, self._grant.scope, None)
            peer.revoke = self._revoke
            peer.initial_sync = self._initial_sync
            room.attach(peer)
            self._arm_timer()
            await run_connection(
                receive_loop=self._receive_loop(room, peer),
                end=self._end,
                outbox=self._outbox,
                transport=self._transport,
                detach=lambda: detach_each([self._initial_sync.close, lambda: room.detach(peer)]),
                metrics=metrics,
            )
        finally:
            self._timer.cancel()
            metrics.connections.labels("yjs").dec()

    async def _receive_loop(self, room: Room, peer: Peer) -> None:
        limit = self._ctx.settings.max_frame_bytes
        while True:
            data = await self._transport.receive()
            if data is None:
                return
            if len(data) > limit and data[:1] == YWS_SYNC_BYTE:
                self._refuse_upload(peer, len(data), limit)
                continue
            message = decode_yws_frame(data, max_frame_bytes=limit)
            note(type(message).__name__, room.name, peer)
            if isinstance(message, YSync):
                inner = message.message
                if not isinstance(inner, SyncStep1) and reads_off_loop(inner.update):
                    await room.receive_update_off_loop(peer, inner.update)
                else:
                    room.handle_sync(peer, inner)
            elif isinstance(message, YAwareness):
                room.handle_awareness(peer, message.update)
            elif isinstance(message, YQueryAwareness):
                room.send_presence(peer)
            elif isinstance(message, YPermissionDenied):
                pass  # meaningless from a client; ignore rather than punish
            done()
            message = data = None  # type: ignore[assignment]  # not held while idle
            if self._end.ended:
                return  # decided while handling this frame (its own outbox overflowed)

    def _refuse_upload(self, peer: Peer, size: int, limit: int) -> None:
        """An editor's own change over ``max_frame_bytes`` (a paste). Closing would make
        y-websocket reconnect and send it again, forever: instead the socket stays, the editor
        is told (permission denied, which y-websocket reports) and is read-only from now on,
        so later edits built on the refused one are not asked for again either."""
        reason = f"update too large: {size} bytes, this server takes at most {limit}; read-only"
        refuse(self._ctx.metrics, "max_frame_bytes", peer.refusals_logged, peer.label, reason)
        peer.scope = "readonly"
        peer.send(YPermissionDenied(reason).encode())

    def _on_timer(self) -> None:
        """Keepalive frames, and the close at the token's expiry (at its expiry, not at the next
        keepalive after it)."""
        if self._end.ended:
            return
        if self._grant.expired():
            self._end.close(CloseConnection(TOKEN_EXPIRED, "token expired"))
            return
        if send_timed_out(self._outbox, self._ctx.settings.send_timeout, time.monotonic()):
            return  # closed by its outbox's overflow
        if time.monotonic() >= self._next_keepalive:
            self._outbox.put(KEEPALIVE_FRAME)
            self._next_keepalive = time.monotonic() + self._ctx.settings.ping_interval
        self._arm_timer()

    def _arm_timer(self) -> None:
        due = self._next_keepalive
        expires_at = self._grant.expires_at
        if expires_at is not None:
            due = min(due, time.monotonic() + max(0.0, expires_at - time.time()))
        self._timer.arm(due)

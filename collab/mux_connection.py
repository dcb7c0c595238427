"""One ``/ws`` connection: the sans-IO ``ServerSession`` wrapped in a receive loop.

Knows nothing of Starlette (it talks to a ``Transport``). Receive path: feed the session, act on
its events, put replies on the bounded outbox. A monitor task sends app-level pings, closes idle
peers, channels whose auth never resolved and sockets with no granted channel for the auth
timeout, and closes the connection when its outbox overflows.
"""

from __future__ import annotations

import asyncio
import logging
import time

from tether.protocol.errors import ChannelNameTooLong, QueueBudgetExhausted, QueueOverflow
from tether.protocol.messages import (
    PING_FRAME,
    Awareness,
    QueryAwareness,
    Stateless,
    Sync,
)
from tether.protocol.session import (
    AuthRequested,
    ChannelClosed,
    ChannelOpened,
    ChannelRefused,
    Incoming,
    Reply,
    ServerSession,
    SessionEvent,
    SessionLimits,
)

from .auth import AuthError, Grant
from .close_codes import AUTH_TIMEOUT, IDLE_TIMEOUT
from .context import ServerContext, Transport, valid_document_name
from .grants import authenticate
from .hooks import ConnectionInfo
from .initial_sync import InitialSync
from .lifecycle import CloseConnection, detach_each, run_connection, slow_consumer
from .limits import refuse
from .metrics import label_value
from .outbox import Outbox
from .peer import Peer
from .room import Room
from .rooms import DocumentQuarantined

log = logging.getLogger(__name__)

_GRANT_CACHE_SIZE = 4


class MuxConnection:
    def __init__(
        self,
        transport: Transport,
        ctx: ServerContext,
        connection: ConnectionInfo | None = None,
        *,
        endpoint: str = "ws",
    ) -> None:
        s = ctx.settings
        self._endpoint = endpoint
        self._auth_refusals_logged: set[str] = (
            set()
        )  # the metrics label: "ws", or "http" for the HTTP fallback
        self._transport = transport
        self._ctx = ctx
        self._connection = connection  # what on_authenticate hooks see of this socket
        self._session = ServerSession(
            SessionLimits(
                max_frame_bytes=s.max_frame_bytes,
                max_documents=s.max_documents_per_connection,
                max_queued_messages=s.max_queued_before_auth,
                max_queued_bytes=s.max_queued_bytes_before_auth,
                max_session_id_bytes=s.max_session_id_bytes,
            ),
            ctx.preauth_budget,
        )
        self._outbox = Outbox(
            transport.send,
            s.send_queue_frames,
            s.send_queue_bytes,
            getattr(transport, "write_now", None),  # collab.raw_frames, where offered
        )
        self._initial_sync = InitialSync(self._outbox, s.initial_sync_piece_bytes, ctx.metrics)
        self._attached: dict[str, tuple[Room, Peer]] = {}
        # Limits this connection ran into and was logged for (collab.limits: once each).
        self._refusals_logged: set[str] = set()
        self._grants: dict[str, Grant] = {}
        self._grant_of_channel: dict[str, Grant] = {}
        self._connected_at = time.monotonic()
        self._last_seen = self._connected_at
        # Since when no channel has been granted (None while one is): a socket that only pings,
        # or whose every channel was refused, is closed after the auth timeout.
        self._ungranted_since: float | None = self._connected_at

    async def run(self) -> None:
        metrics = self._ctx.metrics
        metrics.connections.labels(self._endpoint).inc()
        try:
            await run_connection(
                receive_loop=self._receive_loop(),
                monitor=self._monitor(),
                outbox=self._outbox,
                transport=self._transport,
                detach=self._detach_all,
                metrics=metrics,
            )
        finally:
            self._session.close()  # gives its pre-auth bytes back to the shared budget
            metrics.connections.labels(self._endpoint).dec()

    async def _receive_loop(self) -> None:
        receive = self._transport.receive
        session = self._session
        while True:
            data = await receive()
            if data is None:
                return
            now = time.monotonic()
            self._last_seen = now
            try:
                events = session.receive(data, now)
            except _SESSION_LIMITS as exc:
                self._ctx.metrics.limit_refusals.labels(_limit_of(exc)).inc()
                log.warning("closing a %s connection: %s", self._endpoint, exc)  # once per peer
                raise
            for event in events:
                await self._handle(event)

    async def _handle(self, event: SessionEvent) -> None:
        if isinstance(event, Incoming):
            self._dispatch(event)
            if isinstance(event.message, Stateless):
                room, peer = self._attached[event.channel]
                await self._ctx.hooks.on_stateless(room, peer, event.message.payload)
        elif isinstance(event, Reply):
            self._outbox.put(event.frame)
        elif isinstance(event, AuthRequested):
            for follow_up in await self._authenticate(event):
                await self._handle(follow_up)
        elif isinstance(event, ChannelOpened):
            await self._open(event)
        elif isinstance(event, ChannelClosed):
            self._detach(event.channel)
        elif isinstance(event, ChannelRefused):
            # Only that document is refused (its PermissionDenied is the Reply before this);
            # the socket and its other documents carry on. Counted each time, logged once.
            refuse(
                self._ctx.metrics,
                _LIMIT_SETTINGS.get(event.limit, event.limit),
                self._refusals_logged,
                "a /ws connection",
                f"refused a document past {event.limit} ({event.channel[:64]!r})",
            )

    def _dispatch(self, event: Incoming) -> None:
        attached = self._attached.get(event.channel)
        if attached is None:
            return
        room, peer = attached
        message = event.message
        if isinstance(message, Sync):
            room.handle_sync(peer, message.message)
        elif isinstance(message, Awareness):
            room.handle_awareness(peer, message.update)
        elif isinstance(message, QueryAwareness):
            room.send_presence(peer)

    async def _authenticate(self, event: AuthRequested) -> list[SessionEvent]:
        auth = self._ctx.authenticator
        if not valid_document_name(event.document):
            return self._session.deny(event.channel, "invalid document name")
        try:
            if self._ctx.hooks.has("on_authenticate"):  # per document: the host decides
                grant = await authenticate(self._ctx, event.token, event.document, self._connection)
            else:
                grant = self._grants.get(event.token)
                if grant is None:
                    grant = auth.verify(event.token)
                    if len(self._grants) >= _GRANT_CACHE_SIZE:
                        self._grants.clear()
                    self._grants[event.token] = grant
                auth.check(grant, event.document)
        except AuthError as exc:
            self._ctx.metrics.auth_failures.labels(label_value(str(exc))).inc()
            if str(exc) not in self._auth_refusals_logged and len(self._auth_refusals_logged) < 8:
                self._auth_refusals_logged.add(str(exc))  # once per reason and connection
                log.info(
                    "refused document %r on a %s connection: %s",
                    event.document,
                    self._endpoint,
                    exc,
                )
            return self._session.deny(event.channel, str(exc))
        self._grant_of_channel[event.channel] = grant
        attached = self._attached.get(event.channel)
        if attached is not None:
            attached[1].scope = grant.scope  # re-authentication may change the scope
        return self._session.grant(event.channel, grant.scope)

    async def _open(self, event: ChannelOpened) -> None:
        try:
            room = await self._ctx.rooms.acquire(event.document)
        except DocumentQuarantined:
            for follow_up in self._session.revoke(event.channel, "document quarantined"):
                if isinstance(follow_up, Reply):
                    self._outbox.put(follow_up.frame)
            self._grant_of_channel.pop(event.channel, None)
            return
        grant = self._grant_of_channel[event.channel]
        peer = Peer(self._outbox, grant, event.scope, event.channel)
        peer.revoke = lambda reason, channel=event.channel: self._revoke(channel, reason)
        peer.initial_sync = self._initial_sync
        room.attach(peer)
        self._attached[event.channel] = (room, peer)

    def _detach(self, channel: str) -> None:
        attached = self._attached.pop(channel, None)
        self._grant_of_channel.pop(channel, None)
        if attached is not None:
            room, peer = attached
            room.detach(peer)

    def _revoke(self, channel: str, reason: str) -> None:
        """The server ends this channel (its document was deleted): PermissionDenied, detach."""
        for event in self._session.revoke(channel, reason):
            if isinstance(event, Reply):
                self._outbox.put(event.frame)
        self._detach(channel)

    def _detach_all(self) -> None:
        self._initial_sync.close()
        detach_each([lambda c=channel: self._detach(c) for channel in list(self._attached)])

    async def _monitor(self) -> CloseConnection:
        """Pings, and decides when to close: slow reader, idle peer, auth never resolved."""
        s = self._ctx.settings
        tick = max(0.05, min(s.ping_interval, s.auth_timeout, s.idle_timeout) / 4)
        last_ping = time.monotonic()
        overflow = asyncio.ensure_future(self._outbox.overflowed.wait())
        try:
            while True:
                done, _ = await asyncio.wait({overflow}, timeout=tick)
                if done:
                    return slow_consumer(self._ctx.metrics, self._outbox)
                now = time.monotonic()
                if now - last_ping >= s.ping_interval:
                    self._outbox.put(PING_FRAME)
                    last_ping = now
                if now - self._last_seen > s.idle_timeout:
                    return CloseConnection(IDLE_TIMEOUT, "idle timeout: no message from the peer")
                if self._auth_overdue(now):
                    return CloseConnection(
                        AUTH_TIMEOUT, "authentication timeout: no document granted"
                    )
                self._expire_grants()
        finally:
            overflow.cancel()

    def _auth_overdue(self, now: float) -> bool:
        timeout = self._ctx.settings.auth_timeout
        if self._session.overdue_channels(now, timeout):
            return True
        # Nor is a socket left open that has no document granted: one that never names one,
        # only pings, or whose every channel was refused (or closed, or revoked).
        if self._session.has_granted_channel():
            self._ungranted_since = None
            return False
        if self._ungranted_since is None:
            self._ungranted_since = now
        return now - self._ungranted_since > timeout

    def _expire_grants(self) -> None:
        now = time.time()
        for channel, grant in list(self._grant_of_channel.items()):
            if grant.expired(now):
                for event in self._session.revoke(channel, "token expired"):
                    if isinstance(event, Reply):
                        self._outbox.put(event.frame)
                self._detach(channel)


# The session's limit names → the settings an operator raises.
_LIMIT_SETTINGS = {
    "max_documents": "max_documents_per_connection",
    "max_frame_bytes": "max_frame_bytes",
}

_SESSION_LIMITS = (ChannelNameTooLong, QueueBudgetExhausted, QueueOverflow)


def _limit_of(exc: Exception) -> str:
    if isinstance(exc, ChannelNameTooLong):
        return "max_session_id_bytes"
    if isinstance(exc, QueueBudgetExhausted):
        return "max_queued_bytes_before_auth_total"
    return "max_queued_before_auth"

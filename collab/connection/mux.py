"""One ``/ws`` connection: the sans-IO ``ServerSession`` wrapped in a receive loop.

Knows nothing of Starlette (it talks to a ``Transport``). Receive path: feed the session, act on
its events, put replies on the bounded outbox. Where the transport offers it (``tether serve``,
collab.transport.raw_frames), a frame that needs no ``await`` is handled as it arrives
(``on_message``) while the receive loop waits with nothing queued: the same steps, without a task
switch. One timer per connection (no task: idle sockets cost memory) sends app-level pings, closes
idle peers, channels whose auth never resolved and sockets with no granted channel for the auth
timeout, and ends grants at their token's expiry; an overflowing outbox ends the connection
through its ``on_overflow`` hook.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from tether.protocol.protocol_errors import (
    ChannelNameTooLong,
    DecodeError,
    QueueBudgetExhausted,
    QueueOverflow,
)
from tether.protocol.sessions.server_session import (
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
from tether.protocol.wire.lib0 import Decoder
from tether.protocol.wire.messages import (
    AUTH,
    PING_FRAME,
    STATELESS,
    Awareness,
    QueryAwareness,
    Stateless,
    Sync,
)
from tether.protocol.wire.sync_payloads import SyncStep1

from ..auth.tokens import AuthError, Grant
from ..hooks import ConnectionInfo
from ..rooms.manager import DocumentQuarantined
from ..rooms.room import Room
from ..rooms.room_peer import Peer
from ..runtime.limits import refuse
from ..runtime.loop_watch import done, note
from ..runtime.sync_metrics import label_value
from ..transport.timer_wheel import ConnectionTimer
from ..updates.update_reads import reads_off_loop
from .close_codes import AUTH_TIMEOUT, IDLE_TIMEOUT, INTERNAL_ERROR
from .grants import authenticate
from .lifecycle import (
    CloseConnection,
    decision_for,
    detach_each,
    outgoing,
    run_connection,
    send_timed_out,
)
from .server_context import ServerContext, Transport, valid_document_name

log = logging.getLogger(__name__)

_GRANT_CACHE_SIZE = 4


def serving(
    ctx: ServerContext, endpoint: str
) -> Callable[[Transport, ConnectionInfo | None], Awaitable[None]]:
    """Runs this connection logic on each transport it is handed until that ends: how the HTTP
    fallback's sessions (``collab.transport.http_stream``, ``endpoint="http"``) are served."""

    async def serve(transport: Transport, connection: ConnectionInfo | None) -> None:
        await MuxConnection(transport, ctx, connection, endpoint=endpoint).run()

    return serve


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
        self._endpoint = endpoint  # the metrics label: "ws", or "http" for the HTTP fallback
        # Auth refusal reasons this connection was logged for (made on first use: an empty set
        # is 216 bytes on every idle connection).
        self._auth_refusals_logged: set[str] | None = None
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
        self._outbox, self._initial_sync, self._end = outgoing(transport, ctx)
        self._attached: dict[str, tuple[Room, Peer]] = {}
        # Limits this connection ran into and was logged for (collab.runtime.limits: once each).
        self._refusals_logged: set[str] | None = None
        self._grants: dict[str, Grant] = {}
        self._grant_of_channel: dict[str, Grant] = {}
        self._connected_at = time.monotonic()
        self._last_seen = self._connected_at
        # Since when no channel has been granted (None while one is): a socket that only pings,
        # or whose every channel was refused, is closed after the auth timeout.
        self._ungranted_since: float | None = self._connected_at
        self._last_ping = self._connected_at
        self._timer = ConnectionTimer(self._on_timer)
        # The channel count the timer last saw: a new channel (a frame before its Token) may
        # bring an auth deadline earlier than the one armed.
        self._channels_seen = 0
        self._deadlines_moved = False
        # The receive loop waits for a frame and none is queued: ``on_message`` may take one.
        self._waiting = False

    async def run(self) -> None:
        metrics = self._ctx.metrics
        metrics.connections.labels(self._endpoint).inc()
        # Not kept in a local: a bound method held by this frame would cost every idle socket.
        if hasattr(self._transport, "set_message_sink"):
            self._transport.set_message_sink(self)  # type: ignore[attr-defined]
        try:
            self._arm_timer(time.monotonic())
            await run_connection(
                receive_loop=self._receive_loop(),
                end=self._end,
                outbox=self._outbox,
                transport=self._transport,
                detach=self._detach_all,
                metrics=metrics,
            )
        finally:
            if hasattr(self._transport, "set_message_sink"):  # it lets go: no reference cycle
                self._transport.set_message_sink(None)  # type: ignore[attr-defined]
            self._timer.cancel()
            self._session.close()  # gives its pre-auth bytes back to the shared budget
            metrics.connections.labels(self._endpoint).dec()

    async def _receive_loop(self) -> None:
        receive = self._transport.receive
        while True:
            self._waiting = True
            try:
                data = await receive()
            finally:
                self._waiting = False
            if data is None:
                return
            for event in self._take(data):
                await self._handle(event)
            event = data = None  # type: ignore[assignment]  # not held while idle
            if self._end.ended:
                return  # decided while handling this frame (its own outbox overflowed)
            self._after_frame()

    def on_message(self, data: bytes) -> bool:
        """A message as it arrives (collab.transport.raw_frames calls this from ``data_received``):
        handled here, and True, when the receive loop waits with nothing queued (so order
        holds) and its handling needs no ``await`` (no Token, no Stateless); else False, and
        the transport queues it for the loop. A failure ends the connection as in the loop."""
        if not self._waiting or self._end.ended or _needs_task(data):
            return False
        try:
            for event in self._take(data):
                if not self._handle_now(event):
                    raise RuntimeError(f"{type(event).__name__} needs the receive loop")
            if not self._end.ended:
                self._after_frame()
        except BaseException as exc:
            self._end.close(decision_for(exc))
            if not isinstance(exc, Exception):
                raise
        return True

    def _take(self, data: bytes) -> list[SessionEvent]:
        """Feed one frame to the session; its events."""
        now = time.monotonic()
        self._last_seen = now
        try:
            return self._session.receive(data, now)
        except _SESSION_LIMITS as exc:
            self._ctx.metrics.limit_refusals.labels(_limit_of(exc)).inc()
            log.warning("closing a %s connection: %s", self._endpoint, exc)  # once per peer
            raise

    def _after_frame(self) -> None:
        if self._deadlines_moved or self._session.channel_count != self._channels_seen:
            # A Token, a grant, a refusal or a close may bring a deadline earlier (not per
            # edit: Incoming and Reply events leave them be).
            self._deadlines_moved = False
            self._arm_timer(time.monotonic())

    def _handle_now(self, event: SessionEvent) -> bool:
        """Act on an event that needs no ``await``; False for the others."""
        if isinstance(event, Incoming):
            message = event.message
            if isinstance(message, Stateless) or _read_off_loop(message):
                return False
            self._dispatch(event)
            return True
        if isinstance(event, Reply):
            self._outbox.put(event.frame)
            return True
        if isinstance(event, ChannelClosed):
            self._deadlines_moved = True
            self._detach(event.channel)
            return True
        if isinstance(event, ChannelRefused):
            self._deadlines_moved = True
            self._refused(event)
            return True
        return False

    async def _handle(self, event: SessionEvent) -> None:
        if self._handle_now(event):
            return
        if isinstance(event, Incoming) and isinstance(event.message, Sync):  # a big update
            attached = self._attached.get(event.channel)
            if attached is not None:
                note("SyncUpdate", attached[0].name, attached[1])
                await attached[0].receive_update_off_loop(attached[1], _update_of(event.message))
                done()
            return
        if isinstance(event, Incoming):  # a Stateless message: the AI's hook
            room, peer = self._attached[event.channel]
            note("Stateless", room.name, peer)
            # type: ignore[union-attr]
            await self._ctx.hooks.on_stateless(room, peer, event.message.payload)
            done()
            return
        self._deadlines_moved = True
        if isinstance(event, AuthRequested):
            for follow_up in await self._authenticate(event):
                await self._handle(follow_up)
        elif isinstance(event, ChannelOpened):
            await self._open(event)

    def _refused(self, event: ChannelRefused) -> None:
        # Only that document is refused (its PermissionDenied is the Reply before this);
        # the socket and its other documents carry on. Counted each time, logged once.
        if self._refusals_logged is None:
            self._refusals_logged = set()
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
        note(type(message).__name__, room.name, peer)
        if isinstance(message, Sync):
            room.handle_sync(peer, message.message)
        elif isinstance(message, Awareness):
            room.handle_awareness(peer, message.update)
        elif isinstance(message, QueryAwareness):
            room.send_presence(peer)
        done()

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
                    grant = await auth.grant(event.token)
                    if len(self._grants) >= _GRANT_CACHE_SIZE:
                        self._grants.clear()
                    self._grants[event.token] = grant
                auth.check(grant, event.document)
        except AuthError as exc:
            self._ctx.metrics.auth_failures.labels(label_value(str(exc))).inc()
            logged = self._auth_refusals_logged
            if logged is None:
                logged = self._auth_refusals_logged = set()
            if str(exc) not in logged and len(logged) < 8:
                logged.add(str(exc))  # once per reason and connection
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
        if not self._end.ended:
            self._arm_timer(time.monotonic())  # perhaps no document granted now

    def _detach_all(self) -> None:
        self._initial_sync.close()
        detach_each([lambda c=channel: self._detach(c) for channel in list(self._attached)])

    def _on_timer(self) -> None:
        """What is due now: a ping, or the decision to close (idle peer, auth never resolved);
        grants whose token expired end. Then the timer is armed for the next deadline."""
        if self._end.ended:
            return
        try:
            close = self._due(time.monotonic())
        except Exception:
            log.exception("a connection's timer failed")
            close = CloseConnection(INTERNAL_ERROR, "internal error")
        if close is not None:
            self._end.close(close)
        if not self._end.ended:
            self._arm_timer(time.monotonic())

    def _due(self, now: float) -> CloseConnection | None:
        s = self._ctx.settings
        if now - self._last_seen > s.idle_timeout:
            return CloseConnection(IDLE_TIMEOUT, "idle timeout: no message from the peer")
        if send_timed_out(self._outbox, s.send_timeout, now):
            return None  # closed by its outbox's overflow
        if self._auth_overdue(now):
            return CloseConnection(AUTH_TIMEOUT, "authentication timeout: no document granted")
        if now - self._last_ping >= s.ping_interval:
            self._outbox.put(PING_FRAME)
            self._last_ping = now
        self._expire_grants()
        return None

    def _arm_timer(self, now: float) -> None:
        """Arm the timer for the earliest deadline: the next ping, the idle timeout, the auth
        timeout of a channel (or of a socket with none granted), the first token expiry."""
        s = self._ctx.settings
        session = self._session
        self._channels_seen = session.channel_count
        # Just past the idle and auth deadlines: they are "longer than", not "as long as".
        due = min(self._last_ping + s.ping_interval, self._last_seen + s.idle_timeout + 0.001)
        waiting_since = session.earliest_waiting_since()
        if waiting_since is not None:
            due = min(due, waiting_since + s.auth_timeout + 0.001)
        if session.has_granted_channel():
            self._ungranted_since = None
        else:
            if self._ungranted_since is None:
                self._ungranted_since = now
            due = min(due, self._ungranted_since + s.auth_timeout + 0.001)
        if self._grant_of_channel:
            wall = time.time()
            for grant in self._grant_of_channel.values():
                if grant.expires_at is not None:
                    due = min(due, now + max(0.0, grant.expires_at - wall))
        self._timer.arm(due)

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


def _read_off_loop(message: object) -> bool:
    """A Sync message carrying an update big enough to be read in a worker thread."""
    return isinstance(message, Sync) and reads_off_loop(_update_of(message))


def _update_of(message: Sync) -> bytes:
    inner = message.message
    return b"" if isinstance(inner, SyncStep1) else inner.update


def _needs_task(data: bytes) -> bool:
    """A frame whose handling may await (a Token: authentication; a Stateless: the AI's hook;
    a big update: read off the loop), or one whose header cannot be read here (the receive
    loop meets the error)."""
    if len(data) < 2:
        return False  # a Ping or a Pong (an empty frame fails the same either way)
    if reads_off_loop(data):
        return True
    name_length = data[0]
    if name_length < 0x80 and name_length + 1 < len(data) and data[name_length + 1] < 0x80:
        kind = data[name_length + 1]  # a short channel name: no decoder needed
    else:
        try:
            decoder = Decoder(data)
            decoder.skip(decoder.read_var_uint())
            kind = decoder.read_var_uint()
        except DecodeError:
            return True
    return kind == AUTH or kind == STATELESS


def _limit_of(exc: Exception) -> str:
    if isinstance(exc, ChannelNameTooLong):
        return "max_session_id_bytes"
    if isinstance(exc, QueueBudgetExhausted):
        return "max_queued_bytes_before_auth_total"
    return "max_queued_before_auth"

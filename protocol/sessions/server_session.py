"""The server side of one multiplexed connection as a state machine: frames in, events out.

Owns per-channel authentication state and the bounded queue of messages that arrive before a
channel's token is verified. Knows nothing of sockets, rooms, storage or how tokens are checked:
it asks with ``AuthRequested`` and is told with ``grant``/``deny``. Every state transition is in
this file (PROTOCOL.md carries a copy of this table; a test keeps them equal):

    state           input           next            events
    (none)          Token           VERIFYING       AuthRequested
    (none)          other message   AWAITING_TOKEN  - (queued)
    (none)          Token [3]       (none)          Reply(PermissionDenied), ChannelRefused
    (none)          other [3]       (none)          - (dropped)
    AWAITING_TOKEN  other message   AWAITING_TOKEN  - (queued; QueueOverflow past the limits)
    AWAITING_TOKEN  Token           VERIFYING       AuthRequested
    VERIFYING       other message   VERIFYING       - (queued; QueueOverflow past the limits)
    VERIFYING       Token           VERIFYING       AuthRequested (again)
    VERIFYING       grant           OPEN            Reply(Authenticated), ChannelOpened [1],
                                                    Incoming for each queued message, in order
    VERIFYING       deny            DENIED          Reply(PermissionDenied), ChannelClosed [2];
                                                    the queue is dropped
    OPEN            other message   OPEN            Incoming
    OPEN            Token           VERIFYING       AuthRequested (re-verified, keeps its scope)
    OPEN            revoke          DENIED          Reply(PermissionDenied), ChannelClosed
    OPEN            Sync too big    DENIED          Reply(PermissionDenied), ChannelClosed,
                                                    ChannelRefused [4]
    DENIED          other message   DENIED          - (dropped)
    DENIED          Token           VERIFYING       AuthRequested
    any             Close           (none)          ChannelClosed [2]
    connection      Ping            -               Reply(Pong)
    connection      Pong            -               -
    connection      server-only     -               raises SessionViolation
    [1] only if the channel was not open already (a re-verification keeps it attached)
    [2] only if the channel was open (or re-verifying after being open)
    [3] a new channel while ``max_documents`` are held: refused, and not remembered
    [4] over ``max_frame_bytes``; any other frame that large raises ``FrameTooLarge``

A new channel beyond ``max_documents`` is refused on its own (``PermissionDenied`` to its Token,
its other messages dropped) while the connection and its other documents carry on; it is not
remembered, so refusing costs no memory. One whose document part is
over ``max_document_name_bytes`` or whose session id (after NUL) is over ``max_session_id_bytes``
raises ``ChannelNameTooLong`` (every frame of a channel carries its name, and a refused channel's
name is remembered). Queued bytes count against the connection's ``max_queued_bytes`` and, when
the server shares one, a ``QueueBudget`` of all connections (``QueueBudgetExhausted``); ``close``
gives a session's share back. The auth timeout
(``overdue_channels``) counts from a channel's first message, or from the Token that moved an
OPEN or DENIED channel back to VERIFYING.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from ..protocol_errors import (
    ChannelNameTooLong,
    DecodeError,
    FrameTooLarge,
    QueueBudgetExhausted,
    QueueOverflow,
    SessionViolation,
)
from ..wire.lib0 import Decoder
from ..wire.messages import (
    CHANNEL_SEPARATOR,
    PONG_FRAME,
    SYNC,
    Authenticated,
    AuthToken,
    ChannelMessage,
    Close,
    PermissionDenied,
    Ping,
    Pong,
    SyncStatus,
    decode_frame,
    document_of,
)


@dataclass(frozen=True, slots=True)
class SessionLimits:
    max_frame_bytes: int = 16 * 1024 * 1024
    max_documents: int = 256
    max_queued_messages: int = 256
    max_queued_bytes: int = 16 * 1024 * 1024
    # 512 characters (the document name rule) of up to 4 UTF-8 bytes each.
    max_document_name_bytes: int = 2048
    max_session_id_bytes: int = 128


class QueueBudget:
    """Bytes that every session sharing it may hold queued before authentication, together."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0

    def take(self, size: int) -> bool:
        if self.used + size > self.capacity:
            return False
        self.used += size
        return True

    def give_back(self, size: int) -> None:
        self.used = max(0, self.used - size)


class ChannelState(enum.Enum):
    AWAITING_TOKEN = "awaiting-token"
    VERIFYING = "verifying"
    OPEN = "open"
    DENIED = "denied"


@dataclass(frozen=True, slots=True)
class Reply:
    """Bytes to send back on this connection."""

    frame: bytes


@dataclass(frozen=True, slots=True)
class AuthRequested:
    channel: str
    document: str
    token: str


@dataclass(frozen=True, slots=True)
class ChannelOpened:
    """The channel's token was accepted; attach it to its document before its messages."""

    channel: str
    document: str
    scope: str


@dataclass(frozen=True, slots=True)
class Incoming:
    """An authenticated message for a document."""

    channel: str
    document: str
    scope: str
    message: ChannelMessage


@dataclass(frozen=True, slots=True)
class ChannelClosed:
    """An open channel was detached (by the client's Close or a failed re-authentication)."""

    channel: str
    document: str


@dataclass(frozen=True, slots=True)
class ChannelRefused:
    """A channel past a per-connection limit was refused (count it, log it once)."""

    channel: str
    limit: str


SessionEvent = Reply | AuthRequested | ChannelOpened | Incoming | ChannelClosed | ChannelRefused

# Messages only a server sends; a client sending them is confused or hostile.
_SERVER_ONLY = (PermissionDenied, Authenticated, SyncStatus)


@dataclass(slots=True)
class _Channel:
    state: ChannelState
    waiting_since: float
    scope: str = ""
    queue: list[ChannelMessage] = field(default_factory=list)
    queued_bytes: int = 0


class ServerSession:
    """Feed it frames with ``receive``; act on the events it returns."""

    def __init__(
        self, limits: SessionLimits | None = None, budget: QueueBudget | None = None
    ) -> None:
        self.limits = limits or SessionLimits()
        self._budget = budget
        self._channels: dict[str, _Channel] = {}
        self._queued_bytes = 0

    def receive(self, data: bytes, now: float) -> list[SessionEvent]:
        if len(data) > self.limits.max_frame_bytes:
            return self._on_oversized(data)
        message = decode_frame(data)
        if isinstance(message, Ping):
            return [Reply(PONG_FRAME)]
        if isinstance(message, Pong):
            return []
        if isinstance(message, _SERVER_ONLY):
            raise SessionViolation(f"{type(message).__name__} is sent by servers only")
        if isinstance(message, AuthToken):
            return self._on_token(message, now)
        if isinstance(message, Close):
            return self._on_close(message.channel)
        return self._on_channel_message(message, len(data), now)

    def grant(self, channel: str, scope: str) -> list[SessionEvent]:
        state = self._channels.get(channel)
        if state is None or state.state is not ChannelState.VERIFYING:
            return []
        was_open = bool(state.scope)
        state.state = ChannelState.OPEN
        state.scope = scope
        queued, state.queue = state.queue, []
        self._unqueue(state.queued_bytes)
        state.queued_bytes = 0
        document = document_of(channel)
        events: list[SessionEvent] = [Reply(Authenticated(channel, scope).encode())]
        if not was_open:
            events.append(ChannelOpened(channel, document, scope))
        events.extend(Incoming(channel, document, scope, message) for message in queued)
        return events

    def deny(self, channel: str, reason: str) -> list[SessionEvent]:
        state = self._channels.get(channel)
        if state is None or state.state is not ChannelState.VERIFYING:
            return []
        was_open = bool(state.scope)
        self._unqueue(state.queued_bytes)
        self._channels[channel] = _Channel(ChannelState.DENIED, state.waiting_since)
        events: list[SessionEvent] = [Reply(PermissionDenied(channel, reason).encode())]
        if was_open:
            events.append(ChannelClosed(channel, document_of(channel)))
        return events

    def revoke(self, channel: str, reason: str) -> list[SessionEvent]:
        """Server-side refusal of an open channel (e.g. its token expired)."""
        state = self._channels.get(channel)
        if state is None or state.state is not ChannelState.OPEN:
            return []
        self._channels[channel] = _Channel(ChannelState.DENIED, state.waiting_since)
        return [
            Reply(PermissionDenied(channel, reason).encode()),
            ChannelClosed(channel, document_of(channel)),
        ]

    def close(self) -> None:
        """The connection ended: drop every queue and give the shared budget its bytes back."""
        self._unqueue(self._queued_bytes)
        for state in self._channels.values():
            state.queue, state.queued_bytes = [], 0

    @property
    def channel_count(self) -> int:
        return len(self._channels)

    @property
    def queued_bytes(self) -> int:
        return self._queued_bytes

    def has_granted_channel(self) -> bool:
        """Some channel is open (or re-verifying after it was open)."""
        return any(ch.scope for ch in self._channels.values())

    def state_of(self, channel: str) -> ChannelState | None:
        state = self._channels.get(channel)
        return None if state is None else state.state

    def open_channels(self) -> dict[str, str]:
        """channel → scope for every open channel."""
        return {
            name: ch.scope for name, ch in self._channels.items() if ch.state is ChannelState.OPEN
        }

    def earliest_waiting_since(self) -> float | None:
        """When the channel waiting longest for its token (or its verdict) began to wait."""
        waiting = (ChannelState.AWAITING_TOKEN, ChannelState.VERIFYING)
        since = [ch.waiting_since for ch in self._channels.values() if ch.state in waiting]
        return min(since) if since else None

    def overdue_channels(self, now: float, auth_timeout: float) -> list[str]:
        """Channels still waiting for a token (or its verdict) longer than ``auth_timeout``."""
        waiting = (ChannelState.AWAITING_TOKEN, ChannelState.VERIFYING)
        return [
            name
            for name, ch in self._channels.items()
            if ch.state in waiting and now - ch.waiting_since > auth_timeout
        ]

    def _on_oversized(self, data: bytes) -> list[SessionEvent]:
        """A frame over ``max_frame_bytes``. A Sync on an open channel is an editor's own big
        change (a paste): closing the socket would make the provider reconnect and send it
        again, forever. So only that document is refused, for good on this connection; anything
        else that large is hostile and ends the connection (``FrameTooLarge``)."""
        limit = self.limits.max_frame_bytes
        channel = _sync_channel_of(data)
        if channel is None or self.state_of(channel) is not ChannelState.OPEN:
            raise FrameTooLarge(f"frame of {len(data)} bytes exceeds {limit}")
        reason = f"update too large: {len(data)} bytes, this server takes at most {limit}"
        return [*self.revoke(channel, reason), ChannelRefused(channel, "max_frame_bytes")]

    def _on_token(self, message: AuthToken, now: float) -> list[SessionEvent]:
        state = self._channel(message.channel, now)
        if state is None:
            reason = (
                f"too many documents on one connection (max {self.limits.max_documents}):"
                " close one to open another"
            )
            return [
                Reply(PermissionDenied(message.channel, reason).encode()),
                ChannelRefused(message.channel, "max_documents"),
            ]
        if state.state in (ChannelState.OPEN, ChannelState.DENIED):
            state.waiting_since = now  # a fresh wait: the auth timeout counts from this token
        # An open channel keeps its scope while re-verifying, so grant/deny know it was open.
        state.state = ChannelState.VERIFYING
        return [AuthRequested(message.channel, document_of(message.channel), message.token or "")]

    def _on_close(self, channel: str) -> list[SessionEvent]:
        state = self._channels.pop(channel, None)
        if state is None:
            return []
        self._unqueue(state.queued_bytes)
        if state.scope:
            return [ChannelClosed(channel, document_of(channel))]
        return []

    def _on_channel_message(
        self, message: ChannelMessage, size: int, now: float
    ) -> list[SessionEvent]:
        state = self._channel(message.channel, now)
        if state is None:
            return []  # a refused channel: nothing of it flows
        if state.state is ChannelState.OPEN:
            return [Incoming(message.channel, document_of(message.channel), state.scope, message)]
        if state.state is ChannelState.DENIED:
            return []  # nothing of a refused document flows, in either direction
        if (
            len(state.queue) >= self.limits.max_queued_messages
            or self._queued_bytes + size > self.limits.max_queued_bytes
        ):
            raise QueueOverflow("too many messages before authentication")
        if self._budget is not None and not self._budget.take(size):
            raise QueueBudgetExhausted("server busy: too many messages waiting for authentication")
        state.queue.append(message)
        state.queued_bytes += size
        self._queued_bytes += size
        return []

    def _unqueue(self, size: int) -> None:
        self._queued_bytes -= size
        if self._budget is not None:
            self._budget.give_back(size)

    def _channel(self, channel: str, now: float) -> _Channel | None:
        """The channel's state, a new one for a new name; None past ``max_documents``."""
        state = self._channels.get(channel)
        if state is None:
            self._check_name(channel)
            if len(self._channels) >= self.limits.max_documents:
                return None
            state = _Channel(ChannelState.AWAITING_TOKEN, now)
            self._channels[channel] = state
        return state

    def _check_name(self, channel: str) -> None:
        document, _, session_id = channel.partition(CHANNEL_SEPARATOR)
        limits = self.limits
        if len(document.encode("utf-8", "surrogatepass")) > limits.max_document_name_bytes:
            raise ChannelNameTooLong("channel name too long: document name")
        if len(session_id.encode("utf-8", "surrogatepass")) > limits.max_session_id_bytes:
            raise ChannelNameTooLong(
                f"channel name too long: session id over {limits.max_session_id_bytes} bytes"
            )


def _sync_channel_of(data: bytes) -> str | None:
    """The channel of a Sync frame, read from its header only; None for any other frame."""
    try:
        decoder = Decoder(data)
        channel = decoder.read_var_string()
        return channel if decoder.read_var_uint() == SYNC else None
    except DecodeError:
        return None

"""The client side of a multiplexed connection as a state machine over pycrdt documents.

Owns each open document's Doc, its auth/sync state and its acknowledgement counters. Knows
nothing of sockets or asyncio: methods return frames to send and events that happened.
Local edits are not buffered while offline: reconnecting sends our state vector and answers the
server's with exactly what it lacks, so offline edits travel in that reply.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from pycrdt import Doc, Text

from .errors import SessionViolation
from .messages import (
    PONG_FRAME,
    Authenticated,
    AuthToken,
    Awareness,
    Close,
    PermissionDenied,
    Ping,
    Pong,
    Stateless,
    Sync,
    SyncStatus,
    decode_frame,
)
from .sync import (
    AwarenessEntry,
    SyncStep1,
    SyncStep2,
    SyncUpdate,
    decode_awareness,
    encode_awareness,
)

TEXT_NAME = "content"
REMOTE_ORIGIN = "tether-remote"


@dataclass(frozen=True, slots=True)
class AuthGranted:
    channel: str
    scope: str


@dataclass(frozen=True, slots=True)
class AuthRefused:
    channel: str
    reason: str


@dataclass(frozen=True, slots=True)
class Synced:
    channel: str


@dataclass(frozen=True, slots=True)
class Acked:
    channel: str
    applied: bool


@dataclass(frozen=True, slots=True)
class RemoteChange:
    channel: str


@dataclass(frozen=True, slots=True)
class PresenceChanged:
    channel: str


@dataclass(frozen=True, slots=True)
class StatelessReceived:
    channel: str
    payload: str


@dataclass(frozen=True, slots=True)
class DocumentClosed:
    channel: str
    reason: str


ClientEvent = (
    AuthGranted
    | AuthRefused
    | Synced
    | Acked
    | RemoteChange
    | PresenceChanged
    | StatelessReceived
    | DocumentClosed
)


@dataclass(eq=False)
class ClientDocument:
    """One document as the client holds it."""

    channel: str
    token: str
    doc: Doc = field(default_factory=Doc)
    scope: str | None = None
    refused: str | None = None
    synced: bool = False
    # Frames the server will acknowledge (our step2 replies and updates) vs. acks received.
    sent: int = 0
    acked: int = 0
    rejected: int = 0
    # A local edit happened while offline: it is unacknowledged until the resync reply is acked.
    dirty_offline: bool = False
    presence: dict[int, AwarenessEntry] = field(default_factory=dict)
    local_presence: str | None = None
    local_clock: int = 0

    @property
    def text(self) -> Text:
        return self.doc.get(TEXT_NAME, type=Text)

    @property
    def all_acked(self) -> bool:
        return self.acked >= self.sent and not self.dirty_offline


class ClientSession:
    def __init__(self) -> None:
        self.documents: dict[str, ClientDocument] = {}
        self.connected = False
        self._applying_remote = False

    # ---- commands ----------------------------------------------------------------------------

    def open(self, channel: str, token: str, doc: Doc | None = None) -> ClientDocument:
        if channel in self.documents:
            raise SessionViolation(f"document {channel!r} is already open")
        state = ClientDocument(channel, token, doc or Doc())
        self.documents[channel] = state
        return state

    def handshake(self, channel: str) -> list[bytes]:
        """What to send when a document opens or the socket (re)connects."""
        state = self.documents[channel]
        state.synced = False
        state.scope = None
        state.refused = None
        state.sent = state.acked = 0
        return [
            AuthToken(channel, state.token, "tether-py").encode(),
            Sync(channel, SyncStep1(state.doc.get_state())).encode(),
            *self._presence_frames(state),
        ]

    def local_update(self, channel: str, update: bytes) -> list[bytes]:
        """A local transaction produced ``update``: send it now, or carry it in the resync."""
        if self._applying_remote:
            return []
        state = self.documents.get(channel)
        if state is None:
            return []
        if not self.connected or state.scope is None:
            state.dirty_offline = True
            return []
        state.sent += 1
        return [Sync(channel, SyncUpdate(update)).encode()]

    def set_presence(self, channel: str, presence: dict[str, object] | None) -> list[bytes]:
        """Our awareness state for a document (None: we left); resent on every reconnect."""
        state = self.documents[channel]
        state.local_clock += 1
        state.local_presence = None if presence is None else json.dumps(presence)
        return self._presence_frames(state)

    def _presence_frames(self, state: ClientDocument) -> list[bytes]:
        if state.local_presence is None and state.local_clock == 0:
            return []
        entry = AwarenessEntry(
            state.doc.client_id, state.local_clock, state.local_presence or "null"
        )
        return [Awareness(state.channel, encode_awareness([entry])).encode()]

    def close(self, channel: str) -> list[bytes]:
        if self.documents.pop(channel, None) is None:
            return []
        return [Close(channel).encode()] if self.connected else []

    def disconnected(self) -> None:
        self.connected = False
        for state in self.documents.values():
            if state.sent > state.acked:
                state.dirty_offline = True
            state.synced = False
            state.presence.clear()

    # ---- incoming ----------------------------------------------------------------------------

    def receive(self, data: bytes) -> tuple[list[bytes], list[ClientEvent]]:
        message = decode_frame(data)
        if isinstance(message, Ping):
            return [PONG_FRAME], []
        if isinstance(message, Pong):
            return [], []
        state = self.documents.get(message.channel)
        if state is None:
            return [], []  # a late frame for a document we closed
        if isinstance(message, Sync):
            return self._on_sync(state, message)
        if isinstance(message, SyncStatus):
            state.acked += 1
            if not message.applied:
                state.rejected += 1
            return [], [Acked(state.channel, message.applied)]
        if isinstance(message, Authenticated):
            state.scope = message.scope
            return [], [AuthGranted(state.channel, message.scope)]
        if isinstance(message, PermissionDenied):
            state.refused = message.reason
            return [], [AuthRefused(state.channel, message.reason)]
        if isinstance(message, Awareness):
            self._on_awareness(state, message.update)
            return [], [PresenceChanged(state.channel)]
        if isinstance(message, Stateless):
            return [], [StatelessReceived(state.channel, message.payload)]
        if isinstance(message, Close):
            return [], [DocumentClosed(state.channel, message.reason or "")]
        return [], []

    def _on_sync(
        self, state: ClientDocument, message: Sync
    ) -> tuple[list[bytes], list[ClientEvent]]:
        inner = message.message
        if isinstance(inner, SyncStep1):
            reply = state.doc.get_update(inner.state_vector)
            state.sent += 1
            state.dirty_offline = False  # the reply carries every offline edit
            return [Sync(state.channel, SyncStep2(reply)).encode()], []
        self._apply_remote(state, inner.update)
        events: list[ClientEvent] = [RemoteChange(state.channel)]
        if isinstance(inner, SyncStep2) and not state.synced:
            state.synced = True
            events.append(Synced(state.channel))
        return [], events

    def _apply_remote(self, state: ClientDocument, update: bytes) -> None:
        self._applying_remote = True
        try:
            with state.doc.transaction(origin=REMOTE_ORIGIN):
                state.doc.apply_update(update)
        finally:
            self._applying_remote = False

    def _on_awareness(self, state: ClientDocument, payload: bytes) -> None:
        for entry in decode_awareness(payload):
            if entry.removed:
                state.presence.pop(entry.client_id, None)
            else:
                state.presence[entry.client_id] = entry

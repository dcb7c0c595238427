"""The client side of a multiplexed connection as a state machine over pycrdt documents.

Owns each open document's Doc, its auth/sync state and its acknowledgement counters. Knows
nothing of sockets or asyncio: methods return frames to send and events that happened.
Local edits are not buffered while offline: reconnecting sends our state vector and answers the
server's with exactly what it lacks, so offline edits travel in that reply.

A ``SyncStatus 0`` for a frame that carried a local change is a refused write under a readonly
grant (``WriteRefused``, once the document is rolled back) and a "send it again" under a
read-write one (the server's next step1 asks for it; not acknowledged until that answer is).
The rollback: a fresh Doc asks the server for its whole state (``syncStep1`` of the empty state
vector) and takes every update that arrives meanwhile; when the answering ``syncStep2`` arrives
it becomes the document, and the old Doc, refused changes and all, goes to the caller. Until
then nothing local is sent and the server's step1s are answered from the fresh Doc, so the
refused change is not offered again (PROTOCOL.md, "Refused writes").
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field

from pycrdt import Doc, Text, get_state

from .errors import SessionViolation
from .messages import (
    PONG_FRAME,
    SCOPE_READONLY,
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
    EMPTY_UPDATE,
    AwarenessEntry,
    SyncStep1,
    SyncStep2,
    SyncUpdate,
    decode_awareness,
    encode_awareness,
)

TEXT_NAME = "content"
REMOTE_ORIGIN = "tether-remote"
READONLY_REASON = "readonly grant: this token may read the document, not write it"
# What an update's state vector is when it holds no structs (only deletions, or nothing).
_NO_STRUCTS = b"\x00"


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


@dataclass(frozen=True, slots=True)
class WriteRefused:
    """The server refused a write for good; the document now holds the server's state and
    ``local_doc`` is the Doc as it was before, the refused changes in it."""

    channel: str
    reason: str
    local_doc: Doc


ClientEvent = (
    AuthGranted
    | AuthRefused
    | Synced
    | Acked
    | RemoteChange
    | PresenceChanged
    | StatelessReceived
    | DocumentClosed
    | WriteRefused
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
    # One entry per frame awaiting its SyncStatus: whether it carries a local change (a step2
    # reply with nothing new does not; under readonly even its delete set is answered 0).
    in_flight: deque[bool] = field(default_factory=deque)
    # A write answered 0 under a read-write grant: the server's next step1 asks for it again.
    resend_due: bool = False
    # While a refused write is rolled back: the server's state, filling from its answer to our
    # step1 and every update since; None otherwise.
    rollback: Doc | None = None
    rollback_reason: str = ""
    # Our step1s awaiting their syncStep2, oldest first: True for the rollback's.
    step1s: deque[bool] = field(default_factory=deque)
    presence: dict[int, AwarenessEntry] = field(default_factory=dict)
    local_presence: str | None = None
    local_clock: int = 0

    @property
    def text(self) -> Text:
        return self.doc.get(TEXT_NAME, type=Text)

    @property
    def all_acked(self) -> bool:
        return (
            self.acked >= self.sent
            and not self.dirty_offline
            and not self.resend_due
            and self.rollback is None
        )

    @property
    def readonly(self) -> bool:
        return self.scope == SCOPE_READONLY


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
        state.in_flight.clear()
        state.step1s.clear()
        # A rollback under way asks for what its fresh Doc lacks: the refused change stays out.
        state.step1s.append(state.rollback is not None)
        return [
            AuthToken(channel, state.token, "tether-py").encode(),
            Sync(channel, SyncStep1(_source(state).get_state())).encode(),
            *self._presence_frames(state),
        ]

    def reauthenticate(self, channel: str, token: str) -> list[bytes]:
        """A new token for an open document (refreshed, or narrowed): the server verifies it
        and answers ``Authenticated`` (the scope may change) or ``PermissionDenied``; it is also
        the token every reconnect sends from now on."""
        state = self.documents[channel]
        state.token = token
        if not self.connected:
            return []
        return [AuthToken(channel, token, "tether-py").encode()]

    def local_update(self, channel: str, update: bytes) -> list[bytes]:
        """A local transaction produced ``update``: send it now, or carry it in the resync."""
        if self._applying_remote:
            return []
        state = self.documents.get(channel)
        if state is None or state.rollback is not None:
            return []  # during a rollback the Doc is the refused copy: nothing of it is sent
        if not self.connected or state.scope is None:
            state.dirty_offline = True
            return []
        state.sent += 1
        state.in_flight.append(update != EMPTY_UPDATE)
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

    def _presence_moved(self, state: ClientDocument, old_client_id: int) -> list[bytes]:
        """After a rollback the Doc's client id is new: the old id leaves, the new one shows."""
        if state.local_presence is None and state.local_clock == 0:
            return []
        state.local_clock += 1
        gone = AwarenessEntry(old_client_id, state.local_clock, "null")
        return [
            Awareness(state.channel, encode_awareness([gone])).encode(),
            *self._presence_frames(state),
        ]

    def close(self, channel: str) -> list[bytes]:
        if self.documents.pop(channel, None) is None:
            return []
        return [Close(channel).encode()] if self.connected else []

    def disconnected(self) -> None:
        self.connected = False
        for state in self.documents.values():
            if any(state.in_flight) or state.resend_due:
                state.dirty_offline = True  # the resync's reply carries it again
            state.resend_due = False
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
            return self._on_status(state, message.applied)
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

    def _on_status(
        self, state: ClientDocument, applied: bool
    ) -> tuple[list[bytes], list[ClientEvent]]:
        state.acked += 1
        carried = state.in_flight.popleft() if state.in_flight else False
        events: list[ClientEvent] = [Acked(state.channel, applied)]
        if applied:
            return [], events
        state.rejected += 1
        if not carried:
            return [], events  # nothing of ours in it (a readonly reply's known delete set)
        if not state.readonly:
            state.resend_due = True  # the server asks again with its step1 (PROTOCOL.md)
            return [], events
        if state.rollback is not None:
            return [], events  # sent before the rollback began: its answer covers this one
        state.rollback = Doc()  # a new client id: the refused clocks are never reused
        state.rollback_reason = READONLY_REASON
        return self._ask_for_rollback(state), events

    def _ask_for_rollback(self, state: ClientDocument) -> list[bytes]:
        """The rollback's step1, once no other step1 of ours awaits its answer: a server that
        rebuilds the document answers only a peer's latest step1, and an answer does not say
        which question it answers."""
        if state.rollback is None or state.step1s:
            return []
        state.step1s.append(True)
        return [Sync(state.channel, SyncStep1(state.rollback.get_state())).encode()]

    def _on_sync(
        self, state: ClientDocument, message: Sync
    ) -> tuple[list[bytes], list[ClientEvent]]:
        inner = message.message
        if isinstance(inner, SyncStep1):
            rolling_back = state.rollback is not None
            reply = _source(state).get_update(inner.state_vector)
            carries = not rolling_back and (state.dirty_offline or get_state(reply) != _NO_STRUCTS)
            state.sent += 1
            state.in_flight.append(carries)
            state.dirty_offline = False  # the reply carries every offline edit
            state.resend_due = False  # and every write the server asks for again
            return [Sync(state.channel, SyncStep2(reply)).encode()], []
        self._apply_remote(state, inner.update)
        frames: list[bytes] = []
        events: list[ClientEvent] = [RemoteChange(state.channel)]
        if isinstance(inner, SyncStep2):
            answers_rollback = state.step1s.popleft() if state.step1s else False
            if answers_rollback and state.rollback is not None:
                frames, refused = self._swap(state)
                events.append(refused)
            else:
                frames = self._ask_for_rollback(state)  # deferred behind the answer just in
            if not state.synced:
                state.synced = True
                events.append(Synced(state.channel))
        return frames, events

    def _swap(self, state: ClientDocument) -> tuple[list[bytes], WriteRefused]:
        """The rollback's Doc holds the server's state now: it becomes the document."""
        assert state.rollback is not None
        local = state.doc
        state.doc, state.rollback = state.rollback, None
        state.dirty_offline = False  # what was unsent is in the refused copy
        refused = WriteRefused(state.channel, state.rollback_reason, local)
        return self._presence_moved(state, local.client_id), refused

    def _apply_remote(self, state: ClientDocument, update: bytes) -> None:
        self._applying_remote = True
        try:
            for doc in (state.doc, state.rollback):
                if doc is not None:
                    with doc.transaction(origin=REMOTE_ORIGIN):
                        doc.apply_update(update)
        finally:
            self._applying_remote = False

    def _on_awareness(self, state: ClientDocument, payload: bytes) -> None:
        for entry in decode_awareness(payload):
            if entry.removed:
                state.presence.pop(entry.client_id, None)
            else:
                state.presence[entry.client_id] = entry


def _source(state: ClientDocument) -> Doc:
    """The Doc whose state we offer the server: the rollback's while one is under way."""
    return state.rollback if state.rollback is not None else state.doc

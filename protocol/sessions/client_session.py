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

Two refusals come without a ``SyncStatus``. An update the server's guard refuses closes the
whole connection (1002, "invalid update: ..."), naming no document: ``disconnected`` is told the
close, and every read-write document with a change still awaiting its SyncStatus is a suspect.
A suspect is rolled back as above on the next connection, its state at the close kept; when the
server's whole state arrives, a suspect the server holds in full was not refused (its frames
were applied before the refused one) and resumes, sending what the server lacks; any other is
refused with the close's reason. A document with no change awaiting an ack resyncs as after any
other close. A ``Sync`` over the server's ``max_frame_bytes`` revokes its channel
(``PermissionDenied("update too large: ...")``): that document is authenticated again on the
same connection and rolled back. Neither refused change is sent again. A document refused
``MAX_REFUSALS_IN_ROW`` times with no write of it applied in between is no longer synced: it is
closed, and its ``WriteRefused`` says ``stopped``.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field

from pycrdt import Doc, Text, get_state

from ..protocol_errors import SessionViolation
from ..wire.messages import (
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
from ..wire.sync_payloads import (
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
# How the server closes a connection whose update its guard refused (close_codes.py), and the
# reason it revokes a channel with for a Sync over max_frame_bytes (session.py).
INVALID_UPDATE_CLOSE = 1002
INVALID_UPDATE_PREFIX = "invalid update"
TOO_LARGE_PREFIX = "update too large"
# Refusals of one document by close or size in a row, with none of its writes applied between,
# before the client stops syncing it: each costs every document on the connection a reconnect.
MAX_REFUSALS_IN_ROW = 3
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
    ``local_doc`` is the Doc as it was before, the refused changes in it. ``stopped``: refused
    too often in a row, so the document was closed instead (``local_doc`` is its last Doc)."""

    channel: str
    reason: str
    local_doc: Doc
    stopped: bool = False


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
    # A suspect of a refusal close: its full state then; the rollback's answer says whether
    # the server holds all of it (not refused after all) or not.
    suspect_state: bytes | None = None
    # Refusals by close or size since a write of this document was last applied.
    refusals_in_row: int = 0
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

    def disconnected(self, close: tuple[int, str] | None = None) -> list[ClientEvent]:
        """The connection ended; ``close`` is its close code and reason, if it had one. A
        refusal close (``is_refusal_close``) makes suspects of the documents awaiting a
        SyncStatus (module docstring); the events are those given up on (``stopped``)."""
        self.connected = False
        refusal = close[1] if close is not None and is_refusal_close(*close) else None
        events: list[ClientEvent] = []
        for state in list(self.documents.values()):
            if refusal is not None and any(state.in_flight) and not state.readonly:
                stopped = self._suspect(state, refusal)
                if stopped is not None:
                    events.append(stopped)
                    continue
            elif any(state.in_flight) or state.resend_due:
                state.dirty_offline = True  # the resync's reply carries it again
            state.resend_due = False
            state.synced = False
            state.presence.clear()
        return events

    def _suspect(self, state: ClientDocument, reason: str) -> WriteRefused | None:
        """``state`` had a change awaiting its SyncStatus when a refusal closed the connection."""
        if self._refused_again(state):
            return self._stop(state, reason)
        if state.rollback is None:
            state.rollback = Doc()  # a new client id: the refused clocks are never reused
            state.rollback_reason = reason
            state.suspect_state = state.doc.get_update()
        return None

    def _refused_again(self, state: ClientDocument) -> bool:
        state.refusals_in_row += 1
        return state.refusals_in_row >= MAX_REFUSALS_IN_ROW

    def _stop(self, state: ClientDocument, reason: str) -> WriteRefused:
        """Refused too often in a row: the document is closed rather than refused once more."""
        self.documents.pop(state.channel, None)
        state.synced = False
        stopped = (
            f"{reason} (refused {state.refusals_in_row} times in a row: this client stopped"
            " syncing the document; open it again to resume)"
        )
        return WriteRefused(state.channel, stopped, state.doc, stopped=True)

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
            if state.scope is None:
                return [], []  # a revoked channel's late ack, before its new grant
            return self._on_status(state, message.applied)
        if isinstance(message, Authenticated):
            state.scope = message.scope
            return [], [AuthGranted(state.channel, message.scope)]
        if isinstance(message, PermissionDenied):
            if message.reason.startswith(TOO_LARGE_PREFIX):
                return self._too_large(state, message.reason)
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
            if carried:
                state.refusals_in_row = 0  # a write of it applied: not refused in a row
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

    def _too_large(
        self, state: ClientDocument, reason: str
    ) -> tuple[list[bytes], list[ClientEvent]]:
        """A Sync of ours over ``max_frame_bytes``: the server revoked the channel. Ask for it
        again on this connection, rolling back (the refused change is never sent again)."""
        if self._refused_again(state):
            return [Close(state.channel).encode()], [self._stop(state, reason)]
        if state.rollback is None:
            state.rollback = Doc()
        state.rollback_reason = reason
        state.suspect_state = None  # this one was refused: nothing to weigh
        return self.handshake(state.channel), []

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
                if _holds_all(state.rollback, state.suspect_state):
                    frames = self._resume(state)
                else:
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
        state.suspect_state = None
        state.dirty_offline = False  # what was unsent is in the refused copy
        refused = WriteRefused(state.channel, state.rollback_reason, local)
        return self._presence_moved(state, local.client_id), refused

    def _resume(self, state: ClientDocument) -> list[bytes]:
        """A suspect the server holds in full was not refused: it keeps its Doc, and sends what
        the server lacks (what was typed since the close)."""
        assert state.rollback is not None
        server = state.rollback
        state.rollback = state.suspect_state = None
        state.refusals_in_row -= 1  # the close was not this document's doing
        state.sent += 1
        state.in_flight.append(True)
        update = state.doc.get_update(server.get_state())
        return [Sync(state.channel, SyncUpdate(update)).encode()]

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


def is_refusal_close(code: int, reason: str) -> bool:
    """Whether a connection's close says the server's guard refused an update of ours."""
    return code == INVALID_UPDATE_CLOSE and reason.startswith(INVALID_UPDATE_PREFIX)


def _holds_all(server: Doc, state: bytes | None) -> bool:
    """Whether ``server`` (a Doc holding the server's state) has everything of ``state`` (a
    suspect's at the close): applied to a copy of it, ``state`` changes nothing. None: the
    rollback was no question (a refusal known for sure). O(document), once per suspect."""
    if state is None:
        return False
    copy = Doc()
    copy.apply_update(server.get_update())
    changes: list[bytes] = []
    copy.observe(lambda event: changes.append(event.update))
    copy.apply_update(state)
    return all(change == EMPTY_UPDATE for change in changes)


def _source(state: ClientDocument) -> Doc:
    """The Doc whose state we offer the server: the rollback's while one is under way."""
    return state.rollback if state.rollback is not None else state.doc

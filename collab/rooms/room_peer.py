"""One attachment of a socket to a document: how to address frames to it, and its rights.

A ``/ws`` connection has one peer per open channel; a ``/yjs/{doc}`` socket is one peer. Knows
nothing of rooms; the room hands it encoded bodies and it adds its own header.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from tether.protocol.wire.lib0 import write_var_string, write_var_uint
from tether.protocol.wire.messages import AWARENESS, STATELESS, SYNC, SyncStatus

from ..auth.tokens import Grant
from ..transport.outbox import Outbox
from .initial_sync import InitialSync

_ids = itertools.count(1)


@dataclass(eq=False, slots=True)
class Peer:
    outbox: Outbox
    grant: Grant
    scope: str
    # The multiplexed channel name; None on the plain y-websocket endpoint (no name in frames).
    channel: str | None
    peer_id: int = field(default_factory=lambda: next(_ids))
    awareness_ids: set[int] = field(default_factory=set)
    # Limits this peer already ran into and was logged for (collab.runtime.limits: once per peer).
    refusals_logged: set[str] = field(default_factory=set)
    sync_header: bytes = b""
    awareness_header: bytes = b""
    # Set by the connection: end this attachment with a reason the editor sees (the document
    # was deleted). None: the room just detaches the peer.
    revoke: Callable[[str], None] | None = None
    # The connection's chunked initial syncs (collab.rooms.initial_sync); None: one SyncStep2.
    initial_sync: InitialSync | None = None
    # The "applied" SyncStatus frame, made on this peer's first ack (one per edit after that).
    applied_frame: bytes | None = None

    def __post_init__(self) -> None:
        if self.channel is None:
            self.sync_header = write_var_uint(SYNC)
            self.awareness_header = write_var_uint(AWARENESS)
        else:
            name = write_var_string(self.channel)
            self.sync_header = name + write_var_uint(SYNC)
            self.awareness_header = name + write_var_uint(AWARENESS)

    @property
    def label(self) -> str:
        """Who this is, for the log (the subject cut short: it comes from a token)."""
        return f"peer {self.peer_id} ({self.grant.subject[:64]!r})"

    @property
    def writable(self) -> bool:
        return self.scope == "read-write"

    @property
    def multiplexed(self) -> bool:
        return self.channel is not None

    def send(self, frame: bytes) -> None:
        self.outbox.put(frame)

    def answer_pending(self, tag: object) -> bool:
        """An answer queued with ``send_answer(..., tag)`` has not reached the socket yet."""
        return self.outbox.holds((self.peer_id, tag))

    def send_answer(self, frame: bytes, tag: object) -> None:
        """Queue a full-state answer (a step2, a presence snapshot) that ``answer_pending`` can
        see: a repeated request is coalesced into the answer already on its way, so a reader that
        never reads cannot make us hold N copies of a document."""
        self.outbox.put_tagged(frame, (self.peer_id, tag))

    def send_sync_status(self, applied: bool) -> None:
        # The plain y-websocket protocol has no acknowledgements.
        if self.channel is None:
            return
        if not applied:
            self.outbox.put(SyncStatus(self.channel, False).encode())
            return
        frame = self.applied_frame
        if frame is None:
            frame = self.applied_frame = SyncStatus(self.channel, True).encode()
        self.outbox.put(frame)

    def send_stateless(self, payload: str) -> None:
        if self.channel is not None:
            self.outbox.put(
                write_var_string(self.channel)
                + write_var_uint(STATELESS)
                + write_var_string(payload)
            )

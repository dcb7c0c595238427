"""A connection's chunked initial syncs: a document too big for one message reaches a client as
bounded updates, one at a time, then a small SyncStep2 (the message y-websocket and Hocuspocus
providers fire ``synced`` on).

Knows nothing of sockets or frames' envelopes (peers add their own headers). Why pieces: a
whole document as one SyncStep2 never arrives through a proxy with a message cap, and on a slow
link it blocks every other message (the client's keepalive timers included) until it is done;
either way the client reconnects and asks for it all again, forever. Here each piece waits
until the connection's send queue has drained, so pings, presence and other documents' updates
go out between pieces. Pieces carry each client's structs in clock order
(protocol.updates.update_split), so a client that reconnects mid-way sends a state vector that
already covers what it applied: the next sync sends only the rest.

Bounded: one chunked sync runs per connection at a time, holding one diff (at most the size of
that document); others wait as (room, peer, state vector) entries, one per channel, the state
vector cut to the clients the document knows (so at most the document's own state vector).
Answers that fit in one piece never wait here: they go out at once, as before. And across
connections: a running sync holds its diff's size of the server's send budget
(``collab.transport.send_budget``); when that is full it drops its diff and waits, holding only
its state vector, and computes the diff again when its turn comes. Syncs of the whole document
(an empty state vector: every new editor) share one encoded state (``Room.diff_for``). What it
asks of a peer and of its room is ``SyncPeer`` and ``SyncRoom``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Iterator
from typing import Any, Protocol, TypeVar

from pycrdt import Doc

from tether.protocol.updates.update_split import split_update
from tether.protocol.wire.lib0 import Decoder, write_var_uint
from tether.protocol.wire.sync_payloads import SyncStep2, SyncUpdate

from ..runtime import pools
from ..runtime.sync_metrics import Metrics
from ..transport.outbox import Outbox


class SyncPeer(Protocol):
    """What a chunked sync sends through: the peer it is for (``collab.rooms.room_peer.Peer``)."""

    @property
    def sync_header(self) -> bytes: ...

    def send(self, frame: bytes) -> None: ...


_P = TypeVar("_P", bound=SyncPeer)


class SyncRoom(Protocol[_P]):
    """What a chunked sync reads of the room whose document it sends."""

    @property
    def doc(self) -> Doc: ...

    @property
    def peers(self) -> Collection[_P]: ...

    def diff_for(self, state_vector: bytes) -> bytes:
        """What ``state_vector`` lacks of the document."""
        ...

    def initial_sync_done(self, peer: _P) -> None:
        """The chunked sync of ``peer`` ended (sent, or dropped)."""


class InitialSync:
    def __init__(self, outbox: Outbox, piece_bytes: int, metrics: Metrics) -> None:
        self.piece_bytes = piece_bytes
        self._outbox = outbox
        self._metrics = metrics
        # A list, not a deque: an empty deque costs ~740 bytes on every idle connection, and
        # this holds at most one entry per channel.
        self._waiting: list[tuple[SyncRoom[Any], SyncPeer, bytes]] = []
        self._active: SyncPeer | None = None
        self._task: asyncio.Task[None] | None = None

    def holds(self, peer: SyncPeer) -> bool:
        """A chunked sync for ``peer`` is running or waiting (asked before every ack)."""
        if self._active is peer:
            return True
        return bool(self._waiting) and any(p is peer for _, p, _ in self._waiting)

    def start(self, room: SyncRoom[Any], peer: SyncPeer, state_vector: bytes, diff: bytes) -> None:
        """Send ``diff`` (what ``state_vector`` lacks of ``room``) in pieces, now or after the
        sync already running; a waiting one recomputes its diff when its turn comes."""
        state_vector = _known_clients_only(state_vector, room)
        if self._task is None or self._task.done():
            # Active from now, not from the task's first step: the peer's next frame (its
            # answer to our step1) may be handled first, and its ack must already be held.
            self._active = peer
            self._task = asyncio.ensure_future(self._run(room, peer, state_vector, diff))
            return
        self._waiting.append((room, peer, state_vector))

    def close(self) -> None:
        """The connection ended: drop every sync (and the diff held by the running one)."""
        self._waiting.clear()
        if self._task is not None:
            self._task.cancel()

    async def _run(
        self, room: SyncRoom[Any], peer: SyncPeer, state_vector: bytes, diff: bytes | None
    ) -> None:
        outbox = self._outbox
        while True:
            self._active = peer
            if diff is None or outbox.budget_full(len(diff)):
                size = len(diff) if diff is not None else len(room.diff_for(b"\x00"))
                diff = None  # not held while it waits for room in the budget
                await outbox.reserve(size)
                if peer in room.peers:
                    diff = room.diff_for(state_vector)
                    outbox.resize_reservation(size, len(diff))
                    size = len(diff)
            else:
                size = len(diff)
                await outbox.reserve(size)  # fits: taken at once
            try:
                if diff is not None:
                    await self._send(room, peer, diff)
            finally:
                outbox.unreserve(size)
                self._active = None
            diff = None  # not held while the next one waits for its turn
            while self._waiting:
                room, peer, state_vector = self._waiting.pop(0)
                if peer in room.peers:
                    break
            else:
                return

    async def _send(self, room: SyncRoom[Any], peer: SyncPeer, diff: bytes) -> None:
        try:
            pieces = split_update(diff, self.piece_bytes)
            held = await _cut(pieces)
            assert held is not None  # an update splits into one piece at least
            while (piece := await _cut(pieces)) is not None:
                if peer not in room.peers or self._outbox.closed:
                    return  # detached mid-way: its next sync starts from its own state
                peer.send(peer.sync_header + SyncUpdate(held).encode())
                self._metrics.initial_sync_pieces.inc()
                held = piece
                # Wait for the socket to take it: keepalives and other traffic go between.
                await self._outbox.wait_sent()
            if peer in room.peers:
                peer.send(peer.sync_header + SyncStep2(held).encode())
                self._metrics.initial_sync_pieces.inc()
        finally:
            room.initial_sync_done(peer)


async def _cut(pieces: Iterator[bytes]) -> bytes | None:
    """The next piece, cut in the updates pool: cutting is pure Python at ~10 us per struct,
    so one piece of typed text held the event loop ~0.4 s; the loop gets the GIL every 5 ms."""
    return await pools.current().updates.run(next, pieces, None)


def _known_clients_only(state_vector: bytes, room: SyncRoom[Any]) -> bytes:
    """``state_vector`` without the clients ``room`` has never seen: they change no diff, and
    dropping them bounds what a waiting sync holds by the document, not by the peer."""
    known = _decode_state_vector(room.doc.get_state())
    theirs = _decode_state_vector(state_vector)
    kept = [(client, clock) for client, clock in theirs.items() if client in known]
    out = [write_var_uint(len(kept))]
    for client, clock in kept:
        out += [write_var_uint(client), write_var_uint(clock)]
    return b"".join(out)


def _decode_state_vector(state_vector: bytes) -> dict[int, int]:
    d = Decoder(state_vector)
    state: dict[int, int] = {}
    for _ in range(d.read_var_uint()):
        client = d.read_var_uint()
        state[client] = d.read_var_uint()
    return state

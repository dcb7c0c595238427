"""One loaded document: its pycrdt Doc, the peers attached to it, presence, and durable acks.

Knows nothing of sockets or frames' envelopes (peers add their own headers) and nothing of
which storage backend it writes to. The sync path here is: decode once (done by the caller),
apply once, encode the outgoing body once, put it on every other peer's queue without awaiting,
then acknowledge after the store says the update is durable.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable
from typing import Any

from pycrdt import Doc

from protocol.lib0 import MAX_SAFE_INTEGER, write_var_uint8_array
from protocol.sync import (
    EMPTY_UPDATE,
    AwarenessEntry,
    SyncMessage,
    SyncStep1,
    SyncStep2,
    SyncUpdate,
    decode_awareness,
    encode_awareness,
)

from .hooks import Hooks
from .metrics import Metrics
from .peer import Peer
from .presence_check import safe_presence
from .storage import StorageError, Store

log = logging.getLogger(__name__)


class InvalidUpdate(Exception):
    """The peer sent an update pycrdt cannot apply; the document is unchanged."""


class RoomClosed(Exception):
    """The room is unloading; reacquire it from the manager."""


def apply_update(doc: Doc, update: bytes, origin: object) -> None:
    """Apply with an origin; any decoding failure, including a Rust panic, is InvalidUpdate."""
    try:
        with doc.transaction(origin=origin):
            doc.apply_update(update)
    except Exception as exc:
        raise InvalidUpdate(str(exc)) from exc
    except BaseException as exc:  # pyo3's PanicException derives from BaseException
        if type(exc).__name__ != "PanicException":
            raise
        raise InvalidUpdate("update caused a decoder panic") from exc


class _AckQueue:
    """A peer's acknowledgements, sent strictly in the order its updates arrived."""

    __slots__ = ("entries", "peer")

    def __init__(self, peer: Peer) -> None:
        self.peer = peer
        self.entries: collections.deque[list[object]] = collections.deque()

    def push(self, done: bool, applied: bool) -> list[object]:
        entry: list[object] = [done, applied]
        self.entries.append(entry)
        if done:
            self.flush()
        return entry

    def flush(self) -> None:
        entries = self.entries
        while entries and entries[0][0]:
            _, applied = entries.popleft()
            self.peer.send_sync_status(bool(applied))


class Room:
    def __init__(
        self,
        name: str,
        doc: Doc,
        store: Store,
        *,
        hooks: Hooks,
        metrics: Metrics,
        compact_threshold: int,
        log_entries: int = 0,
    ) -> None:
        self.name = name
        self.doc = doc
        self.peers: set[Peer] = set()
        self.awareness: dict[int, AwarenessEntry] = {}
        self._awareness_owner: dict[int, Peer] = {}
        self._store = store
        self._hooks = hooks
        self._metrics = metrics
        self._compact_threshold = compact_threshold
        self._log_entries = log_entries
        self._acks: dict[Peer, _AckQueue] = {}
        self._pending_writes: set[asyncio.Future[Any]] = set()
        self._compacting = False
        self.closing = False
        self.on_empty: Callable[[Room], None] | None = None

    @property
    def log_entries(self) -> int:
        return self._log_entries

    # ---- peers -------------------------------------------------------------------------------

    def attach(self, peer: Peer) -> None:
        """Add a peer and start the handshake: our state vector, then everyone's presence."""
        if self.closing:
            raise RoomClosed(self.name)
        self.peers.add(peer)
        self._acks[peer] = _AckQueue(peer)
        peer.send(peer.sync_header + SyncStep1(self.doc.get_state()).encode())
        if self.awareness:
            peer.send(peer.awareness_header + _awareness_body(list(self.awareness.values())))

    def detach(self, peer: Peer) -> None:
        if peer not in self.peers:
            return
        self.peers.discard(peer)
        self._acks.pop(peer, None)
        try:
            self._remove_presence(peer)
        finally:
            self._hooks.on_detach(self, peer)
            if not self.peers and self.on_empty is not None:
                self.on_empty(self)

    # ---- sync --------------------------------------------------------------------------------

    def handle_sync(self, peer: Peer, message: SyncMessage) -> None:
        if isinstance(message, SyncStep1):
            try:
                diff = self.doc.get_update(message.state_vector)
            except Exception as exc:
                raise InvalidUpdate("invalid state vector") from exc
            peer.send(peer.sync_header + SyncStep2(diff).encode())
            return
        self.receive_update(peer, message.update)

    def receive_update(self, peer: Peer, update: bytes) -> None:
        acks = self._acks.get(peer)
        if acks is None:
            return
        if update == EMPTY_UPDATE:
            acks.push(done=True, applied=True)  # nothing to store; ack keeps its place in line
            return
        if not peer.writable:
            self._metrics.rejected_updates.inc()
            acks.push(done=True, applied=False)
            return
        apply_update(self.doc, update, origin=peer)
        self._metrics.updates.inc()
        self._broadcast(SyncUpdate(update).encode(), exclude=peer, sync=True)
        self._hooks.on_change(self, update, peer)
        entry = acks.push(done=False, applied=False)
        self._persist(update, acks, entry, received=time.perf_counter())

    def edit(self, change: Callable[[Doc], None], origin: object) -> asyncio.Future[int]:
        """An edit made by the server itself (e.g. an accepted AI suggestion), in one transaction
        with ``origin``: broadcast to every peer, stored; the future resolves once durable."""
        before = self.doc.get_state()
        with self.doc.transaction(origin=origin):
            change(self.doc)
        update = self.doc.get_update(before)
        self._broadcast(SyncUpdate(update).encode(), exclude=None, sync=True)
        self._hooks.on_change(self, update, origin)
        return self._persist(update, None, None, received=time.perf_counter())

    def _persist(
        self,
        update: bytes,
        acks: _AckQueue | None,
        entry: list[object] | None,
        received: float,
    ) -> asyncio.Future[int]:
        # append_future takes its place in the store's FIFO now, before any later compact();
        # a done-callback (not a task per update) keeps the hot path cheap.
        write = self._store.append_future(self.name, update)
        self._pending_writes.add(write)
        write.add_done_callback(lambda done: self._stored(done, acks, entry, received))
        return write

    def _stored(
        self,
        write: asyncio.Future[int],
        acks: _AckQueue | None,
        entry: list[object] | None,
        received: float,
    ) -> None:
        self._pending_writes.discard(write)
        error = write.exception()
        applied = error is None
        if error is not None:
            log.error("could not store an update of %r: %s", self.name, error)
        else:
            self._log_entries = write.result()
        if entry is not None and acks is not None:
            entry[0], entry[1] = True, applied
            acks.flush()
            self._metrics.ack_seconds.observe(time.perf_counter() - received)
        if applied and self._log_entries >= self._compact_threshold and not self._compacting:
            self._compacting = True
            task = asyncio.ensure_future(self.compact())
            self._pending_writes.add(task)
            task.add_done_callback(self._pending_writes.discard)

    async def compact(self) -> None:
        """Fold the update log into one snapshot (the store does it atomically)."""
        self._compacting = True
        try:
            await self._store.compact(self.name, self.doc.get_update())
            self._log_entries = 0
            self._metrics.compactions.inc()
        except StorageError:
            log.exception("compaction of %r failed; the log is intact", self.name)
        finally:
            self._compacting = False

    async def flush(self) -> None:
        """Wait until every update received so far is durable."""
        while self._pending_writes:
            await asyncio.gather(*list(self._pending_writes), return_exceptions=True)

    # ---- presence ----------------------------------------------------------------------------

    def handle_awareness(self, peer: Peer, payload: bytes) -> None:
        payload = safe_presence(payload, self._metrics)  # hex colours, bounded names: item 12
        entries = decode_awareness(payload)
        accepted = []
        for entry in entries:
            owner = self._awareness_owner.get(entry.client_id)
            if owner is not None and owner is not peer:
                continue  # one editor may not speak for another's presence
            accepted.append(entry)
            if entry.removed:
                self.awareness.pop(entry.client_id, None)
                self._awareness_owner.pop(entry.client_id, None)
                peer.awareness_ids.discard(entry.client_id)
            else:
                self.awareness[entry.client_id] = entry
                self._awareness_owner[entry.client_id] = peer
                peer.awareness_ids.add(entry.client_id)
        if accepted:
            full = len(accepted) == len(entries)
            body = write_var_uint8_array(payload) if full else _awareness_body(accepted)
            # Echo to the sender too: y-websocket clients treat silence as a dead connection.
            self._broadcast(body, exclude=None, sync=False)

    def awareness_snapshot(self) -> bytes:
        return _awareness_body(list(self.awareness.values()))

    def _remove_presence(self, peer: Peer) -> None:
        gone = []
        for client_id in peer.awareness_ids:
            entry = self.awareness.pop(client_id, None)
            self._awareness_owner.pop(client_id, None)
            if entry is not None:
                # Capped: a hostile clock of 2**53 - 1 must not break everyone's disconnect.
                clock = min(entry.clock + 1, MAX_SAFE_INTEGER)
                gone.append(AwarenessEntry(client_id, clock, "null"))
        peer.awareness_ids.clear()
        if gone:
            self._broadcast(_awareness_body(gone), exclude=None, sync=False)

    # ---- fan-out -----------------------------------------------------------------------------

    def _broadcast(self, body: bytes, *, exclude: Peer | None, sync: bool) -> None:
        """Encode the body once; each distinct header (channel name) is joined once."""
        frames: dict[bytes, bytes] = {}
        for peer in self.peers:
            if peer is exclude:
                continue
            header = peer.sync_header if sync else peer.awareness_header
            frame = frames.get(header)
            if frame is None:
                frame = frames[header] = header + body
            peer.send(frame)
        self._metrics.fanout_frames.inc(len(self.peers) - (exclude is not None))


def _awareness_body(entries: list[AwarenessEntry]) -> bytes:
    return write_var_uint8_array(encode_awareness(entries))

"""A room's path to disk: appends, ordered acks, log folds; knows no sync, fan-out or rebuild.

An update is acknowledged (SyncStatus 1) only once the store says it is durable, and a peer's
acks go out in the order its updates arrived. The log is folded into a snapshot when the
compaction policy says so, never while the document is being rebuilt, and never past an update
yrs still holds as pending (DESIGN.md, Durability). What it asks of its room (``DurableRoom``):
its name, its document, whether it is closing, deleted or being rebuilt, and a rebuild after a
lost write.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Protocol

from pycrdt import Doc

from ..hooks import Hooks
from ..runtime.sync_metrics import Metrics
from ..storage.compaction import CompactionPolicy, LogSize
from ..storage.store import StorageError, Store
from ..updates.pending import still_pending
from .room_peer import Peer

log = logging.getLogger(__name__)

# Acks held back during a chunked initial sync, at most (beyond, they flow: bounded memory
# matters more than a ``synced`` event that comes early).
_HELD_ACKS = 1024


class DurableRoom(Protocol):
    """What a room's path to disk asks of the room (which the store hooks are handed too)."""

    @property
    def name(self) -> str: ...

    @property
    def doc(self) -> Doc: ...

    @property
    def closing(self) -> bool: ...

    @property
    def deleted(self) -> bool: ...

    @property
    def reloading(self) -> bool: ...

    async def reloaded(self) -> None: ...

    def rebuild(self, *, lost_write: bool = False) -> None: ...


class AckQueue:
    """A peer's acknowledgements, sent strictly in the order its updates arrived."""

    __slots__ = ("entries", "peer")

    def __init__(self, peer: Peer) -> None:
        self.peer = peer
        # A list: an empty deque costs ~740 bytes per attached peer, and few acks wait here.
        self.entries: list[list[object]] = []

    def push(self, done: bool, applied: bool) -> list[object]:
        entry: list[object] = [done, applied]
        self.entries.append(entry)
        if done:
            self.flush()
        return entry

    def flush(self) -> None:
        entries = self.entries
        chunked = self.peer.initial_sync
        if chunked is not None and chunked.holds(self.peer) and len(entries) <= _HELD_ACKS:
            # Hocuspocus providers fire ``synced`` when their last change is acknowledged: an
            # ack before the chunked initial sync ends would announce a document half loaded.
            return
        while entries and entries[0][0]:
            _, applied = entries.pop(0)
            self.peer.send_sync_status(bool(applied))


class Durability:
    """One room's writes: what is stored, what is still in flight, and when the log is folded."""

    __slots__ = (
        "_appends",
        "_compacting",
        "_hooks",
        "_metrics",
        "_policy",
        "_room",
        "_store",
        "_work",
        "log",
    )

    def __init__(
        self,
        room: DurableRoom,
        store: Store,
        hooks: Hooks,
        metrics: Metrics,
        policy: CompactionPolicy,
        log: LogSize,
    ) -> None:
        self._room = room
        self._store = store
        self._hooks = hooks
        self._metrics = metrics
        self._policy = policy
        # Sizes, and updates applied as pending (no fold while one still is).
        self.log = log
        # Everything ``flush`` waits for (appends, folds, a rebuild), and the appends among them.
        self._work: set[asyncio.Future[Any]] = set()
        self._appends: set[asyncio.Future[int]] = set()
        self._compacting = False

    def persist(self, update: bytes, acks: AckQueue | None, received: float) -> asyncio.Future[int]:
        """Store ``update``; the sender's ``acks`` (None for the server's own edits) gets its
        place in line now and its answer once the store says whether the update is durable."""
        entry = None if acks is None else acks.push(done=False, applied=False)
        room = self._room
        # append_future takes its place in the store's FIFO now, before any later compact();
        # a done-callback (not a task per update) keeps the hot path cheap.
        write = self._store.append_future(room.name, update)
        self.log.bytes += len(update)
        self._work.add(write)
        self._appends.add(write)
        write.add_done_callback(lambda done: self._stored(done, acks, entry, received, update))
        self._hooks.on_store(room, update)
        return write

    def keep_pending(self, update: bytes) -> None:
        """``update`` was applied as pending (its dependencies missing): no fold may drop it."""
        self.log.pending.append(update)

    def track(self, work: asyncio.Future[Any]) -> None:
        """``flush`` waits for ``work`` too (a fold, a rebuild of the document)."""
        self._work.add(work)
        work.add_done_callback(self._work.discard)

    def due_at_unload(self) -> bool:
        return self._policy.due_at_unload(self.log)

    async def flush(self) -> None:
        """Wait until every update received so far is durable."""
        await _settled(self._work)

    async def appends_settled(self) -> None:
        """Wait until every append called so far has succeeded or failed."""
        await _settled(self._appends)

    def _stored(
        self,
        write: asyncio.Future[int],
        acks: AckQueue | None,
        entry: list[object] | None,
        received: float,
        update: bytes,
    ) -> None:
        self._work.discard(write)
        self._appends.discard(write)
        room = self._room
        error = write.exception()
        applied = error is None
        if error is not None:
            log.error("could not store an update of %r: %s", room.name, error)
            if not room.deleted and not room.closing:
                # Peers have it (fanned out before the disk) and may build on it; the store
                # fences the document meanwhile (``Store.resume``).
                room.rebuild(lost_write=True)
        else:
            self.log.entries = write.result()
        if entry is not None and acks is not None:
            entry[0], entry[1] = True, applied
            acks.flush()
            self._metrics.ack_seconds.observe(time.perf_counter() - received)
        if applied:
            self._hooks.after_store(room, update)
        if (
            applied
            and not room.deleted
            and self._policy.due(self.log)
            and self.log.entries >= self.log.retry_at
            and not self._compacting
            and not room.reloading
        ):
            self._compacting = True
            self.track(asyncio.ensure_future(self.compact()))

    async def compact(self) -> None:
        """Fold the update log into one snapshot (the store does it atomically)."""
        room = self._room
        await room.reloaded()  # the doc in memory may hold a refused update's remains
        if room.deleted:
            return  # a snapshot now would bring the deleted document back
        self._compacting = True
        try:
            if self.log.pending and self._holds_pending():
                self.log.retry_at = self.log.entries + self._policy.min_entries
                return
            size = self.log
            folded = size.bytes
            snapshot = room.doc.get_update()
            await self._store.compact(room.name, snapshot)
            log.debug(
                "compacted %r: %d log entries (%d bytes) into %d bytes",
                room.name,
                size.entries,
                folded,
                len(snapshot),
            )
            # Appends called while the snapshot was written stay in the log, and counted. A
            # reload meanwhile counted afresh from the store.
            size.bytes -= folded
            size.entries = 0
            size.snapshot_bytes = len(snapshot)
            self._metrics.compactions.inc()
        except StorageError:
            log.exception("compaction of %r failed; the log is intact", room.name)
        finally:
            self._compacting = False

    def _holds_pending(self) -> bool:
        """Whether an update yrs parked as pending is still not in the document: a snapshot
        would leave it out, so the log (which has it) must stay until it is."""
        self.log.pending = still_pending(self._room.doc.get_state(), self.log.pending)
        if self.log.pending:  # once per try: at most every --compact-threshold appends
            log.warning(
                "%r holds %d update(s) whose dependencies never arrived: its log is not"
                " compacted until they do",
                self._room.name,
                len(self.log.pending),
            )
        return bool(self.log.pending)


async def _settled(work: set[asyncio.Future[Any]]) -> None:
    """Wait until ``work`` is empty (the done ones leave it by themselves)."""
    while work:
        await asyncio.gather(*list(work), return_exceptions=True)

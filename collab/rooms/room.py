"""One loaded document: its pycrdt Doc, the peers attached to it, presence, and durable acks.

Knows nothing of sockets or frames' envelopes (peers add their own headers) and nothing of
which storage backend it writes to. The sync path here is: decode once (done by the caller),
apply once, encode the outgoing body once, put it on every other peer's queue without awaiting,
then acknowledge after the store says the update is durable.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from pycrdt import Doc

from tether.protocol.lib0 import write_var_uint8_array
from tether.protocol.sync import (
    EMPTY_UPDATE,
    AwarenessEntry,
    SyncMessage,
    SyncStep1,
    SyncStep2,
    SyncUpdate,
    encode_awareness,
)
from tether.protocol.update_scan import MalformedUpdate, scan_update
from tether.protocol.update_split import split_update

from ..hooks import Hooks
from ..runtime.limits import refuse
from ..runtime.metrics import Metrics
from ..storage.compaction import CompactionPolicy, LogSize
from ..storage.store import StorageError, Store
from ..updates.guard import (
    DEFAULT_MAX_NESTING_DEPTH,
    MissingDependencies,
    UpdateGuard,
    UpdateRefused,
    check_applied_origin_order,
    check_origin_order,
)
from ..updates.pending import still_pending
from ..updates.yrs_panics import is_rust_panic
from .peer import Peer
from .presence import Presence, PresenceLimits
from .presence_check import safe_presence
from .presence_claims import ClaimRegistry

log = logging.getLogger(__name__)


class InvalidUpdate(Exception):
    """The peer sent an update pycrdt cannot apply; the document is unchanged."""


class RoomClosed(Exception):
    """The room is unloading; reacquire it from the manager."""


@dataclass
class StoredDocument:
    """A document read back from storage through a fresh guard: what a room starts from."""

    doc: Doc
    guard: UpdateGuard
    log: LogSize = field(default_factory=LogSize)  # with the updates yrs parked as pending


# Reads the document back from storage: what a reload starts from.
Reload = Callable[[], Awaitable[StoredDocument]]


def apply_update(doc: Doc, update: bytes, origin: object) -> None:
    """Apply with an origin; any decoding failure, including a Rust panic, is InvalidUpdate."""
    try:
        with doc.transaction(origin=origin):
            doc.apply_update(update)
    except Exception as exc:
        raise InvalidUpdate(str(exc)) from exc
    except BaseException as exc:
        if not is_rust_panic(exc):
            raise
        raise InvalidUpdate("update caused a decoder panic") from exc


class _AckQueue:
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


_RELOAD_RETRY_FIRST_S = 0.1
_RELOAD_RETRY_MAX_S = 2.0

# Acks held back during a chunked initial sync, at most (beyond, they flow: bounded memory
# matters more than a ``synced`` event that comes early).
_HELD_ACKS = 1024


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
        compact_log_ratio: float = 1.0,
        guard: UpdateGuard | None = None,
        log: LogSize | None = None,
        presence_limits: PresenceLimits | None = None,
        claims: ClaimRegistry | None = None,
        max_message_bytes: int = 1024 * 1024,
        reload: Reload | None = None,
    ) -> None:
        self.name = name
        self._max_message_bytes = max_message_bytes
        self.doc = doc
        self.peers: set[Peer] = set()
        self.presence = Presence(name, metrics, presence_limits, claims)
        self._store = store
        self._hooks = hooks
        self._metrics = metrics
        self._compaction = CompactionPolicy(compact_threshold, compact_log_ratio)
        # Sizes, and updates applied as pending (no fold while one still is). Few attributes:
        # past 28 each room's dict outgrew its shared keys (+1.1 KB per document).
        self._log = log or LogSize()
        self._acks: dict[Peer, _AckQueue] = {}
        self._pending_writes: set[asyncio.Future[Any]] = set()
        self._pending_appends: set[asyncio.Future[int]] = set()  # the updates among those
        self._compacting = False
        # The guard must have seen everything in ``doc`` (RoomManager loads through it).
        self.guard = guard or UpdateGuard(DEFAULT_MAX_NESTING_DEPTH)
        # (peer id, limit) already logged, so a hostile peer costs one log line per limit
        self._refusals_logged: set[tuple[int, str]] = set()
        # peers already asked to resend from our state vector since their last accepted update
        self._resync_asked: set[Peer] = set()
        # While the document is rebuilt from storage (an update failed part-way through yrs):
        # the task, the peers whose updates were turned away meanwhile (asked to resend after),
        # and each peer's latest unanswered state vector (one per peer: bounded by the frame cap).
        self._reload = reload
        self._reloading: asyncio.Future[None] | None = None
        self._resend_after_reload: set[Peer] = set()
        # The reload is for a failed append: every peer may hold (or have built on) the lost
        # update, so all are asked to resend, and the store must be reachable to rebuild.
        self._lost_write = False
        self._step1_after_reload: dict[Peer, bytes] = {}
        self.closing = False
        self.on_empty: Callable[[Room], None] | None = None
        # Server-side direct connections holding the room loaded (RoomManager.hold).
        self.holders = 0
        # The document was deleted (RoomManager.delete): nothing more is applied or stored.
        self.deleted = False

    @property
    def log_entries(self) -> int:
        return self._log.entries

    @property
    def log_size(self) -> LogSize:
        return self._log

    def compaction_due_at_unload(self) -> bool:
        return self._compaction.due_at_unload(self._log)

    @property
    def reloading(self) -> bool:
        """The in-memory document is being rebuilt from storage; it must not be read."""
        return self._reloading is not None

    async def reloaded(self) -> None:
        """Returns once no rebuild from storage is under way."""
        while self._reloading is not None:
            await asyncio.shield(self._reloading)

    @property
    def awareness(self) -> dict[int, AwarenessEntry]:
        return self.presence.entries

    # ---- peers -------------------------------------------------------------------------------

    def attach(self, peer: Peer) -> None:
        """Add a peer and start the handshake: our state vector, then everyone's presence."""
        if self.closing:
            raise RoomClosed(self.name)
        self.peers.add(peer)
        self._acks[peer] = _AckQueue(peer)
        peer.send(peer.sync_header + SyncStep1(self.doc.get_state()).encode())
        if self.presence.entries or self._hooks.remote_presence(self):
            self.send_presence(peer)

    def initial_sync_done(self, peer: Peer) -> None:
        """The chunked initial sync of ``peer`` ended: release the acks it held back."""
        acks = self._acks.get(peer)
        if acks is not None:
            acks.flush()

    def detach(self, peer: Peer) -> None:
        if peer not in self.peers:
            return
        self.peers.discard(peer)
        self._acks.pop(peer, None)
        self._resync_asked.discard(peer)
        self._resend_after_reload.discard(peer)
        self._step1_after_reload.pop(peer, None)
        self._refusals_logged = {k for k in self._refusals_logged if k[0] != peer.peer_id}
        try:
            self._remove_presence(peer)
        finally:
            self._hooks.on_detach(self, peer)
            if not self.peers and self.on_empty is not None:
                self.on_empty(self)

    # ---- sync --------------------------------------------------------------------------------

    def handle_sync(self, peer: Peer, message: SyncMessage) -> None:
        if isinstance(message, SyncStep1):
            # The same question while its answer is still queued: that answer, plus the updates
            # broadcast after it, already tells the peer everything a second one would.
            tag = ("step2", _fingerprint(message.state_vector))
            chunked = peer.initial_sync
            if peer.answer_pending(tag) or (chunked is not None and chunked.holds(peer)):
                self._refuse(peer, "repeated_step1", "step1 repeated while its answer is queued")
                return
            if self._reloading is not None:
                self._step1_after_reload[peer] = (
                    message.state_vector
                )  # answered from the rebuilt doc
                return
            try:
                diff = self.doc.get_update(message.state_vector)
            except Exception as exc:
                raise InvalidUpdate("invalid state vector") from exc
            if chunked is not None and len(diff) > chunked.piece_bytes:
                chunked.start(self, peer, message.state_vector, diff)  # collab.rooms.initial_sync
                return
            peer.send_answer(peer.sync_header + SyncStep2(diff).encode(), tag)
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
        if self._reloading is not None:
            # Not applied (the doc is being replaced); the peer resends once it is back.
            acks.push(done=True, applied=False)
            self._resend_after_reload.add(peer)
            return
        try:
            scan = scan_update(update)
            parents = self.guard.check(scan)
            applied_pairs = check_origin_order(self.doc, scan, self.guard)
        except MalformedUpdate as exc:
            self._refuse_update(peer, "malformed", str(exc))
            raise InvalidUpdate(str(exc)) from exc
        except MissingDependencies as exc:
            # Not hostile in itself (a relay may deliver out of order), so the connection stays;
            # nothing is applied or stored, the ack says so, and the sender is asked once for
            # everything we lack, which a Yjs client answers with one complete update.
            self._refuse_update(peer, exc.limit, str(exc))
            acks.push(done=True, applied=False)
            if peer not in self._resync_asked:
                self._resync_asked.add(peer)
                peer.send(peer.sync_header + SyncStep1(self.doc.get_state()).encode())
            return
        except UpdateRefused as exc:
            self._refuse_update(peer, exc.limit, str(exc))
            raise InvalidUpdate(str(exc)) from exc
        try:
            apply_update(self.doc, update, origin=peer)
        except InvalidUpdate as exc:
            # yrs failed part-way through an update the guard passed, and it does not roll
            # back: part of it may be in the doc. Nothing of it was broadcast or stored, so the
            # store holds exactly what everyone else has; rebuild the doc from there.
            self._refuse_update(peer, "apply_failed", str(exc))
            self._start_reload()
            raise
        if applied_pairs:
            try:
                check_applied_origin_order(self.doc, applied_pairs)
            except UpdateRefused as exc:
                # Applied but not yet broadcast or stored: the store still holds what everyone
                # else has, so the doc is rebuilt from there, as after a failed apply.
                self._refuse_update(peer, exc.limit, str(exc))
                self._start_reload()
                raise InvalidUpdate(str(exc)) from exc
        self.guard.admit(scan, parents)
        self._resync_asked.discard(peer)
        self._metrics.updates.inc()
        self._broadcast_update(update, exclude=peer)
        self._hooks.on_change(self, update, peer)
        entry = acks.push(done=False, applied=False)
        self._persist(update, acks, entry, received=time.perf_counter())

    def _refuse_update(self, peer: Peer, limit: str, reason: str) -> None:
        self._metrics.update_refusals.labels(limit).inc()
        key = (peer.peer_id, limit)
        if key not in self._refusals_logged:
            self._refusals_logged.add(key)
            log.warning("refused an update of %r from peer %d: %s", self.name, peer.peer_id, reason)

    def _start_reload(self, *, lost_write: bool = False) -> None:
        self._lost_write = self._lost_write or lost_write
        if self._reloading is not None:
            return
        if lost_write:
            log.error(
                "an update of %r was not stored; rebuilding it from storage and asking its"
                " editors to resend",
                self.name,
            )
        else:
            log.error(
                "document %r may hold part of a refused update; rebuilding it from storage",
                self.name,
            )
        self._reloading = asyncio.ensure_future(self._reload_from_store())
        # flush() waits for it, so an unload or shutdown compacts the rebuilt doc, never this one.
        self._pending_writes.add(self._reloading)
        self._reloading.add_done_callback(self._pending_writes.discard)

    async def _reload_from_store(self) -> None:
        try:
            # Every update applied before the failure must be in the store first (a compaction
            # meanwhile waits for us, so only the appends are waited for here).
            while self._pending_appends:
                await asyncio.gather(*list(self._pending_appends), return_exceptions=True)
            if self._reload is None:
                raise RuntimeError("this room has no storage to reload from")
            delay = _RELOAD_RETRY_FIRST_S
            while True:
                self._store.resume(self.name)
                try:
                    stored = await self._reload()
                    self.doc, self.guard = stored.doc, stored.guard
                    self._log = stored.log
                    break
                except StorageError:
                    # After a lost write the old doc must not be served on: what builds on
                    # the lost update would be stored without it. Wait for the store.
                    if not self._lost_write or self.closing or self.deleted:
                        raise
                await asyncio.sleep(delay)
                delay = min(delay * 2, _RELOAD_RETRY_MAX_S)
            self._metrics.reloads.inc()
        except Exception:
            # Keep serving what we have rather than nothing; the log says why.
            log.exception("rebuilding %r from storage failed", self.name)
        finally:
            self._reloading = None
        if self._lost_write:
            self._lost_write = False
            self._resend_after_reload |= self.peers
        for peer in [p for p in self._resend_after_reload if p in self.peers]:
            peer.send(peer.sync_header + SyncStep1(self.doc.get_state()).encode())
        self._resend_after_reload.clear()
        asked, self._step1_after_reload = self._step1_after_reload, {}
        for peer, state_vector in asked.items():
            if peer in self.peers:
                try:
                    self.handle_sync(peer, SyncStep1(state_vector))
                except InvalidUpdate:
                    pass  # a malformed state vector: that peer gets no answer, as it would not

    def edit(self, change: Callable[[Doc], None], origin: object) -> asyncio.Future[int]:
        """An edit made by the server itself (e.g. an accepted AI suggestion), in one transaction
        with ``origin``: broadcast to every peer, stored; the future resolves once durable."""
        if self._reloading is not None or self.deleted:
            raise RoomClosed(self.name)  # an edit now would be lost with the doc it went into
        before = self.doc.get_state()
        with self.doc.transaction(origin=origin):
            change(self.doc)
        update = self.doc.get_update(before)
        scan = scan_update(update)
        self.guard.admit(scan, self.guard.check(scan))
        self._broadcast_update(update, exclude=None)
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
        self._log.bytes += len(update)
        self._pending_writes.add(write)
        self._pending_appends.add(write)
        write.add_done_callback(lambda done: self._stored(done, acks, entry, received, update))
        self._hooks.on_store(self, update)
        return write

    def _stored(
        self,
        write: asyncio.Future[int],
        acks: _AckQueue | None,
        entry: list[object] | None,
        received: float,
        update: bytes,
    ) -> None:
        self._pending_writes.discard(write)
        self._pending_appends.discard(write)
        error = write.exception()
        applied = error is None
        if error is not None:
            log.error("could not store an update of %r: %s", self.name, error)
            if not self.deleted and not self.closing:
                # Peers have it (fanned out before the disk) and may build on it; the store
                # fences the document meanwhile (``Store.resume``).
                self._start_reload(lost_write=True)
        else:
            self._log.entries = write.result()
        if entry is not None and acks is not None:
            entry[0], entry[1] = True, applied
            acks.flush()
            self._metrics.ack_seconds.observe(time.perf_counter() - received)
        if applied:
            self._hooks.after_store(self, update)
        if (
            applied
            and not self.deleted
            and self._compaction.due(self._log)
            and self._log.entries >= self._log.retry_at
            and not self._compacting
            and self._reloading is None
        ):
            self._compacting = True
            task = asyncio.ensure_future(self.compact())
            self._pending_writes.add(task)
            task.add_done_callback(self._pending_writes.discard)

    async def compact(self) -> None:
        """Fold the update log into one snapshot (the store does it atomically)."""
        if self._reloading is not None:
            await self._reloading  # the doc in memory may hold a refused update's remains
        if self.deleted:
            return  # a snapshot now would bring the deleted document back
        self._compacting = True
        try:
            if self._log.pending and self._holds_pending():
                self._log.retry_at = self._log.entries + self._compaction.min_entries
                return
            size = self._log
            folded = size.bytes
            snapshot = self.doc.get_update()
            await self._store.compact(self.name, snapshot)
            log.debug(
                "compacted %r: %d log entries (%d bytes) into %d bytes",
                self.name,
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
            log.exception("compaction of %r failed; the log is intact", self.name)
        finally:
            self._compacting = False

    def _holds_pending(self) -> bool:
        """Whether an update yrs parked as pending is still not in the document: a snapshot
        would leave it out, so the log (which has it) must stay until it is."""
        self._log.pending = still_pending(self.doc.get_state(), self._log.pending)
        if self._log.pending:  # once per try: at most every --compact-threshold appends
            log.warning(
                "%r holds %d update(s) whose dependencies never arrived: its log is not"
                " compacted until they do",
                self.name,
                len(self._log.pending),
            )
        return bool(self._log.pending)

    async def flush(self) -> None:
        """Wait until every update received so far is durable."""
        while self._pending_writes:
            await asyncio.gather(*list(self._pending_writes), return_exceptions=True)

    # ---- presence ----------------------------------------------------------------------------

    def handle_awareness(self, peer: Peer, payload: bytes) -> None:
        payload = safe_presence(payload, self._metrics)  # hex colours, bounded names: item 12
        body = self.presence.receive(peer, payload)
        if body is not None:
            # Echo to the sender too: y-websocket clients treat silence as a dead connection.
            self._broadcast(body, exclude=None, sync=False)
            self._hooks.on_presence(self, body)

    def send_presence(self, peer: Peer) -> None:
        """Everyone's presence to one peer (a QueryAwareness, or joining); coalesced like step1."""
        if peer.answer_pending(_PRESENCE_SNAPSHOT):
            self._refuse(peer, "repeated_query_awareness", "presence asked while one is queued")
            return
        peer.send_answer(peer.awareness_header + self.awareness_snapshot(), _PRESENCE_SNAPSHOT)

    def awareness_snapshot(self) -> bytes:
        remote = self._hooks.remote_presence(self)  # e.g. other nodes' editors
        if not remote:
            return self.presence.snapshot()
        entries = [*self.presence.entries.values(), *remote]
        return write_var_uint8_array(encode_awareness(entries))

    def broadcast_presence(self, body: bytes) -> None:
        """Another node's presence body, to every peer here."""
        self._broadcast(body, exclude=None, sync=False)

    def apply_remote(self, update: bytes, origin: object, *, in_order: bool = False) -> bool:
        """An update another node committed: applied and sent to every peer here, not stored
        (it is). False if its dependencies are missing here (the caller backfills first);
        ``in_order`` (everything numbered before it is applied) parks it as pending instead,
        as a load does: what it lacks was never committed, and waiting would wait forever."""
        try:
            scan = scan_update(update)
            parents = self.guard.check(scan)
        except MissingDependencies:
            if not in_order:
                return False
            log.warning("a committed update of %r lacks dependencies: pending", self.name)
            apply_update(self.doc, update, origin=origin)
            self._log.pending.append(update)
            self._broadcast(SyncUpdate(update).encode(), exclude=None, sync=True)
            return True
        except (MalformedUpdate, UpdateRefused) as exc:
            # Another node's guard admitted it; ours must not loop on it.
            log.error("skipped a committed update of %r from another node: %s", self.name, exc)
            return True
        apply_update(self.doc, update, origin=origin)
        self.guard.admit(scan, parents)
        self._broadcast(SyncUpdate(update).encode(), exclude=None, sync=True)
        self._hooks.on_change(self, update, origin)
        return True

    def _remove_presence(self, peer: Peer) -> None:
        body = self.presence.remove_peer(peer)
        if body is not None:
            self._broadcast(body, exclude=None, sync=False)
            self._hooks.on_presence(self, body)

    def _refuse(self, peer: Peer, limit: str, detail: str) -> None:
        refuse(
            self._metrics,
            limit,
            peer.refusals_logged,
            peer.label,
            f"{detail} on {self.name[:64]!r}",
        )

    # ---- fan-out -----------------------------------------------------------------------------

    def _broadcast_update(self, update: bytes, *, exclude: Peer | None) -> None:
        """An update larger than the outgoing message cap goes out as several valid updates
        (protocol.update_split), so no proxy with a message cap drops it."""
        for piece in split_update(update, self._max_message_bytes):
            self._broadcast(SyncUpdate(piece).encode(), exclude=exclude, sync=True)

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


_PRESENCE_SNAPSHOT = "presence"


def _fingerprint(state_vector: bytes) -> bytes:
    # A digest, not the vector: a tag lives as long as its answer is queued, and a state vector
    # may be megabytes.
    return hashlib.blake2b(state_vector, digest_size=16).digest()

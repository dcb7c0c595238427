"""One loaded document: its pycrdt Doc, the peers attached to it, presence, and durable acks.

Knows nothing of sockets or frames' envelopes (peers add their own headers) and nothing of
which storage backend it writes to. The sync path here is: decode once (done by the caller),
apply once, encode the outgoing body once, put it on every other peer's queue without awaiting,
then acknowledge after the store says the update is durable. The writes, acks and folds are
``collab.rooms.durability``'s; the rebuild from storage after a failed update is
``collab.rooms.reload``'s.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
import weakref
from collections.abc import Callable, Iterable

from pycrdt import Doc

from tether.protocol.updates.update_merge import scan_merged
from tether.protocol.updates.update_order import MIN_CLIENTS, in_dependency_order
from tether.protocol.updates.update_scan import MalformedUpdate, scan_update
from tether.protocol.updates.update_split import split_update
from tether.protocol.wire.lib0 import write_var_uint8_array
from tether.protocol.wire.sync_payloads import (
    EMPTY_UPDATE,
    AwarenessEntry,
    SyncMessage,
    SyncStep1,
    SyncStep2,
    SyncUpdate,
    encode_awareness,
)

from ..hooks import Hooks
from ..runtime import pools
from ..runtime.gc_hold import full_collections_held
from ..runtime.limits import refuse
from ..runtime.metrics import Metrics
from ..storage.compaction import LogSize
from ..storage.store import Store
from ..updates.guard import (
    MissingDependencies,
    Spend,
    UpdateGuard,
    UpdateRefused,
    check_applied_origin_order,
    check_origin_order,
)
from ..updates.reading import ReadUpdate, read_update
from ..updates.slicing import SlicedUpdate, slice_update, wants_slices
from ..updates.yrs_panics import is_rust_panic
from .durability import AckQueue, Durability
from .peer import Peer
from .presence import Presence
from .presence_check import safe_presence
from .presence_claims import ClaimRegistry
from .reload import ReadStored, Reload, StoredDocument
from .settings import RoomSettings

log = logging.getLogger(__name__)

# The slices of every room take turns, one at a time, each followed by a turn of the loop of at
# least this long: with five big imports applying at once, the loop waited out a slice per room,
# back to back, between its other work; now one. Measured (six 64 KiB Markdown imports, /health
# every 10 ms, medians of 4): p99 60 -> 33 ms, max 74 -> 52 ms.
_BETWEEN_SLICES_S = 0.001
_SLICE_TURNS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
    weakref.WeakKeyDictionary()
)


def _slice_turns() -> asyncio.Lock:
    """This event loop's turnstile for slices (a process serves from one; tests run many)."""
    loop = asyncio.get_running_loop()
    turns = _SLICE_TURNS.get(loop)
    if turns is None:
        turns = _SLICE_TURNS[loop] = asyncio.Lock()
    return turns


class InvalidUpdate(Exception):
    """The peer sent an update pycrdt cannot apply; the document is unchanged."""


class RoomClosed(Exception):
    """The room is unloading; reacquire it from the manager."""


def apply_update(
    doc: Doc, update: bytes, origin: object, layers: list[bytes] | None = None
) -> None:
    """Apply with an origin; any decoding failure, including a Rust panic, is InvalidUpdate.
    An update of many clients goes in as ``layers`` in dependency order, in one transaction
    (protocol.updates.update_order: yrs' pending set is quadratic in them); given, or cut here."""
    if layers is None:
        try:
            layers = in_dependency_order(update)
        except Exception:
            layers = None  # not readable as layers: yrs judges it whole, as it always did
    try:
        with doc.transaction(origin=origin):
            if layers is None:
                doc.apply_update(update)
            else:
                for layer in layers:
                    doc.apply_update(layer)
    except Exception as exc:
        raise InvalidUpdate(str(exc)) from exc
    except BaseException as exc:
        if not is_rust_panic(exc):
            raise
        raise InvalidUpdate("update caused a decoder panic") from exc


class Room:
    def __init__(
        self,
        name: str,
        doc: Doc,
        store: Store,
        *,
        hooks: Hooks,
        metrics: Metrics,
        settings: RoomSettings,
        guard: UpdateGuard | None = None,
        log: LogSize | None = None,
        claims: ClaimRegistry | None = None,
        reload: ReadStored | None = None,
    ) -> None:
        self.name = name
        self.settings = settings
        self.doc = doc
        self.peers: set[Peer] = set()
        self.presence = Presence(name, metrics, settings.presence, claims, authored=self._authored)
        self._hooks = hooks
        self._metrics = metrics
        self._acks: dict[Peer, AckQueue] = {}
        # The path to disk and the rebuild from it, each an object of its own (and few attributes
        # here: past 28 each room's dict outgrew its shared keys, +1.1 KB per document).
        self._durability = Durability(
            self, store, hooks, metrics, settings.compaction, log or LogSize()
        )
        self._reload = Reload(self, self._durability, store, metrics, reload)
        # The guard must have seen everything in ``doc`` (RoomManager loads through it).
        self.guard = guard or settings.new_guard()
        # (peer id, limit) already logged, so a hostile peer costs one log line per limit
        self._refusals_logged: set[tuple[int, str]] = set()
        # peers already asked to resend from our state vector since their last accepted update
        self._resync_asked: set[Peer] = set()
        self.closing = False
        self.on_empty: Callable[[Room], None] | None = None
        # Server-side direct connections holding the room loaded (RoomManager.hold).
        self.holders = 0
        # The document was deleted (RoomManager.delete): nothing more is applied or stored.
        self.deleted = False
        # The whole document encoded, shared by the chunked initial syncs of new editors while
        # it is unchanged (``diff_for``); dropped on every change and when those syncs end.
        self._full_state: bytes | None = None

    def _authored(self, client_id: int) -> bool:
        """Whether ``client_id`` has written to this document (presence asks, for readers)."""
        return client_id in self.guard.known_clocks

    @property
    def awareness(self) -> dict[int, AwarenessEntry]:
        return self.presence.entries

    # ---- peers -------------------------------------------------------------------------------

    def attach(self, peer: Peer) -> None:
        """Add a peer and start the handshake: our state vector, then everyone's presence."""
        if self.closing:
            raise RoomClosed(self.name)
        self.peers.add(peer)
        self._acks[peer] = AckQueue(peer)
        peer.send(peer.sync_header + SyncStep1(self.doc.get_state()).encode())
        if self.presence.entries or self._hooks.remote_presence(self):
            self.send_presence(peer)

    def initial_sync_done(self, peer: Peer) -> None:
        """The chunked initial sync of ``peer`` ended: release the acks it held back."""
        acks = self._acks.get(peer)
        if acks is not None:
            acks.flush()
        if self._full_state is not None and not any(
            p.initial_sync is not None and p is not peer and p.initial_sync.holds(p)
            for p in self.peers
        ):
            self._full_state = None  # nobody else is sending it: not kept beside the document

    def diff_for(self, state_vector: bytes) -> bytes:
        """What ``state_vector`` lacks of the document. The whole document (an empty state
        vector: a new editor) is encoded once while it is unchanged, however many ask at once;
        a malformed state vector raises ``InvalidUpdate``."""
        if state_vector == b"\x00":
            if self._full_state is None:
                self._full_state = self.doc.get_update()
            return self._full_state
        try:
            return self.doc.get_update(state_vector)
        except Exception as exc:
            raise InvalidUpdate("invalid state vector") from exc

    def detach(self, peer: Peer) -> None:
        if peer not in self.peers:
            return
        self.peers.discard(peer)
        self._acks.pop(peer, None)
        self._resync_asked.discard(peer)
        self._reload.forget(peer)
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
            if self._reload.running is not None:
                self._reload.answer_after(peer, message.state_vector)
                return
            diff = self.diff_for(message.state_vector)
            if chunked is not None and len(diff) > chunked.piece_bytes:
                chunked.start(self, peer, message.state_vector, diff)  # collab.rooms.initial_sync
                return
            if diff is self._full_state:
                self._full_state = None  # small: nobody sends it in pieces, so not kept
            peer.send_answer(peer.sync_header + SyncStep2(diff).encode(), tag)
            return
        self.receive_update(peer, message.update)

    async def receive_update_off_loop(self, peer: Peer, update: bytes) -> None:
        """``receive_update`` for a big update, read (scanned, runs merged) in a worker thread
        first, and cut there into the pieces it is broadcast as when it is over the outgoing
        message cap (cutting is Python per struct: 1.5 s of a 1.8 MB update's 3 s on the loop);
        the caller awaits it before the peer's next frame, so its updates keep order. One of
        many structs is applied in slices (``collab.updates.slicing``)."""
        with full_collections_held():  # its objects would make each full pass long
            await self._receive_off_loop(peer, update)

    async def _receive_off_loop(self, peer: Peer, update: bytes) -> None:
        pieces: list[bytes] | None = None
        layers: list[bytes] | None = None
        try:
            updates = pools.current().updates  # the socket's own: never behind imports
            read: ReadUpdate | MalformedUpdate = await read_update(update, updates)
            cap = self.settings.max_message_bytes
            if len(read[0]) > cap:
                pieces = await updates.run(broadcast_pieces, read[0], cap)
            if wants_slices(*read):
                sliced = await updates.run(slice_update, *read)
                await self._receive_sliced(peer, read[0], sliced, pieces)
                return
            if len(read[1].starts) >= MIN_CLIENTS:  # many clients: ordered here, not there
                layers = await updates.run(in_dependency_order, read[0])
        except MalformedUpdate as exc:
            read = exc
        self.receive_update(peer, update, read, pieces, layers)

    async def _receive_sliced(
        self, peer: Peer, update: bytes, sliced: SlicedUpdate | None, pieces: list[bytes] | None
    ) -> None:
        """An update of many structs, applied slice by slice with the room held (updates and
        state vectors turned away, as during a rebuild), the loop free between slices; then
        broadcast, stored and acked whole, as any other. The work runs to its end even if the
        sender goes away meanwhile: stopping halfway would leave part of it in the document."""
        acks = self._acks.get(peer)
        if acks is None or self._turned_back(peer, acks):
            return
        if sliced is None:
            self._refuse_update(peer, "malformed", "its structs cannot be put in order")
            raise InvalidUpdate("update refused: its structs cannot be put in any order")
        missing = self.guard.lacking(sliced.needs)
        if missing is not None:
            self._missing_dependencies(peer, acks, missing)
            return
        try:
            await self._apply_sliced(update, sliced, peer, pieces)
        except UpdateRefused as exc:
            self._refuse_update(peer, exc.limit, str(exc))
            raise InvalidUpdate(str(exc)) from exc
        except InvalidUpdate as exc:
            self._refuse_update(peer, "apply_failed", str(exc))
            raise

    async def import_sliced(
        self,
        update: bytes,
        sliced: SlicedUpdate,
        origin: object,
        pieces: list[bytes] | None = None,
    ) -> int:
        """An update of many structs made by the server itself (a REST import), applied in
        slices as a peer's is; raises ``RoomClosed``, ``UpdateRefused`` or ``InvalidUpdate``
        (nothing of it kept), else returns once it is durable, as ``edit`` does. ``pieces``:
        the update already cut for the broadcast (``broadcast_pieces``, in a worker thread), if
        it is over the outgoing message cap; cut on the loop it held it 0.3-0.5 s at 1.7 MB."""
        if self._reload.running is not None or self.deleted:
            raise RoomClosed(self.name)
        missing = self.guard.lacking(sliced.needs)
        if missing is not None:
            raise missing
        return await (await self._apply_sliced(update, sliced, origin, pieces))

    async def _apply_sliced(
        self,
        update: bytes,
        sliced: SlicedUpdate,
        origin: object,
        pieces: list[bytes] | None,
    ) -> asyncio.Future[int]:
        """Hold the room, apply the slices, then broadcast, store and ack ``update`` whole, as
        any other (to every peer but the sender, if ``origin`` is one). The work runs to its end
        even if the sender goes away meanwhile: stopping halfway would leave part of the update
        in the document. Returns the store's future, as ``edit`` does."""
        self._full_state = None
        self._reload.hold()
        work = self._apply_then_store(update, sliced, origin, pieces)
        return await asyncio.shield(asyncio.ensure_future(work))

    async def _apply_then_store(
        self,
        update: bytes,
        sliced: SlicedUpdate,
        origin: object,
        pieces: list[bytes] | None,
    ) -> asyncio.Future[int]:
        await self._apply_each_slice(origin, sliced)
        sender = origin if isinstance(origin, Peer) else None
        acks = None
        if sender is not None:
            acks = self._acks.get(sender)  # None once it has gone: nobody to ack
            self._resync_asked.discard(sender)
            self._metrics.updates.inc()
        self._broadcast_update(update, exclude=sender, pieces=pieces)
        self._hooks.on_change(self, update, origin)
        written = self._durability.persist(update, acks, time.perf_counter())
        self._reload.release()
        return written

    async def _apply_each_slice(self, origin: object, sliced: SlicedUpdate) -> None:
        """Each slice checked, applied and admitted as an update of its own, the loop free
        between them. One refused after others were applied leaves part of the update in the
        document, which is then rebuilt from storage (nothing of it was broadcast or stored).
        The budgets meant per update (cuts, walks) are shared by its slices: ``spent``. Rooms
        take turns (``_slice_turns``): a slice, then the loop's turn, then the next room's."""
        applied = False
        spent = Spend()
        turns = _slice_turns()
        try:
            for piece, scan in sliced.slices:
                async with turns:
                    parents = self.guard.check(scan, spent=spent)
                    pairs = check_origin_order(self.doc, scan, self.guard, spent)
                    applied = True
                    apply_update(self.doc, piece, origin=origin, layers=[piece])  # in order
                    if pairs:
                        check_applied_origin_order(self.doc, pairs)
                    self.guard.admit(scan, parents)
                    # Held meanwhile: the loop's turn, timers too, before any room's next slice.
                    await asyncio.sleep(_BETWEEN_SLICES_S)
        except BaseException:
            self._reload.release(resync=not applied)
            if applied:
                self.rebuild()
            raise

    def receive_update(
        self,
        peer: Peer,
        update: bytes,
        read: ReadUpdate | MalformedUpdate | None = None,
        pieces: list[bytes] | None = None,
        layers: list[bytes] | None = None,
    ) -> None:
        acks = self._acks.get(peer)
        if acks is None:
            return
        if update == EMPTY_UPDATE:
            acks.push(done=True, applied=True)  # nothing to store; ack keeps its place in line
            return
        if self._turned_back(peer, acks):
            return
        try:
            # A run of items the client's own encoder would have sent as one is merged first:
            # yrs merges it in O(run²). What is applied is what is stored and broadcast.
            update, scan = _read(update, read)
            parents = self.guard.check(scan)
            applied_pairs = check_origin_order(self.doc, scan, self.guard)
        except MalformedUpdate as exc:
            self._refuse_update(peer, "malformed", str(exc))
            raise InvalidUpdate(str(exc)) from exc
        except MissingDependencies as exc:
            self._missing_dependencies(peer, acks, exc)
            return
        except UpdateRefused as exc:
            self._refuse_update(peer, exc.limit, str(exc))
            raise InvalidUpdate(str(exc)) from exc
        self._full_state = None
        try:
            apply_update(self.doc, update, origin=peer, layers=layers)
        except InvalidUpdate as exc:
            # yrs failed part-way through an update the guard passed, and it does not roll
            # back: part of it may be in the doc. Nothing of it was broadcast or stored, so the
            # store holds exactly what everyone else has; rebuild the doc from there.
            self._refuse_update(peer, "apply_failed", str(exc))
            self.rebuild()
            raise
        if applied_pairs:
            try:
                check_applied_origin_order(self.doc, applied_pairs)
            except UpdateRefused as exc:
                # Applied but not yet broadcast or stored: the store still holds what everyone
                # else has, so the doc is rebuilt from there, as after a failed apply.
                self._refuse_update(peer, exc.limit, str(exc))
                self.rebuild()
                raise InvalidUpdate(str(exc)) from exc
        self.guard.admit(scan, parents)
        self._resync_asked.discard(peer)
        self._metrics.updates.inc()
        self._broadcast_update(update, exclude=peer, pieces=pieces)
        self._hooks.on_change(self, update, peer)
        self._durability.persist(update, acks, time.perf_counter())

    def _turned_back(self, peer: Peer, acks: AckQueue) -> bool:
        """Whether ``peer``'s update is answered "not applied" before it is read: a readonly
        peer's, or any while the document is rebuilt or held (the peer resends after)."""
        if not peer.writable:
            self._metrics.rejected_updates.inc()
            acks.push(done=True, applied=False)
            return True
        if self._reload.running is not None:
            acks.push(done=True, applied=False)
            self._reload.turned_away(peer)
            return True
        return False

    def _missing_dependencies(self, peer: Peer, acks: AckQueue, exc: MissingDependencies) -> None:
        # Not hostile in itself (a relay may deliver out of order), so the connection stays;
        # nothing is applied or stored, the ack says so, and the sender is asked once for
        # everything we lack, which a Yjs client answers with one complete update.
        self._refuse_update(peer, exc.limit, str(exc))
        acks.push(done=True, applied=False)
        if peer not in self._resync_asked:
            self._resync_asked.add(peer)
            peer.send(peer.sync_header + SyncStep1(self.doc.get_state()).encode())

    def _refuse_update(self, peer: Peer, limit: str, reason: str) -> None:
        self._metrics.update_refusals.labels(limit).inc()
        key = (peer.peer_id, limit)
        if key not in self._refusals_logged:
            self._refusals_logged.add(key)
            log.warning("refused an update of %r from peer %d: %s", self.name, peer.peer_id, reason)

    def edit(self, change: Callable[[Doc], None], origin: object) -> asyncio.Future[int]:
        """An edit made by the server itself (e.g. an accepted AI suggestion), in one transaction
        with ``origin``: broadcast to every peer, stored; the future resolves once durable."""
        if self._reload.running is not None or self.deleted:
            raise RoomClosed(self.name)  # an edit now would be lost with the doc it went into
        before = self.doc.get_state()
        self._full_state = None
        with self.doc.transaction(origin=origin):
            change(self.doc)
        update = self.doc.get_update(before)
        scan = scan_update(update)
        self.guard.admit(scan, self.guard.check(scan))
        self._broadcast_update(update, exclude=None)
        self._hooks.on_change(self, update, origin)
        return self._durability.persist(update, None, time.perf_counter())

    def apply_remote(self, update: bytes, origin: object, *, in_order: bool = False) -> bool:
        """An update another node committed: applied and sent to every peer here, not stored
        (it is). False if its dependencies are missing here (the caller backfills first);
        ``in_order`` (everything numbered before it is applied) parks it as pending instead,
        as a load does: what it lacks was never committed, and waiting would wait forever."""
        try:
            update, scan = scan_merged(update)  # another node merged it; a no-op then
            parents = self.guard.check(scan)
        except MissingDependencies:
            if not in_order:
                return False
            log.warning("a committed update of %r lacks dependencies: pending", self.name)
            self._full_state = None
            apply_update(self.doc, update, origin=origin)
            self._durability.keep_pending(update)
            self._broadcast(SyncUpdate(update).encode(), exclude=None, sync=True)
            return True
        except (MalformedUpdate, UpdateRefused) as exc:
            # Another node's guard admitted it; ours must not loop on it.
            log.error("skipped a committed update of %r from another node: %s", self.name, exc)
            return True
        self._full_state = None
        apply_update(self.doc, update, origin=origin)
        self.guard.admit(scan, parents)
        self._broadcast(SyncUpdate(update).encode(), exclude=None, sync=True)
        self._hooks.on_change(self, update, origin)
        return True

    # ---- storage: durable writes and rebuilds (collab.rooms.durability, .reload) -------------

    async def flush(self) -> None:
        """Wait until every update received so far is durable."""
        await self._durability.flush()

    async def compact(self) -> None:
        """Fold the update log into one snapshot (the store does it atomically)."""
        await self._durability.compact()

    def compaction_due_at_unload(self) -> bool:
        return self._durability.due_at_unload()

    @property
    def log_entries(self) -> int:
        return self._durability.log.entries

    @property
    def log_size(self) -> LogSize:
        return self._durability.log

    @property
    def holds_pending(self) -> bool:
        """Whether an update was applied as pending (another node's, or a stored one from
        before the guard): yrs integrates it later, inside some other update, so what an update
        changed cannot be told from that update alone while this holds."""
        return bool(self._durability.log.pending)

    @property
    def reloading(self) -> bool:
        """The in-memory document is being rebuilt from storage; it must not be read."""
        return self._reload.running is not None

    async def reloaded(self) -> None:
        """Returns once no rebuild from storage is under way."""
        await self._reload.wait()

    def rebuild(self, *, lost_write: bool = False) -> None:
        """Rebuild the document from storage: an update failed part-way through yrs, which does
        not roll back, or (``lost_write``) the store lost an update that peers already have."""
        self._reload.start(lost_write=lost_write)

    def replace_document(self, stored: StoredDocument) -> None:
        """The rebuilt document takes this one's place (collab.rooms.reload)."""
        self._full_state = None
        self.doc, self.guard = stored.doc, stored.guard
        self._durability.log = stored.log

    def resync(self, resend: Iterable[Peer], asked: dict[Peer, bytes]) -> None:
        """After a rebuild: ask ``resend`` for what we may lack, and answer the state vectors
        ``asked`` meanwhile from the rebuilt document."""
        for peer in [p for p in resend if p in self.peers]:
            peer.send(peer.sync_header + SyncStep1(self.doc.get_state()).encode())
        for peer, state_vector in asked.items():
            if peer in self.peers:
                try:
                    self.handle_sync(peer, SyncStep1(state_vector))
                except InvalidUpdate:
                    pass  # a malformed state vector: that peer gets no answer, as it would not

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

    def _broadcast_update(
        self, update: bytes, *, exclude: Peer | None, pieces: list[bytes] | None = None
    ) -> None:
        """An update larger than the outgoing message cap goes out as several valid updates
        (protocol.updates.update_split, or ``pieces`` already cut), so no proxy with a message cap
        drops it."""
        if pieces is None:
            pieces = list(split_update(update, self.settings.max_message_bytes))
        for piece in pieces:
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


def broadcast_pieces(update: bytes, cap: int) -> list[bytes] | None:
    """``update`` cut into updates of at most ``cap`` bytes, or None if it cannot be (then the
    broadcast cuts it, and fails, as it would have)."""
    try:
        return list(split_update(update, cap))
    except Exception:
        return None


def _read(update: bytes, read: ReadUpdate | MalformedUpdate | None) -> ReadUpdate:
    """The update as read off the loop (``read``), or read here."""
    if read is None:
        return scan_merged(update)
    if isinstance(read, MalformedUpdate):
        raise read
    return read


def _fingerprint(state_vector: bytes) -> bytes:
    # A digest, not the vector: a tag lives as long as its answer is queued, and a state vector
    # may be megabytes.
    return hashlib.blake2b(state_vector, digest_size=16).digest()

"""One loaded document: its pycrdt Doc, the peers attached to it, presence, and durable acks.

Knows nothing of sockets or frames' envelopes (peers add their own headers) and nothing of
which storage backend it writes to. The sync path here is: decode once (done by the caller),
apply once, encode the outgoing body once, put it on every other peer's queue without awaiting,
then acknowledge after the store says the update is durable. Peers' updates (their acks,
refusals, slices) are ``collab.rooms.peer_updates``'s, the sends ``collab.rooms.fanout``'s, the
writes and folds ``collab.rooms.durability``'s, the rebuild from storage ``collab.rooms.reload``'s.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable, Iterable

from pycrdt import Doc

from tether.protocol.updates.update_merge import scan_merged
from tether.protocol.updates.update_scan import MalformedUpdate, scan_update
from tether.protocol.wire.lib0 import write_var_uint8_array
from tether.protocol.wire.sync_payloads import (
    AwarenessEntry,
    SyncMessage,
    SyncStep1,
    SyncStep2,
    SyncUpdate,
    encode_awareness,
)

from ..hooks import Hooks
from ..runtime.limits import refuse
from ..runtime.sync_metrics import Metrics
from ..storage.compaction import LogSize
from ..storage.store import Store
from ..updates.applying import InvalidUpdate, apply_update  # InvalidUpdate: also still from here
from ..updates.guard import MissingDependencies, UpdateGuard, UpdateRefused
from ..updates.slicing import SlicedUpdate
from ..updates.update_reads import ReadUpdate
from .durability import AckQueue, Durability
from .fanout import FanOut
from .peer_updates import PeerUpdates
from .presence_check import safe_presence
from .presence_claims import ClaimRegistry
from .reload import ReadStored, Reload, StoredDocument
from .room_peer import Peer
from .room_presence import Presence
from .room_settings import RoomSettings

log = logging.getLogger(__name__)


class RoomClosed(Exception):
    """The room is unloading; reacquire it from the manager."""


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
        self._fanout = FanOut(self.peers, metrics, settings.max_message_bytes)
        self.presence = Presence(name, metrics, settings.presence, claims, authored=self._authored)
        self._hooks = hooks
        self._metrics = metrics
        # The path to disk and the rebuild from it, each an object of its own (and few attributes
        # here: past 28 each room's dict outgrew its shared keys, +1.1 KB per document).
        self._durability = Durability(
            self, store, hooks, metrics, settings.compaction, log or LogSize()
        )
        self._reload = Reload(self, self._durability, store, metrics, reload)
        # Peers' updates: their acks, refusals and resends (collab.rooms.peer_updates).
        self._updates = PeerUpdates(self, self._reload, metrics, settings.max_message_bytes)
        # The guard must have seen everything in ``doc`` (RoomManager loads through it).
        self.guard = guard or settings.new_guard()
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
        self._updates.attach(peer)
        peer.send(peer.sync_header + SyncStep1(self.doc.get_state()).encode())
        if self.presence.entries or self._hooks.remote_presence(self):
            self.send_presence(peer)

    def initial_sync_done(self, peer: Peer) -> None:
        """The chunked initial sync of ``peer`` ended: release the acks it held back."""
        self._updates.release_acks(peer)
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
        self._updates.detach(peer)
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
        many structs is applied in slices (``collab.updates.sliced_apply``)."""
        await self._updates.receive_off_loop(peer, update)

    def receive_update(
        self,
        peer: Peer,
        update: bytes,
        read: ReadUpdate | MalformedUpdate | None = None,
        pieces: list[bytes] | None = None,
        layers: list[bytes] | None = None,
    ) -> None:
        """A peer's update: acked in its turn, turned back, refused or applied
        (``collab.rooms.peer_updates``)."""
        self._updates.receive(peer, update, read, pieces, layers)

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
        return await (await self._updates.apply_sliced(update, sliced, origin, pieces))

    def hold(self) -> None:
        """Turn updates, state vectors, joiners, readers and folds away while a big update goes
        in slices (``collab.updates.sliced_apply``), as a rebuild does."""
        self._reload.hold()

    def release(self, *, resync: bool = True) -> None:
        """End ``hold`` (``Reload.release``)."""
        self._reload.release(resync=resync)

    def changing(self) -> None:
        """The document is about to change: its encoded whole (``diff_for``) is dropped."""
        self._full_state = None

    def publish(
        self,
        update: bytes,
        origin: object,
        *,
        exclude: Peer | None,
        acks: AckQueue | None,
        pieces: list[bytes] | None = None,
    ) -> asyncio.Future[int]:
        """``update`` was applied: to every peer but ``exclude``, to the hooks, then to the store
        (``acks`` answered once it is durable); returns the store's future."""
        self._fanout.update(update, exclude=exclude, pieces=pieces)
        self._hooks.on_change(self, update, origin)
        return self._durability.persist(update, acks, time.perf_counter())

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
        return self.publish(update, origin, exclude=None, acks=None)

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
            self._fanout.send(SyncUpdate(update).encode(), exclude=None, sync=True)
            return True
        except (MalformedUpdate, UpdateRefused) as exc:
            # Another node's guard admitted it; ours must not loop on it.
            log.error("skipped a committed update of %r from another node: %s", self.name, exc)
            return True
        self._full_state = None
        apply_update(self.doc, update, origin=origin)
        self.guard.admit(scan, parents)
        self._fanout.send(SyncUpdate(update).encode(), exclude=None, sync=True)
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
            self._fanout.send(body, exclude=None, sync=False)
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
        self._fanout.send(body, exclude=None, sync=False)

    def _remove_presence(self, peer: Peer) -> None:
        body = self.presence.remove_peer(peer)
        if body is not None:
            self._fanout.send(body, exclude=None, sync=False)
            self._hooks.on_presence(self, body)

    def _refuse(self, peer: Peer, limit: str, detail: str) -> None:
        refuse(
            self._metrics,
            limit,
            peer.refusals_logged,
            peer.label,
            f"{detail} on {self.name[:64]!r}",
        )


_PRESENCE_SNAPSHOT = "presence"


def _fingerprint(state_vector: bytes) -> bytes:
    # A digest, not the vector: a tag lives as long as its answer is queued, and a state vector
    # may be megabytes.
    return hashlib.blake2b(state_vector, digest_size=16).digest()

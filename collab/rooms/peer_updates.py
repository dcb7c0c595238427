"""A room's peers' updates: each answered in the order it arrived (acks), turned back, refused or
applied (whole, or in slices when big), and what is applied handed to the room to broadcast and
store. Knows nothing of sockets, fan-out or storage: what it asks of its room is
``UpdatesRoom``.

A refusal is counted every time and logged once per peer and limit, so a hostile peer costs one
log line per limit. An update that builds on history the document lacks is not hostile in
itself (a relay may deliver out of order): its sender is asked once for everything we lack.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from tether.protocol.updates.update_merge import scan_merged
from tether.protocol.updates.update_order import MIN_CLIENTS, in_dependency_order
from tether.protocol.updates.update_scan import MalformedUpdate
from tether.protocol.wire.sync_payloads import EMPTY_UPDATE, SyncStep1

from ..runtime import pools
from ..runtime.gc_hold import full_collections_held
from ..runtime.sync_metrics import Metrics
from ..updates.applying import InvalidUpdate, apply_update
from ..updates.guard import (
    MissingDependencies,
    UpdateRefused,
    check_applied_origin_order,
    check_origin_order,
)
from ..updates.sliced_apply import SliceTarget, apply_sliced
from ..updates.slicing import SlicedUpdate, broadcast_pieces, slice_update, wants_slices
from ..updates.update_reads import ReadUpdate, read_update
from .durability import AckQueue
from .reload import Reload
from .room_peer import Peer

log = logging.getLogger(__name__)


class UpdatesRoom(SliceTarget, Protocol):
    """What a room's peers' updates ask of the room (besides ``SliceTarget``'s document, guard,
    hold and rebuild)."""

    @property
    def name(self) -> str: ...

    def changing(self) -> None:
        """The document is about to change: what is kept encoded of it is dropped."""

    def publish(
        self,
        update: bytes,
        origin: object,
        *,
        exclude: Peer | None,
        acks: AckQueue | None,
        pieces: list[bytes] | None = None,
    ) -> asyncio.Future[int]:
        """``update`` was applied: to every peer but ``exclude``, to the hooks, to the store."""
        ...


class PeerUpdates:
    """One room's peers' updates: their acks, refusals and the resends asked of them."""

    __slots__ = (
        "_acks",
        "_cap",
        "_metrics",
        "_refusals_logged",
        "_reload",
        "_resync_asked",
        "_room",
    )

    def __init__(self, room: UpdatesRoom, reload: Reload, metrics: Metrics, cap: int) -> None:
        self._room = room
        self._reload = reload
        self._metrics = metrics
        self._cap = cap  # the outgoing message cap: a bigger update is broadcast in pieces
        self._acks: dict[Peer, AckQueue] = {}
        # (peer id, limit) already logged, so a hostile peer costs one log line per limit
        self._refusals_logged: set[tuple[int, str]] = set()
        # peers already asked to resend from our state vector since their last accepted update
        self._resync_asked: set[Peer] = set()

    def attach(self, peer: Peer) -> None:
        self._acks[peer] = AckQueue(peer)

    def release_acks(self, peer: Peer) -> None:
        """The acks ``peer``'s chunked initial sync held back go out."""
        acks = self._acks.get(peer)
        if acks is not None:
            acks.flush()

    def detach(self, peer: Peer) -> None:
        self._acks.pop(peer, None)
        self._resync_asked.discard(peer)
        self._reload.forget(peer)
        self._refusals_logged = {k for k in self._refusals_logged if k[0] != peer.peer_id}

    async def receive_off_loop(self, peer: Peer, update: bytes) -> None:
        """``receive`` for a big update, read off the loop first (``Room.receive_update_off_loop``
        says how)."""
        with full_collections_held():  # its objects would make each full pass long
            await self._receive_off_loop(peer, update)

    async def _receive_off_loop(self, peer: Peer, update: bytes) -> None:
        pieces: list[bytes] | None = None
        layers: list[bytes] | None = None
        try:
            updates = pools.current().updates  # the socket's own: never behind imports
            read: ReadUpdate | MalformedUpdate = await read_update(update, updates)
            cap = self._cap
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
        self.receive(peer, update, read, pieces, layers)

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
        missing = self._room.guard.lacking(sliced.needs)
        if missing is not None:
            self._missing_dependencies(peer, acks, missing)
            return
        try:
            await self.apply_sliced(update, sliced, peer, pieces)
        except UpdateRefused as exc:
            self._refuse_update(peer, exc.limit, str(exc))
            raise InvalidUpdate(str(exc)) from exc
        except InvalidUpdate as exc:
            self._refuse_update(peer, "apply_failed", str(exc))
            raise

    async def apply_sliced(
        self,
        update: bytes,
        sliced: SlicedUpdate,
        origin: object,
        pieces: list[bytes] | None,
    ) -> asyncio.Future[int]:
        """Apply the slices (``collab.updates.sliced_apply``), then broadcast, store and ack
        ``update`` whole, as any other (to every peer but the sender, if ``origin`` is one).
        Returns the store's future, as ``Room.edit`` does."""
        self._room.changing()
        return await apply_sliced(
            self._room, sliced, origin, lambda: self._sliced_applied(update, origin, pieces)
        )

    def _sliced_applied(
        self, update: bytes, origin: object, pieces: list[bytes] | None
    ) -> asyncio.Future[int]:
        sender = origin if isinstance(origin, Peer) else None
        acks = None
        if sender is not None:
            acks = self._acks.get(sender)  # None once it has gone: nobody to ack
            self._resync_asked.discard(sender)
            self._metrics.updates.inc()
        return self._room.publish(update, origin, exclude=sender, acks=acks, pieces=pieces)

    def receive(
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
        room = self._room
        try:
            # A run of items the client's own encoder would have sent as one is merged first:
            # yrs merges it in O(run²). What is applied is what is stored and broadcast.
            update, scan = _read(update, read)
            parents = room.guard.check(scan)
            applied_pairs = check_origin_order(room.doc, scan, room.guard)
        except MalformedUpdate as exc:
            self._refuse_update(peer, "malformed", str(exc))
            raise InvalidUpdate(str(exc)) from exc
        except MissingDependencies as exc:
            self._missing_dependencies(peer, acks, exc)
            return
        except UpdateRefused as exc:
            self._refuse_update(peer, exc.limit, str(exc))
            raise InvalidUpdate(str(exc)) from exc
        room.changing()
        try:
            apply_update(room.doc, update, origin=peer, layers=layers)
        except InvalidUpdate as exc:
            # yrs failed part-way through an update the guard passed, and it does not roll
            # back: part of it may be in the doc. Nothing of it was broadcast or stored, so the
            # store holds exactly what everyone else has; rebuild the doc from there.
            self._refuse_update(peer, "apply_failed", str(exc))
            room.rebuild()
            raise
        if applied_pairs:
            try:
                check_applied_origin_order(room.doc, applied_pairs)
            except UpdateRefused as exc:
                # Applied but not yet broadcast or stored: the store still holds what everyone
                # else has, so the doc is rebuilt from there, as after a failed apply.
                self._refuse_update(peer, exc.limit, str(exc))
                room.rebuild()
                raise InvalidUpdate(str(exc)) from exc
        room.guard.admit(scan, parents)
        self._resync_asked.discard(peer)
        self._metrics.updates.inc()
        room.publish(update, peer, exclude=peer, acks=acks, pieces=pieces)

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
            peer.send(peer.sync_header + SyncStep1(self._room.doc.get_state()).encode())

    def _refuse_update(self, peer: Peer, limit: str, reason: str) -> None:
        self._metrics.update_refusals.labels(limit).inc()
        key = (peer.peer_id, limit)
        if key not in self._refusals_logged:
            self._refusals_logged.add(key)
            log.warning(
                "refused an update of %r from peer %d: %s", self._room.name, peer.peer_id, reason
            )


def _read(update: bytes, read: ReadUpdate | MalformedUpdate | None) -> ReadUpdate:
    """The update as read off the loop (``read``), or read here."""
    if read is None:
        return scan_merged(update)
    if isinstance(read, MalformedUpdate):
        raise read
    return read

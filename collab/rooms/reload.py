"""A room's rebuild from storage, one at a time; knows nothing of frames, fan-out, acks or folds.

yrs does not roll back an update that fails part-way, and a write the store lost may already be
in every editor's document: either way the in-memory document is rebuilt from the store, which
holds exactly what everyone else has. Meanwhile updates are turned away and state vectors go
unanswered; once it ends, the room asks the peers concerned to resend (``Room.resync``). After a
lost write every peer is asked, and the rebuild waits for the store however long it takes: the
old document must not be served on, or what builds on the lost update would be stored without it.
What it asks of its room is ``ReloadedRoom``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Set
from dataclasses import dataclass, field
from typing import Protocol

from pycrdt import Doc

from ..runtime.sync_metrics import Metrics
from ..storage.compaction import LogSize
from ..storage.store import StorageError, Store
from ..updates.guard import UpdateGuard
from .durability import Durability
from .room_peer import Peer

log = logging.getLogger(__name__)

_RETRY_FIRST_S = 0.1
_RETRY_MAX_S = 2.0


@dataclass
class StoredDocument:
    """A document read back from storage through a fresh guard: what a room starts from."""

    doc: Doc
    guard: UpdateGuard
    log: LogSize = field(default_factory=LogSize)  # with the updates yrs parked as pending


# Reads the document back from storage: what a rebuild starts from.
ReadStored = Callable[[], Awaitable[StoredDocument]]


class ReloadedRoom(Protocol):
    """What a rebuild asks of the room whose document it rebuilds."""

    @property
    def name(self) -> str: ...

    @property
    def peers(self) -> Set[Peer]: ...

    @property
    def closing(self) -> bool: ...

    @property
    def deleted(self) -> bool: ...

    def replace_document(self, stored: StoredDocument) -> None:
        """The rebuilt document takes the old one's place."""

    def resync(self, resend: Iterable[Peer], asked: dict[Peer, bytes]) -> None:
        """Ask ``resend`` to resend, and answer the state vectors ``asked`` meanwhile."""


class Reload:
    """Whether a room's document is being rebuilt, and who is owed an answer once it is."""

    __slots__ = (
        "_durability",
        "_lost_write",
        "_metrics",
        "_read",
        "_resend",
        "_room",
        "_step1s",
        "_store",
        "running",
    )

    def __init__(
        self,
        room: ReloadedRoom,
        durability: Durability,
        store: Store,
        metrics: Metrics,
        read: ReadStored | None,
    ) -> None:
        self._room = room
        self._durability = durability
        self._store = store
        self._metrics = metrics
        self._read = read
        # The rebuild under way; None when the document may be read.
        self.running: asyncio.Future[None] | None = None
        # The peers whose updates were turned away meanwhile (asked to resend after), and each
        # peer's latest unanswered state vector (one per peer: bounded by the frame cap).
        self._resend: set[Peer] = set()
        self._step1s: dict[Peer, bytes] = {}
        # The rebuild is for a failed append: every peer may hold (or have built on) the lost
        # update, so all are asked to resend, and the store must be reachable to rebuild.
        self._lost_write = False

    def start(self, *, lost_write: bool = False) -> None:
        """Rebuild the document unless a rebuild is already under way (which then also counts
        as one for a lost write, if this one is)."""
        self._lost_write = self._lost_write or lost_write
        if self.running is not None:
            return
        name = self._room.name
        if lost_write:
            log.error(
                "an update of %r was not stored; rebuilding it from storage and asking its"
                " editors to resend",
                name,
            )
        else:
            log.error(
                "document %r may hold part of a refused update; rebuilding it from storage", name
            )
        self.running = asyncio.ensure_future(self._run())
        # flush() waits for it, so an unload or shutdown compacts the rebuilt doc, never this one.
        self._durability.track(self.running)

    def hold(self) -> None:
        """Turn updates, state vectors, joiners, readers and folds away as a rebuild does, while
        the room applies one big update in slices (``Room.receive_update_off_loop``): between
        slices the document holds part of it, which nobody may read, build on or store."""
        if self.running is not None:
            raise RuntimeError("the room is already held")
        self.running = asyncio.get_running_loop().create_future()
        self._durability.track(self.running)

    def release(self, *, resync: bool = True) -> None:
        """End a ``hold``; the peers turned away meanwhile are asked to resend, unless a rebuild
        follows (``resync=False``), which asks them once it ends."""
        held, self.running = self.running, None
        if held is not None and not held.done():
            held.set_result(None)
        if resync:
            self._answer_waiting()

    async def wait(self) -> None:
        """Returns once no rebuild is under way."""
        while self.running is not None:
            await asyncio.shield(self.running)

    def turned_away(self, peer: Peer) -> None:
        """An update of ``peer`` was not applied: it is asked to resend once the rebuild ends."""
        self._resend.add(peer)

    def answer_after(self, peer: Peer, state_vector: bytes) -> None:
        """``peer`` asked with ``state_vector``: answered from the rebuilt document."""
        self._step1s[peer] = state_vector

    def forget(self, peer: Peer) -> None:
        self._resend.discard(peer)
        self._step1s.pop(peer, None)

    async def _run(self) -> None:
        room = self._room
        try:
            # Every update applied before the failure must be in the store first (a compaction
            # meanwhile waits for us, so only the appends are waited for here).
            await self._durability.appends_settled()
            await self._rebuild()
            self._metrics.reloads.inc()
        except Exception:
            # Keep serving what we have rather than nothing; the log says why.
            log.exception("rebuilding %r from storage failed", room.name)
        finally:
            self.running = None
        self._answer_waiting()

    def _answer_waiting(self) -> None:
        room = self._room
        resend, self._resend = self._resend, set()
        if self._lost_write:
            self._lost_write = False
            resend |= room.peers
        asked, self._step1s = self._step1s, {}
        room.resync(resend, asked)

    async def _rebuild(self) -> None:
        room = self._room
        if self._read is None:
            raise RuntimeError("this room has no storage to reload from")
        delay = _RETRY_FIRST_S
        while True:
            self._store.resume(room.name)
            try:
                room.replace_document(await self._read())
                return
            except StorageError:
                # After a lost write the old doc must not be served on: what builds on the lost
                # update would be stored without it. Wait for the store.
                if not self._lost_write or room.closing or room.deleted:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, _RETRY_MAX_S)

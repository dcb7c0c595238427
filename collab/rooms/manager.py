"""Opens documents on first use and unloads them after the last editor leaves and a grace period.

Knows nothing of sockets. No lock is held across a room's lifetime: concurrent openers of one
new document share one loading future, so two editors opening it at once both get the same room
(pycrdt-websocket deadlocks here). A room is persisted (flushed and compacted) before it is
forgotten, and an opener that arrives while it unloads waits and gets a fresh load.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator

from pycrdt import Doc

from tether.protocol.updates.update_merge import scan_merged
from tether.protocol.updates.update_scan import MalformedUpdate

from ..hooks import Hooks
from ..runtime import gc_policy, pools
from ..runtime.gc_hold import full_collections_held
from ..runtime.sync_metrics import Metrics
from ..storage.store import Store
from ..updates.applying import InvalidUpdate, apply_update
from ..updates.guard import MissingDependencies, UpdateGuard, UpdateRefused
from ..updates.slicing import load_slices
from ..updates.update_reads import reads_off_loop
from .presence_claims import ClaimRegistry
from .reload import StoredDocument
from .room import Room
from .room_settings import RoomSettings

log = logging.getLogger(__name__)

STORAGE_ORIGIN = "storage"

# Stored documents smaller than this are read on the event loop (a thread hop costs more).
_LOAD_INLINE_BYTES = 64 * 1024


class RoomManager:
    def __init__(
        self,
        store: Store,
        *,
        hooks: Hooks,
        metrics: Metrics,
        settings: RoomSettings,
        claims: ClaimRegistry | None = None,
    ) -> None:
        self._store = store
        self._settings = settings
        # One registry for all documents: a binding must outlive its document's unload.
        self._claims = claims or ClaimRegistry(3600.0, 65536, 256)
        self._hooks = hooks
        self._metrics = metrics
        self._rooms: dict[str, Room] = {}
        self._loading: dict[str, asyncio.Future[Room]] = {}
        self._unloading: dict[str, asyncio.Task[None]] = {}
        self._unload_timers: dict[str, asyncio.TimerHandle] = {}

    @property
    def rooms(self) -> dict[str, Room]:
        return self._rooms

    async def acquire(self, name: str, *, refusable: bool = False) -> Room:
        """The loaded room for ``name``; the caller must attach a peer before awaiting again.
        ``refusable``: a REST request's, refused with ``PoolFull`` rather than waiting behind
        its pool's queue bound of loads; an editor's open is never refused and goes first."""
        while True:
            unloading = self._unloading.get(name)
            if unloading is not None:
                # A done task is awaited without yielding, so its done-callback would never get
                # to run: forget it here, or this loop spins.
                if not unloading.done():
                    await asyncio.shield(unloading)
                if self._unloading.get(name) is unloading:
                    del self._unloading[name]
                continue
            room = self._rooms.get(name)
            if room is not None and room.reloading:
                await room.reloaded()  # nobody new reads or joins a doc being rebuilt
                continue
            if room is not None and not room.closing:
                self._cancel_unload_timer(name)
                return room
            future = self._loading.get(name)
            if future is None or future.done():
                # Taken now, so a full pool refuses before anything starts; the load itself
                # is never refused once it runs (others may be waiting on it).
                place = pools.current().loads.reserve() if refusable else None
                future = asyncio.ensure_future(self._load(name, first=place is None))
                if place is not None:
                    future.add_done_callback(lambda _, p=place: p.release())
                self._loading[name] = future
                future.add_done_callback(lambda f, n=name: self._forget_loading(n, f))
            room = await asyncio.shield(future)
            if not room.closing:
                self._cancel_unload_timer(name)
                return room

    @contextlib.asynccontextmanager
    async def visit(self, name: str, *, refusable: bool = False) -> AsyncIterator[Room]:
        """The loaded room for a reader that attaches no peer (REST, the HTTP suggestion path):
        when it is done, a room nobody is attached to goes back to unloading after the grace
        period, as if its last editor had left. ``acquire`` alone would pin it loaded forever.
        ``refusable`` as for ``acquire``."""
        room = await self.acquire(name, refusable=refusable)
        try:
            yield room
        finally:
            if not room.peers and not room.closing and self._rooms.get(name) is room:
                self._schedule_unload(room)

    @contextlib.asynccontextmanager
    async def hold(self, name: str) -> AsyncIterator[Room]:
        """The loaded room, kept loaded until the block ends even if every editor leaves (a
        server-side direct connection); then it unloads like an emptied room."""
        room = await self.acquire(name)
        room.holders += 1
        try:
            yield room
        finally:
            room.holders -= 1
            if not room.holders and not room.peers and self._rooms.get(name) is room:
                if not room.closing:
                    self._schedule_unload(room)

    async def delete(self, name: str, reason: str) -> None:
        """Forget ``name`` in memory and in the store: every attached peer is revoked with
        ``reason``, and an opener arriving meanwhile waits, then loads a fresh empty document.
        Registered as the name's unload, which is what ``acquire`` already waits for. The
        ``on_deleted`` hooks run once the store has forgotten it."""
        while (pending := self._unloading.get(name)) is not None:  # a real unload: let it end
            await asyncio.shield(pending)
            self._forget_unloading(name, pending)
        task = asyncio.ensure_future(self._delete(name, reason))
        self._unloading[name] = task
        task.add_done_callback(lambda t: self._forget_unloading(name, t))
        await asyncio.shield(task)
        self._hooks.on_deleted(name)

    def discard(self, name: str, reason: str) -> asyncio.Task[None]:
        """Forget ``name`` in memory only, as ``delete`` does (peers revoked with ``reason``,
        openers wait and then load afresh): another node deleted it (collab.cluster.node).
        Registered as the name's unload at once, and the ``on_deleted`` hooks run, before this
        returns."""
        previous = self._unloading.get(name)

        async def run() -> None:
            if previous is not None:
                await asyncio.gather(previous, return_exceptions=True)
            await self._delete(name, reason, stored=False)

        task = asyncio.ensure_future(run())
        self._unloading[name] = task
        task.add_done_callback(lambda t: self._forget_unloading(name, t))
        self._hooks.on_deleted(name)
        return task

    async def _delete(self, name: str, reason: str, *, stored: bool = True) -> None:
        room = self._rooms.get(name)
        loading = self._loading.get(name)
        if loading is not None:
            try:
                room = await asyncio.shield(loading)
            except Exception:  # a quarantined document: deleting it is the way out
                room = None
        if room is not None:
            room.closing = room.deleted = True
            room.on_empty = None
            self._cancel_unload_timer(name)
            if self._rooms.get(name) is room:
                del self._rooms[name]
                gc_policy.finished()
            self._metrics.rooms.set(len(self._rooms))
            for peer in list(room.peers):
                if peer.revoke is not None:
                    peer.revoke(reason)
                room.detach(peer)  # at once, whatever the connection does: no update lands
        # Called after every append the room made (call order is store order): they all go.
        if stored:
            await self._store.delete(name)

    def _forget_loading(self, name: str, future: asyncio.Future[Room]) -> None:
        if self._loading.get(name) is future:
            del self._loading[name]

    async def _read(self, name: str, *, first: bool = True) -> StoredDocument:
        """The stored document, through a fresh guard, and the size of its log; ``first``:
        someone waits on it at the socket (an editor's open, a rebuild), ahead of REST."""
        updates = await self._store.load(name)
        if sum(len(u) for u in updates) < _LOAD_INLINE_BYTES:
            return self._build(name, updates)
        # Scanning and checking a big document is pure Python at ~25 us per item: 1.6 MB of
        # typed text held the event loop (every editor's fan-out) for over 5 s. In a worker
        # thread the loop still gets the GIL every switch interval (5 ms); the doc and guard
        # are new, so nothing else touches them meanwhile. The loads pool is theirs alone:
        # no import or render queued elsewhere delays an editor's open.
        with full_collections_held():  # its objects would make each full pass long
            return await pools.current().loads.run(self._build, name, updates, first=first)

    def _build(self, name: str, updates: list[bytes]) -> StoredDocument:
        stored = StoredDocument(Doc(), self._settings.new_guard())
        for update in updates:
            if not _load_stored(name, stored.doc, stored.guard, update):
                stored.log.pending.append(update)
        # The store gives the snapshot first; a document never folded has none, and its first
        # entry is counted as one (it only makes the first fold a little early or late).
        head = len(updates[0]) if updates else 0
        stored.log.entries = max(len(updates) - 1, 0)
        stored.log.bytes = sum(len(u) for u in updates) - head
        stored.log.snapshot_bytes = head
        return stored

    async def _load(self, name: str, *, first: bool = True) -> Room:
        started = time.perf_counter()
        stored = await self._read(name, first=first)
        log.info(
            "loaded document %r (%d log entries) in %.1f ms",
            name,
            stored.log.entries,
            (time.perf_counter() - started) * 1000,
        )
        room = Room(
            name,
            stored.doc,
            self._store,
            hooks=self._hooks,
            metrics=self._metrics,
            settings=self._settings,
            guard=stored.guard,
            log=stored.log,
            claims=self._claims,
            reload=lambda: self._read(name),
        )
        room.on_empty = self._schedule_unload
        self._rooms[name] = room
        gc_policy.started()
        self._metrics.rooms.set(len(self._rooms))
        await self._hooks.on_load(room)
        # Nobody may attach: unload it after the grace period like any emptied room.
        self._schedule_unload(room)
        return room

    def _schedule_unload(self, room: Room) -> None:
        self._cancel_unload_timer(room.name)
        loop = asyncio.get_running_loop()
        self._unload_timers[room.name] = loop.call_later(
            self._settings.unload_grace, self._start_unload, room
        )

    def _cancel_unload_timer(self, name: str) -> None:
        timer = self._unload_timers.pop(name, None)
        if timer is not None:
            timer.cancel()

    def _start_unload(self, room: Room) -> None:
        self._unload_timers.pop(room.name, None)
        if room.peers or room.holders or room.closing or self._rooms.get(room.name) is not room:
            return
        room.closing = True
        task = asyncio.ensure_future(self._unload(room))
        self._unloading[room.name] = task
        task.add_done_callback(lambda t, n=room.name: self._forget_unloading(n, t))

    def _forget_unloading(self, name: str, task: asyncio.Task[None]) -> None:
        if self._unloading.get(name) is task:
            del self._unloading[name]

    async def _unload(self, room: Room) -> None:
        try:
            await room.flush()
            if room.compaction_due_at_unload():
                await room.compact()
            await self._hooks.on_unload(room)
        except Exception:
            log.exception("unloading %r failed; its update log is kept", room.name)
        finally:
            if self._rooms.get(room.name) is room:
                del self._rooms[room.name]
                gc_policy.finished()
                log.info("unloaded document %r", room.name)
            self._metrics.rooms.set(len(self._rooms))

    async def close(self) -> None:
        """Persist every room (server shutdown)."""
        for timer in self._unload_timers.values():
            timer.cancel()
        self._unload_timers.clear()
        for room in list(self._rooms.values()):
            await room.flush()
            if room.compaction_due_at_unload():
                await room.compact()
        if self._unloading:
            await asyncio.gather(*self._unloading.values(), return_exceptions=True)


class DocumentQuarantined(Exception):
    """A stored document holds structure the server refuses to load (e.g. nesting deep enough
    to overflow yrs's stack when deleted, stored before the guard existed). Its bytes are kept
    untouched for the operator; it is never applied, so no edit or delete can crash on it."""


def _load_stored(name: str, doc: Doc, guard: UpdateGuard, update: bytes) -> bool:
    """Apply one stored update through the same checks as a live one; False if it was
    applied as pending (its dependencies missing)."""
    try:
        # Runs merged as on the socket path: a log stored before that still holds an unmerged
        # run (O(run²) in yrs) never replays it as it was.
        update, scan = scan_merged(update)
        parents = guard.check(scan, stored=True)
    except MissingDependencies:
        # Stored before the guard refused such updates: yrs parks it as pending, as it did.
        log.warning("a stored update of %r has missing dependencies; applied as pending", name)
        applied = _apply_stored(name, doc, update)
        return not applied  # one yrs cannot read is skipped, as before: nothing to keep
    except (MalformedUpdate, UpdateRefused) as exc:
        log.error("document %r is quarantined: %s", name, exc)
        raise DocumentQuarantined(f"document {name!r} is quarantined: {exc}") from exc
    if _apply_stored(name, doc, update):
        guard.admit(scan, parents)
    return True


def _apply_stored(name: str, doc: Doc, update: bytes) -> bool:
    # A big one in slices: pycrdt holds the GIL while yrs applies, so the loop waits out each
    # apply_update call even from this thread, but gets its turn between them.
    layers = load_slices(update) if reads_off_loop(update) else None
    try:
        apply_update(doc, update, origin=STORAGE_ORIGIN, layers=layers)
    except InvalidUpdate:
        log.error("skipping an unreadable stored update of %r", name)
        return False
    return True

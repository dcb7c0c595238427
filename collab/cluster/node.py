"""Several tether nodes on one PostgreSQL: how a node's documents converge with the others'.

All nodes are equal: any node accepts edits to any document, commits them to PostgreSQL
(``collab.storage.postgres``: per-document sequence numbers under the document row's lock) and acks
after COMMIT; the bus (``collab.cluster.bus``) relays each committed update, tagged with its seq,
to the other nodes that have the document loaded, which apply it and send it to their editors.

Only committed updates cross nodes, although local fan-out does not wait for the disk: an
editor on node B must never build on an update that is not committed. On one node that holds by
construction (one FIFO: whatever B's editor saw was appended before its own edit, so commits
with or before it). An update relayed before its COMMIT breaks it: B commits and acks an edit
that depends on A's uncommitted one; A is killed; the acked edit sits in PostgreSQL but cannot
be integrated by anyone loading the document (tried: cross-node fan-out p50 fell from 103 to
37 ms, and the kill -9 trials lost acked edits). The commit in every cross-node fan-out is the
price of "an ack means committed" across nodes.
No owner, lease or epoch: a Yjs document converges whatever order updates are applied in, so
what ownership would buy (one writer per document) is not needed for correctness, and it would
cost a failover protocol and a forwarding hop for every editor not on the owner.

Each node keeps, per loaded document, a watermark: the highest seq below which its document
holds everything (its ledger, ``collab.cluster.ledger``, which the store's write path records
in and the cluster reads; ``build_store`` below gives both the same one). A bus entry above
``watermark + 1`` is a gap; so is a head in PostgreSQL above the watermark, which every node
checks for its loaded documents every ``bus_reconcile_interval`` seconds. Either way the node
backfills from PostgreSQL (the snapshot if the log it needs was compacted, then the log after).
So losing Redis, a node killed between COMMIT and XADD, or a restart loses no acked edit and no
convergence, only latency. Presence from other nodes is relayed the same way (not stored) and
expires after ``bus_presence_ttl`` seconds without news, so a dead node's editors vanish.

Deleting a document reaches the other nodes that have it loaded as a delete entry on its stream
and, if that is lost, as the document missing (or of another epoch) in the reconciliation: they
revoke their editors with the same reason as the deleting node ("document deleted") and unload
it. The epoch (``collab.storage.postgres``; the one held is in the ledger) keeps the
incarnations apart: a node never applies an update of another incarnation than the one it holds,
and its own late writes to a deleted one fail.

How it plugs in, as an extension among others (``collab.hooks``), knowing rooms only through
their public methods and storage only through what storage declares:

- rooms: the ``Cluster`` hooks ``on_load`` (subscribe, backfill), ``on_unload`` and
  ``before_read`` (catch up before a REST read or a version); the ``PresenceRelay``
  (``collab.cluster.node_presence``) hooks ``on_presence`` and ``remote_presence``. Registered from
  ``Cluster.extensions()``: none on one node. Another node's delete reaches the other
  extensions (the AI engine's cache) as ``on_deleted`` through ``RoomManager.discard``.
- storage: the store's ``SequencedStore`` face (``collab.storage.sequenced``), whose one
  listener (this ``Cluster``) hears of each commit, delete and stale write. A commit goes
  store -> cluster -> bus, tagged with the incarnation the ledger holds, with no call back into
  the store.

Without a bus (SQLite, or PostgreSQL alone) this is just ``/health`` and, for PostgreSQL,
forgetting what the ledger held of an unloaded document.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from dataclasses import dataclass
from typing import Any

from ..config import Settings
from ..rooms.manager import RoomManager
from ..rooms.room import Room
from ..runtime.sync_metrics import Metrics
from ..storage.registry import StoreOptions, open_store
from ..storage.sequenced import Committed
from ..storage.store import StorageError, Store
from .bus import RedisBus
from .ledger import Ledger
from .node_presence import PresenceRelay

log = logging.getLogger(__name__)

REMOTE_ORIGIN = "cluster"
DELETED_REASON = "document deleted"  # as collab.http.documents says on the deleting node
_GAP_GRACE_S = 0.2


@dataclass(frozen=True, slots=True)
class NodeStore:
    """The store a node uses and, for a store shared with other nodes, the ledger it keeps."""

    store: Store
    ledger: Ledger | None = None


def build_store(settings: Settings, metrics: Metrics, given: Store | None = None) -> NodeStore:
    """The store a host gave (used as it is: one node's), else the one ``--store`` names
    (``collab.storage.registry``: SQLite in the data dir, or a PostgreSQL), handed this node's
    ledger, which the cluster then reads too if other nodes share the store."""
    if given is not None:
        return NodeStore(given)
    ledger = Ledger()
    options = StoreOptions(
        settings.data_dir,
        commit_window=settings.commit_window_ms / 1000,
        holdings=ledger,
        statement_cache_size=settings.store_statement_cache_size,
        outage_timeout=settings.store_outage_timeout,
        queue_bytes=settings.store_queue_bytes,
        on_refusal=lambda limit: metrics.limit_refusals.labels(limit).inc(),
    )
    store = open_store(settings.store, options)
    return NodeStore(store, ledger if store.sequenced() is not None else None)


class Cluster:
    """The hooks (on_load, on_unload, before_read) and tasks that keep this node's documents in
    step with the other nodes'; inert without ``--bus``. Register ``extensions()``."""

    def __init__(
        self, settings: Settings, built: NodeStore, rooms: RoomManager, metrics: Metrics
    ) -> None:
        self._settings = settings
        self._store = built.store
        self._rooms = rooms
        self._metrics = metrics
        self.node_id = settings.node_id or f"{socket.gethostname()}-{os.getpid()}"
        self._db = built.store.sequenced()  # None: a store of one node
        # What this node holds of each document, as the store records it (an empty one for a
        # store that keeps none: it reads as holding nothing).
        self._ledger = built.ledger or Ledger()
        self._shared = self._db is not None and built.ledger is not None
        self._bus: RedisBus | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._backfilling: dict[str, asyncio.Task[None]] = {}
        self._dropping: set[asyncio.Task[None]] = set()
        self._again: set[str] = set()  # asked to backfill while one ran
        self._relay: PresenceRelay | None = None  # with the bus
        self._gap_timers: dict[str, asyncio.TimerHandle] = {}
        self.backfills = 0
        self.deletes = 0  # documents closed here because another node deleted them

    async def __aenter__(self) -> Cluster:
        if self._settings.bus and self._shared:
            self._bus = RedisBus(
                self._settings.bus,
                self.node_id,
                stream_length=self._settings.bus_stream_length,
                queue_bytes=self._settings.bus_queue_bytes,
                on_update=self._remote_update,
                on_presence=self._remote_presence,
                on_reconnect=self._backfill_all,
                on_drop=lambda: self._metrics.limit_refusals.labels("bus_queue_bytes").inc(),
                on_delete=self._remote_delete,
            )
            await self._bus.__aenter__()
            self._relay = PresenceRelay(
                self._bus, self._settings.bus_presence_ttl, self._settings.awareness_document_bytes
            )
            assert self._db is not None
            self._db.listen(self)
            self._tasks.append(asyncio.ensure_future(self._reconcile_loop()))
        return self

    async def __aexit__(self, *exc: object) -> None:
        for timer in self._gap_timers.values():
            timer.cancel()
        self._gap_timers.clear()
        for task in [*self._tasks, *self._backfilling.values()]:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._backfilling.values(), return_exceptions=True)
        if self._bus is not None:
            if self._db is not None:
                self._db.listen(None)
            await self._bus.__aexit__(None, None, None)

    def extensions(self) -> list[object]:
        """What to register as hooks once entered: this cluster for a store shared by nodes,
        and with a bus the presence relay. None for a store of one node, so its rooms pay
        nothing for scale-out (a presence change: one empty list of hooks)."""
        own: list[object] = [self] if self._shared else []
        return own if self._relay is None else [*own, self._relay]

    # -- hooks -------------------------------------------------------------------------------

    async def on_load(self, room: Room) -> None:
        if self._bus is None or self._relay is None:
            return
        await self._bus.subscribe(room.name)
        self._relay.track(room.name)
        # What was committed between our load and our subscription reaches us this way.
        self._backfill(room.name)

    async def on_unload(self, room: Room) -> None:
        if self._bus is not None:
            self._bus.unsubscribe(room.name)
        if self._relay is not None:
            self._relay.forget(room.name)
        self._ledger.forget(room.name)

    async def before_read(self, room: Room) -> None:
        if self._bus is not None:
            await self.catch_up(room.name)

    # -- what the store tells us (collab.storage.sequenced.StoreEvents) -----------------------

    def committed(self, items: list[Committed]) -> None:
        """Our commits, to the other nodes, tagged with the incarnation they landed in."""
        assert self._bus is not None
        epoch = self._ledger.epoch
        self._bus.publish_updates([(name, seq, data, epoch(name)) for name, seq, data in items])

    def deleted(self, name: str, epoch: int) -> None:
        """Our REST delete committed: tell the nodes that have the document loaded."""
        if self._bus is not None:
            self._bus.publish_delete(name, epoch)
            if name not in self._rooms.rooms:
                self._bus.unsubscribe(name)
                if self._relay is not None:
                    self._relay.forget(name)

    def stale(self, name: str) -> None:
        self._drop(name)

    # -- what other nodes send ---------------------------------------------------------------

    def _room(self, name: str) -> Room | None:
        room = self._rooms.rooms.get(name)
        # A room being rebuilt from storage takes nothing now; the next backfill brings it.
        return None if room is None or room.closing or room.reloading else room

    def _held_elsewhere(self, name: str, epoch: int) -> bool:
        """Whether an update of incarnation ``epoch`` belongs in our document; one of a newer
        incarnation means ours was deleted, and the document is dropped here."""
        if self._ledger.accepts(name, epoch):
            return True
        if epoch > self._ledger.epoch(name) > 0:
            self._drop(name)
        return False

    def _remote_update(self, name: str, seq: int, update: bytes, epoch: int) -> None:
        room = self._room(name)
        if room is None or not self._held_elsewhere(name, epoch):
            return
        mark = self._ledger.watermark(name)
        if mark.holds(seq):
            return
        if not room.apply_remote(update, REMOTE_ORIGIN):
            self._backfill(name)  # it needs what we lack: PostgreSQL has it, in order
            return
        mark.add(seq)
        if mark.ahead:
            self._backfill_if_gap_stays(name)

    def _backfill_if_gap_stays(self, name: str) -> None:
        """A gap below what arrived: usually an entry still on its way (nodes commit in seq
        order but publish independently), so wait a moment before asking PostgreSQL; asking
        at once would turn every cross-node burst into a query per entry."""
        if name in self._gap_timers:
            return

        def check() -> None:
            del self._gap_timers[name]
            if self._ledger.watermark(name).ahead:
                self._backfill(name)

        self._gap_timers[name] = asyncio.get_running_loop().call_later(_GAP_GRACE_S, check)

    def _remote_presence(self, name: str, body: bytes) -> None:
        room = self._room(name)
        if room is None or self._relay is None:
            return
        if self._relay.receive(name, body, time.monotonic()):
            room.broadcast_presence(body)

    # -- deletes -----------------------------------------------------------------------------

    def _remote_delete(self, name: str, epoch: int) -> None:
        held = self._ledger.epoch(name)
        if held == epoch:
            self._drop(name)
        elif held <= 0 and epoch > -held:
            # Nothing of that incarnation was adopted here: our edits (on an empty document)
            # belong to whatever comes after it.
            self._ledger.lift_floor(name, epoch)

    def _drop(self, name: str) -> None:
        """Another node deleted the document: revoke its editors here, unload it, forget it."""
        room = self._rooms.rooms.get(name)
        if room is None or room.closing:
            return  # already going (an unload's late compaction is refused as stale)
        room.closing = True  # nothing more from the bus or a backfill lands in it
        self.deletes += 1
        log.info("document %r was deleted on another node; closing it here", name[:64])
        if self._bus is not None:
            self._bus.unsubscribe(name)
        if self._relay is not None:
            self._relay.forget(name)
        timer = self._gap_timers.pop(name, None)
        if timer is not None:
            timer.cancel()
        task = self._rooms.discard(name, DELETED_REASON)  # on_deleted: e.g. cached suggestions go
        self._ledger.forget(name)
        self._dropping.add(task)
        task.add_done_callback(self._dropping.discard)

    # -- backfill ----------------------------------------------------------------------------

    def _backfill_all(self) -> None:
        for name in list(self._rooms.rooms):
            self._backfill(name)

    def _backfill(self, name: str) -> None:
        running = self._backfilling.get(name)
        if running is not None and not running.done():
            self._again.add(name)
            return
        task = asyncio.ensure_future(self._run_backfill(name))
        self._backfilling[name] = task
        task.add_done_callback(lambda t, n=name: self._backfill_done(n, t))

    def _backfill_done(self, name: str, task: asyncio.Task[None]) -> None:
        if self._backfilling.get(name) is task:
            del self._backfilling[name]
        if name in self._again:
            self._again.discard(name)
            self._backfill(name)

    async def catch_up(self, name: str) -> None:
        """Apply everything committed for ``name`` up to now: a version or a REST read on this
        node then holds every edit acked anywhere before it was asked for, whatever the bus's
        delay. If the database is unreachable, what is held is used (saving a version then
        fails anyway)."""
        running = self._backfilling.get(name)
        if running is not None:
            await asyncio.gather(asyncio.shield(running), return_exceptions=True)
        await self._run_backfill(name)  # a read started after the caller's request

    async def _run_backfill(self, name: str) -> None:
        if self._db is None:
            return
        # Only a read that started after we held an incarnation can say it is gone: one that
        # started before our own first commit of a new document does not see it yet.
        held = self._ledger.epoch(name)
        try:
            mark = self._ledger.watermark(name)
            missing = await self._db.backfill(name, mark.mark)
        except StorageError as exc:
            log.debug("backfill of %r waits for the database: %s", name, exc)
            return
        room = self._room(name)
        if room is None:
            return
        if not missing.epoch:  # gone from PostgreSQL: deleted, unless never created
            if held > 0 and self._ledger.epoch(name) == held:
                self._drop(name)
            return
        if not self._held_elsewhere(name, missing.epoch):
            return
        self.backfills += 1
        if missing.snapshot is not None:
            room.apply_remote(missing.snapshot, REMOTE_ORIGIN, in_order=True)
            mark.raise_to(missing.snapshot_seq)
        for seq, update in missing.updates:
            if not mark.holds(seq):
                room.apply_remote(update, REMOTE_ORIGIN, in_order=True)
                mark.add(seq)

    async def _reconcile_loop(self) -> None:
        assert self._db is not None and self._relay is not None
        ledger = self._ledger
        while True:
            await asyncio.sleep(self._settings.bus_reconcile_interval)
            for name, body in self._relay.expire(time.monotonic()):
                room = self._room(name)
                if room is not None:
                    room.broadcast_presence(body)
            names = [name for name in self._rooms.rooms if self._room(name) is not None]
            if not names:
                continue
            held_before = {name: ledger.epoch(name) for name in names}  # see _run_backfill
            try:
                heads = await self._db.generations(names)
            except StorageError:
                continue  # the database is down: the next round tries again
            except Exception:  # this loop is the safety net: it must never die
                log.exception("reconciliation failed; retrying")
                continue
            for name in names:
                epoch, head = heads.get(name, (0, 0))
                held = ledger.epoch(name)
                if held > 0 and epoch != held and held_before.get(name) == held:
                    self._drop(name)  # deleted (and perhaps created again) elsewhere
                elif head > ledger.watermark(name).mark or (held <= 0 and epoch > -held):
                    self._backfill(name)

    # -- /health -----------------------------------------------------------------------------

    async def health(self) -> dict[str, Any]:
        database: dict[str, Any] = {"backend": self._store.backend, "state": "ok"}
        if self._db is not None:
            try:
                reachable = await asyncio.wait_for(self._db.ping(), 2.0)
            except TimeoutError:
                reachable = False
            database["state"] = "ok" if reachable else "unavailable"
            database["queued_bytes"] = self._db.queued_bytes
            if not reachable:
                database["error"] = self._db.last_error
        bus = {"state": "off"} if self._bus is None else self._bus.health()
        if self._bus is not None:
            bus["backfills"] = self.backfills
            bus["remote_deletes"] = self.deletes
        return {"node": self.node_id, "database": database, "bus": bus}

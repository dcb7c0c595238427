"""Adversarial update shapes on a room's own paths (receive, REST import, load), with an
in-memory store and peers whose outboxes we read: what is applied is what is stored and
broadcast, re-encoded where yrs would pay more than linear for it."""

from __future__ import annotations

import time

import pytest
from pycrdt import Doc, Text

from tests.collab.test_room import Capture, make_peer, make_room, room_settings
from tether.bench.shape_updates import fragmenting_deletes, unmerged_run
from tether.collab.hooks import Hooks
from tether.collab.rooms.document_edits import import_update
from tether.collab.rooms.manager import DocumentQuarantined, RoomManager
from tether.collab.runtime.sync_metrics import Metrics
from tether.collab.storage.store import MemoryStore
from tether.protocol.updates.update_scan import scan_update
from tether.protocol.wire.sync_payloads import SyncUpdate

pytestmark = pytest.mark.anyio


def text_of(*updates: bytes) -> str:
    doc = Doc()
    for each in updates:
        doc.apply_update(each)
    return str(doc.get("content", type=Text))


async def test_an_unmerged_run_is_applied_stored_and_broadcast_as_one_item() -> None:
    attack = unmerged_run(3000).attack
    async with MemoryStore() as store:
        room = await make_room(store)
        sender, other = Capture(), Capture()
        peer = make_peer(sender)
        room.attach(peer)
        room.attach(make_peer(other))
        room.handle_sync(peer, SyncUpdate(attack))
        await room.flush()
        assert sender.statuses() == [True]
        (broadcast,) = other.updates()
        (stored,) = await store.load("doc")
        assert broadcast == stored
        assert len(scan_update(stored).items) == 1
        assert text_of(stored) == text_of(attack) == "a" * 3000
        assert str(room.doc.get("content", type=Text)) == "a" * 3000


async def test_a_rest_import_of_an_unmerged_run_is_stored_as_one_item() -> None:
    attack = unmerged_run(3000).attack
    async with MemoryStore() as store:
        room = await make_room(store)
        await import_update(room, attack, "import")
        (stored,) = await store.load("doc")
        assert len(scan_update(stored).items) == 1
        assert text_of(stored) == "a" * 3000


async def test_a_stored_unmerged_run_is_merged_when_the_document_loads() -> None:
    """A log written before runs were merged still holds one raw: a load must not replay it
    item by item (O(run²) in yrs)."""
    attack = unmerged_run(3000).attack
    async with MemoryStore() as store:
        await store.append("doc", attack)
        manager = RoomManager(store, hooks=Hooks(), metrics=Metrics(), settings=room_settings(100))
        room = await manager.acquire("doc")
        assert str(room.doc.get("content", type=Text)) == "a" * 3000
        typed = Doc()
        typed.apply_update(room.doc.get_update())
        more = typed.get_state()
        typed.get("content", type=Text).insert(3000, "b")
        assert room.guard.check(scan_update(typed.get_update(more))) is not None
        await manager.close()


async def test_a_stored_long_run_from_before_merging_loads_in_linear_time() -> None:
    """128,000 items: yrs alone takes ~10 s to merge them one by one (O(n²)), merged first
    well under a second."""
    attack = unmerged_run(128_000).attack
    async with MemoryStore() as store:
        await store.append("doc", attack)
        manager = RoomManager(store, hooks=Hooks(), metrics=Metrics(), settings=room_settings(100))
        began = time.perf_counter()
        room = await manager.acquire("doc")
        assert time.perf_counter() - began < 5
        assert len(str(room.doc.get("content", type=Text))) == 128_000
        await manager.close()


async def test_a_stored_fragmenting_delete_set_quarantines_its_document_without_applying() -> None:
    """A delete set of 256,000 one-character ranges over one long item, stored before cuts were
    priced: replaying it would hold yrs ~12 s; the document is quarantined instead, its bytes
    kept for the operator."""
    shape = fragmenting_deletes(256_000)
    async with MemoryStore() as store:
        for update in [*shape.setup, shape.attack]:
            await store.append("doc", update)
        manager = RoomManager(store, hooks=Hooks(), metrics=Metrics(), settings=room_settings(100))
        began = time.perf_counter()
        with pytest.raises(DocumentQuarantined, match="too many pieces"):
            await manager.acquire("doc")
        assert time.perf_counter() - began < 5
        assert await store.load("doc") == [*shape.setup, shape.attack]

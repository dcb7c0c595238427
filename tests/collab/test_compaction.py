"""When a room folds its log: by entries for a small document, by weight for a big one, and
never past an update yrs holds as pending. In-memory store, no sockets."""

from __future__ import annotations

import pytest
from pycrdt import Doc, Text

from tether.collab.hooks import Hooks
from tether.collab.rooms.manager import RoomManager
from tether.collab.runtime.sync_metrics import Metrics
from tether.collab.storage.compaction import CompactionPolicy, LogSize
from tether.collab.storage.store import MemoryStore
from tether.protocol.wire.sync_payloads import SyncUpdate
from tether.tests.collab.test_room import Capture, edit, make_peer, room_settings

pytestmark = pytest.mark.anyio


def test_a_small_document_folds_every_min_entries_as_before() -> None:
    policy = CompactionPolicy(min_entries=500, log_ratio=1.0)
    assert not policy.due(LogSize(entries=499, bytes=20_000, snapshot_bytes=4_000))
    assert policy.due(LogSize(entries=500, bytes=20_000, snapshot_bytes=4_000))


def test_a_big_document_folds_once_its_log_weighs_a_share_of_the_snapshot() -> None:
    policy = CompactionPolicy(min_entries=500, log_ratio=1.0, entry_bytes=1024)
    big = 20 * 2**20
    # 500 keystrokes on 20 MB: the old rule rewrote 20 MB here; now the log waits.
    assert not policy.due(LogSize(entries=500, bytes=500 * 30, snapshot_bytes=big))
    # ... until its entries and bytes weigh the snapshot: ~20,000 keystrokes.
    assert not policy.due(LogSize(entries=19_000, bytes=19_000 * 30, snapshot_bytes=big))
    assert policy.due(LogSize(entries=20_000, bytes=20_000 * 30, snapshot_bytes=big))
    # Big appends get there in bytes.
    assert policy.due(LogSize(entries=500, bytes=big, snapshot_bytes=big))


def test_an_unload_folds_a_small_log_of_a_small_document_but_not_of_a_big_one() -> None:
    policy = CompactionPolicy(min_entries=500, log_ratio=1.0)
    assert policy.due_at_unload(LogSize(entries=1, bytes=30, snapshot_bytes=500))
    assert not policy.due_at_unload(LogSize(entries=3, bytes=90, snapshot_bytes=2**20))
    assert not policy.due_at_unload(LogSize(entries=0, bytes=0, snapshot_bytes=0))


def text_of(updates: list[bytes]) -> str:
    doc = Doc()
    for update in updates:
        doc.apply_update(update)
    return str(doc.get("content", type=Text))


async def test_typing_into_a_big_stored_document_does_not_rewrite_it_until_the_log_weighs_enough():
    async with MemoryStore() as store:
        author = Doc()
        big = "x" * 200_000
        await store.append("doc", edit(big, author))
        await store.compact("doc", author.get_update())  # a 200 KB snapshot
        manager = RoomManager(store, hooks=Hooks(), metrics=Metrics(), settings=room_settings(5))
        room = await manager.acquire("doc")
        peer = make_peer(Capture())
        room.attach(peer)
        for ch in "abcdefghij":  # twice the threshold, a few hundred bytes of weight
            room.handle_sync(peer, SyncUpdate(edit(ch, author)))
        await room.flush()
        info = await store.info("doc")
        assert info is not None and info.log_entries == 10, "a 200 KB snapshot not rewritten"
        room.handle_sync(peer, SyncUpdate(edit("y" * 250_000, author)))  # outweighs it
        await room.flush()
        info = await store.info("doc")
        assert info is not None and info.log_entries == 0, "folded once the log outweighed it"
        assert text_of(await store.load("doc")) == big + "abcdefghij" + "y" * 250_000
        room.handle_sync(peer, SyncUpdate(edit("z", author)))
        room.detach(peer)
        await manager.close()  # shutdown: one small entry on a 450 KB snapshot stays a log entry
        info = await store.info("doc")
        assert info is not None and info.log_entries == 1
        assert text_of(await store.load("doc")).endswith("yz")


def dependent_pair() -> tuple[bytes, bytes]:
    """Two updates of one client, the second typed on the first."""
    author = Doc(client_id=4242)
    return edit("hello", author), edit(" world", author)


async def test_an_update_stored_without_its_dependency_is_never_folded_away() -> None:
    first, second = dependent_pair()
    async with MemoryStore() as store:
        await store.append("doc", second)  # stored before the guard refused such updates
        manager = RoomManager(store, hooks=Hooks(), metrics=Metrics(), settings=room_settings(2))
        room = await manager.acquire("doc")
        peer = make_peer(Capture())
        room.attach(peer)
        other = Doc()
        for ch in "abcdef":  # three times the threshold
            room.handle_sync(peer, SyncUpdate(edit(ch, other)))
        await room.flush()
        room.detach(peer)
        await manager.close()  # and the shutdown's fold
        stored = await store.load("doc")
        assert second in stored, "the pending update is still stored"
        text = text_of([*stored, first])  # two clients typed at 0: yrs orders them by id
        assert "hello world" in text and "abcdef" in text and len(text) == 17

        # Once its dependency arrives, the document holds it, and the next fold keeps it.
        manager = RoomManager(store, hooks=Hooks(), metrics=Metrics(), settings=room_settings(2))
        room = await manager.acquire("doc")
        peer = make_peer(Capture())
        room.attach(peer)
        room.handle_sync(peer, SyncUpdate(first))
        for ch in "gh":
            room.handle_sync(peer, SyncUpdate(edit(ch, other)))
        await room.flush()
        info = await store.info("doc")
        assert info is not None and info.log_entries < 3, "folded once nothing is pending"
        text = text_of(await store.load("doc"))
        assert "hello world" in text and "abcdefgh" in text and len(text) == 19
        room.detach(peer)
        await manager.close()


async def test_another_nodes_update_applied_as_pending_is_never_folded_away() -> None:
    _, second = dependent_pair()
    async with MemoryStore() as store:
        manager = RoomManager(store, hooks=Hooks(), metrics=Metrics(), settings=room_settings(2))
        room = await manager.acquire("doc")
        await store.append("doc", second)  # committed by another node (collab.cluster.node)
        assert room.apply_remote(second, "remote", in_order=True)
        peer = make_peer(Capture())
        room.attach(peer)
        for ch in "abcd":
            room.handle_sync(peer, SyncUpdate(edit(ch)))
        await room.flush()
        await room.compact()
        assert second in await store.load("doc")
        room.detach(peer)
        await manager.close()


async def test_a_big_stored_document_loads_whole_with_its_log_counted_and_its_pending_kept():
    """Past 64 KB the document is read in a worker thread (collab.rooms.manager): the same doc,
    guard, log size and pending updates as on the event loop."""
    first, second = dependent_pair()
    async with MemoryStore() as store:
        author = Doc()
        big = edit("x" * 100_000, author)
        await store.append("doc", big)
        await store.compact("doc", author.get_update())
        await store.append("doc", edit("y", author))
        await store.append("doc", second)
        manager = RoomManager(store, hooks=Hooks(), metrics=Metrics(), settings=room_settings(2))
        room = await manager.acquire("doc")
        assert str(room.doc.get("content", type=Text)) == "x" * 100_000 + "y"
        assert room.log_size.entries == 2 and room.log_size.snapshot_bytes > 100_000
        capture = Capture()
        peer = make_peer(capture)
        room.attach(peer)
        room.handle_sync(peer, SyncUpdate(edit("z", author)))  # the guard knows what it builds on
        room.handle_sync(peer, SyncUpdate(first))
        await room.flush()
        assert capture.statuses() == [True, True]
        text = str(room.doc.get("content", type=Text))
        assert "x" * 100_000 + "yz" in text and "hello world" in text
        room.detach(peer)
        await manager.close()
        assert "hello world" in text_of(await store.load("doc"))

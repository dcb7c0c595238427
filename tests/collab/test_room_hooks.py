"""The hooks the cluster and the AI engine plug into (on_presence, remote_presence, before_read,
on_deleted): an extension sees them, a failing one is contained. Rooms on an in-memory store,
peers whose outboxes we read: no sockets (tests/test_hooks.py drives them through a server)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from pycrdt import Doc

from tether.collab.hooks import Hooks
from tether.collab.rooms.manager import RoomManager
from tether.collab.rooms.room import Room
from tether.collab.runtime.sync_metrics import Metrics
from tether.collab.storage.store import MemoryStore
from tether.protocol.wire.lib0 import Decoder
from tether.protocol.wire.messages import Awareness
from tether.protocol.wire.sync_payloads import AwarenessEntry, decode_awareness, encode_awareness

from .test_room import Capture, make_peer, room_settings

pytestmark = pytest.mark.anyio

ELSEWHERE = AwarenessEntry(900, 3, '{"name":"on another node"}')


class Recorder:
    """Implements every hook of this file and records what it saw."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []

    def on_presence(self, room: Room, body: bytes) -> None:
        self.seen.append(("presence", [e.client_id for e in _entries(body)]))

    def remote_presence(self, room: Room) -> list[AwarenessEntry]:
        return [ELSEWHERE]

    async def before_read(self, room: Room) -> None:
        self.seen.append(("before_read", room.name))

    def on_deleted(self, name: str) -> None:
        self.seen.append(("deleted", name))


class Broken:
    """Fails in every hook of this file: the document and the next extension go on."""

    def on_presence(self, room: Room, body: bytes) -> None:
        raise RuntimeError("broken on_presence")

    def remote_presence(self, room: Room) -> list[AwarenessEntry]:
        raise RuntimeError("broken remote_presence")

    async def before_read(self, room: Room) -> None:
        raise RuntimeError("broken before_read")

    def on_deleted(self, name: str) -> None:
        raise RuntimeError("broken on_deleted")


def _entries(body: bytes) -> list[AwarenessEntry]:
    return decode_awareness(Decoder(body).read_var_uint8_array())


def _snapshot_ids(capture: Capture) -> list[int]:
    snapshots = [m for m in capture.decoded() if isinstance(m, Awareness)]
    assert snapshots, "no presence was sent"
    return [e.client_id for e in decode_awareness(snapshots[-1].update)]


def _room(hooks: Hooks) -> Room:
    settings = room_settings(100)
    return Room("doc", Doc(), MemoryStore(), hooks=hooks, metrics=Metrics(), settings=settings)


@pytest.mark.parametrize("broken_first", [False, True])
async def test_an_extension_sees_each_presence_change_leaving_the_room(broken_first, caplog):
    recorder = Recorder()
    room = _room(Hooks([Broken(), recorder] if broken_first else [recorder]))
    editor, other = Capture(), Capture()
    peer = make_peer(editor)
    room.attach(peer)
    room.attach(make_peer(other))
    with caplog.at_level(logging.ERROR):
        room.handle_awareness(peer, encode_awareness([AwarenessEntry(7, 1, '{"n":"a"}')]))
        room.detach(peer)  # its presence goes: a change too
    assert recorder.seen == [("presence", [7]), ("presence", [7])]
    last = [m for m in other.decoded() if isinstance(m, Awareness)][-1]
    assert decode_awareness(last.update)[0].state == "null"  # the editors here saw it go
    assert ("on_presence hook failed in Broken" in caplog.text) == broken_first


@pytest.mark.parametrize("broken_first", [False, True])
async def test_presence_held_elsewhere_is_in_the_snapshot_a_joining_editor_gets(broken_first):
    recorder = Recorder()
    room = _room(Hooks([Broken(), recorder] if broken_first else [recorder]))
    first, joining = Capture(), Capture()
    peer = make_peer(first)
    room.attach(peer)
    room.handle_awareness(peer, encode_awareness([AwarenessEntry(7, 1, '{"n":"a"}')]))
    room.attach(make_peer(joining))
    assert _snapshot_ids(joining) == [7, ELSEWHERE.client_id]  # the room's own editors first


async def test_a_room_alone_sends_presence_only_when_someone_is_present():
    alone = _room(Hooks())
    joining = Capture()
    alone.attach(make_peer(joining))
    assert not [m for m in joining.decoded() if isinstance(m, Awareness)]
    elsewhere = _room(Hooks([Recorder()]))
    joining = Capture()
    elsewhere.attach(make_peer(joining))  # nobody here, but someone on another node
    assert _snapshot_ids(joining) == [ELSEWHERE.client_id]


async def test_before_read_is_awaited_and_a_failing_one_leaves_the_read_to_go_on(caplog):
    recorder = Recorder()
    hooks = Hooks([Broken(), recorder])
    with caplog.at_level(logging.ERROR):
        await hooks.before_read(_room(hooks))
    assert recorder.seen == [("before_read", "doc")]
    assert "before_read hook failed in Broken" in caplog.text


async def test_deleting_a_document_here_or_on_another_node_runs_on_deleted(caplog):
    recorder = Recorder()
    hooks = Hooks([Broken(), recorder])
    async with MemoryStore() as store:
        rooms = RoomManager(store, hooks=hooks, metrics=Metrics(), settings=room_settings(100))
        await rooms.acquire("here")
        await rooms.acquire("there")
        with caplog.at_level(logging.ERROR):
            await rooms.delete("here", "document deleted")
            assert recorder.seen == [("deleted", "here")]
            await rooms.discard("there", "document deleted")  # another node deleted it
        assert recorder.seen == [("deleted", "here"), ("deleted", "there")]
        assert "on_deleted hook failed in Broken" in caplog.text
        assert not rooms.rooms
        await rooms.close()


async def test_without_extensions_the_hooks_answer_nothing():
    hooks = Hooks()
    room = _room(hooks)
    assert hooks.remote_presence(room) == []
    hooks.on_presence(room, b"")
    hooks.on_deleted("doc")
    await hooks.before_read(room)

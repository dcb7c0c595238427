"""The AI engine's work on a big rich document, per keystroke and per ask (issue 37): the real
engine, scheduler and scripted provider on a real pycrdt document and update guard, driven
through its hooks as a room drives it. Blocks rendered are counted, not time."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator

import pytest
from prometheus_client import CollectorRegistry
from pycrdt import Doc, XmlFragment

from tether.ai.engine import AiEngine
from tether.ai.metrics import AiMetrics
from tether.ai.model.providers.scripted import ScriptedProvider
from tether.ai.settings import AiSettings
from tether.ai.suggest.scheduler import Scheduler
from tether.collab.auth.tokens import OPEN_GRANT
from tether.collab.updates.guard import UpdateGuard
from tether.protocol.updates.update_scan import scan_update
from tether.protocol.wire.ai_messages import Suggest
from tether.protocol.wire.relative_position import RelativePosition

from .test_rich_windows import rich_update, sentence

pytestmark = pytest.mark.anyio

PARAGRAPHS = 20_000


class Room:
    """What the engine reads of a room: its document, update guard and settings."""

    name = "big-rich"

    def __init__(self, update: bytes) -> None:
        self.doc = Doc()
        self.doc.apply_update(update)
        self.guard = UpdateGuard(128)
        scan = scan_update(update)
        self.guard.admit(scan, self.guard.check(scan))
        self.settings = type("Settings", (), {"rich_fragment": "default"})()
        self.reloading = False

    def apply(self, update: bytes, origin: object) -> None:
        scan = scan_update(update)
        parents = self.guard.check(scan)
        with self.doc.transaction(origin=origin):
            self.doc.apply_update(update)
        self.guard.admit(scan, parents)


class Peer:
    def __init__(self, peer_id: int) -> None:
        self.peer_id = peer_id
        self.outbox = object()
        self.grant = OPEN_GRANT
        self.writable = True
        self.sent: asyncio.Queue[dict] = asyncio.Queue()

    def send_stateless(self, payload: str) -> None:
        self.sent.put_nowait(json.loads(payload))


@pytest.fixture(scope="module")
def big() -> bytes:
    return rich_update([sentence(n) for n in range(PARAGRAPHS)])


@pytest.fixture
async def engine() -> AsyncIterator[AiEngine]:
    settings = AiSettings(stop_rule="tokens", heal=False, junk_filter=False, prefetch_seconds=0)
    async with Scheduler(8) as scheduler:
        provider = ScriptedProvider([" and", " the", " tide"], delay=0.01)
        ai = AiEngine(provider, scheduler, AiMetrics(CollectorRegistry()), settings)
        yield ai
        ai.close()


async def answer(peer: Peer, request_id: str) -> tuple[str, dict]:
    text = ""
    while True:
        message = await asyncio.wait_for(peer.sent.get(), 10)
        if message.get("id") != request_id:
            continue
        if message["type"] == "suggestion.delta":
            text += message["text"]
        elif message["type"] in ("suggestion.end", "suggestion.error"):
            return text, message


async def test_typing_and_asking_at_the_end_of_a_big_rich_document_renders_what_changed(
    engine: AiEngine, big: bytes
) -> None:
    room = Room(big)
    editor = Doc()
    editor.apply_update(big)
    updates: list[bytes] = []
    editor.observe(lambda event: updates.append(event.update))
    fragment = editor.get("default", type=XmlFragment)
    last = fragment.children[PARAGRAPHS - 1].children[0]
    peer = Peer(1)
    await engine.on_load(room)
    state = engine.flights.room_state(room)
    assert state.document.reader.rendered == 0  # loading reads nothing of a rich document
    renders: list[int] = []
    for key in range(8):
        last.insert(len(last), f" w{key}")
        update = updates.pop()
        room.apply(update, peer)
        engine.on_change(room, update, peer)
        clock = scan_update(update).items[-1].clock + len(f" w{key}") - 1
        anchor = RelativePosition(item=(editor.client_id, clock), assoc=-1).encode()
        before = state.document.reader.rendered
        request = Suggest(f"r{key}", "complete", anchor=base64.b64encode(anchor).decode())
        await engine.on_stateless(room, peer, request.encode())
        text, end = await answer(peer, f"r{key}")
        renders.append(state.document.reader.rendered - before)
        assert end["type"] == "suggestion.end" and text == " and the tide", end
    prompt = engine.provider.prompts[-1].prompt  # type: ignore[attr-defined]
    assert prompt.endswith(sentence(PARAGRAPHS - 1) + "".join(f" w{k}" for k in range(8)))
    assert sentence(0) in prompt  # the opening paragraph says what the document is
    assert len(prompt) < 4 * engine.settings.context_budget_tokens + 1_000
    # The first ask reads its window (a hundred blocks of 20,000); each one after, the block
    # typed in.
    assert renders[0] < 150 and renders[1:] == [1] * 7, renders


async def test_an_anchor_beside_an_inline_node_is_refused_before_anything_is_read(
    engine: AiEngine,
) -> None:
    writer = Doc()
    fragment = writer.get("default", type=XmlFragment)
    with writer.transaction() as txn:
        native, raw = fragment.integrated, txn._txn
        for number in reversed(range(2_000)):
            native.insert_element_prelim(raw, 0, "paragraph").insert_str(raw, 0, sentence(number))
    clock = scan_update(writer.get_update()).ends[writer.client_id]
    with writer.transaction() as txn:
        native, raw = fragment.integrated, txn._txn
        paragraph = native.insert_element_prelim(raw, 2_000, "paragraph")  # clock
        paragraph.insert_element_prelim(raw, 0, "mention")  # + 1: no text on either side
        labelled = native.insert_element_prelim(raw, 2_001, "paragraph")  # + 2
        labelled.insert_str(raw, 0, "See ")  # + 3, its text + 4 to + 7
        mentioned = labelled.insert_element_prelim(raw, 1, "mention")  # + 8
        mentioned.insert_str(raw, 0, "Ada Lovelace")  # + 9, its text from + 10
    update = writer.get_update()
    mention = (writer.client_id, clock + 1)
    label = (writer.client_id, clock + 10)
    room = Room(update)
    peer = Peer(1)
    document = engine.flights.room_state(room).document
    anchor = base64.b64encode(RelativePosition(item=mention).encode()).decode()
    await engine.on_stateless(room, peer, Suggest("inline", "complete", anchor=anchor).encode())
    _, end = await answer(peer, "inline")
    assert end["type"] == "suggestion.error" and end["code"] == "bad_request", end
    assert "beside an inline node" in end["message"]
    assert document.reader.rendered == 0
    # A cursor in the text of an inline node (a mention's label): found, then refused; asked
    # again, it costs one block, not a window, let alone the document.
    anchor = base64.b64encode(RelativePosition(item=(label[0], label[1] + 4)).encode()).decode()
    for attempt in range(2):
        rendered = document.reader.rendered
        request = Suggest(f"label{attempt}", "complete", anchor=anchor)
        await engine.on_stateless(room, peer, request.encode())
        _, end = await answer(peer, f"label{attempt}")
        assert end["code"] == "bad_request" and "inside an inline node" in end["message"], end
    assert document.reader.rendered - rendered == 1


class Watched(ScriptedProvider):
    """Scripted, and it says when it is asked."""

    def __init__(self) -> None:
        super().__init__([" and", " the", " tide"])
        self.asked = asyncio.Event()

    async def stream(self, request, cancel):  # type: ignore[no-untyped-def]
        self.asked.set()
        async for piece in super().stream(request, cancel):
            yield piece


async def test_after_a_fix_further_up_a_pause_prefetches_where_the_fix_ended(big: bytes) -> None:
    """The server sees edits, not cursors: an editor that asked at the end, then fixed a word
    a few paragraphs up and paused, is guessed to be at the fix's end (the block it touched,
    its text before against after), as on a plain document."""
    settings = AiSettings(stop_rule="tokens", heal=False, junk_filter=False, prefetch_seconds=0.05)
    async with Scheduler(8) as scheduler:
        provider = Watched()
        ai = AiEngine(provider, scheduler, AiMetrics(CollectorRegistry()), settings)
        room = Room(big)
        editor = Doc()
        editor.apply_update(big)
        updates: list[bytes] = []
        editor.observe(lambda event: updates.append(event.update))
        fragment = editor.get("default", type=XmlFragment)
        peer = Peer(1)

        def typed(block: int, at: int, words: str) -> bytes:
            fragment.children[block].children[0].insert(at, words)
            update = updates.pop()
            room.apply(update, peer)
            ai.on_change(room, update, peer)
            return update

        last = PARAGRAPHS - 1
        update = typed(last, len(sentence(last)), " x")
        clock = scan_update(update).items[-1].clock + 1
        anchor = RelativePosition(item=(editor.client_id, clock), assoc=-1).encode()
        request = Suggest("asked", "complete", anchor=base64.b64encode(anchor).decode())
        await ai.on_stateless(room, peer, request.encode())
        await answer(peer, "asked")
        provider.asked.clear()
        typed(last - 5, len("The harbour keeper"), " gladly")  # a fix five paragraphs up
        await asyncio.wait_for(provider.asked.wait(), 10)
        prompt = provider.prompts[-1].prompt
        # (" gladly" typed after "keeper" reads as "gladly " typed before " watched" too.)
        assert prompt.endswith("The harbour keeper gladly "), prompt[-80:]
        prefetch = ai.flights.rooms[room.name].prefetches[peer.peer_id]
        assert prefetch.job is not None
        await asyncio.wait([prefetch.job], timeout=10)  # its stream ends before the engine
        ai.close()


async def test_an_update_that_integrates_a_pending_one_makes_the_next_ask_read_afresh(
    engine: AiEngine,
) -> None:
    """Another node's update whose dependency never came is applied as pending (the room
    holds it); yrs integrates it inside whichever update completes it, which says nothing of
    the pending one's blocks: while one is held, nothing is followed, so no stale block is
    read into a prompt."""
    original = rich_update([sentence(n) for n in range(200)])
    room = Room(original)
    room.holds_pending = False
    editor = Doc()
    editor.apply_update(original)
    updates: list[bytes] = []
    editor.observe(lambda event: updates.append(event.update))
    fragment = editor.get("default", type=XmlFragment)
    fragment.children[150].children[0].insert(0, "Fog. ")  # first: what completes the rest
    completing = updates.pop()
    fragment.children[120].children[0].insert(0, "Storm warning. ")  # depends on the first
    pending = updates.pop()
    peer = Peer(1)
    # The cursor: after the last character of paragraph 121, an item of the original.
    ident = _item_of(original, 121, len(sentence(121)) - 1)
    anchor = base64.b64encode(RelativePosition(item=ident, assoc=-1).encode()).decode()
    await engine.on_stateless(room, peer, Suggest("warm", "complete", anchor=anchor).encode())
    await answer(peer, "warm")  # the window around paragraph 121 is read and kept
    with room.doc.transaction(origin=None):
        room.doc.apply_update(pending)  # what the room's pending path does: no hook runs
    room.holds_pending = True
    room.apply(completing, peer)  # yrs integrates the pending update now too
    engine.on_change(room, completing, peer)
    await engine.on_stateless(room, peer, Suggest("after", "complete", anchor=anchor).encode())
    _, end = await answer(peer, "after")
    assert end["type"] == "suggestion.end", end
    prompt = engine.provider.prompts[-1].prompt  # type: ignore[attr-defined]
    assert "Storm warning. " + sentence(120) in prompt


def _item_of(update: bytes, paragraph: int, offset: int) -> tuple[int, int]:
    """The ID of character ``offset`` of ``paragraph``'s text in a document ``rich_update``
    wrote (last paragraph first, each text one item)."""
    texts = [item for item in scan_update(update).items if not item.makes_type]
    chosen = texts[len(texts) - 1 - paragraph]
    assert chosen.length > offset
    return chosen.client, chosen.clock + offset

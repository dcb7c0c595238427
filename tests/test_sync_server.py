"""Sync behaviour of the real server with raw Python editors (websockets + pycrdt)."""

from __future__ import annotations

import asyncio
import uuid

import anyio
import pytest

from tests.rawpeer import MuxPeer, sync_frames
from tests.serverproc import ServerProcess
from tether.protocol.wire.messages import SyncStatus
from tether.protocol.wire.sync_payloads import SyncStep2

pytestmark = pytest.mark.anyio


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def test_several_editors_with_several_documents_each_converge(server: ServerProcess):
    names = [unique("conv") for _ in range(3)]
    token = server.token(names)
    with anyio.fail_after(30):
        peers = [await MuxPeer.connect(server.ws_url) for _ in range(3)]
        try:
            docs = [[await p.open(n, token) for n in names] for p in peers]

            async def burst(i: int) -> None:
                for j in range(15):
                    for d in docs[i]:
                        await d.append(f"<{i}.{j}é😀>")

            await asyncio.gather(*(burst(i) for i in range(3)))
            for row in docs:
                for d in row:
                    await d.wait_acked()
                    assert all(d.statuses), "every update of a writer is applied"
            for col in range(len(names)):
                texts = [row[col] for row in docs]
                for d in texts:
                    await d.wait_text(lambda t: t.count("<") == 45)
                assert len({str(d) for d in texts}) == 1, "all editors see the same text"
                final = str(texts[0])
                for i in range(3):
                    for j in range(15):
                        assert f"<{i}.{j}é😀>" in final
        finally:
            for p in peers:
                await p.aclose()


async def test_a_late_joiner_receives_the_full_state(server: ServerProcess):
    name = unique("late")
    token = server.token([name])
    with anyio.fail_after(20):
        async with await MuxPeer.connect(server.ws_url) as early:
            doc = await early.open(name, token)
            for k in range(50):
                await doc.append(f"line {k} ✓\n")
            await doc.wait_acked()
            expected = str(doc)
        async with await MuxPeer.connect(server.ws_url) as late:
            joined = await late.open(name, token)
            assert str(joined) == expected


async def test_two_editors_opening_a_new_document_at_the_same_instant_both_sync(
    server: ServerProcess,
):
    names = [unique("race") for _ in range(8)]
    token = server.token(names)
    with anyio.fail_after(20):
        a = await MuxPeer.connect(server.ws_url)
        b = await MuxPeer.connect(server.ws_url)
        try:
            pairs = await asyncio.gather(
                *(asyncio.gather(a.open(n, token), b.open(n, token)) for n in names)
            )
            for da, db in pairs:
                await da.append("from a;")
                await db.append("from b;")
            for da, db in pairs:
                for d in (da, db):
                    await d.wait_text(lambda t: "from a;" in t and "from b;" in t)
                assert str(da) == str(db)
        finally:
            await a.aclose()
            await b.aclose()


async def test_close_detaches_only_that_document(server: ServerProcess):
    closed_name, kept_name = unique("closed"), unique("kept")
    token = server.token([closed_name, kept_name])
    with anyio.fail_after(20):
        async with (
            await MuxPeer.connect(server.ws_url) as leaver,
            await MuxPeer.connect(server.ws_url) as other,
        ):
            l_closed = await leaver.open(closed_name, token)
            l_kept = await leaver.open(kept_name, token)
            o_closed = await other.open(closed_name, token)
            o_kept = await other.open(kept_name, token)
            await l_closed.set_awareness({"user": "leaver"})
            await o_closed.wait(lambda: l_closed.doc.client_id in o_closed.awareness)

            await leaver.detach(closed_name)
            await o_closed.wait(
                lambda: l_closed.doc.client_id not in o_closed.awareness,
                what="the leaver's presence to be removed on Close",
            )
            frames_before = len(l_closed.frames)
            # The edit to the closed document is fanned out before the one to the kept
            # document (same sender, processed in order), so once the second arrives, the
            # first would have arrived too had the leaver still been attached.
            await o_closed.append("after close")
            await o_kept.append("still here")
            await l_kept.wait_text("still here")
            assert str(l_closed) == ""
            assert l_closed.frames[frames_before:] == []

            # The kept document still works both ways on the same socket.
            await l_kept.append("!")
            await l_kept.wait_acked()
            assert l_kept.statuses[-1] is True
            await o_kept.wait_text("still here!")

            # And the closed one can be reopened on the same socket and resyncs.
            reopened = await leaver.open(closed_name, token)
            assert str(reopened) == "after close"
            assert leaver.closed is False


async def test_a_reconnecting_editor_resyncs_by_state_vector_and_keeps_offline_edits(
    server: ServerProcess,
):
    name = unique("reconnect")
    token = server.token([name])
    with anyio.fail_after(20):
        async with await MuxPeer.connect(server.ws_url) as other:
            o = await other.open(name, token)
            first = await MuxPeer.connect(server.ws_url)
            d = await first.open(name, token)
            await d.append("x" * 20_000)
            await d.wait_acked()
            await o.wait_text(lambda t: len(t) == 20_000)
            await first.aclose()

            # Offline: the editor keeps its Doc and edits it; meanwhile the other edits too.
            d.edit(lambda text: text.insert(0, "offline→"))
            await o.append("online")
            await o.wait_acked()

            second = await MuxPeer.connect(server.ws_url)
            try:
                second.docs[name] = d
                d.peer = second
                d.frames.clear()
                d.statuses.clear()
                d.sent_updates = 0
                await second.open(name, token)
                expected = "offline→" + "x" * 20_000 + "online"
                await d.wait_text(expected)
                await o.wait_text(expected)
                # The server sent only what the state vector lacked, not the 20 kB again.
                step2 = [f.message for f in sync_frames(d) if isinstance(f.message, SyncStep2)]
                assert len(step2) == 1 and len(step2[0].update) < 1000
                # The offline edit went up in our step2 reply and was durably acknowledged.
                await d.wait_acked()
                acks = [f for f in d.frames if isinstance(f, SyncStatus)]
                assert acks and all(a.applied for a in acks)
            finally:
                await second.aclose()

"""Presence (awareness) against the real server: bounded growth and who may speak for an id
(issue 10, items 6 and 13).

Every wait is on a frame: the watcher sees a broadcast, or a later presence of the same socket
(frames of one socket are handled in order) proves the earlier ones were handled.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import anyio
import pytest

from tests.metrics_scrape import metric_value, metrics_text
from tests.rawpeer import MuxPeer, RawDoc, YwsPeer
from tests.serverproc import ServerProcess
from tether.collab.auth.tokens import make_token
from tether.protocol.wire.sync_payloads import AwarenessEntry, encode_awareness

pytestmark = pytest.mark.anyio

DOCUMENT_BYTES = 100 * 1024
BIG = 15 * 1024  # under the 16 KiB entry bound; four fill the 64 KiB share


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    # Default per-connection bounds (8 ids, 16 KiB an entry, 64 KiB); a small document bound.
    with ServerProcess(
        tmp_path_factory.mktemp("presence"), awareness_document_bytes=DOCUMENT_BYTES
    ) as proc:
        yield proc


def state(tag: str, size: int = 0) -> str:
    body = json.dumps({"user": tag, "pad": ""})
    return json.dumps({"user": tag, "pad": "p" * max(0, size - len(body))})


def entries(*items: tuple[int, int, str]) -> bytes:
    return encode_awareness([AwarenessEntry(cid, clock, text) for cid, clock, text in items])


async def connect_as(server: ServerProcess, endpoint: str, name: str, token: str):
    """A peer on either endpoint, synced, with a ``send_presence(update)`` and its RawDoc."""
    if endpoint == "ws":
        peer = await MuxPeer.connect(server.ws_url)
        doc = await peer.open(name, token)
    else:
        peer = await YwsPeer.connect(server.yjs_url, name, token)
        doc = peer.single
        await doc.wait_synced()
    return peer, doc


async def refusals(server: ServerProcess, limit: str) -> float:
    return metric_value(await metrics_text(server), "tether_limit_refusals_total", limit=limit)


def shown_bytes(doc: RawDoc, ids: range) -> int:
    return sum(len(doc.awareness[cid].encode()) for cid in ids if cid in doc.awareness)


# ---- item 6: growth ----------------------------------------------------------------------------


@pytest.mark.parametrize("endpoint", ["ws", "yjs"])
async def test_one_connection_shows_at_most_its_ids_and_bytes_and_a_joiner_gets_no_more(
    srv: ServerProcess, endpoint: str
):
    name = unique("grow")
    token = srv.token([name])
    ids = range(1000, 1016)
    with anyio.fail_after(30):
        async with await MuxPeer.connect(srv.ws_url) as watching:
            w = await watching.open(name, token)
            attacker, a = await connect_as(srv, endpoint, name, token)
            async with attacker:
                send = a.peer.send_awareness
                # 16 ids at once: 8 are shown.
                await send(name, entries(*[(cid, 1, state("a")) for cid in ids]))
                # Then try to grow its 8 to 15 KiB each, 20 times over (clocks rising), and one
                # entry over 16 KiB.
                for clock in range(2, 22):
                    await send(name, entries(*[(cid, clock, state("a", BIG)) for cid in ids]))
                await send(name, entries((ids[0], 30, state("huge", 17 * 1024))))
                # A barrier: a small update of one of its own ids, sent last.
                await send(name, entries((ids[7], 40, state("last"))))
                await w.wait(
                    lambda: json.loads(w.awareness.get(ids[7], "{}")).get("user") == "last",
                    what="the attacker's last presence",
                )
                assert len([cid for cid in ids if cid in w.awareness]) == 8
                assert shown_bytes(w, ids) <= 64 * 1024
                async with await MuxPeer.connect(srv.ws_url) as late:
                    j = await late.open(name, token)
                    await j.wait(lambda: ids[7] in j.awareness, what="the joiner's snapshot")
                    assert len([cid for cid in ids if cid in j.awareness]) == 8
                    assert shown_bytes(j, ids) <= 64 * 1024
                    assert json.loads(j.awareness[ids[0]])["user"] != "huge"
    for limit in ("awareness_ids_per_peer", "awareness_peer_bytes", "awareness_entry_bytes"):
        assert await refusals(srv, limit) >= 1, limit


async def test_the_channels_of_one_socket_share_its_presence_bounds(srv: ServerProcess):
    """doc\\0s1 … doc\\0s4 on one socket are one connection: 8 ids between them, not 8 each."""
    name = unique("sessions")
    token = srv.token([name])
    with anyio.fail_after(20):
        async with (
            await MuxPeer.connect(srv.ws_url) as watching,
            await MuxPeer.connect(srv.ws_url) as many,
        ):
            w = await watching.open(name, token)
            for s in range(4):
                channel = f"{name}\0s{s}"
                await many.open(channel, token)
                ids = [2000 + 10 * s + k for k in range(4)]
                await many.send_awareness(channel, entries(*[(cid, 1, "{}") for cid in ids]))
            await many.send_awareness(f"{name}\0s0", entries((2000, 2, state("last"))))
            await w.wait(lambda: "last" in w.awareness.get(2000, ""), what="the barrier")
            assert len([cid for cid in w.awareness if 2000 <= cid < 2100]) == 8


async def test_the_document_bound_caps_what_all_connections_show_together(srv: ServerProcess):
    name = unique("full")
    token = srv.token([name])
    with anyio.fail_after(20):
        async with (
            await MuxPeer.connect(srv.ws_url) as watching,
            await MuxPeer.connect(srv.ws_url) as first,
            await MuxPeer.connect(srv.ws_url) as second,
        ):
            w = await watching.open(name, token)
            for peer, base in ((first, 3000), (second, 3100)):
                await peer.open(name, token)
                big = [(base + k, 1, state("big", BIG)) for k in range(4)]
                await peer.send_awareness(name, entries(*big))
                await peer.send_awareness(name, entries((base + 7, 1, state("small"))))
                await w.wait(lambda b=base: b + 7 in w.awareness, what=f"barrier {base}")
            assert shown_bytes(w, range(3000, 3200)) <= DOCUMENT_BYTES
            assert len([c for c in range(3000, 3004) if c in w.awareness]) == 4  # first came
            assert len([c for c in range(3100, 3104) if c in w.awareness]) < 4
    assert await refusals(srv, "awareness_document_bytes") >= 1


# ---- item 13: takeover -------------------------------------------------------------------------


@pytest.mark.parametrize("endpoint", ["ws", "yjs"])
async def test_another_subject_cannot_claim_an_offline_editors_id_and_the_editor_is_shown_on_return(
    srv: ServerProcess, endpoint: str
):
    name = unique("offline")
    alice = make_token(srv.secret, [name], subject="alice")
    mallory = make_token(srv.secret, [name], subject="mallory", scope="readonly")
    victim_id = 424_001
    with anyio.fail_after(20):
        async with await MuxPeer.connect(srv.ws_url) as watching:
            w = await watching.open(name, srv.token([name]))
            victim = await MuxPeer.connect(srv.ws_url)
            await victim.open(name, alice)
            await victim.send_awareness(name, entries((victim_id, 1, state("alice"))))
            await w.wait(lambda: victim_id in w.awareness, what="the victim's presence")
            await victim.aclose()
            await w.wait(lambda: victim_id not in w.awareness, what="the victim leaving")

            attacker, a = await connect_as(srv, endpoint, name, mallory)
            async with attacker:
                await a.peer.send_awareness(name, entries((victim_id, 99, state("mallory"))))
                await a.peer.send_awareness(name, entries((424_999, 1, state("mallory-own"))))
                await w.wait(lambda: 424_999 in w.awareness, what="the attacker's own presence")
                assert victim_id not in w.awareness, "the attacker took the offline id"

                back = await MuxPeer.connect(srv.ws_url)
                async with back:
                    await back.open(name, alice)
                    # Its clock must pass the one it left with (the server's null had 2), as
                    # y-protocols clients require too; a provider's renewal does that.
                    await back.send_awareness(name, entries((victim_id, 3, state("alice back"))))
                    await w.wait(lambda: victim_id in w.awareness, what="the victim's return")
                    assert json.loads(w.awareness[victim_id])["user"] == "alice back"
    assert await refusals(srv, "presence_owner") >= 1


async def test_the_same_subject_takes_its_id_over_from_a_socket_that_still_looks_alive(
    srv: ServerProcess,
):
    """A reconnecting provider keeps its client id; its old socket may not have timed out yet."""
    name = unique("takeover")
    alice = make_token(srv.secret, [name], subject="alice")
    with anyio.fail_after(20):
        async with await MuxPeer.connect(srv.ws_url) as watching:
            w = await watching.open(name, srv.token([name]))
            stale = await MuxPeer.connect(srv.ws_url)
            await stale.open(name, alice)
            # The stale socket shows the id and a second one, whose removal marks its detach.
            await stale.send_awareness(name, entries((5001, 1, state("old")), (5002, 1, "{}")))
            await w.wait(lambda: 5002 in w.awareness, what="the stale socket's presence")
            async with await MuxPeer.connect(srv.ws_url) as fresh:
                await fresh.open(name, alice)
                await fresh.send_awareness(name, entries((5001, 2, state("new"))))
                await w.wait(lambda: "new" in w.awareness.get(5001, ""), what="the takeover")
                await stale.aclose()
                await w.wait(lambda: 5002 not in w.awareness, what="the stale socket's detach")
                assert json.loads(w.awareness[5001])["user"] == "new", "the new owner kept it"


async def test_with_auth_none_every_connection_is_one_subject_and_may_take_any_id_over(tmp_path):
    """No identities to protect presence with: the latest claim wins (as anyone may edit)."""
    with ServerProcess(tmp_path, auth="none") as server:
        name = unique("anon")
        with anyio.fail_after(20):
            async with (
                await MuxPeer.connect(server.ws_url) as one,
                await MuxPeer.connect(server.ws_url) as other,
            ):
                a = await one.open(name, "")
                await other.open(name, "")
                await one.send_awareness(name, entries((6001, 1, state("one"))))
                await a.wait(lambda: 6001 in a.awareness, what="one's presence")
                await other.send_awareness(name, entries((6001, 2, state("other"))))
                await a.wait(lambda: "other" in a.awareness.get(6001, ""), what="the takeover")


async def test_after_a_restart_a_reader_cannot_take_the_id_a_writer_typed_under(tmp_path):
    """Issue 26, finding 11: claims live in memory, so after a restart a readonly attacker who
    showed a victim's client id first kept it for an hour. An id with clocks in the document's
    history is a writer's: a reader is refused it, bound or not."""
    name = unique("restarted")
    with ServerProcess(tmp_path) as server:
        alice = make_token(server.secret, [name], subject="alice")
        mallory = make_token(server.secret, [name], subject="mallory", scope="readonly")
        with anyio.fail_after(30):
            async with await MuxPeer.connect(server.ws_url) as writer:
                doc = await writer.open(name, alice)
                await doc.append("typed by alice")
                await doc.wait_acked()
                victim_id = doc.doc.client_id
            server.restart()
            async with (
                await MuxPeer.connect(server.ws_url) as watching,
                await MuxPeer.connect(server.ws_url) as attacker,
            ):
                w = await watching.open(name, server.token([name]))
                await attacker.open(name, mallory)
                await attacker.send_awareness(name, entries((victim_id, 1, state("mallory"))))
                await attacker.send_awareness(name, entries((424_777, 1, state("mallory-own"))))
                await w.wait(lambda: 424_777 in w.awareness, what="the attacker's own presence")
                assert victim_id not in w.awareness, "a reader took the writer's id"
                async with await MuxPeer.connect(server.ws_url) as back:
                    await back.open(name, alice)
                    await back.send_awareness(name, entries((victim_id, 2, state("alice"))))
                    await w.wait(lambda: victim_id in w.awareness, what="the writer's return")
        assert await refusals(server, "presence_owner") >= 1

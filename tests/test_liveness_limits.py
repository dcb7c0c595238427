"""Liveness and limits: idle and auth timeouts, documents per socket, slow readers, presence."""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from collections.abc import Iterator

import anyio
import psutil
import pytest
from pycrdt import Doc, Text
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.rawpeer import MuxPeer, RawDoc, sync_frames
from tests.serverproc import ServerProcess
from tether.protocol.wire.messages import AuthToken, Awareness, Sync
from tether.protocol.wire.sync_payloads import (
    AwarenessEntry,
    SyncStep1,
    SyncUpdate,
    encode_awareness,
)
from tether.protocol.wire.yws_frames import YAwareness, YSync

pytestmark = pytest.mark.anyio

IDLE_TIMEOUT = 1.5
PING_INTERVAL = 0.25
AUTH_TIMEOUT = 1.0


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def lively(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(
        tmp_path_factory.mktemp("lively"),
        idle_timeout=IDLE_TIMEOUT,
        ping_interval=PING_INTERVAL,
        auth_timeout=AUTH_TIMEOUT,
        max_documents_per_connection=3,
    ) as proc:
        yield proc


async def test_a_client_that_never_answers_pings_is_closed_after_the_idle_timeout_and_its_presence_removed(  # noqa: E501
    lively: ServerProcess,
):
    name = unique("idle")
    token = lively.token([name])
    with anyio.fail_after(15):
        async with (
            await MuxPeer.connect(lively.ws_url, answer_pings=False) as mute,
            await MuxPeer.connect(lively.ws_url) as watcher,
        ):
            w = await watcher.open(name, token)
            m = await mute.open(name, token)
            await m.set_awareness({"user": "mute"})
            await w.wait(lambda: m.doc.client_id in w.awareness, what="mute's presence")
            silent_since = time.monotonic()
            code = await mute.wait_closed(timeout=IDLE_TIMEOUT + 3)
            elapsed = time.monotonic() - silent_since
            assert code == 4000, mute.close_reason
            assert mute.pings >= 2, "the server pinged before giving up"
            assert IDLE_TIMEOUT * 0.8 <= elapsed <= IDLE_TIMEOUT + 1.5
            await w.wait(
                lambda: m.doc.client_id not in w.awareness,
                what="the closed peer's presence to be removed",
            )
            assert not watcher.closed


async def test_a_client_that_answers_pings_stays_open_past_the_idle_timeout(lively: ServerProcess):
    name = unique("alive")
    with anyio.fail_after(15):
        async with await MuxPeer.connect(lively.ws_url) as peer:
            doc = await peer.open(name, lively.token([name]))
            start = time.monotonic()
            wanted = int(2 * IDLE_TIMEOUT / PING_INTERVAL)
            await peer.watch.until(lambda: peer.pings >= wanted or peer.closed, 10, "pings")
            assert not peer.closed, (peer.close_code, peer.close_reason)
            assert time.monotonic() - start > IDLE_TIMEOUT
            await doc.append("still alive")
            await doc.wait_acked()
            assert doc.statuses[-1] is True


async def test_a_socket_that_sends_step1_but_no_token_is_closed_after_the_auth_timeout(
    lively: ServerProcess,
):
    with anyio.fail_after(10):
        async with await MuxPeer.connect(lively.ws_url) as peer:
            start = time.monotonic()
            await peer.send(Sync(unique("tokenless"), SyncStep1(b"\x00")).encode())
            code = await peer.wait_closed(timeout=AUTH_TIMEOUT + 3)
            elapsed = time.monotonic() - start
            assert code == 4001, peer.close_reason
            assert AUTH_TIMEOUT * 0.8 <= elapsed <= AUTH_TIMEOUT + 1.5
            assert all(not d.frames for d in peer.docs.values()), "nothing of the document"


async def test_a_socket_that_never_names_a_document_is_closed_after_the_auth_timeout(
    lively: ServerProcess,
):
    with anyio.fail_after(10):
        async with await MuxPeer.connect(lively.ws_url) as peer:
            assert await peer.wait_closed(timeout=AUTH_TIMEOUT + 3) == 4001


async def test_a_document_slow_to_authenticate_does_not_close_the_socket_while_others_flow(
    lively: ServerProcess,
):
    """Only a channel that never sends its token counts, not traffic on open channels."""
    name = unique("open")
    with anyio.fail_after(10):
        async with await MuxPeer.connect(lively.ws_url) as peer:
            doc = await peer.open(name, lively.token([name]))
            start = time.monotonic()
            while time.monotonic() - start < AUTH_TIMEOUT * 1.5:
                await doc.append(".")
                await doc.wait_acked()
            assert not peer.closed


async def test_opening_more_documents_than_allowed_refuses_only_the_extra_one(
    lively: ServerProcess,
):
    names = [unique("many") for _ in range(4)]
    token = lively.token(names)
    with anyio.fail_after(10):
        async with await MuxPeer.connect(lively.ws_url) as peer:
            opened = [await peer.open(name, token) for name in names[:3]]
            extra = await peer.attach(names[3], token)
            await extra.wait(lambda: extra.denied is not None, what="the refusal")
            assert extra.denied is not None and "too many documents" in extra.denied
            assert await peer.alive()  # the socket stays
            await opened[0].append("the others still sync")
            await opened[0].wait_acked()
            assert opened[0].statuses[-1] is True
            assert not extra.synced


async def test_closing_a_document_frees_its_slot(lively: ServerProcess):
    names = [unique("slot") for _ in range(4)]
    token = lively.token(names)
    with anyio.fail_after(10):
        async with await MuxPeer.connect(lively.ws_url) as peer:
            for name in names[:3]:
                await peer.open(name, token)
            await peer.detach(names[0])
            fourth = await peer.open(names[3], token)
            await fourth.append("fits")
            await fourth.wait_acked()
            assert fourth.statuses[-1] is True and not peer.closed


async def test_awareness_of_a_peer_whose_connection_drops_is_removed_for_others(
    lively: ServerProcess,
):
    name = unique("drop")
    token = lively.token([name])
    with anyio.fail_after(10):
        async with await MuxPeer.connect(lively.ws_url) as watcher:
            w = await watcher.open(name, token)
            for ending in ("abort", "close"):
                leaver = await MuxPeer.connect(lively.ws_url)
                d = await leaver.open(name, token)
                await d.set_awareness({"user": ending})
                await w.wait(lambda d=d: d.doc.client_id in w.awareness)
                if ending == "abort":
                    leaver.ws.transport.abort()  # TCP reset: no close frame, no awareness null
                await leaver.aclose()
                await w.wait(
                    lambda d=d: d.doc.client_id not in w.awareness,
                    what=f"presence removal after {ending}",
                )


# ---- slow consumers -------------------------------------------------------------------------

FLOOD_CHUNK = 32 * 1024
FLOOD_UPDATES = 256  # 8 MiB: well past the loopback socket buffers (about 4 MiB here)


@pytest.fixture
def slow_server(tmp_path) -> Iterator[ServerProcess]:
    # Long ping/idle so that only the send queue can end the non-reading connection.
    with ServerProcess(tmp_path, send_queue_frames=64, ping_interval=20, idle_timeout=60) as srv:
        yield srv


async def open_non_reading_socket(server: ServerProcess, endpoint: str, name: str, token: str):
    """A socket with a tiny receive buffer that opens ``name`` and then never reads.

    No permessage-deflate: the flood must take real space in the socket buffers. It says who it
    is (awareness client 424242) before it stops reading.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", server.port))
    url = server.ws_url if endpoint == "ws" else f"{server.yjs_url}/{name}?token={token}"
    ws = await connect(url, sock=sock, max_queue=1, max_size=None, compression=None)
    presence = encode_awareness([AwarenessEntry(STUCK_CLIENT, 1, '{"user":"stuck"}')])
    if endpoint == "ws":
        await ws.send(AuthToken(name, token).encode())
        await ws.send(Sync(name, SyncStep1(b"\x00")).encode())
        await ws.send(Awareness(name, presence).encode())
    else:
        await ws.send(YSync(SyncStep1(b"\x00")).encode())
        await ws.send(YAwareness(presence).encode())
    return ws


STUCK_CLIENT = 424242


def flood_updates() -> list[bytes]:
    """Independent inserts from fresh documents: cheap to make, 32 KiB each on the wire."""
    updates = []
    for k in range(FLOOD_UPDATES):
        doc = Doc()
        doc.get("content", type=Text).insert(0, chr(ord("a") + k % 26) * FLOOD_CHUNK)
        updates.append(doc.get_update())
    return updates


async def flood(editor: RawDoc) -> float:
    start = time.monotonic()
    for k, update in enumerate(flood_updates()):
        await editor.send_update(update)
        if k % 32 == 31:
            await editor.wait_acked(timeout=10)
    await editor.wait_acked(timeout=10)
    return time.monotonic() - start


def updates_received(doc: RawDoc) -> int:
    return sum(isinstance(f.message, SyncUpdate) for f in sync_frames(doc))


@pytest.mark.parametrize("endpoint", ["ws", "yjs"])
async def test_a_client_that_stops_reading_is_closed_with_1013_and_the_flooder_is_unaffected(
    slow_server: ServerProcess, endpoint: str
):
    name = unique("flood")
    token = slow_server.token([name])
    with anyio.fail_after(60):
        slow = await open_non_reading_socket(slow_server, endpoint, name, token)
        async with (
            await MuxPeer.connect(slow_server.ws_url) as flooder,
            await MuxPeer.connect(slow_server.ws_url) as bystander,
        ):
            f = await flooder.open(name, token)
            b = await bystander.open(name, token)
            seconds = await flood(f)
            assert all(f.statuses), "every flooded update applied and acknowledged"
            assert seconds < 20
            await b.wait(lambda: updates_received(b) == FLOOD_UPDATES, timeout=20)
            assert not flooder.closed and not bystander.closed

            # Now read: whatever was buffered, then the server's close.
            received = 0
            with pytest.raises(ConnectionClosed):
                while True:
                    received += len(await slow.recv())
            assert slow.protocol.close_rcvd is not None, "no close frame"
            assert slow.protocol.close_rcvd.code == 1013, slow.protocol.close_rcvd
            assert received < FLOOD_UPDATES * FLOOD_CHUNK, "frames after the overflow were dropped"


async def test_a_closed_socket_whose_peer_takes_nothing_is_released_after_the_idle_timeout(
    tmp_path,
):
    """A peer that stops reading while it is sent to, or vanished without a FIN or RST: the
    server's close can never drain, and the socket (its buffers, the protocol's objects) was
    kept for as long as the peer held its end. Now it is aborted an idle timeout later."""
    name = unique("linger")
    with ServerProcess(tmp_path, send_queue_frames=64, ping_interval=1, idle_timeout=3) as srv:
        token = srv.token([name])
        server = psutil.Process(srv.proc.pid)
        slow = await open_non_reading_socket(srv, "ws", name, token)
        port = slow.transport.get_extra_info("sockname")[1]

        def held() -> bool:
            return any(c.raddr and c.raddr.port == port for c in server.net_connections())

        with anyio.fail_after(60):
            async with await MuxPeer.connect(srv.ws_url) as flooder:
                await flood(await flooder.open(name, token))  # overflows it: closed with 1013
        # Before: kept until the kernel gave up on it (~50 s on loopback, minutes on a network).
        with anyio.fail_after(20):
            while held():  # while the peer holds its end, reading nothing
                await anyio.sleep(0.2)  # polling the server's sockets; there is no event
        slow.transport.abort()


@pytest.mark.parametrize("endpoint", ["ws", "yjs"])
async def test_a_slow_consumer_is_detached_at_once_even_while_it_does_not_read(
    slow_server: ServerProcess, endpoint: str
):
    """Its presence must go away when its queue overflows, not when it next reads."""
    name = unique("stuck")
    token = slow_server.token([name])
    with anyio.fail_after(60):
        slow = await open_non_reading_socket(slow_server, endpoint, name, token)
        try:
            async with (
                await MuxPeer.connect(slow_server.ws_url) as flooder,
                await MuxPeer.connect(slow_server.ws_url) as watcher,
            ):
                f = await flooder.open(name, token)
                w = await watcher.open(name, token)
                await w.wait(lambda: STUCK_CLIENT in w.awareness, what="the slow peer's presence")
                await flood(f)
                await w.wait(
                    lambda: STUCK_CLIENT not in w.awareness,
                    timeout=5,
                    what="the overflowed peer's presence to be removed",
                )
        finally:
            slow.transport.abort()

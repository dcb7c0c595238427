"""Exhaustion by readers and by sockets that never authenticate (issue 10, items 5 and 7).

Each test attacks a real server over loopback: a readonly reader that never reads and asks for
the whole document again and again, channel names that prefix every frame, sockets that park
bytes before auth or hold a socket open with nothing granted, many sockets from one address.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import uuid
from collections.abc import Iterator

import anyio
import pytest
from pycrdt import Doc, Text
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests.metrics_scrape import metric_value, metrics_text
from tests.rawpeer import MuxPeer, RawDoc, YwsPeer
from tests.serverproc import ServerProcess
from tether.protocol.wire.lib0 import write_var_uint
from tether.protocol.wire.messages import AuthToken, Awareness, QueryAwareness, Sync, decode_frame
from tether.protocol.wire.sync_payloads import (
    AwarenessEntry,
    SyncStep1,
    SyncStep2,
    encode_awareness,
)
from tether.protocol.wire.yws_frames import YAwareness, YQueryAwareness, YSync, decode_yws_frame

pytestmark = pytest.mark.anyio

DOC_BYTES = 3 * 1024 * 1024  # the answer to one full-state request: 3 MiB
REPEATS = 60
READER_CLIENT = 515151


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    # Long ping/idle: only the limits under test may end a connection. Default send queue bound.
    with ServerProcess(
        tmp_path_factory.mktemp("big"), ping_interval=20, idle_timeout=60, auth_timeout=30
    ) as proc:
        yield proc


async def seed_big_document(server: ServerProcess, name: str) -> tuple[MuxPeer, RawDoc]:
    """A writer that keeps the document open (and loaded), holding DOC_BYTES of text."""
    writer = await MuxPeer.connect(server.ws_url)
    w = await writer.open(name, server.token([name]))
    seed = Doc()
    seed.get("content", type=Text).insert(0, "x" * DOC_BYTES)
    await w.send_update(seed.get_update())
    w.apply(seed.get_update())  # our own copy too, so our appends land after it
    await w.wait_acked(timeout=20)
    assert w.statuses[-1] is True
    return writer, w


async def non_reading_socket(url: str) -> ClientConnection:
    """A socket with a tiny receive buffer that we never read from (until we choose to)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    port = int(url.split(":")[2].split("/")[0])
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    return await connect(url, sock=sock, max_queue=1, max_size=None, compression=None)


def presence_of(client_id: int, state: str) -> bytes:
    return encode_awareness([AwarenessEntry(client_id, 1, state)])


def state_vector_of(client_id: int) -> bytes:
    """A state vector claiming one client the document has never seen: its answer is all of it."""
    return write_var_uint(1) + write_var_uint(client_id) + write_var_uint(1)


async def close_code_after_reading(ws: ClientConnection) -> int:
    with pytest.raises(ConnectionClosed):
        while True:
            await ws.recv()
    assert ws.protocol.close_rcvd is not None, "no close frame"
    return ws.protocol.close_rcvd.code


async def refusals(server: ServerProcess, limit: str) -> float:
    return metric_value(await metrics_text(server), "tether_limit_refusals_total", limit=limit)


async def still_editing(w: RawDoc, bystander: RawDoc, text: str) -> None:
    await w.append(text)
    await w.wait_acked()
    assert w.statuses[-1] is True
    await bystander.wait(lambda: str(bystander).endswith(text), 20, f"{text!r} at the bystander")


# ---- item 5: a readonly reader that never reads ------------------------------------------------


@pytest.mark.parametrize("endpoint", ["ws", "yjs"])
async def test_repeated_full_state_requests_from_a_reader_that_never_reads_are_coalesced(
    big: ServerProcess, endpoint: str
):
    name = unique("amp")
    readonly = big.token([name], scope="readonly")
    before_step1 = await refusals(big, "repeated_step1")
    before_query = await refusals(big, "repeated_query_awareness")
    with anyio.fail_after(60):
        writer, w = await seed_big_document(big, name)
        async with writer, await MuxPeer.connect(big.ws_url) as watching:
            b = await watching.open(name, big.token([name]), timeout=20)
            await b.set_awareness({"user": "bystander", "pad": "p" * 4000})
            if endpoint == "ws":
                reader = await non_reading_socket(big.ws_url)
                await reader.send(AuthToken(name, readonly).encode())
                for _ in range(REPEATS):
                    await reader.send(Sync(name, SyncStep1(b"\x00")).encode())
                    await reader.send(QueryAwareness(name).encode())
                await reader.send(Awareness(name, presence_of(READER_CLIENT, "{}")).encode())
            else:
                reader = await non_reading_socket(f"{big.yjs_url}/{name}?token={readonly}")
                for _ in range(REPEATS):
                    await reader.send(YSync(SyncStep1(b"\x00")).encode())
                    await reader.send(YQueryAwareness().encode())
                await reader.send(YAwareness(presence_of(READER_CLIENT, "{}")).encode())
            try:
                # Frames of one socket are handled in order: its presence reaching the bystander
                # means every request before it was handled.
                await b.wait(lambda: READER_CLIENT in b.awareness, 20, "the reader's presence")
                # Loopback's kernel buffers take up to a few MB before the socket blocks, so one
                # or two answers may leave before the rest find one still on its way.
                assert await refusals(big, "repeated_step1") - before_step1 >= REPEATS - 4
                assert await refusals(big, "repeated_query_awareness") - before_query >= REPEATS - 4
                await still_editing(w, b, "unaffected")
                assert not writer.closed and not watching.closed
            finally:
                reader.transport.abort()


@pytest.mark.parametrize("endpoint", ["ws", "yjs"])
async def test_a_reader_that_varies_its_state_vector_gets_one_answer_paced_by_its_socket(
    big: ServerProcess, endpoint: str
):
    """Coalescing by equal state vectors cannot stop a different one each time, but a 3 MiB
    answer is a chunked initial sync (collab.rooms.initial_sync): it queues one 256 KiB piece at a
    time, only once the socket took the one before, and further step1s while it runs are
    refused. A reader that never reads holds one diff and one piece, not N answers; once it
    reads, the rest arrives, ending in one SyncStep2. Nobody else is affected."""
    name = unique("vary")
    readonly = big.token([name], scope="readonly")
    before_queue = await refusals(big, "send_queue_bytes")
    before_step1 = await refusals(big, "repeated_step1")
    with anyio.fail_after(60):
        writer, w = await seed_big_document(big, name)
        async with writer, await MuxPeer.connect(big.ws_url) as watching:
            b = await watching.open(name, big.token([name]), timeout=20)
            if endpoint == "ws":
                reader = await non_reading_socket(big.ws_url)
                await reader.send(AuthToken(name, readonly).encode())
            else:
                reader = await non_reading_socket(f"{big.yjs_url}/{name}?token={readonly}")
            for k in range(REPEATS):
                sv = state_vector_of(1000 + k)
                frame = Sync(name, SyncStep1(sv)) if endpoint == "ws" else YSync(SyncStep1(sv))
                await reader.send(frame.encode())
                if k == 10:
                    await still_editing(w, b, "meanwhile")
            presence = presence_of(READER_CLIENT, "{}")
            last = Awareness(name, presence) if endpoint == "ws" else YAwareness(presence)
            await reader.send(last.encode())
            # Frames of one socket are handled in order: its presence reaching the bystander
            # means every step1 before it was handled.
            await b.wait(lambda: READER_CLIENT in b.awareness, 20, "the reader's presence")
            # All but the first are refused while an answer is under way; the kernel's send
            # buffer (autotuned up to megabytes on loopback) may swallow a whole 3 MiB answer,
            # ending that sync early, so a second one may start: at most a couple, never N.
            refused = await refusals(big, "repeated_step1") - before_step1
            assert REPEATS - 3 <= refused <= REPEATS - 1
            assert await refusals(big, "send_queue_bytes") == before_queue
            await still_editing(w, b, "after")
            assert not writer.closed and not watching.closed
            # The reader starts reading: the rest of its one answer arrives.
            while True:
                data = await reader.recv()
                assert isinstance(data, bytes)
                message = decode_frame(data) if endpoint == "ws" else decode_yws_frame(data)
                if isinstance(message, Sync | YSync) and isinstance(message.message, SyncStep2):
                    break
            reader.transport.abort()


async def test_a_long_session_id_closes_the_connection_and_a_normal_one_works(big: ServerProcess):
    name = unique("sid")
    token = big.token([name])
    with anyio.fail_after(15):
        async with await MuxPeer.connect(big.ws_url) as peer:
            fine = await peer.open(f"{name}\0{uuid.uuid4()}", token)
            await fine.append("ok")
            await fine.wait_acked()
            await peer.send(AuthToken(f"{name}\0" + "s" * 129, token).encode())
            assert await peer.wait_closed() == 1008
            assert "channel name too long" in peer.close_reason
        assert await refusals(big, "max_session_id_bytes") >= 1


# ---- item 7: sockets that never authenticate ---------------------------------------------------

AUTH_TIMEOUT = 1.0


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(
        tmp_path_factory.mktemp("strict"),
        auth_timeout=AUTH_TIMEOUT,
        ping_interval=0.25,
        idle_timeout=30,
        max_queued_bytes_before_auth=64 * 1024,
        max_queued_bytes_before_auth_total=200 * 1024,
    ) as proc:
        yield proc


async def test_a_socket_whose_only_channel_was_refused_is_closed_after_the_auth_timeout_even_if_it_pings(  # noqa: E501
    strict: ServerProcess,
):
    with anyio.fail_after(15):
        async with await MuxPeer.connect(strict.ws_url) as peer:
            doc = await peer.attach(unique("refused"), "not a token")
            await doc.wait(lambda: doc.denied is not None, what="PermissionDenied")
            while not peer.closed:  # keeps talking: pings are not a reason to stay
                if not await peer.alive():
                    break
            assert await peer.wait_closed() == 4001
            assert "no document granted" in peer.close_reason


async def test_a_socket_that_closed_its_last_document_is_closed_after_the_auth_timeout(
    strict: ServerProcess,
):
    name = unique("closed")
    with anyio.fail_after(15):
        async with await MuxPeer.connect(strict.ws_url) as peer:
            await peer.open(name, strict.token([name]))
            await peer.detach(name)
            assert await peer.wait_closed() == 4001


def tokenless_step1s(name: str, count: int, size: int) -> list[bytes]:
    """Frames for a channel that never sends its token: each waits in the pre-auth queue."""
    return [Sync(name, SyncStep1(b"\x01" * size)).encode() for _ in range(count)]


async def test_pre_auth_bytes_are_bounded_across_all_connections(strict: ServerProcess):
    """Three sockets park 60 KiB each (under their own 64 KiB); a fourth passes the 200 KiB of all
    together and is closed with 1013, and leaving gives the bytes back."""
    before = await refusals(strict, "max_queued_bytes_before_auth_total")
    with anyio.fail_after(20):
        parkers = [await MuxPeer.connect(strict.ws_url) for _ in range(4)]
        try:
            for peer in parkers[:3]:
                for frame in tokenless_step1s(unique("park"), 6, 10 * 1024):
                    await peer.send(frame)
                assert await peer.alive()
            for frame in tokenless_step1s(unique("park"), 6, 10 * 1024):
                await parkers[3].send(frame)
            assert await parkers[3].wait_closed() == 1013
            assert "waiting for authentication" in parkers[3].close_reason
            assert await refusals(strict, "max_queued_bytes_before_auth_total") - before == 1
            # An editor with a token queues nothing and is not hurt.
            name = unique("editor")
            async with await MuxPeer.connect(strict.ws_url) as editor:
                doc = await editor.open(name, strict.token([name]))
                await doc.append("fine")
                await doc.wait_acked()
            # One parker leaves: its 60 KiB come back and another fits. The server learns of the
            # leave on its own time, so a late parker may still be refused: each try is a real
            # round trip (refused or Pong), bounded in number.
            await parkers[0].aclose()
            for _ in range(20):
                late = await MuxPeer.connect(strict.ws_url)
                parkers.append(late)
                for frame in tokenless_step1s(unique("park"), 6, 10 * 1024):
                    with contextlib.suppress(ConnectionClosed):
                        await late.send(frame)
                if await late.alive():
                    break
            assert not late.closed, "the budget was given back"
        finally:
            for peer in parkers:
                await peer.aclose()


@pytest.fixture
def crowded(tmp_path) -> Iterator[ServerProcess]:
    # Its own server: sockets other tests just closed may not have left a shared one yet.
    with ServerProcess(tmp_path, max_connections_per_address=12) as proc:
        yield proc


async def test_connections_per_address_are_limited_on_both_endpoints(crowded: ServerProcess):
    strict = crowded
    name = unique("crowd")
    token = strict.token([name])
    before = await refusals(strict, "max_connections_per_address")
    with anyio.fail_after(20):
        held: list[MuxPeer | YwsPeer] = []
        try:
            for k in range(12):
                if k % 2:
                    held.append(await YwsPeer.connect(strict.yjs_url, name, token))
                else:
                    held.append(await MuxPeer.connect(strict.ws_url))
                    await held[-1].open(name, token)  # granted: not closed by the auth timeout
            for url in (strict.ws_url, f"{strict.yjs_url}/{name}?token={token}"):
                with pytest.raises(InvalidStatus) as refused:
                    await connect(url, open_timeout=10)
                assert refused.value.response.status_code == 403
            assert await refusals(strict, "max_connections_per_address") - before == 2
            await held.pop().aclose()
            assert isinstance(held[-1], MuxPeer)
            async with await YwsPeer.connect(strict.yjs_url, name, token) as again:
                assert await again.roundtrip()
        finally:
            for peer in held:
                await peer.aclose()


async def _open_as(server: ServerProcess, client: str) -> ClientConnection:
    return await connect(server.ws_url, additional_headers={"X-Forwarded-For": client})


@pytest.mark.parametrize("trusted", [True, False])
async def test_behind_a_trusted_proxy_each_user_is_counted_not_the_proxy(tmp_path, trusted: bool):
    """Issue 26, finding 8: behind a proxy every user had the proxy's address, so the 65th
    editor was refused. With the proxy's address in --forwarded-allow-ips the limit counts the
    client the proxy names; a proxy not listed is not believed."""
    proxy = "127.0.0.1" if trusted else "192.0.2.1"  # the test connects from loopback
    with ServerProcess(tmp_path, max_connections_per_address=2, forwarded_allow_ips=proxy) as srv:
        with anyio.fail_after(20):
            held = [await _open_as(srv, f"198.51.100.{k}") for k in range(2)]
            try:
                if trusted:  # a third user, then that user's second and (refused) third socket
                    held += [await _open_as(srv, "198.51.100.7") for _ in range(2)]
                with pytest.raises(InvalidStatus) as refused:
                    held.append(await _open_as(srv, "198.51.100.7"))
                assert refused.value.response.status_code == 403
            finally:
                for ws in held:
                    await ws.close()

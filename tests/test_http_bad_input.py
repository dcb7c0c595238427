"""tests/test_bad_input.py's attacks over the HTTP fallback: a bad frame (or a bad batch) ends
its own session with the code /ws would close with, the server stays up, every other editor
keeps editing, and no garbage reaches a document."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator

import anyio
import pytest
from websockets.exceptions import ConnectionClosed

from tests.httppeer import HttpMuxPeer
from tests.serverproc import ServerProcess
from tests.test_bad_input import (
    ALLOWED_CLOSES,
    MAX_FRAME,
    PRECIOUS,
    PRECIOUS_TEXT,
    SCRATCH,
    Fuzz,
    healthy,
    rest_text,
)
from tether.protocol.wire.lib0 import write_var_string, write_var_uint
from tether.protocol.wire.messages import AUTH, AuthToken, Stateless, Sync
from tether.protocol.wire.sync_payloads import SyncUpdate

pytestmark = pytest.mark.anyio

FRAMES = 200


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(
        tmp_path_factory.mktemp("http-fuzz"),
        max_frame_bytes=MAX_FRAME,
        auth_timeout=120,
        idle_timeout=120,
        ping_interval=30,
        http_sessions_per_address=0,
    ) as proc:
        yield proc


class Sessions:
    """One reusable HTTP session per target; one the server closed is replaced."""

    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.token = server.token()
        self.open: dict[str, HttpMuxPeer] = {}
        self.opened = 0

    async def get(self, target: str) -> HttpMuxPeer:
        peer = self.open.get(target)
        if peer is None or peer.closed:
            if peer is not None:
                await peer.aclose()
            peer = await HttpMuxPeer.connect(self.server.http_url, self.token)
            self.opened += 1
            if target in ("precious", "scratch"):
                await peer.open(PRECIOUS if target == "precious" else SCRATCH, self.token)
            self.open[target] = peer
        return peer

    async def aclose(self) -> None:
        for peer in self.open.values():
            await peer.aclose()


async def bystander(server: ServerProcess, done: anyio.Event, stats: Counter[str]) -> None:
    """Edits over HTTP and sees them arrive over HTTP until ``done``; all acked."""
    token = server.token(["http-bystander"])
    async with (
        await HttpMuxPeer.connect(server.http_url, token) as writer_peer,
        await HttpMuxPeer.connect(server.http_url, token) as reader_peer,
    ):
        writer = await writer_peer.open("http-bystander", token)
        reader = await reader_peer.open("http-bystander", token)
        while not done.is_set():
            mark = f"[{stats['rounds']}]"
            await writer.append(mark)
            await writer.wait_acked(timeout=5)
            await reader.wait_text(lambda t, m=mark: m in t, timeout=5)
            stats["rounds"] += 1
        assert all(writer.statuses)
        assert not writer_peer.closed and not reader_peer.closed


async def seed_precious(server: ServerProcess) -> None:
    token = server.token([PRECIOUS])
    async with await HttpMuxPeer.connect(server.http_url, token) as peer:
        doc = await peer.open(PRECIOUS, token)
        if str(doc) != PRECIOUS_TEXT:
            await doc.append(PRECIOUS_TEXT)
            await doc.wait_acked()


async def test_bad_frames_over_http_close_only_their_sessions(fuzz_server: ServerProcess) -> None:
    await seed_precious(fuzz_server)
    fuzz = Fuzz(seed=1111)
    closes: Counter[int] = Counter()
    stats: Counter[str] = Counter()
    done = anyio.Event()
    sessions = Sessions(fuzz_server)
    start = time.monotonic()
    with anyio.fail_after(120):
        async with anyio.create_task_group() as tg:
            tg.start_soon(bystander, fuzz_server, done, stats)
            try:
                sent = 0
                while sent < FRAMES:
                    target, frame = fuzz.frame()
                    if isinstance(frame, str):
                        continue  # HTTP has no text frames: every body is binary
                    sent += 1
                    peer = await sessions.get(target)
                    try:
                        await peer.send(frame)
                    except ConnectionClosed:
                        pass
                    if await peer.alive():
                        continue
                    code = await peer.wait_closed()
                    closes[code] += 1
                    assert code in ALLOWED_CLOSES, (frame, target, code, peer.close_reason)
            finally:
                done.set()
                await sessions.aclose()
    assert await healthy(fuzz_server)
    assert closes[1002] > 0 and closes[1008] > 0, closes
    assert stats["rounds"] >= 5, stats
    assert await rest_text(fuzz_server, PRECIOUS) == PRECIOUS_TEXT
    print(
        f"{FRAMES} frames in {time.monotonic() - start:.1f}s, {sessions.opened} sessions: {closes}"
    )


async def test_an_update_over_the_limit_refuses_its_document_and_a_big_body_closes_with_1009(
    fuzz_server: ServerProcess,
) -> None:
    """As on /ws: an editor's too-big change refuses only its document (closing would make a
    provider send it again forever); a body past the transport's bound ends the session."""
    token = fuzz_server.token()
    with anyio.fail_after(15):
        async with await HttpMuxPeer.connect(fuzz_server.http_url, token) as peer:
            doc = await peer.open("http-big", token)
            update = doc.edit(lambda text: text.insert(0, "b" * (MAX_FRAME + 1)))
            await peer.send(Sync("http-big", SyncUpdate(update)).encode())
            await doc.wait(lambda: doc.denied is not None, what="the refusal")
            assert doc.denied is not None and doc.denied.startswith("update too large")
        async with await HttpMuxPeer.connect(fuzz_server.http_url, token) as peer:
            await peer.open("http-big", token)
            too_long = b"\x00" * (MAX_FRAME + 128 * 1024)  # over the body bound
            reply = await peer.ws.post_raw(too_long, check=False)
            assert reply.status_code == 410 and reply.json()["code"] == 1009
            assert await peer.wait_closed() == 1009
    assert "b" * 100 not in await rest_text(fuzz_server, "http-big")


async def test_a_broken_batch_closes_with_1002_and_a_wrong_type_is_refused(
    fuzz_server: ServerProcess,
) -> None:
    token = fuzz_server.token()
    with anyio.fail_after(15):
        async with await HttpMuxPeer.connect(fuzz_server.http_url, token) as peer:
            await peer.open("http-batch", token)
            reply = await peer.ws.post_raw(b"", content_type="text/plain")
            assert reply.status_code == 415
            assert await peer.alive(), "a refused request does not end the session"
            past_the_end = write_var_uint(40) + b"short"
            reply = await peer.ws.post_raw(past_the_end, check=False)
            assert reply.status_code == 410
            assert await peer.wait_closed() == 1002


async def test_too_many_messages_before_authentication_close_with_1008(
    fuzz_server: ServerProcess,
) -> None:
    with anyio.fail_after(15):
        async with await HttpMuxPeer.connect(fuzz_server.http_url, fuzz_server.token()) as peer:
            with pytest.raises(ConnectionClosed):
                await peer.ws.send_batch([Stateless("queued", "x").encode()] * 300)
            assert await peer.wait_closed() == 1008


async def test_a_bad_auth_frame_closes_that_session_only(fuzz_server: ServerProcess) -> None:
    token = fuzz_server.token()
    with anyio.fail_after(15):
        async with await HttpMuxPeer.connect(fuzz_server.http_url, token) as good:
            doc = await good.open("http-neighbour", token)
            async with await HttpMuxPeer.connect(fuzz_server.http_url, token) as bad:
                await bad.send(AuthToken("http-neighbour", token).encode())
                with pytest.raises(ConnectionClosed):
                    await bad.send(write_var_string("http-neighbour") + bytes([AUTH, 7]))
                assert await bad.wait_closed() == 1002
            await doc.append("fine")
            await doc.wait_acked()
            assert doc.statuses[-1] is True and not good.closed

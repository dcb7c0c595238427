"""Chunked initial sync and split updates (issue 11, part 2) with a raw client: no server
message over the cap, a final SyncStep2, and a reconnect mid-way resumes instead of
restarting (the client's state vector already covers the pieces it applied)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from pycrdt import Doc, Text

from tests.metrics_scrape import metric_value, metrics_text
from tests.rawpeer import MuxPeer, RawDoc
from tests.serverproc import ServerProcess
from tether.protocol.wire.messages import Sync
from tether.protocol.wire.sync_payloads import SyncStep2, SyncUpdate

pytestmark = pytest.mark.anyio

CAP = 256 * 1024
PIECE = 64 * 1024
SIZE = 4 * 1024 * 1024


@pytest.fixture(scope="module")
def chunky(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(
        Path(tmp_path_factory.mktemp("chunky")),
        max_outgoing_message_bytes=CAP,
        initial_sync_piece_bytes=PIECE,
    ) as server:
        yield server


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def pieces_sent(server: ServerProcess) -> float:
    return metric_value(await metrics_text(server), "tether_initial_sync_pieces_total")


async def seed(server: ServerProcess, name: str, token: str) -> str:
    text = "".join(chr(ord("a") + k % 26) for k in range(SIZE))
    async with await MuxPeer.connect(server.ws_url) as peer:
        doc = await peer.open(name, token)
        for start in range(0, SIZE, CAP // 2):
            await doc.append(text[start : start + CAP // 2])
        await doc.wait_acked(timeout=60)
    return text


def sync_sizes(doc: RawDoc) -> list[tuple[str, int]]:
    return [(type(f.message).__name__, len(f.encode())) for f in doc.frames if isinstance(f, Sync)]


async def test_a_big_document_arrives_in_pieces_under_the_cap_then_one_step2(
    chunky: ServerProcess,
):
    name = unique("pieces")
    token = chunky.token([name])
    text = await seed(chunky, name, token)
    before = await pieces_sent(chunky)
    with anyio.fail_after(60):
        async with await MuxPeer.connect(chunky.ws_url) as peer:
            doc = await peer.open(name, token, timeout=60)
            assert str(doc) == text
            sizes = sync_sizes(doc)
    kinds = [kind for kind, _ in sizes]
    assert kinds[0] == "SyncStep1"  # the server's question comes first
    assert kinds.count("SyncStep2") == 1 and kinds[-1] == "SyncStep2"
    assert kinds.count("SyncUpdate") >= SIZE // PIECE
    assert max(size for _, size in sizes) <= PIECE + 64
    assert await pieces_sent(chunky) - before == kinds.count("SyncUpdate") + 1


async def test_a_client_that_reconnects_mid_way_gets_only_the_rest(chunky: ServerProcess):
    name = unique("resume")
    token = chunky.token([name])
    text = await seed(chunky, name, token)
    with anyio.fail_after(60):
        start = await pieces_sent(chunky)
        first = await MuxPeer.connect(chunky.ws_url)
        doc = await first.attach(name, token)
        await doc.wait(lambda: len(str(doc)) >= 16 * PIECE, what="a quarter of it")
        await first.aclose()  # gone mid-way
        # What it had applied when it went: its first 16 pieces. (Loopback may have carried
        # the whole answer before the close, so the cut is made here, not left to timing.)
        pieces = [
            f.message.update
            for f in doc.frames
            if isinstance(f, Sync) and isinstance(f.message, SyncUpdate)
        ][:16]
        assert len(pieces) == 16
        kept = Doc()
        for piece in pieces:
            kept.apply_update(piece)
        half = len(str(kept.get("content", type=Text)))
        assert 0 < half < SIZE
        middle = await pieces_sent(chunky)
        async with await MuxPeer.connect(chunky.ws_url) as second:
            again = second.doc(name)
            again.doc = kept  # the same local document, as a provider keeps it
            await second.attach(name, token)
            await again.wait_synced(timeout=60)
            assert str(again) == text
        rest = await pieces_sent(chunky) - middle
    total = SIZE // PIECE
    assert rest < total - 2, (rest, total)  # what it had was not sent again
    assert (middle - start) + rest < 2 * total
    print(f"resume: {half} bytes held, {middle - start:.0f} pieces before, {rest:.0f} after")


async def test_an_update_bigger_than_the_cap_reaches_other_editors_in_pieces(
    chunky: ServerProcess,
):
    name = unique("split")
    token = chunky.token([name])
    big = "z" * (3 * CAP)
    with anyio.fail_after(30):
        async with (
            await MuxPeer.connect(chunky.ws_url) as writer,
            await MuxPeer.connect(chunky.ws_url) as reader,
        ):
            w = await writer.open(name, token)
            r = await reader.open(name, token)
            await w.append(big)
            await r.wait_text(big)
            updates = [size for kind, size in sync_sizes(r) if kind == "SyncUpdate"]
            assert len(updates) > 3 and max(updates) <= CAP
            assert [kind for kind, _ in sync_sizes(r)].count(SyncStep2.__name__) == 1

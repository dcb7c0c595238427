"""The pre-framed fan-out path (collab.transport.raw_frames) against the real server: frames of
every WebSocket header size (7-bit, 16-bit and 64-bit lengths) reach another editor whole and in
order, several per loop turn. The back-pressure side (a peer that never reads is closed 1013
with its queue bounded in bytes) is attacked in test_exhaustion.py, over the same path.
"""

from __future__ import annotations

import uuid

import anyio
import pytest

from tests.rawpeer import MuxPeer
from tests.serverproc import ServerProcess


class RecordingPeer(MuxPeer):
    """Notes each frame's size and the document's text length right after applying it."""

    sizes: list[int]
    lengths: list[int]
    channel: str

    async def _on_frame(self, data: bytes) -> None:
        await super()._on_frame(data)
        if self.channel in self.docs:
            self.sizes.append(len(data))
            self.lengths.append(len(str(self.docs[self.channel])))


@pytest.mark.anyio
async def test_fanned_out_frames_of_every_header_size_arrive_whole_and_in_order(
    server: ServerProcess,
) -> None:
    name = f"raw-{uuid.uuid4().hex[:8]}"
    token = server.token([name])
    # 7-bit, 16-bit (126..65535) and 64-bit (>= 65536) payload lengths, interleaved with small
    # ones so that several frames of different sizes share a loop turn.
    pieces = ["a" * 10, "b" * 300, "c", "d" * 70_000, "e" * 5, "f" * 126, "g" * 65_536, "h"]
    with anyio.fail_after(20):
        async with (
            await MuxPeer.connect(server.ws_url) as writer,
            await RecordingPeer.connect(server.ws_url) as reader,
        ):
            reader.sizes, reader.lengths, reader.channel = [], [], name
            w = await writer.open(name, token)
            r = await reader.open(name, token)
            for piece in pieces:  # sent back to back, not waiting for each to arrive
                await w.append(piece)
            expected = "".join(pieces)
            await r.wait_text(expected)
    # Every append arrived as its own frame and changed the text by exactly its length: a
    # frame out of order would have waited as pending and arrived with a later one.
    growth = [b - a for a, b in zip([0, *reader.lengths], reader.lengths, strict=False) if b > a]
    assert growth == [len(p) for p in pieces]
    assert any(size < 126 for size in reader.sizes)
    assert any(126 <= size < 65_536 for size in reader.sizes)
    assert any(size >= 65_536 for size in reader.sizes)

"""Big documents over hostile networks (issue 11, part 2): real @hocuspocus/provider and
y-websocket clients load a 20 MB document through a proxy that throttles to 256 KB/s and through
one that kills any connection carrying a WebSocket message over 1 MiB, in one connection each
(a reconnect loop shows as more connections at the proxy).

Marked slow: through the throttle, 20 MB takes about 80 s (both clients at once).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from tests.jsclient import JsEditor
from tests.metrics_scrape import metric_value, metrics_text
from tests.netproxy import NetProxy
from tests.rawpeer import MuxPeer
from tests.serverproc import ServerProcess
from tether.client import TetherClient

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

DOCUMENT_BYTES = 20 * 1024 * 1024
UPLOAD_PIECE = 512 * 1024  # under every cap: seeding is not what is tested
MESSAGE_CAP = 1024 * 1024
THROTTLE = 256 * 1024


async def seed(server: ServerProcess, name: str, size: int) -> str:
    """Write ``size`` bytes of ASCII text into ``name`` (direct, in small updates)."""
    line = "".join(chr(ord("a") + k % 26) for k in range(63)) + "\n"
    text = (line * (size // len(line) + 1))[:size]
    async with await MuxPeer.connect(server.ws_url) as peer:
        doc = await peer.open(name, server.token([name]))
        for start in range(0, size, UPLOAD_PIECE):
            await doc.append(text[start : start + UPLOAD_PIECE])
        await doc.wait_acked(timeout=120)
        assert all(doc.statuses)
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, str, str]]:
    """A server on default flags holding one 20 MB document: (server, name, SHA-256)."""
    with ServerProcess(Path(tmp_path_factory.mktemp("big"))) as server:
        name = f"big-{uuid.uuid4().hex[:8]}"
        digest = asyncio.run(seed(server, name, DOCUMENT_BYTES))
        yield server, name, digest


async def sync_pieces(server: ServerProcess) -> float:
    return metric_value(await metrics_text(server), "tether_initial_sync_pieces_total")


def editor(kind: str, port: int, server: ServerProcess, name: str) -> JsEditor:
    base = f"ws://127.0.0.1:{port}"
    token = server.token([name])
    if kind == "hocuspocus":
        return JsEditor.hocuspocus(base + "/ws", docs=[name], token=token, summary=True)
    return JsEditor.y_websocket(base + "/yjs", doc=name, token=token, summary=True)


async def load(kind: str, port: int, server: ServerProcess, name: str, digest: str) -> float:
    """Seconds until the editor's ``synced`` with the whole document; checks its content."""
    started = time.monotonic()
    async with editor(kind, port, server, name) as ed:
        synced = await ed.wait_synced(name, timeout=300)
        elapsed = time.monotonic() - started
        assert synced["length"] == DOCUMENT_BYTES, ed.events[-20:]
        assert synced["sha256"] == digest
        closes = [e for e in ed.events if e.get("event") == "close"]
        assert closes == [], closes
    return elapsed


@pytest.mark.parametrize("kind", ["hocuspocus", "y-websocket"])
async def test_a_20mb_document_loads_through_a_1mib_message_cap_in_one_connection(big, kind):
    server, name, digest = big
    pieces_before = await sync_pieces(server)
    async with NetProxy(server.port, max_message_bytes=MESSAGE_CAP) as proxy:
        with anyio.fail_after(300):
            elapsed = await load(kind, proxy.port, server, name, digest)
        assert proxy.killed == 0
        assert proxy.connections == 1  # no reconnect loop
        assert 0 < proxy.largest_message <= MESSAGE_CAP
    pieces = await sync_pieces(server) - pieces_before
    assert pieces >= DOCUMENT_BYTES // (256 * 1024)
    print(f"{kind} through a 1 MiB cap: {elapsed:.1f} s, {pieces:.0f} pieces")


async def test_a_20mb_document_loads_through_a_256kbs_throttle_in_one_connection(big):
    """Both clients at once, each through a throttle of its own: 80 s, where one after the
    other took 160 s of the suite's 15 minutes."""
    server, name, digest = big

    async def through_a_throttle(kind: str) -> None:
        async with NetProxy(server.port, rate=THROTTLE) as proxy:
            elapsed = await load(kind, proxy.port, server, name, digest)
            assert proxy.connections == 1, kind  # the client's timers stayed alive
        print(f"{kind} through a 256 KB/s throttle: {elapsed:.1f} s")

    with anyio.fail_after(300):
        async with anyio.create_task_group() as both:
            for kind in ("hocuspocus", "y-websocket"):
                both.start_soon(through_a_throttle, kind)


async def test_a_20mb_document_loads_over_the_http_transport_in_pieces(big):
    """The HTTP fallback carries the same chunked initial sync: the document arrives in
    pieces (each one event of the stream), in one session, with all its text."""
    server, name, digest = big
    pieces_before = await sync_pieces(server)
    started = time.monotonic()
    with anyio.fail_after(300):
        async with TetherClient(
            server.ws_url, token=server.token([name]), transport="http"
        ) as client:
            doc = await client.open(name, timeout=300)
            elapsed = time.monotonic() - started
            assert hashlib.sha256(str(doc).encode()).hexdigest() == digest
            assert client.connects == 1 and client.transport_in_use == "http"
    pieces = await sync_pieces(server) - pieces_before
    assert pieces >= DOCUMENT_BYTES // (256 * 1024)
    print(f"HTTP transport: {elapsed:.1f} s, {pieces:.0f} pieces")

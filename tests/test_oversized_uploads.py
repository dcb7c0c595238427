"""An editor's own change over ``max_frame_bytes`` (a big paste) gets a permanent refusal the
real client reports, never a close: @hocuspocus/provider and y-websocket reconnect after any
close code (1009 included) and would send the same change again, forever."""

from __future__ import annotations

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

pytestmark = pytest.mark.anyio

MAX_FRAME = 64 * 1024


@pytest.fixture(scope="module")
def small_frames(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(Path(tmp_path_factory.mktemp("frames")), max_frame_bytes=MAX_FRAME) as s:
        yield s


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def refusals(server: ServerProcess) -> float:
    text = await metrics_text(server)
    return metric_value(text, "tether_limit_refusals_total", limit="max_frame_bytes")


async def test_hocuspocus_is_told_its_paste_is_too_large_and_keeps_its_other_documents(
    small_frames: ServerProcess,
):
    big, beside = unique("paste"), unique("beside")
    token = small_frames.token([big, beside])
    before = await refusals(small_frames)
    with anyio.fail_after(30):
        async with (
            NetProxy(small_frames.port) as proxy,
            JsEditor.hocuspocus(
                f"ws://127.0.0.1:{proxy.port}/ws", docs=[big, beside], token=token
            ) as hoc,
        ):
            await hoc.wait_synced(big)
            await hoc.wait_synced(beside)
            await hoc.insert(big, 0, "p" * (MAX_FRAME + 1))
            denied = await hoc.wait_event("denied", doc=big)
            assert denied["reason"].startswith("update too large")
            async with await MuxPeer.connect(small_frames.ws_url) as py:
                other = await py.open(beside, token)
                await hoc.insert(beside, 0, "still syncing")
                await other.wait_text("still syncing")
            assert [e for e in hoc.events if e.get("event") == "close"] == []
            assert proxy.connections == 1  # no reconnect, so no resend of the paste
    assert await refusals(small_frames) - before == 1


async def test_y_websocket_is_told_its_paste_is_too_large_and_stays_connected_read_only(
    small_frames: ServerProcess,
):
    name = unique("yws-paste")
    token = small_frames.token([name])
    with anyio.fail_after(30):
        async with (
            NetProxy(small_frames.port) as proxy,
            JsEditor.y_websocket(f"ws://127.0.0.1:{proxy.port}/yjs", doc=name, token=token) as y,
            await MuxPeer.connect(small_frames.ws_url) as py,
        ):
            await y.wait_synced(name)
            writer = await py.open(name, token)
            await y.insert(name, 0, "q" * (MAX_FRAME + 1))
            denied = await y.wait_event("denied", doc=name)
            assert denied["reason"].startswith("update too large")
            await y.insert(name, 0, "after")  # built on the refused paste: refused too
            await writer.append("others still arrive")
            await y.wait_text(name, lambda text: text.endswith("others still arrive"))
            assert str(writer) == "others still arrive"
            assert [e for e in y.events if e.get("event") == "close"] == []
            assert proxy.connections == 1

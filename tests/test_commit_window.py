"""The default commit window through the real server: commits wait for company only when
editors bring some (issue 29). Counted on /metrics, not timed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from tests.metrics_scrape import metric_value, metrics_text
from tests.rawpeer import MuxPeer
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.anyio

TIMEOUT = 60


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with ServerProcess(tmp_path) as server:  # the default --commit-window-ms
        yield server


async def _counts(server: ServerProcess) -> tuple[float, float]:
    text = await metrics_text(server)
    return (
        metric_value(text, "tether_store_commits_total"),
        metric_value(text, "tether_store_commit_waits_total"),
    )


async def test_an_editor_that_awaits_each_ack_gets_every_commit_at_once(server):
    with anyio.fail_after(TIMEOUT):
        async with await MuxPeer.connect(server.ws_url) as peer:
            doc = await peer.open("alone", server.token())
            commits, waits = await _counts(server)
            for i in range(40):
                await doc.append(f"{i} ")
                await doc.wait_acked()
            after_commits, after_waits = await _counts(server)
    assert after_commits - commits >= 40  # one durable commit per awaited edit
    assert after_waits == waits  # and none of them waited for company


async def test_many_editors_typing_at_once_share_commits(server):
    with anyio.fail_after(TIMEOUT):
        peers = [await MuxPeer.connect(server.ws_url) for _ in range(20)]
        try:
            docs = [await p.open(f"busy-{i % 10}", server.token()) for i, p in enumerate(peers)]
            commits, waits = await _counts(server)
            for step in range(10):  # every editor types before any waits for its acks
                for doc in docs:
                    await doc.append(f"{step} ")
            for doc in docs:
                await doc.wait_acked()
            after_commits, after_waits = await _counts(server)
        finally:
            for p in peers:
                await p.aclose()
    assert after_waits > waits  # edits came while others were in flight: commits waited
    assert after_commits - commits < 200 / 2  # 200 edits, at least two a commit on average

"""Many documents on one socket (issue 11, part 3): a HocuspocusProviderWebsocket shared by 200
providers (a sidebar of notes) syncs on the default flags, and past the limit only the extra
documents are refused, with a reason the provider surfaces, while the others keep syncing."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.jsclient import JsEditor
from tests.metrics_scrape import metric_value, metrics_text
from tests.rawpeer import MuxPeer
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.anyio

LIMIT = 5


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(
        Path(tmp_path_factory.mktemp("limited")), max_documents_per_connection=LIMIT
    ) as proc:
        yield proc


def events_of(editor: JsEditor, name: str) -> list[dict[str, Any]]:
    return [e for e in editor.events if e.get("event") == name]


async def until(editor: JsEditor, condition: Callable[[], bool], timeout: float = 20.0) -> None:
    """Wait until ``condition`` holds over the editor's whole event history."""
    if not condition():
        await editor.wait_for(lambda _event: condition(), timeout)


def notes(count: int) -> tuple[str, list[str]]:
    prefix = f"notes-{uuid.uuid4().hex[:8]}"
    return prefix, [f"{prefix}-{k:03d}" for k in range(count)]


async def test_200_providers_on_one_socket_sync_on_the_default_flags(server: ServerProcess):
    prefix, names = notes(200)
    token = server.token([prefix + "-*"])
    with anyio.fail_after(120):
        async with JsEditor.hocuspocus(server.ws_url, docs=names, token=token) as hoc:
            for name in names:
                await hoc.wait_synced(name, timeout=60)
            assert [e for e in hoc.events if e.get("event") in ("denied", "close")] == []
            # And they carry edits both ways, the last one opened included.
            async with await MuxPeer.connect(server.ws_url) as py:
                last = await py.open(names[-1], token)
                await hoc.insert(names[-1], 0, "note 200")
                await last.wait_text("note 200")
                await last.append("!")
                await hoc.wait_text(names[-1], "note 200!")
            statuses = [e for e in hoc.events if e.get("event") == "status"]
            assert [s["status"] for s in statuses].count("connected") <= 2  # no reconnects
            assert hoc.errors() == []


async def test_past_the_limit_only_the_extra_documents_are_refused(limited: ServerProcess):
    prefix, names = notes(LIMIT + 3)
    token = limited.token([prefix + "-*"])
    before = metric_value(
        await metrics_text(limited),
        "tether_limit_refusals_total",
        limit="max_documents_per_connection",
    )
    with anyio.fail_after(60):
        async with JsEditor.hocuspocus(limited.ws_url, docs=names, token=token) as hoc:
            # The provider attaches in order: the first LIMIT sync, the rest are refused.
            await until(hoc, lambda: len(events_of(hoc, "denied")) >= 3)
            await until(hoc, lambda: len(events_of(hoc, "synced")) >= LIMIT)
            denied = {e["doc"]: e["reason"] for e in events_of(hoc, "denied")}
            assert set(denied) == set(names[LIMIT:])
            assert {e["doc"] for e in events_of(hoc, "synced")} == set(names[:LIMIT])
            assert all("too many documents on one connection" in r for r in denied.values())
            # The socket stays, and the granted documents keep syncing.
            async with await MuxPeer.connect(limited.ws_url) as py:
                first = await py.open(names[0], token)
                await hoc.insert(names[0], 0, "still here")
                await first.wait_text("still here")
                await first.append(" and back")
                await hoc.wait_text(names[0], "still here and back")
            assert [e for e in hoc.events if e.get("event") == "close"] == []
            state = await hoc.state(names[-1])
            assert not state["synced"] and state["status"] == "connected"
    after = metric_value(
        await metrics_text(limited),
        "tether_limit_refusals_total",
        limit="max_documents_per_connection",
    )
    assert after - before == 3
    logged = [line for line in limited.log().splitlines() if "max_documents_per_connection" in line]
    assert len(logged) == 1, logged  # once per connection, not once per refused document

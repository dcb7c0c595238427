"""Refusals without a SyncStatus reach the writer (issue 38, item 3), through the real server over
the WebSocket and the HTTP fallback: an update the server's guard refuses closes the connection,
and the Python client raises ``WriteRefusedError`` with the server's reason, rolls the document
back to the server's state, never sends the refused update again and keeps its other documents
syncing; a change over the frame limit is refused the same way without a reconnect; a document
refused three times in a row is no longer synced."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator

import anyio
import pytest
from pycrdt import Doc, Map, Text

from tests.metrics_scrape import metric_value, metrics_text
from tests.serverproc import ServerProcess, rest_text
from tether.client import DocumentHandle, PermissionDeniedError, TetherClient, WriteRefusedError

pytestmark = pytest.mark.anyio

TRANSPORTS = ["ws", "http"]
MAX_MAP_KEYS = 8  # a table-size limit of the update guard, low enough for a client to pass
MAX_FRAME = 64 * 1024
GUARD_REASON = f"invalid update: update refused: a map holds at most {MAX_MAP_KEYS} keys"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data = tmp_path_factory.mktemp("refused-updates")
    with ServerProcess(data, max_map_keys=MAX_MAP_KEYS, max_frame_bytes=MAX_FRAME) as running:
        yield running


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@contextlib.asynccontextmanager
async def client(
    server: ServerProcess, names: list[str], transport: str
) -> AsyncIterator[TetherClient]:
    token = server.token(names)
    async with TetherClient(server.ws_url, token=token, transport=transport) as opened:  # type: ignore[arg-type]
        yield opened


async def guard_refusals(server: ServerProcess) -> float:
    text = await metrics_text(server)
    return metric_value(text, "tether_update_refusals_total", limit="map-keys")


async def frame_refusals(server: ServerProcess) -> float:
    text = await metrics_text(server)
    return metric_value(text, "tether_limit_refusals_total", limit="max_frame_bytes")


def guarded_write(handle: DocumentHandle, typed: str) -> None:
    """One local transaction the server's guard refuses: ``typed`` appended, and one map given
    more keys than the server allows (what an editor's settings or comments map could do)."""
    with handle.doc.transaction():
        text = handle.doc.get("content", type=Text)
        text.insert(len(text), typed)
        meta = handle.doc.get("meta", type=Map)
        for key in range(MAX_MAP_KEYS + 1):
            meta[f"k{key}"] = key


def text_of(doc: Doc | None) -> str:
    assert doc is not None
    return str(doc.get("content", type=Text))


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_an_update_the_guard_refuses_raises_is_rolled_back_and_is_sent_only_once(
    server: ServerProcess, transport: str
) -> None:
    name, beside = unique("guarded"), unique("beside")
    before = await guard_refusals(server)
    with anyio.fail_after(60):
        async with client(server, [name, beside], transport) as alice:
            notes = await alice.open(name)
            other = await alice.open(beside)
            notes.append("base")
            await notes.wait_acked()
            held = notes.doc

            guarded_write(notes, " refused")
            assert str(notes) == "base refused"
            with pytest.raises(WriteRefusedError, match=name) as refused:
                await notes.wait_acked()
            assert refused.value.reason == GUARD_REASON
            assert isinstance(refused.value, PermissionDeniedError)
            # The server's state again; the refused change handed back whole.
            assert str(notes) == "base" == await rest_text(server, name)
            assert notes.doc is not held and refused.value.local_doc is held
            assert text_of(held) == "base refused" and len(held.get("meta", type=Map)) == 9
            assert len(notes.doc.get("meta", type=Map)) == 0

            # Both documents carry on over the one reconnect the refusal cost.
            notes.append(" kept")
            other.append("beside")
            await notes.wait_acked()
            await other.wait_acked()
            assert alice.connects == 2
    assert await rest_text(server, name) == "base kept"
    assert await rest_text(server, beside) == "beside"
    assert await guard_refusals(server) == before + 1, "the bad update reached the server once"


async def test_a_write_of_another_document_in_flight_at_the_refusal_is_kept_not_refused(
    server: ServerProcess,
) -> None:
    """Sent before the refused update, it was applied before the close: the client finds the
    server holds it and resumes, rather than calling it refused."""
    name, beside = unique("guarded"), unique("in-flight")
    with anyio.fail_after(60):
        async with client(server, [name, beside], "ws") as alice:
            notes = await alice.open(name)
            other = await alice.open(beside)
            kept = other.doc
            other.append("typed just before")
            guarded_write(notes, "refused")
            with pytest.raises(WriteRefusedError):
                await notes.wait_acked()
            await other.wait_acked()
            assert other.doc is kept and str(other) == "typed just before"
            other.append(", and after")
            await other.wait_acked()
            assert str(notes) == ""
    assert await rest_text(server, beside) == "typed just before, and after"


async def test_a_document_refused_three_times_in_a_row_is_no_longer_synced(
    server: ServerProcess,
) -> None:
    name, beside = unique("guarded"), unique("beside")
    before = await guard_refusals(server)
    with anyio.fail_after(60):
        async with client(server, [name, beside], "ws") as alice:
            notes = await alice.open(name)
            other = await alice.open(beside)
            notes.append("base")
            await notes.wait_acked()
            for attempt in range(3):
                guarded_write(notes, f" try {attempt}")
                with pytest.raises(WriteRefusedError) as refused:
                    await notes.wait_acked()
                assert refused.value.reason.startswith(GUARD_REASON)
            assert refused.value.stopped and "3 times in a row" in refused.value.reason
            assert text_of(refused.value.local_doc) == "base try 2"
            with pytest.raises(WriteRefusedError):
                await notes.wait_text("base")  # every wait on it says so
            with pytest.raises(KeyError):
                alice.document(name)

            other.append("still syncing")
            await other.wait_acked()
            again = await alice.open(name)
            assert str(again) == "base"
            again.append(" resumed")
            await again.wait_acked()
            assert alice.connects == 4
    assert await guard_refusals(server) == before + 3
    assert await rest_text(server, name) == "base resumed"
    assert await rest_text(server, beside) == "still syncing"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_change_over_the_frame_limit_raises_write_refused_without_a_reconnect(
    server: ServerProcess, transport: str
) -> None:
    name, beside = unique("too-large"), unique("beside")
    before = await frame_refusals(server)
    paste = "p" * (MAX_FRAME + 1)
    with anyio.fail_after(60):
        async with client(server, [name, beside], transport) as alice:
            notes = await alice.open(name)
            other = await alice.open(beside)
            notes.append("base")
            await notes.wait_acked()
            held = notes.doc

            notes.append(paste)
            with pytest.raises(WriteRefusedError, match=name) as refused:
                await notes.wait_acked()
            assert refused.value.reason.startswith("update too large")
            assert str(notes) == "base" == await rest_text(server, name)
            assert refused.value.local_doc is held and text_of(held) == "base" + paste

            notes.append(" small")
            other.append("beside")
            await notes.wait_acked()
            await other.wait_acked()
            assert alice.connects == 1
    assert await rest_text(server, name) == "base small"
    assert await rest_text(server, beside) == "beside"
    assert await frame_refusals(server) == before + 1

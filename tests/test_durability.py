"""Durability: acknowledged edits survive kill -9, compaction keeps content, unload round-trips."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from pathlib import Path

import anyio
import anyio.lowlevel
import httpx
import pytest
from pycrdt import Doc, Text
from websockets.exceptions import ConnectionClosed

from tests.rawpeer import MuxPeer, RawDoc
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.anyio


async def rest_text(server: ServerProcess, name: str) -> str:
    async with httpx.AsyncClient(timeout=10) as http:
        response = await http.get(
            f"{server.http_url}/api/documents/{name}",
            headers={"Authorization": f"Bearer {server.token([name])}"},
        )
    if response.status_code == 404:  # never stored (nor loaded with content): no text
        return ""
    response.raise_for_status()
    return str(response.json()["text"])


def read_db(data_dir: Path, name: str) -> tuple[bytes | None, list[bytes]]:
    """(snapshot, log) of one document, read from a second connection (WAL allows it)."""
    uri = f"file:{data_dir / 'tether.db'}?mode=ro"
    with sqlite3.connect(uri, uri=True) as conn:
        row = conn.execute("SELECT data FROM snapshots WHERE name = ?", (name,)).fetchone()
        log = [
            r[0]
            for r in conn.execute("SELECT data FROM updates WHERE name = ? ORDER BY id", (name,))
        ]
    return (row[0] if row else None), log


def text_of_stored(snapshot: bytes | None, log: list[bytes]) -> str:
    doc = Doc()
    for update in ([snapshot] if snapshot else []) + log:
        doc.apply_update(update)
    return str(doc.get("content", type=Text))


def token_of(doc_index: int, k: int) -> str:
    return f"<{doc_index}:{k}é>"


async def test_every_acknowledged_edit_survives_a_kill_after_the_burst(fresh_server: ServerProcess):
    fresh_server.start()
    names = [f"burst-{i}" for i in range(3)]
    token = fresh_server.token(names)
    per_doc = 100
    with anyio.fail_after(60):
        async with await MuxPeer.connect(fresh_server.ws_url) as peer:
            docs = [await peer.open(n, token) for n in names]
            for k in range(per_doc):
                for i, d in enumerate(docs):
                    await d.append(token_of(i, k))
            for d in docs:
                await d.wait_acked(timeout=30)
                assert all(d.statuses), "every edit acknowledged as applied"
            expected = [str(d) for d in docs]
            fresh_server.kill()
        fresh_server.start()
        for name, text in zip(names, expected, strict=True):
            assert await rest_text(fresh_server, name) == text


@pytest.mark.parametrize("compact_threshold", [500, 7])
async def test_an_edit_acknowledged_just_before_a_kill_is_never_lost(
    fresh_server: ServerProcess, compact_threshold: int
):
    """Kill while edits stream in (and, with a low threshold, while compactions run): whatever
    was acknowledged by then is stored."""
    fresh_server.settings["compact_threshold"] = compact_threshold
    fresh_server.start()
    names = [f"midburst-{i}" for i in range(3)]
    token = fresh_server.token(names)
    with anyio.fail_after(60):
        peer = await MuxPeer.connect(fresh_server.ws_url)
        try:
            docs = [await peer.open(n, token) for n in names]
            for d in docs:
                await d.wait_acked()  # the ack of our step2 reply comes first
            base = [len(d.statuses) for d in docs]
            sent = [0, 0, 0]

            def acked_edits(i: int) -> int:
                return len(docs[i].statuses) - base[i]

            async def stream() -> None:
                with contextlib.suppress(ConnectionClosed):
                    while True:
                        for i, d in enumerate(docs):
                            await d.append(token_of(i, sent[i]))
                            sent[i] += 1
                        # Keep a burst in flight, not an unbounded one: a writer that never
                        # lets its reader take the acks is (rightly) closed as a slow consumer
                        # once 2048 of them wait, and then no ack ever arrives.
                        if sum(sent) - sum(map(acked_edits, range(3))) > 150:
                            await peer.watch.until(
                                lambda: sum(sent) - sum(map(acked_edits, range(3))) <= 75,
                                20,
                                "acks to catch up",
                            )
                        await anyio.lowlevel.checkpoint()  # let the reader take acks

            async with anyio.create_task_group() as tg:
                tg.start_soon(stream)
                await peer.watch.until(lambda: sum(map(acked_edits, range(3))) >= 300, 30, "acks")
                for _ in range(10):  # a burst straight to the socket, then the kill: in flight
                    for i, d in enumerate(docs):
                        await d.append(token_of(i, sent[i]))
                        sent[i] += 1
                fresh_server.kill()
                await peer.wait_closed(timeout=10)  # every ack that reached us is now counted
                tg.cancel_scope.cancel()
            acked = [acked_edits(i) for i in range(3)]
            assert all(all(d.statuses) for d in docs)
        finally:
            await peer.aclose()
        assert sum(acked) < sum(sent), "the kill landed while edits were in flight"
        fresh_server.start()
        for i, name in enumerate(names):
            stored = await rest_text(fresh_server, name)
            missing = [k for k in range(acked[i]) if token_of(i, k) not in stored]
            assert missing == [], f"{name}: acknowledged edits lost after kill -9"


async def test_compaction_folds_the_log_into_a_snapshot_and_keeps_the_content(
    fresh_server: ServerProcess,
):
    fresh_server.settings["compact_threshold"] = 20
    fresh_server.start()
    name = "compacted"
    token = fresh_server.token([name])
    edits = 100
    with anyio.fail_after(30):
        async with await MuxPeer.connect(fresh_server.ws_url) as peer:
            doc = await peer.open(name, token)
            for k in range(edits):
                await doc.append(f"{k}😀 ")
                await doc.wait_acked()
            expected = str(doc)
        snapshot, log = read_db(fresh_server.data_dir, name)
        assert snapshot is not None, "a snapshot was written"
        assert len(log) < edits // 2, f"{len(log)} log rows left after {edits} edits"
        assert text_of_stored(snapshot, log) == expected, "snapshot + log hold every edit"
        fresh_server.kill()
        fresh_server.start()
        assert await rest_text(fresh_server, name) == expected
        async with await MuxPeer.connect(fresh_server.ws_url) as peer:
            reopened = await peer.open(name, token)
            assert str(reopened) == expected


async def test_a_big_documents_log_is_folded_by_its_weight_and_every_edit_survives(
    fresh_server: ServerProcess,
):
    """Compaction (collab.storage.compaction): a few keystrokes do not rewrite a big snapshot,
    neither while the document is open nor when it unloads; a log that outweighs it is folded."""
    fresh_server.settings.update(compact_threshold=5, unload_grace=0.2)
    fresh_server.start()
    name = "weighed"
    token = fresh_server.token([name])

    async def type_acked(doc: RawDoc, chunks: list[str]) -> None:
        for chunk in chunks:
            await doc.append(chunk)
        await doc.wait_acked()
        await doc.append(".")  # acked after anything a fold called before it (one FIFO)
        await doc.wait_acked()

    with anyio.fail_after(60):
        async with await MuxPeer.connect(fresh_server.ws_url) as peer:
            doc = await peer.open(name, token)
            await type_acked(doc, ["a" * 300_000, "b", "c", "d", "e"])  # 5 entries: folded
            snapshot, log = read_db(fresh_server.data_dir, name)
            # The fold may have encoded the closing "." too (then the log is empty).
            assert snapshot is not None and len(snapshot) > 300_000 and len(log) <= 1
            kept = len(log) + 22  # 21 letters and a "."
            assert text_of_stored(snapshot, log) == str(doc), "snapshot + log hold every edit"
            await type_acked(doc, list("fghijklmnopqrstuvwxyz"))
            assert len(read_db(fresh_server.data_dir, name)[1]) == kept, "no 300 KB rewrite"
        await poll_loaded(fresh_server, 0, timeout=10)
        snapshot, log = read_db(fresh_server.data_dir, name)
        assert len(log) == kept, "unloading did not rewrite it either"
        async with await MuxPeer.connect(fresh_server.ws_url) as peer:
            doc = await peer.open(name, token)
            await type_acked(doc, ["y" * 400_000])  # outweighs the snapshot: folded
            snapshot, log = read_db(fresh_server.data_dir, name)
            assert snapshot is not None and len(snapshot) > 700_000 and len(log) <= 1
            expected = str(doc)
        fresh_server.kill()
        fresh_server.start()
        assert await rest_text(fresh_server, name) == expected


async def documents_loaded(server: ServerProcess) -> int:
    async with httpx.AsyncClient(timeout=2) as http:
        response = await http.get(f"{server.http_url}/health")
    return int(response.json()["documents_loaded"])


async def poll_loaded(server: ServerProcess, wanted: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while (loaded := await documents_loaded(server)) != wanted:
        assert time.monotonic() < deadline, f"documents_loaded stuck at {loaded}, wanted {wanted}"
        await anyio.sleep(0.05)  # polling a count over HTTP; there is no event to wait on


async def test_a_document_is_unloaded_after_its_last_editor_leaves_and_reopens_intact(
    fresh_server: ServerProcess,
):
    fresh_server.settings["unload_grace"] = 0.2
    fresh_server.start()
    name = "unloadable"
    token = fresh_server.token([name])
    with anyio.fail_after(30):
        first: RawDoc
        async with (
            await MuxPeer.connect(fresh_server.ws_url) as a,
            await MuxPeer.connect(fresh_server.ws_url) as b,
        ):
            first = await a.open(name, token)
            second = await b.open(name, token)
            await first.append("kept ✓ ")
            await second.append("and this")
            await first.wait_acked()
            await second.wait_acked()
            await first.wait_text(lambda t: "this" in t)
            expected = str(first)
            await a.aclose()
            # One editor is still there: the document stays loaded past the grace period.
            await second.append("!")
            await second.wait_acked()
            assert await documents_loaded(fresh_server) == 1
            expected += "!"
        await poll_loaded(fresh_server, 0, timeout=10)
        snapshot, log = read_db(fresh_server.data_dir, name)
        assert text_of_stored(snapshot, log) == expected
        async with await MuxPeer.connect(fresh_server.ws_url) as c:
            again = await c.open(name, token)
            assert str(again) == expected
            assert await documents_loaded(fresh_server) == 1
            await again.append(" more")
            await again.wait_acked()
        await poll_loaded(fresh_server, 0, timeout=10)
        fresh_server.kill()
        fresh_server.start()
        assert await rest_text(fresh_server, name) == expected + " more"


async def test_leaving_and_reopening_a_document_while_it_unloads_never_loses_an_edit(
    fresh_server: ServerProcess,
):
    fresh_server.settings["unload_grace"] = 0.01
    fresh_server.start()
    name = "flapping"
    token = fresh_server.token([name])
    expected = ""
    with anyio.fail_after(60):
        for k in range(40):
            async with await MuxPeer.connect(fresh_server.ws_url) as peer:
                doc = await peer.open(name, token)
                assert str(doc) == expected, f"round {k}: reopened with {str(doc)!r}"
                await doc.append(f"{k},")
                await doc.wait_acked()
                assert doc.statuses[-1] is True
                expected += f"{k},"
            if k % 2:  # half the time, also race a REST read (it loads without attaching)
                assert await rest_text(fresh_server, name) == expected
        fresh_server.kill()
        fresh_server.start()
        assert await rest_text(fresh_server, name) == expected

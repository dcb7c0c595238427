"""Renders and imports off the event loop, each in a bounded pool of its own (issue 37).

A readonly GET of a 50,000-paragraph rich document, in any format, a version's read and a
webhook's text each held the loop 1.4-1.8 s; six slow Markdown imports on the shared default
executor made another user's GET of an unloaded document time out and a new editor's open get
no sync. Against the real server: the bystander's edits are all acknowledged and no loop turn
is held past 250 ms (``tether_event_loop_lag_seconds``) while the big document is read, each
state is rendered once, and a flood of imports is refused past its pool's bound (503 with
Retry-After) without delaying reads and opens."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from pycrdt import Doc, Text, XmlElement, XmlFragment, XmlText

from tests.rawpeer import MuxPeer, RawDoc
from tests.serverproc import ServerProcess
from tests.test_webhooks import Receiver

pytestmark = pytest.mark.anyio

PARAGRAPHS = 50_000
OCTETS = {"Content-Type": "application/octet-stream"}


def rich_document(paragraphs: int) -> bytes:
    """Paragraphs as y-prosemirror writes them, a bold word in every tenth (~3.2 MB of text).
    Inserted last first at index 0: appending walks the fragment from its start each time."""
    doc = Doc()
    fragment = doc.get("default", type=XmlFragment)
    with doc.transaction():
        for i in reversed(range(paragraphs)):
            paragraph = fragment.children.insert(0, XmlElement("paragraph"))
            text = paragraph.children.insert(0, XmlText())
            text.insert(0, f"Paragraph {i:06d}: the quick brown fox jumps over the lazy dog.")
            if i % 10 == 0:
                text.format(0, len("Paragraph"), {"bold": {}})
    return doc.get_update()


def plain_document(text: str) -> bytes:
    doc = Doc()
    doc.get("content", type=Text).insert(0, text)
    return doc.get_update()


@pytest.fixture(scope="module")
def big() -> bytes:
    return rich_document(PARAGRAPHS)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(tmp_path_factory.mktemp("renders")) as running:
        yield running


async def type_until(doc: RawDoc, done: asyncio.Event) -> int:
    """What a bystander does meanwhile: a keystroke every few milliseconds; how many."""
    typed = 0
    while not done.is_set():
        await doc.append(f"{typed} ")
        typed += 1
        await asyncio.sleep(0.005)  # pacing the typist, not synchronising the test
    await doc.wait_acked(timeout=60)
    return typed


async def metric(http: httpx.AsyncClient, name: str, **labels: str) -> float:
    """One sample of /metrics (0 when the series is not there yet)."""
    text = (await http.get("/metrics")).text
    wanted = ",".join(f'{key}="{value}"' for key, value in sorted(labels.items()))
    pattern = "(?m)^" + re.escape(name + ("{" + wanted + "}" if wanted else "")) + r" (\S+)$"
    found = re.search(pattern, text)
    return float(found.group(1)) if found else 0.0


async def stalls(http: httpx.AsyncClient) -> float:
    """Loop turns late by more than 250 ms so far (as tests/test_no_peer_stalls.py counts)."""
    text = (await http.get("/metrics")).text
    buckets = dict(re.findall(r'tether_event_loop_lag_seconds_bucket\{le="([^"]+)"\} (\S+)', text))
    return float(buckets["+Inf"]) - float(buckets["0.25"])


async def renders(http: httpx.AsyncClient) -> dict[str, float]:
    return {
        outcome: await metric(http, "tether_renders_total", outcome=outcome)
        for outcome in ("miss", "hit", "shared")
    }


def check_export(export: str, body: str) -> None:
    """What 50,000 paragraphs with a bold word in every tenth look like in ``export``."""
    assert body.count(": the quick brown fox jumps over the lazy dog.") == PARAGRAPHS
    if export == "text":
        assert body.startswith("Paragraph 000000: the quick")
    elif export == "markdown":
        assert body.count("**Paragraph**") == PARAGRAPHS // 10
    elif export == "html":
        assert body.count("<p>") == PARAGRAPHS
        assert body.count("<strong>Paragraph</strong>") == PARAGRAPHS // 10


async def test_every_format_of_a_big_rich_document_is_read_while_a_bystander_is_acked(
    server: ServerProcess, big: bytes
) -> None:
    async with httpx.AsyncClient(base_url=server.http_url, timeout=120) as http:
        writer = {"Authorization": f"Bearer {server.token()}"}
        reader = {"Authorization": f"Bearer {server.token(scope='readonly')}"}
        made = await http.put("/api/documents/rich/big", content=big, headers=OCTETS | writer)
        assert made.status_code == 200, made.text
        before = await stalls(http)
        async with await MuxPeer.connect(server.ws_url) as bystander:
            doc = await bystander.open("bystander-renders", server.token())
            done = asyncio.Event()
            typing = asyncio.ensure_future(type_until(doc, done))
            replies = {}
            for export in ("info", "json", "text", "markdown", "html", "yjs"):
                url = f"/api/documents/rich/big?format={export}"
                replies[export] = await http.get(url, headers=reader)
            done.set()
            typed = await typing
        assert typed >= 20 and len(doc.statuses) >= typed and all(doc.statuses)
        assert await stalls(http) == before  # no loop turn held past 250 ms
    for export, reply in replies.items():
        assert reply.status_code == 200, (export, reply.text[:200])
        if export != "yjs":
            check_export(export, reply.text)
    answer = replies["info"].json()
    assert answer["kind"] == "rich" and answer["name"] == "rich/big"
    assert answer["text"] == replies["text"].text
    assert len(replies["json"].json()["content"]) == PARAGRAPHS  # the ProseMirror tree
    copy = Doc()
    copy.apply_update(replies["yjs"].content)
    assert len(copy.get("default", type=XmlFragment).children) == PARAGRAPHS


async def test_a_state_is_rendered_once_however_many_read_it(server: ServerProcess) -> None:
    async with httpx.AsyncClient(base_url=server.http_url, timeout=120) as http:
        http.headers["Authorization"] = f"Bearer {server.token()}"
        made = await http.put(
            "/api/documents/rich/once", content=rich_document(2000), headers=OCTETS
        )
        assert made.status_code == 200
        start = await renders(http)
        first = await http.get("/api/documents/rich/once?format=html")
        again = await http.get("/api/documents/rich/once?format=html")
        assert first.text == again.text and first.text.count("<p>") == 2000
        counted = await renders(http)
        assert counted["miss"] - start["miss"] == 1 and counted["hit"] - start["hit"] == 1
        # Readers at once share the render under way.
        together = await asyncio.gather(
            *(http.get("/api/documents/rich/once?format=markdown") for _ in range(4))
        )
        assert len({reply.text for reply in together}) == 1
        shared = await renders(http)
        assert shared["miss"] - counted["miss"] == 1
        assert (shared["hit"] + shared["shared"]) - (counted["hit"] + counted["shared"]) == 3
        # A change is a new state: rendered again, once.
        async with await MuxPeer.connect(server.ws_url) as editor:
            doc = await editor.open("rich/once", server.token())
            await doc.append("a change")
            await doc.wait_acked()
            changed = await http.get("/api/documents/rich/once?format=html")
            assert changed.status_code == 200
        after = await renders(http)
        assert after["miss"] - shared["miss"] == 1


async def test_a_big_version_is_read_off_the_loop_and_rendered_once(
    server: ServerProcess, big: bytes
) -> None:
    async with httpx.AsyncClient(base_url=server.http_url, timeout=120) as http:
        http.headers["Authorization"] = f"Bearer {server.token()}"
        made = await http.put("/api/documents/rich/versioned", content=big, headers=OCTETS)
        assert made.status_code == 200
        # A state of its own: the same bytes as another document's would share its renders.
        more = plain_document("a note beside the tree")
        assert (
            await http.put("/api/documents/rich/versioned", content=more, headers=OCTETS)
        ).status_code == 200
        saved = await http.post("/api/versions/rich/versioned", json={"label": "v1"})
        assert saved.status_code == 201, saved.text
        number = saved.json()["id"]
        before, counted = await stalls(http), await renders(http)
        async with await MuxPeer.connect(server.ws_url) as bystander:
            doc = await bystander.open("bystander-versions", server.token())
            done = asyncio.Event()
            typing = asyncio.ensure_future(type_until(doc, done))
            url = f"/api/versions/rich/versioned?id={number}"
            html = await http.get(url + "&format=html")
            whole = await http.get(url)
            again = await http.get(url)
            done.set()
            typed = await typing
        assert typed >= 10 and all(doc.statuses)
        assert await stalls(http) == before
        after = await renders(http)
    assert html.status_code == 200 and whole.status_code == 200
    check_export("html", html.text)
    assert whole.json()["kind"] == "rich" and whole.json()["id"] == number
    check_export("text", whole.json()["text"])
    assert again.content == whole.content
    assert after["miss"] - counted["miss"] == 2 and after["hit"] - counted["hit"] == 1


async def test_a_webhook_for_a_big_document_carries_its_text_without_holding_the_loop(
    tmp_path: Path, big: bytes
) -> None:
    async with Receiver() as receiver:
        settings = {
            "webhook_url": receiver.url,
            "webhook_events": "change",
            "webhook_debounce": 0.1,
        }
        with ServerProcess(tmp_path, **settings) as server:
            async with httpx.AsyncClient(base_url=server.http_url, timeout=120) as http:
                http.headers["Authorization"] = f"Bearer {server.token()}"
                async with await MuxPeer.connect(server.ws_url) as bystander:
                    typist = await bystander.open("bystander-hooks", server.token())
                    await typist.append("first")
                    await receiver.wait_for(1)
                    before = await stalls(http)
                    done = asyncio.Event()
                    typing = asyncio.ensure_future(type_until(typist, done))
                    made = await http.put("/api/documents/hooked", content=big, headers=OCTETS)
                    assert made.status_code == 200
                    await receiver.wait_for(
                        len(receiver.posts) + 1, timeout=60
                    )  # the big one, or a bystander's notice first
                    big_notice = None
                    while big_notice is None:
                        notices = [json.loads(body) for _, body in receiver.posts]
                        big_notice = next((n for n in notices if n["document"] == "hooked"), None)
                        if big_notice is None:
                            await receiver.wait_for(len(receiver.posts) + 1, timeout=60)
                    done.set()
                    typed = await typing
                assert typed >= 10 and all(typist.statuses)
                assert await stalls(http) == before
    check_export("text", big_notice["text"])
    assert big_notice["event"] == "change"


async def test_a_flood_of_imports_is_refused_past_its_bound_and_delays_no_read_or_open(
    tmp_path: Path, big: bytes
) -> None:
    settings = {"imports_threads": 1, "imports_queue": 1, "unload_grace": 0.2}
    with ServerProcess(tmp_path, **settings) as server:
        async with httpx.AsyncClient(base_url=server.http_url, timeout=120) as http:
            writer = {"Authorization": f"Bearer {server.token()}"}
            reader = {"Authorization": f"Bearer {server.token(scope='readonly')}"}
            stored = "stored words " * 10_000  # 130 KB: loaded in the loads pool
            for name in ("resting", "opened"):
                put = await http.put(
                    f"/api/documents/{name}",
                    content=plain_document(stored),
                    headers=OCTETS | writer,
                )
                assert put.status_code == 200
            await _until_unloaded(http)
            imports = [
                asyncio.ensure_future(
                    http.put(f"/api/documents/flood{k}", content=big, headers=OCTETS | writer)
                )
                for k in range(2)
            ]
            await _until(lambda: metric(http, "tether_pool_requests", pool="imports"), 2)
            refused = [
                await http.put(f"/api/documents/more{k}", content=big, headers=OCTETS | writer)
                for k in range(4)
            ]
            read = await http.get("/api/documents/resting?format=text", headers=reader)
            async with await MuxPeer.connect(server.ws_url) as editor:
                opened = await editor.open("opened", server.token(), timeout=30)
                assert str(opened.text) == stored
            # Both answered while the two imports they used to queue behind were under way.
            assert not any(task.done() for task in imports)
            assert [reply.status_code for reply in await asyncio.gather(*imports)] == [200, 200]
            assert await metric(http, "tether_pool_refusals_total", pool="imports") == 4
    assert read.status_code == 200 and read.text == stored
    for reply in refused:
        assert reply.status_code == 503 and "busy with other imports" in reply.json()["error"]
        assert int(reply.headers["Retry-After"]) >= 1


async def _until(sample: object, wanted: float, timeout: float = 30.0) -> None:
    """Poll a public figure of the server until it reads ``wanted`` (no event to wait on)."""
    async with asyncio.timeout(timeout):
        while await sample() != wanted:  # type: ignore[operator]
            await asyncio.sleep(0.02)


async def _until_unloaded(http: httpx.AsyncClient) -> None:
    await _until(lambda: metric(http, "tether_documents_loaded"), 0)

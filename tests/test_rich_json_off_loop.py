"""The ProseMirror tree of a 50,000-paragraph rich document, read and written over REST while a
bystander types (issue 39, item 2, with issue 37's discipline): ``GET ?format=json`` is rendered
off the loop and once per state, and a JSON PUT of the same tree (6 MB) and an HTML PUT are read,
built and applied off it, so no loop turn is held past 250 ms and every keystroke is acked.
The approach of tests/test_renders_off_loop.py, whose helpers this uses."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import httpx
import pytest

from tests.rawpeer import MuxPeer
from tests.serverproc import ServerProcess
from tests.test_renders_off_loop import (
    OCTETS,
    PARAGRAPHS,
    renders,
    rich_document,
    stalls,
    type_until,
)

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(
        tmp_path_factory.mktemp("json-off-loop"), max_html_bytes=8 * 1024 * 1024
    ) as running:
        yield running


async def test_a_big_documents_tree_is_read_and_written_while_a_bystander_is_acked(
    server: ServerProcess,
) -> None:
    big = await asyncio.to_thread(rich_document, PARAGRAPHS)
    async with httpx.AsyncClient(base_url=server.http_url, timeout=300) as http:
        writer = {"Authorization": f"Bearer {server.token()}"}
        made = await http.put("/api/documents/json/big", content=big, headers=OCTETS | writer)
        assert made.status_code == 200, made.text
        before = await stalls(http)
        counted = await renders(http)
        async with await MuxPeer.connect(server.ws_url) as bystander:
            doc = await bystander.open("bystander-json", server.token())
            done = asyncio.Event()
            typing = asyncio.ensure_future(type_until(doc, done))
            first = await http.get("/api/documents/json/big?format=json", headers=writer)
            again = await http.get("/api/documents/json/big?format=json", headers=writer)
            # The tree back in, as JSON into another document, and the same text as HTML.
            tree = first.content
            put = await http.put(
                "/api/documents/json/copy",
                content=tree,
                headers=writer | {"Content-Type": "application/json"},
            )
            html = "".join(f"<p>Paragraph {i:06d}: a line.</p>" for i in range(PARAGRAPHS))
            put_html = await http.put(
                "/api/documents/json/html",
                content=html.encode(),
                headers=writer | {"Content-Type": "text/html"},
            )
            done.set()
            typed = await typing
        assert typed >= 20 and len(doc.statuses) >= typed and all(doc.statuses)
        assert await stalls(http) == before  # no loop turn held past 250 ms
        assert first.status_code == again.status_code == 200
        assert put.status_code == 200, put.text
        assert put_html.status_code == 200, put_html.text
        read = json.loads(first.content)
        assert len(read["content"]) == PARAGRAPHS and first.content == again.content
        assert read["content"][10]["content"][0] == {
            "type": "text",
            "text": "Paragraph",
            "marks": [{"type": "bold"}],
        }
        # Rendered once for the two reads (the second was kept), once more for the copy.
        after = await renders(http)
        assert after["miss"] - counted["miss"] == 1 and after["hit"] - counted["hit"] >= 1
        copy = await http.get("/api/documents/json/copy?format=json", headers=writer)
        assert copy.content == first.content
        text = await http.get("/api/documents/json/html?format=text", headers=writer)
        assert text.text.count(": a line.") == PARAGRAPHS

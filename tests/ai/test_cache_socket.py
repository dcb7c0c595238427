"""The exact and type-ahead cache layers over the real socket (scripted provider)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest

from tests.ai.asking import UNSHAPED
from tests.serverproc import ServerProcess
from tether.protocol.clients.tether_client import DocumentHandle, TetherClient
from tether.protocol.wire.ai_messages import Suggest

pytestmark = pytest.mark.anyio

SCRIPT = '{"pieces": [" and", " the", " gulls", " cried."], "delay": 0.01}'


@pytest.fixture(scope="module")
def cache_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(
        Path(tmp_path_factory.mktemp("cache")),
        ai_provider="scripted",
        **UNSHAPED,
        ai_script=SCRIPT,
    ) as proc:
        yield proc


async def ask(doc: DocumentHandle, request_id: str) -> tuple[str, str]:
    """(source, text) of one suggestion at the end of the document."""
    pos = len(str(doc.text).encode("utf-16-le")) // 2
    doc.send_stateless(Suggest(request_id, "complete", pos=pos, max_tokens=8).encode())
    source, text = "", ""
    with anyio.fail_after(15):
        while True:
            message = json.loads(await doc.stateless.get())
            if message.get("id") != request_id:
                continue
            if message["type"] == "suggestion.start":
                source = message["source"]
            elif message["type"] == "suggestion.delta":
                text += message["text"]
            elif message["type"] in ("suggestion.end", "suggestion.error"):
                return source, text


async def test_asking_twice_at_the_same_place_is_served_from_the_exact_layer(cache_server):
    async with TetherClient(cache_server.ws_url, token=cache_server.token()) as client:
        doc = await client.open("cache-exact")
        doc.append("The boats came home")
        await doc.wait_acked()
        first = await ask(doc, "a1")
        second = await ask(doc, "a2")
        assert first == ("model", " and the gulls cried.")
        assert second == ("exact", " and the gulls cried.")
        doc.send_stateless('{"type":"accept","id":"a2"}')  # a cached answer can be accepted
        await doc.wait_text("The boats came home and the gulls cried.", timeout=10)


async def test_typing_the_start_of_a_cached_answer_serves_the_rest(cache_server):
    async with TetherClient(cache_server.ws_url, token=cache_server.token()) as client:
        doc = await client.open("cache-typeahead")
        doc.append("The nets were heavy")
        await doc.wait_acked()
        assert (await ask(doc, "t1"))[0] == "model"
        doc.append(" and the")
        await doc.wait_acked()
        assert await ask(doc, "t2") == ("typeahead", " gulls cried.")


async def test_another_documents_cached_answer_is_never_served(cache_server):
    token = cache_server.token()
    async with TetherClient(cache_server.ws_url, token=token) as client:
        first = await client.open("cache-iso-a")
        second = await client.open("cache-iso-b")
        for doc in (first, second):
            doc.append("Identical text in both documents")
            await doc.wait_acked()
        assert (await ask(first, "i1"))[0] == "model"
        assert (await ask(second, "i2"))[0] == "model"  # same context, other document
        assert (await ask(second, "i3"))[0] == "exact"


async def test_a_deleted_documents_cached_answers_are_never_served_again(cache_server):
    """DELETE drops the document's cache scope (exact, type-ahead and semantic entries): a new
    document under the same name with the same text asks the model again."""
    token = cache_server.token()
    async with TetherClient(cache_server.ws_url, token=token) as client:
        doc = await client.open("cache-deleted")
        doc.append("The lighthouse keeper wrote")
        await doc.wait_acked()
        assert (await ask(doc, "d1"))[0] == "model"
        assert (await ask(doc, "d2"))[0] == "exact"
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(base_url=cache_server.http_url, headers=headers) as http:
            deleted = await http.delete("/api/documents/cache-deleted")
            assert deleted.status_code == 200, deleted.text
    async with TetherClient(cache_server.ws_url, token=token) as client:
        doc = await client.open("cache-deleted")
        assert str(doc.text) == ""
        doc.append("The lighthouse keeper wrote")
        await doc.wait_acked()
        assert await ask(doc, "d3") == ("model", " and the gulls cried.")

"""Faithful rewrites through the real server: a rewrite that drops a date ends with ``dropped``
naming it; ``accept`` without ``confirm_dropped`` is answered ``confirm_required`` and the
document is unchanged; with it, the rewrite is applied. A faithful rewrite carries no
``dropped`` and accepts as before. The same list comes from the cache, on the HTTP path, and
when an accept stops a rewrite mid-stream.

The scripted provider answers per passage (its ``replies`` are keyed by a marker in the
selected text), so one server shows every case."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.ai.asking import Answer, collect, utf16_len
from tests.serverproc import ServerProcess
from tether.protocol.clients.tether_client import DocumentHandle, TetherClient
from tether.protocol.wire.ai_messages import Accept, Suggest

pytestmark = pytest.mark.anyio

DATE_PASSAGE = "We ship the rw-date build on 3 March."
DATE_REWRITE = ["We", " ship", " the", " rw-date", " build", " soon", "."]
GOOD_PASSAGE = "We ship the rw-good build on Friday."
GOOD_REWRITE = ["We", " will", " ship", " the", " rw-good", " build", " on", " Friday", "."]
SLOW_PASSAGE = "We ship the rw-slow build on 3 March and tell Alice."
# Long enough (60 pieces at DELAY) that an accept after the first text arrives mid-stream.
SLOW_REWRITE = ["We", " ship", " the", " rw-slow", " build", " later", *[" and", " later"] * 27]
LONG_PASSAGE = "The rw-long plan: " + ", ".join(f"step {n}" for n in range(1, 13)) + "."
# 37 pieces: more than the server's default length for completions (24).
LONG_REWRITE = (
    ["The", " rw-long", " plan", ":"]
    + [piece for n in range(1, 12) for piece in (f" step {n}", ",")]
    + [" step 12", "."]
)
REPLIES = {
    "rw-date": DATE_REWRITE,
    "rw-good": GOOD_REWRITE,
    "rw-slow": SLOW_REWRITE,
    "rw-long": LONG_REWRITE,
}
DELAY = 0.05


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    script = json.dumps({"replies": REPLIES, "delay": DELAY})
    with ServerProcess(
        Path(tmp_path_factory.mktemp("faithful")), ai_provider="scripted", ai_script=script
    ) as proc:
        yield proc


@asynccontextmanager
async def writer(server: ServerProcess, text: str) -> AsyncIterator[tuple[str, DocumentHandle]]:
    """A new document holding ``text``, stored, and an editor on it."""
    name = f"faithful-{uuid.uuid4().hex[:8]}"
    async with TetherClient(server.ws_url, token=server.token([name]), reconnect=False) as client:
        doc = await client.open(name)
        doc.append(text)
        await doc.wait_acked()
        yield name, doc


async def rewrite_all(doc: DocumentHandle, request_id: str) -> Answer:
    text = str(doc.text)
    doc.send_stateless(Suggest(request_id, "rewrite", start=0, end=utf16_len(text)).encode())
    return await collect(doc, request_id)


async def reply_to(doc: DocumentHandle, request_id: str) -> dict[str, Any]:
    """The next message for ``request_id`` that is not its stream (an accept's answer)."""
    with anyio.fail_after(15):
        while True:
            message = json.loads(await doc.stateless.get())
            if message.get("id") == request_id and message["type"] not in (
                "suggestion.start",
                "suggestion.delta",
            ):
                return message


async def rest_text(server: ServerProcess, name: str) -> str:
    headers = {"Authorization": f"Bearer {server.token([name])}"}
    async with httpx.AsyncClient(base_url=server.http_url) as http:
        response = await http.get(f"/api/documents/{name}", headers=headers)
    assert response.status_code == 200, response.text
    return str(response.json()["text"])


async def test_a_rewrite_that_drops_a_date_ends_naming_it_and_needs_confirming(server) -> None:
    async with writer(server, DATE_PASSAGE) as (name, doc):
        answer = await rewrite_all(doc, "d1")
        assert answer.text == "".join(DATE_REWRITE)  # still shown: not junk
        assert answer.end["type"] == "suggestion.end"
        assert answer.end["reason"] == "done"
        assert answer.end["dropped"] == [{"kind": "date", "text": "3 March"}]

        doc.send_stateless(Accept("d1").encode())
        refused = await reply_to(doc, "d1")
        assert refused["type"] == "suggestion.error"
        assert refused["code"] == "confirm_required"
        assert "the date '3 March'" in refused["message"]
        assert await rest_text(server, name) == DATE_PASSAGE  # nothing applied

        doc.send_stateless(Accept("d1", confirm_dropped=True).encode())
        assert (await reply_to(doc, "d1"))["type"] == "suggestion.accepted"
        await doc.wait_text("".join(DATE_REWRITE))
    assert await rest_text(server, name) == "".join(DATE_REWRITE)


async def test_a_faithful_rewrite_has_no_dropped_and_accepts_as_before(server) -> None:
    async with writer(server, GOOD_PASSAGE) as (name, doc):
        answer = await rewrite_all(doc, "g1")
        assert answer.end["reason"] == "done"
        assert "dropped" not in answer.end
        doc.send_stateless(Accept("g1").encode())
        assert (await reply_to(doc, "g1"))["type"] == "suggestion.accepted"
        await doc.wait_text("".join(GOOD_REWRITE))
    assert await rest_text(server, name) == "".join(GOOD_REWRITE)


async def test_a_rewrite_that_asks_for_no_length_gets_room_for_its_whole_passage(server) -> None:
    assert len(LONG_REWRITE) > 24
    async with writer(server, LONG_PASSAGE) as (_name, doc):
        answer = await rewrite_all(doc, "l1")
    assert answer.text == "".join(LONG_REWRITE) == LONG_PASSAGE  # not cut at 24 tokens
    assert answer.end["tokens"] == len(LONG_REWRITE)
    assert "dropped" not in answer.end


async def test_a_cached_rewrite_is_flagged_the_same(server) -> None:
    async with writer(server, DATE_PASSAGE) as (_name, doc):
        first = await rewrite_all(doc, "c1")
        second = await rewrite_all(doc, "c2")
        assert (first.source, second.source) == ("model", "exact")
        assert second.text == first.text
        assert (
            second.end["dropped"] == first.end["dropped"] == [{"kind": "date", "text": "3 March"}]
        )
        doc.send_stateless(Accept("c2").encode())
        assert (await reply_to(doc, "c2"))["code"] == "confirm_required"


async def test_an_accept_mid_stream_ends_the_rewrite_with_what_it_drops(server) -> None:
    async with writer(server, SLOW_PASSAGE) as (name, doc):
        text = str(doc.text)
        doc.send_stateless(Suggest("s1", "rewrite", start=0, end=utf16_len(text)).encode())
        streamed = ""
        with anyio.fail_after(15):
            while not streamed:  # the first text: the rest takes ~3 s more
                message = json.loads(await doc.stateless.get())
                streamed += message.get("text", "")
            doc.send_stateless(Accept("s1").encode())
            while (message := json.loads(await doc.stateless.get()))["type"] == "suggestion.delta":
                streamed += message["text"]
        assert message["type"] == "suggestion.end"
        assert message["reason"] == "cancelled"
        assert {"kind": "date", "text": "3 March"} in message["dropped"]
        assert {"kind": "name", "text": "Alice"} in message["dropped"]
        refused = await reply_to(doc, "s1")
        assert refused["code"] == "confirm_required"
        assert await rest_text(server, name) == SLOW_PASSAGE

        doc.send_stateless(Accept("s1", confirm_dropped=True).encode())
        assert (await reply_to(doc, "s1"))["type"] == "suggestion.accepted"
        await doc.wait_text(streamed)
    assert streamed != "".join(SLOW_REWRITE)
    assert await rest_text(server, name) == streamed


async def test_the_http_path_ends_a_rewrite_with_what_it_drops(server) -> None:
    body = {
        "doc": "faithful-http",
        "id": "h1",
        "kind": "rewrite",
        "from": 0,
        "to": utf16_len(DATE_PASSAGE),
        "text": DATE_PASSAGE,
    }
    headers = {"Authorization": f"Bearer {server.token()}"}
    messages: list[dict[str, Any]] = []
    async with (
        httpx.AsyncClient(base_url=server.http_url, timeout=15) as http,
        http.stream("POST", "/api/suggest", json=body, headers=headers) as response,
    ):
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line:
                messages.append(json.loads(line.removeprefix("data: ")))
    end = messages[-1]
    assert end["type"] == "suggestion.end"
    assert end["dropped"] == [{"kind": "date", "text": "3 March"}]

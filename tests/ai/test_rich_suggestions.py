"""AI suggestions on rich-text documents (a Tiptap tree written by y-prosemirror), through the
real server over real sockets: the cursor as a relative position the real Yjs made, accept
landing in the right block with the right marks (while another editor types in the same
paragraph), rewrite inside one block, the refusals, and the real local model at a rich cursor.

The placements run on the scripted provider (its text is known); one test runs SmolLM2.
What the editors end with is read back by Tiptap's own schema (``tiptap_reads``)."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import httpx
import pytest
from pycrdt import XmlFragment

from tests.jsclient import tiptap_document, tiptap_reads, yjs_anchors
from tests.serverproc import ServerProcess
from tether.protocol.clients.tether_client import (
    DocumentHandle,
    SuggestionFailedError,
    TetherClient,
)
from tether.protocol.wire.ai_messages import Accept, SuggestionEnd

pytestmark = pytest.mark.anyio

SHARP = " sharp"
BOLD = [{"type": "bold"}]
LINK = [{"type": "link", "attrs": {"href": "https://example.com"}}]


def _text(text: str, marks: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"type": "text", "text": text, **({"marks": marks} if marks else {})}


def _paragraph(*content: dict[str, Any]) -> dict[str, Any]:
    return {"type": "paragraph", "content": list(content)} if content else {"type": "paragraph"}


DOCUMENT = [
    {"type": "heading", "attrs": {"level": 2}, "content": [_text("Plans")]},  # [0, 0]
    _paragraph(_text("We meet at "), _text("noon", BOLD), _text(" on Friday.")),  # [1, 0]
    {
        "type": "bulletList",
        "content": [{"type": "listItem", "content": [_paragraph(_text("first item"))]}],
    },  # [2, 0, 0, 0]
    _paragraph(),  # [3]: empty
    _paragraph(_text("see "), _text("the site", LINK), _text(" now")),  # [4, 0]
]


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    settings: dict[str, Any] = {
        "ai_provider": "scripted",
        "ai_stop": "tokens",
        "ai_heal": "off",
        "ai_junk_filter": "off",
        "ai_script": json.dumps({"pieces": [SHARP]}),
    }
    with ServerProcess(tmp_path_factory.mktemp("rich-ai"), **settings) as proc:
        yield proc


@contextlib.asynccontextmanager
async def rich_editor(server: ServerProcess, name: str) -> AsyncIterator[DocumentHandle]:
    async with TetherClient(server.ws_url, token=server.token([name]), reconnect=False) as client:
        yield await client.open(name)


async def seeded(server: ServerProcess, label: str) -> tuple[str, bytes]:
    """A new document holding DOCUMENT, stored; its name and state."""
    name = f"rich-{label}-{uuid.uuid4().hex[:8]}"
    async with rich_editor(server, name) as doc:
        doc.doc.apply_update(tiptap_document(DOCUMENT))
        await doc.wait_acked()
        return name, doc.doc.get_update()


async def suggest_and_accept(doc: DocumentHandle, **where: Any) -> str:
    """Ask (at ``where``), take the whole suggestion, accept it; the suggested text."""
    text = ""
    request_id = ""
    async for message in doc.suggest(max_tokens=4, **where):
        request_id = message.id
        text += getattr(message, "text", "")
        if isinstance(message, SuggestionEnd):
            assert message.reason == "done", message
    doc.send_stateless(Accept(request_id).encode())
    with anyio.fail_after(10):
        while True:
            answer = json.loads(await doc.stateless.get())
            if answer.get("id") == request_id:
                assert answer["type"] == "suggestion.accepted", answer
                return text


def block(doc: DocumentHandle, index: int) -> dict[str, Any]:
    return dict(tiptap_reads(doc.doc.get_update())["content"][index])


async def test_accept_inside_a_bold_run_is_bold_and_in_that_paragraph(
    scripted: ServerProcess,
) -> None:
    name, state = await seeded(scripted, "bold")
    (anchor,) = yjs_anchors(state, [([1, 0], len("We meet at no"), 0)])
    async with rich_editor(scripted, name) as doc:
        assert await suggest_and_accept(doc, anchor=anchor) == SHARP
        await doc.wait_for(lambda: "sharp" in doc.read())
        assert block(doc, 1)["content"] == [
            _text("We meet at "),
            _text("no" + SHARP + "on", BOLD),
            _text(" on Friday."),
        ]
        assert block(doc, 0) == {
            "type": "heading",
            "attrs": {"level": 2},
            "content": [_text("Plans")],
        }


async def test_accept_lands_at_the_anchor_while_another_editor_types_in_that_paragraph(
    scripted: ServerProcess,
) -> None:
    name, state = await seeded(scripted, "race")
    (anchor,) = yjs_anchors(state, [([1, 0], len("We meet at noon"), 0)])
    async with rich_editor(scripted, name) as doc, rich_editor(scripted, name) as other:
        await other.wait_synced()
        request_id = ""
        async for message in doc.suggest(anchor=anchor, max_tokens=4):
            request_id = message.id
        # The other editor types at the paragraph's start before the accept arrives.
        paragraph = other.doc.get("default", type=XmlFragment).children[1].children[0]
        paragraph.insert(0, "Now: ")
        await other.wait_acked()
        await doc.wait_for(lambda: "Now: " in doc.read())
        doc.send_stateless(Accept(request_id).encode())
        await other.wait_for(lambda: SHARP in other.read(), timeout=10)
        assert block(other, 1)["content"] == [
            _text("Now: We meet at "),
            _text("noon" + SHARP, BOLD),
            _text(" on Friday."),
        ]
        assert other.read("markdown").splitlines()[2] == "Now: We meet at **noon sharp** on Friday."


async def test_accept_at_the_end_of_a_heading_a_list_item_and_in_an_empty_paragraph(
    scripted: ServerProcess,
) -> None:
    name, state = await seeded(scripted, "ends")
    heading, item, empty = yjs_anchors(
        state,
        [([0, 0], len("Plans"), 0), ([2, 0, 0, 0], len("first item"), 0), ([3], 0, 0)],
    )
    async with rich_editor(scripted, name) as doc:
        for anchor in (heading, item, empty):
            await suggest_and_accept(doc, anchor=anchor)
        await doc.wait_for(lambda: doc.read().count("sharp") == 3)
        assert block(doc, 0) == {
            "type": "heading",
            "attrs": {"level": 2},
            "content": [_text("Plans" + SHARP)],
        }
        assert block(doc, 2)["content"][0]["content"][0]["content"] == [_text("first item" + SHARP)]
        assert block(doc, 3)["content"] == [_text(SHARP)]
        assert doc.read("markdown").startswith("## Plans sharp\n\nWe meet at **noon** on Friday.")


async def test_text_typed_after_a_link_does_not_join_it(scripted: ServerProcess) -> None:
    name, state = await seeded(scripted, "link")
    (anchor,) = yjs_anchors(state, [([4, 0], len("see the site"), 0)])
    async with rich_editor(scripted, name) as doc:
        await suggest_and_accept(doc, anchor=anchor)
        await doc.wait_for(lambda: "sharp" in doc.read())
        runs = [
            (n["text"], [m["type"] for m in n.get("marks", [])]) for n in block(doc, 4)["content"]
        ]
        assert runs == [("see ", []), ("the site", ["link"]), (SHARP + " now", [])]


async def test_pos_with_a_path_and_a_rewrite_inside_one_block(scripted: ServerProcess) -> None:
    name, state = await seeded(scripted, "path")
    start, end, elsewhere = yjs_anchors(
        state,
        [([1, 0], len("We meet at "), 0), ([1, 0], len("We meet at noon"), 0), ([0, 0], 1, 0)],
    )
    async with rich_editor(scripted, name) as doc:
        await suggest_and_accept(doc, pos=len("We"), path=[1, 0])
        await doc.wait_for(lambda: "We sharp meet" in doc.read())
        with pytest.raises(SuggestionFailedError, match="within one block"):
            async for _ in doc.suggest(kind="rewrite", anchor=start, anchor_end=elsewhere):
                pass
        # The anchors made before the first accept still name the same characters.
        await suggest_and_accept(doc, kind="rewrite", anchor=start, anchor_end=end)
        await doc.wait_for(lambda: "noon" not in doc.read())
        assert block(doc, 1)["content"] == [
            _text("We sharp meet at "),
            _text(SHARP, BOLD),
            _text(" on Friday."),
        ]


async def test_rich_cursors_that_cannot_be_served_are_refused_clearly(
    scripted: ServerProcess,
) -> None:
    name, state = await seeded(scripted, "refused")
    (between,) = yjs_anchors(state, [([], 1, 0)])  # between the heading and the paragraph
    async with rich_editor(scripted, name) as doc:
        refusals = [
            ({"pos": 3}, "rich-text document: send 'anchor'"),
            ({"pos": 0, "path": [9, 0]}, "no text at path"),
            ({"anchor": between}, "not inside text"),
            ({"anchor": "AAEEAA=="}, "not in this document"),
        ]
        for where, message in refusals:
            with pytest.raises(SuggestionFailedError, match=message):
                async for _ in doc.suggest(**where):
                    pass
        assert await suggest_and_accept(doc, pos=0, path=[0, 0]) == SHARP  # the socket lives


async def test_rest_reads_the_accepted_rich_document_as_markdown(scripted: ServerProcess) -> None:
    name, state = await seeded(scripted, "rest")
    (anchor,) = yjs_anchors(state, [([2, 0, 0, 0], len("first"), 0)])
    async with rich_editor(scripted, name) as doc:
        await suggest_and_accept(doc, anchor=anchor)
    async with httpx.AsyncClient(base_url=scripted.http_url) as http:
        response = await http.get(
            f"/api/documents/{name}",
            params={"format": "markdown"},
            headers={"Authorization": f"Bearer {scripted.token([name])}"},
        )
    assert response.status_code == 200
    assert "- first sharp item\n" in response.text


# ---- the real local model ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    settings = {
        "ai_provider": "local",
        "ai_stop": "tokens",
        "ai_heal": "off",
        "ai_junk_filter": "off",
        "ai_max_tokens": 6,
    }
    with ServerProcess(tmp_path_factory.mktemp("rich-local"), **settings) as proc:
        yield proc


async def test_the_local_model_suggests_at_a_rich_cursor_and_it_lands_there(
    local: ServerProcess,
) -> None:
    name, state = await seeded(local, "local")
    (anchor,) = yjs_anchors(state, [([1, 0], len("We meet at noon on"), 0)])
    with anyio.fail_after(60):  # the first request pays the model's cold prefill
        async with rich_editor(local, name) as doc:
            text = await suggest_and_accept(doc, anchor=anchor)
            assert text.strip(), "the model suggested nothing mid-sentence"
            await doc.wait_for(lambda: text in doc.read())
            paragraph = "".join(node["text"] for node in block(doc, 1)["content"])
            assert paragraph == "We meet at noon on" + text + " Friday."

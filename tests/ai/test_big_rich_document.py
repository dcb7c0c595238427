"""Typing and asking on a 20,000-paragraph rich document through the real server (issue 37): the
AI reads a window of blocks around each cursor, so the suggestion must still come from the
right text and land at the right place, at the end of the document and in its middle, after
paragraphs were inserted and joined above the cursor. Scripted provider (its text is known)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from pycrdt import XmlElement, XmlFragment, XmlText

from tests.serverproc import ServerProcess
from tether.protocol.updates.update_scan import scan_update
from tether.protocol.wire.relative_position import RelativePosition

from .test_rich_suggestions import SHARP, rich_editor, suggest_and_accept
from .test_rich_windows import rich_update, sentence

pytestmark = pytest.mark.anyio

PARAGRAPHS = 20_000


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    settings: dict[str, Any] = {
        "ai_provider": "scripted",
        "ai_stop": "tokens",
        "ai_heal": "off",
        "ai_junk_filter": "off",
        "ai_script": json.dumps({"pieces": [SHARP]}),
    }
    with ServerProcess(tmp_path_factory.mktemp("big-rich-ai"), **settings) as proc:
        yield proc


def text_of(node: XmlText) -> str:
    return "".join(part for part, _attrs in node.diff())


async def test_typing_and_asking_in_a_big_rich_document_lands_at_the_cursor(
    server: ServerProcess,
) -> None:
    name = f"big-rich-{uuid.uuid4().hex[:8]}"
    async with rich_editor(server, name) as doc:
        doc.doc.apply_update(rich_update([sentence(n) for n in range(PARAGRAPHS)]))
        await doc.wait_acked(timeout=120)
        typed: list[bytes] = []
        doc.doc.observe(lambda event: typed.append(event.update))
        fragment = doc.doc.get("default", type=XmlFragment)

        async def type_and_accept(block: int, words: str) -> None:
            node = fragment.children[block].children[0]
            node.insert(len(node), words)
            await doc.wait_acked()
            item = scan_update(typed[-1]).items[-1]
            cursor = RelativePosition(item=(item.client, item.clock + item.length - 1), assoc=-1)
            assert await suggest_and_accept(doc, anchor=cursor.encode()) == SHARP
            await doc.wait_for(lambda: text_of(node).endswith(SHARP))

        last = PARAGRAPHS - 1
        await type_and_accept(last, " and then")
        await type_and_accept(last, " again")
        assert text_of(fragment.children[last].children[0]) == (
            sentence(last) + " and then" + SHARP + " again" + SHARP
        )
        middle = PARAGRAPHS // 2
        await type_and_accept(middle, ", said the keeper")
        # Paragraphs come and go above the cursor between asks: it is found all the same.
        fragment.children.insert(middle - 3, XmlElement("paragraph", contents=[XmlText("New.")]))
        await doc.wait_acked()
        del fragment.children[middle - 40]
        await doc.wait_acked()
        await type_and_accept(middle, " twice")
        assert text_of(fragment.children[middle].children[0]) == (
            sentence(middle) + ", said the keeper" + SHARP + " twice" + SHARP
        )
        for block in (middle - 1, middle + 1, last - 1):
            assert SHARP not in text_of(fragment.children[block].children[0])
        assert len(fragment.children) == PARAGRAPHS

"""Relative positions made by the real Yjs and y-prosemirror, resolved by the server to the
same place Yjs resolves them to, over text written concurrently by three clients (accents,
emoji, a bold range, deletions, a paste inside another client's run)."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from pycrdt import Doc, XmlFragment

from tether.ai.errors import BadRequest
from tether.ai.text.positions import utf16_to_index as _utf16_to_index
from tether.ai.text.relative import Place, locate
from tether.ai.text.rich_view import RichReader
from tether.collab.updates.guard import UpdateGuard
from tether.protocol.updates.update_scan import scan_update
from tether.protocol.wire.relative_position import RelativePosition, decode_relative_position

from ..jsclient import yjs_cursor_cases


def _text(text: str) -> dict[str, str]:
    return {"type": "text", "text": text}


RICH = [
    {"type": "heading", "attrs": {"level": 1}, "content": [{"type": "text", "text": "Café plans"}]},
    {
        "type": "paragraph",
        "content": [
            {"type": "text", "text": "We meet at "},
            {"type": "text", "marks": [{"type": "bold"}], "text": "naïve 😀 noon"},
            {"type": "text", "text": " on Friday."},
            {"type": "hardBreak"},
            {"type": "text", "text": "Then lunch."},
        ],
    },
    {"type": "paragraph"},
    {
        "type": "bulletList",
        "content": [
            {
                "type": "listItem",
                "content": [
                    {"type": "paragraph", "content": [{"type": "text", "text": "first ✓"}]},
                    {
                        "type": "orderedList",
                        "content": [
                            {
                                "type": "listItem",
                                "content": [{"type": "paragraph", "content": [_text("inner")]}],
                            }
                        ],
                    },
                ],
            }
        ],
    },
    {"type": "codeBlock", "attrs": {"language": "py"}, "content": [_text("x = '日本'")]},
]


@pytest.fixture(scope="module")
def positions() -> dict[str, Any]:
    return yjs_cursor_cases(RICH)


def _loaded(update: bytes) -> tuple[Doc, UpdateGuard]:
    doc = Doc()
    doc.apply_update(update)
    guard = UpdateGuard(128)
    scan = scan_update(update)
    guard.admit(scan, guard.check(scan))
    return doc, guard


def test_every_tiptap_cursor_resolves_where_yjs_puts_it(positions: dict[str, Any]) -> None:
    doc, guard = _loaded(base64.b64decode(positions["update"]))
    cases = positions["cases"]
    assert len(cases) > 60
    non_ascii = 0
    for case in cases:
        position = decode_relative_position(base64.b64decode(case["anchor"]))
        place = locate(doc, position, guard, "default", "content")
        path = tuple(case["path"])
        if case["text"] is None:  # an empty paragraph: the element itself
            assert place == Place("default", path, 0, holds_text=False), case
            continue
        expected = _utf16_to_index(case["text"], case["index"])
        assert place == Place("default", path, expected), case
        non_ascii += not case["text"][:expected].isascii()
    assert non_ascii > 10  # the slow path (accents and emoji before the cursor) was exercised


def test_every_plain_index_and_assoc_resolves_where_yjs_puts_it(positions: dict[str, Any]) -> None:
    doc, guard = _loaded(base64.b64decode(positions["update"]))
    text = positions["plain"]
    assert not text.isascii()
    for case in positions["plainCases"]:
        position = decode_relative_position(base64.b64decode(case["anchor"]))
        place = locate(doc, position, guard, "default", "content")
        assert place == Place("content", (), _utf16_to_index(text, case["index"])), case


def test_places_are_slots_of_the_view(positions: dict[str, Any]) -> None:
    doc, _guard = _loaded(base64.b64decode(positions["update"]))

    fragment = doc.get("default", type=XmlFragment)
    with doc.transaction() as txn:
        view = RichReader().read(fragment.integrated, txn._txn)
    assert view.text.startswith("# Cfümlaut 😀 é plans tail ✓\n\nWe meet at naïve 😀 noon")
    assert "\n- first ✓\n  1. inner" in view.text
    assert view.text.endswith("```py\nxñ😀x = '日本'\n```")
    for case in positions["cases"]:
        slot = view.slot_of(tuple(case["path"]))
        assert slot is not None, case
        if case["text"] is not None:
            assert slot.text == case["text"]


def test_positions_that_are_not_in_text_are_refused(positions: dict[str, Any]) -> None:
    doc, guard = _loaded(base64.b64decode(positions["update"]))
    refused = [
        RelativePosition(item=(12345, 0)),  # a client the document never had
        RelativePosition(tname="default"),  # the fragment's end: between blocks
        RelativePosition(tname="nothing"),
    ]
    for position in refused:
        with pytest.raises(BadRequest):
            locate(doc, position, guard, "default", "content")
    with pytest.raises(Exception, match="relative position"):
        decode_relative_position(b"\x07\x01\x02")


def test_reading_after_an_edit_renders_only_the_edited_block() -> None:
    from tether.ai.suggest.document_text import DocumentText
    from tether.bench.rich_ai import paragraphs, write_rich

    doc = Doc()
    last = write_rich(doc, paragraphs(0.05))
    reader = DocumentText("default")
    first = reader.read(doc)
    assert first.rich and first.text.startswith("## Part 1\n\nThe ")
    rendered = reader.reader.rendered
    for _ in range(3):
        last.insert(len(last), " more")
        reader.mark_dirty()
        again = reader.read(doc)
        assert again.text.endswith(" more")
    assert reader.reader.rendered == rendered + 3  # one block each time, not the document
    assert again.view is not None
    slot = again.view.slot_of((again.text.count("\n\n"), 0))
    assert slot is not None and again.text.endswith(slot.text)
    assert again.view.slot_at(len(again.text)) == (slot, len(slot.text))


def test_an_anchor_deep_in_one_long_insertion_after_non_ascii_is_refused_in_bounded_time() -> None:
    """The walk back to an item's start is one yrs call per character: bounded, then refused."""
    import time

    from pycrdt import Text

    from tether.ai.text import relative

    body = Doc()
    body_text = body.get("content", type=Text)
    body_text.insert(0, "é" + "a" * (relative.MAX_STEPS + 100))  # one item, non-ASCII first
    update = body.get_update()
    loaded, guard = _loaded(update)
    client = body.client_id
    position = RelativePosition(item=(client, relative.MAX_STEPS + 50))
    started = time.perf_counter()
    with pytest.raises(BadRequest, match="too costly"):
        locate(loaded, position, guard, "default", "content")
    assert time.perf_counter() - started < 1.0
    near = RelativePosition(item=(client, 40))  # a short walk is exact
    assert locate(loaded, near, guard, "default", "content") == Place("content", (), 40)

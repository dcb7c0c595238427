"""A rich tree keeps what it says through every writer and reader: written into a Yjs fragment
(``tree_write``) and read back (``tree``, and Tiptap through y-prosemirror), and written as
Markdown and read back (``markdown``, ``markdown_in``)."""

from __future__ import annotations

from typing import Any

from pycrdt import Doc, XmlFragment

from tests.jsclient import tiptap_reads
from tether.collab.content.reading import read_content
from tether.collab.content.tree import Node, Run, read_fragment
from tether.collab.content.tree_write import replace_fragment

BOLD: dict[str, Any] = {"bold": {}}
ITALIC: dict[str, Any] = {"italic": {}}


def link(href: str) -> dict[str, Any]:
    return {"link": {"href": href}}


# Marks that end where others begin, links that differ only in their address, a mark around
# a hard break, and text that is not ASCII (pycrdt counts UTF-8 bytes, Yjs UTF-16 units).
RUNS = (
    Run("plain "),
    Run("bold", BOLD),
    Run("both", {**BOLD, **ITALIC}),
    Run("italic", ITALIC),
    Run(" to a", link("https://a.example/")),
    Run(" to b", link("https://b.example/")),
    Run(" \N{GRINNING FACE} é", {"strike": {}}),
    Node("hardBreak"),
    Run("after", {"code": {}}),
    Run(" end"),
)


def written(blocks: tuple[Node | Run, ...]) -> Doc:
    doc = Doc()
    with doc.transaction():
        replace_fragment(doc.get("default", type=XmlFragment), blocks)
    return doc


def test_a_paragraph_s_runs_read_back_with_the_marks_they_were_written_with() -> None:
    blocks = (Node("paragraph", {}, RUNS),)
    read = read_fragment(written(blocks).get("default", type=XmlFragment))
    first_text = Node("#text", {}, RUNS[:7])
    assert read == (Node("paragraph", {}, (first_text, RUNS[7], Node("#text", {}, RUNS[8:]))),)


def test_tiptap_reads_each_run_with_its_own_marks_and_no_mark_leaks_into_the_next() -> None:
    pm = tiptap_reads(written((Node("paragraph", {}, RUNS),)).get_update())
    got = [
        (piece.get("text"), sorted(mark["type"] for mark in piece.get("marks", [])))
        for piece in pm["content"][0]["content"]
    ]
    assert got == [
        ("plain ", []),
        ("bold", ["bold"]),
        ("both", ["bold", "italic"]),
        ("italic", ["italic"]),
        (" to a", ["link"]),
        (" to b", ["link"]),
        (" \N{GRINNING FACE} é", ["strike"]),
        (None, []),
        ("after", ["code"]),
        (" end", []),
    ]
    hrefs = [
        mark["attrs"]["href"]
        for piece in pm["content"][0]["content"]
        for mark in piece.get("marks", [])
        if mark["type"] == "link"
    ]
    assert hrefs == ["https://a.example/", "https://b.example/"]


def test_twenty_thousand_alternating_runs_are_written_and_read_back_in_order() -> None:
    runs = tuple(Run(f"w{i}", BOLD if i % 2 else {}) for i in range(20_000))
    doc = written((Node("paragraph", {}, runs),))
    (paragraph,) = read_fragment(doc.get("default", type=XmlFragment))
    assert isinstance(paragraph, Node) and paragraph.children == (Node("#text", {}, runs),)
    assert read_content(doc).text() == "".join(f"w{i}" for i in range(20_000))

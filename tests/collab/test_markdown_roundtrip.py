"""A rich tree keeps what it says through every writer and reader: written into a Yjs fragment
(``tree_write``) and read back (``tree``, and Tiptap through y-prosemirror), and written as
Markdown and read back (``markdown``, ``markdown_in``)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pycrdt import Doc, XmlFragment

from tests.jsclient import tiptap_reads
from tether.collab.content.markdown import to_markdown
from tether.collab.content.markdown_in import parse_markdown
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


# ---- tree → Markdown → tree is the identity on the schema Markdown holds ----------------------
#
# The trees are those the Markdown reader makes: headings 1-6, non-empty paragraphs, bullet and
# ordered lists (any start CommonMark writes, 0 to 999,999,999) nested in any way, blockquotes,
# fenced code with a language, rules, hard breaks inside a block, and the marks bold, italic,
# strike, code and link (to an address as the reader keeps it). Runs are canonical: adjacent
# runs differ in marks, and whitespace at the edge of a mark is outside it (the writer keeps
# spaces outside a mark's delimiters, as CommonMark needs). Not held: control
# characters that markdown-it neither keeps at a line's edge nor reads from a reference (U+000B,
# U+001C-U+001F, U+0085: the C0/C1 ones but tab, line feed, form feed and carriage return), NUL
# anywhere (CommonMark makes it U+FFFD), a carriage return in code blocks (a line ending) and a
# line break in inline code (written between two code spans, the break itself not code).

WORD_PIECES = st.sampled_from(
    [
        "a",
        "Word",
        "1986.",
        "2)",
        "42",
        "#",
        "##",
        "*",
        "**",
        "_",
        "__",
        "~",
        "~~",
        "`",
        "``",
        "[",
        "]",
        "(",
        ")",
        "!",
        "<",
        ">",
        "<b>",
        "</p>",
        "\\",
        "\\*",
        "&",
        "&copy;",
        "&amp;",
        "&#10;",
        "&#x41;",
        ";",
        ":",
        ".",
        "-",
        "---",
        "+",
        "=",
        "===",
        "|",
        '"',
        "'",
        "é",
        "ß",
        "中文",
        "\N{GRINNING FACE}",
        "\u05d0",
        "\u0301",
        "%20",
        "http://x.example",
    ]
)
WORDS = st.lists(WORD_PIECES, min_size=1, max_size=3).map("".join)
SPACES = st.lists(
    st.sampled_from([" ", "  ", "\t", "\n", "\r", "\x0c", "\u00a0", "\u2028", "\u3000"]),
    min_size=1,
    max_size=3,
).map("".join)
CODE_SPACES = SPACES.filter(lambda space: "\n" not in space and "\r" not in space)
HREFS = st.sampled_from(
    [
        "https://x.example/",
        "https://x.example/a(b)c",
        "https://x.example/a%20b?q=1&r=2#f",
        "/relative/path",
        "mailto:a@b.example",
        "",
        "#top",
        "https://x.example/&copy;",
        "a%5Cb",
        "https://x.example/*_~",
    ]
)
MARKS = st.fixed_dictionaries(
    {},
    optional={
        "bold": st.just({}),
        "italic": st.just({}),
        "strike": st.just({}),
        "code": st.just({}),
        "link": HREFS.map(lambda href: {"href": href}),
    },
)


def canonical_runs(items: list[Any]) -> tuple[Node | Run, ...]:
    """Words and whitespace ((text, marks)) and hard breaks (None) as the reader gives them
    back: adjacent runs with the same marks are one."""
    runs: list[Node | Run] = []
    for item in items:
        if item is None:
            runs.append(Node("hardBreak"))
            continue
        text, marks = item
        last = runs[-1] if runs else None
        if isinstance(last, Run) and dict(last.marks) == marks:
            runs[-1] = Run(last.text + text, marks)
        else:
            runs.append(Run(text, marks))
    return tuple(runs)


@st.composite
def spans(draw: st.DrawFn, outer: dict[str, Any], depth: int) -> list[Any]:
    """Words under nested marks, and whitespace between them with the marks around both: a
    mark covers a span of words, spans nest, and whitespace at a span's edge is outside it.
    (Marks that cross, ``**a *b** c*``, are closed and opened again around the other.)"""
    items: list[Any] = []
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        if items and draw(st.booleans()):
            items.append((draw(CODE_SPACES if "code" in outer else SPACES), dict(outer)))
        free = [name for name in ("bold", "italic", "strike", "code", "link") if name not in outer]
        if depth > 0 and free and draw(st.booleans()):
            name = draw(st.sampled_from(free))
            attrs = {"href": draw(HREFS)} if name == "link" else {}
            items.extend(draw(spans({**outer, name: attrs}, depth - 1)))
        else:
            items.append((draw(WORDS), dict(outer)))
    return items


@st.composite
def inline(draw: st.DrawFn, breaks: bool = True) -> tuple[Node | Run, ...]:
    items: list[Any] = []
    if draw(st.booleans()):
        items.append((draw(SPACES), {}))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        if items and items[-1] is not None:
            if breaks and draw(st.booleans()):
                items.append(None)  # a hard break, never last
            elif draw(st.booleans()):
                items.append((draw(SPACES), {}))
        items.extend(draw(spans({}, 3)))
    if draw(st.booleans()):
        items.append((draw(SPACES), {}))
    return canonical_runs(items)


CODE_TEXT = st.text(
    alphabet=st.characters(blacklist_characters="\r\x00", blacklist_categories=("Cs",)),
    max_size=30,
) | st.sampled_from(["```", "a\n```\nb", "~~~\n", "    indented\n\ttab", "\n\n", "`x`"])
LANGUAGES = st.none() | st.sampled_from(["py", "c++", "a\\b", "x&amp;y", "{.lang}", "é"])


def blocks_of(depth: int) -> st.SearchStrategy[tuple[Node, ...]]:
    return st.lists(block(depth), min_size=1, max_size=3).map(tuple)


@st.composite
def block(draw: st.DrawFn, depth: int) -> Node:
    kinds = ["paragraph", "heading", "code", "rule"]
    if depth > 0:
        kinds += ["bullet", "ordered", "quote"]
    kind = draw(st.sampled_from(kinds))
    if kind == "paragraph":
        return Node("paragraph", {}, draw(inline()))
    if kind == "heading":
        level = draw(st.integers(min_value=1, max_value=6))
        content = draw(st.just(()) | inline(breaks=level <= 2))
        return Node("heading", {"level": level}, content)
    if kind == "code":
        text = draw(CODE_TEXT)
        return Node("codeBlock", {"language": draw(LANGUAGES)}, (Run(text),) if text else ())
    if kind == "rule":
        return Node("horizontalRule")
    if kind == "quote":
        children = draw(st.lists(block(depth - 1), max_size=3).map(tuple))
        return Node("blockquote", {}, children)
    items = draw(
        st.lists(
            st.lists(block(depth - 1), max_size=3).map(lambda c: Node("listItem", {}, tuple(c))),
            min_size=1,
            max_size=3,
        )
    )
    if kind == "bullet":
        return Node("bulletList", {}, tuple(items))
    start = draw(st.sampled_from([0, 1, 2, 9, 10, 999_999_999]) | st.integers(0, 10**6))
    return Node("orderedList", {"start": start}, tuple(items))


@settings(max_examples=500, deadline=None)
@given(blocks=blocks_of(3))
def test_a_tree_written_as_markdown_reads_back_as_the_same_tree(
    blocks: tuple[Node, ...],
) -> None:
    markdown = to_markdown(blocks)
    assert parse_markdown(markdown) == blocks, markdown


MARKDOWN_PIECES = st.sampled_from(
    [
        "- ",
        "* ",
        "+ ",
        "1. ",
        "3) ",
        "> ",
        "# ",
        "### ",
        "```",
        "~~~",
        "    ",
        "  ",
        "\t",
        "\n",
        "\n\n",
        "a",
        "b c",
        "*",
        "**",
        "_",
        "~~",
        "`",
        "[x]",
        "[x]: /u",
        "(/y)",
        "[",
        "]",
        "<b>",
        "</b>",
        "<div>",
        "&amp;",
        "&copy;",
        "\\",
        "\\\n",
        "---",
        "***",
        "===",
        "![i](s)",
        "[l](h)",
        "[j](javascript:x)",
        "<http://a.example>",
        "1986. ",
        "#",
        " #",
        "é",
    ]
)


@settings(max_examples=500, deadline=None)
@given(markdown=st.lists(MARKDOWN_PIECES, min_size=1, max_size=40).map("".join))
def test_markdown_read_written_and_read_again_gives_the_same_tree(markdown: str) -> None:
    tree = parse_markdown(markdown)
    written = to_markdown(tree)
    assert parse_markdown(written) == tree, (markdown, written)


@pytest.mark.parametrize(
    "text",
    ["1986. A good year", "&copy; 2024", "    four spaces", "Version 2 #", "\tTabbed", "#hash"],
)
def test_the_issue_s_paragraphs_read_back_as_the_same_text(text: str) -> None:
    blocks = (Node("paragraph", {}, (Run(text),)), Node("heading", {"level": 2}, (Run(text),)))
    assert parse_markdown(to_markdown(blocks)) == blocks

"""The Markdown export is safe through any CommonMark renderer: whatever text, link address,
image address or alt text a document holds, the export holds no raw HTML once read as
CommonMark, links and images only to the addresses the HTML export keeps, and every word of
its text and alt texts shows in what is rendered.

Checked by reading the export with markdown-it (its tokens: no ``html_block``/``html_inline``,
which is what a CommonMark renderer passes through) and by rendering it with a permissive
renderer (raw HTML on, every link scheme allowed) and parsing the HTML it makes."""

from __future__ import annotations

import re
from collections import Counter
from html.parser import HTMLParser
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt
from markdown_it.token import Token

from tether.collab.content.html import to_html
from tether.collab.content.markdown import to_markdown
from tether.collab.content.plain import to_plain
from tether.collab.content.tree import Node, Run
from tether.collab.content.urls import safe_url

HOSTILE = [
    "\n<script>alert(1)</script>",
    "\n\n<img src=x onerror=alert(1)>",
    "\r\n<svg onload=alert(1)>",
    ")<svg/onload=alert(1)>(",
    "javascript:alert(1)",
    "JaVaScRiPt:alert(1)",
    "java\nscript:alert(1)",
    "\x01javascript:alert(1)",
    " javascript:alert(1)",
    "vbscript:x",
    "data:text/html,<script>alert(1)</script>",
    "javascript&colon;alert(1)",
    "&#106;avascript:alert(1)",
    "<javascript:alert(1)>",
    'https://x.example/a b" onmouseover="alert(1)',
    "https://x.example/`<b>`",
    "https://x.example/\\)\\(",
    "]([x](javascript:alert(1))",
    "\u2028<script>",
    "\x00<script>",
    "\t<iframe src=//evil>",
    "    <script>alert(1)</script>",
    "<!-- x -->",
    "<?php ?>",
    "<![CDATA[x]]>",
]
ALLOWED = {
    "p": set(),
    "em": set(),
    "strong": set(),
    "s": set(),
    "code": {"class"},
    "pre": set(),
    "a": {"href"},
    "img": {"src", "alt"},
    "ul": set(),
    "ol": {"start"},
    "li": set(),
    "blockquote": set(),
    "hr": set(),
    "br": set(),
    **{f"h{n}": set() for n in range(1, 7)},
}


def permissive() -> MarkdownIt:
    """A renderer as lax as CommonMark allows: raw HTML passed through, any link scheme."""
    md = MarkdownIt("commonmark").enable("strikethrough")
    md.validateLink = lambda url: True  # type: ignore[method-assign]
    return md


RENDERER = permissive()


class Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.seen: list[tuple[str, dict[str, str | None]]] = []
        self.comments: list[str] = []
        self.text: list[str] = []

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.seen.append((tag, dict(attrs)))

    def handle_comment(self, data: str) -> None:
        self.comments.append(data)

    def handle_pi(self, data: str) -> None:
        self.comments.append(data)

    def unknown_decl(self, data: str) -> None:
        self.comments.append(data)


def tokens_of(tokens: list[Token]) -> list[Token]:
    out: list[Token] = []
    for token in tokens:
        out.append(token)
        out.extend(tokens_of(token.children or []))
    return out


def assert_safe(blocks: tuple[Node | Run, ...]) -> str:
    markdown = to_markdown(blocks)
    tokens = tokens_of(RENDERER.parse(markdown))
    assert not [t for t in tokens if t.type in ("html_block", "html_inline")], markdown
    for token in tokens:
        for name in ("href", "src"):
            address = token.attrGet(name)
            if address is not None:
                assert safe_url(str(address)) is not None, (markdown, address)
    html = RENDERER.render(markdown)
    parsed = Elements()
    parsed.feed(html)
    assert not parsed.comments, html
    for tag, attrs in parsed.seen:
        assert tag in ALLOWED and set(attrs) <= ALLOWED[tag], (markdown, html)
        for name in ("href", "src"):
            if attrs.get(name) is not None:
                assert safe_url(attrs[name]) is not None, (markdown, html)
        if tag == "code" and "class" in attrs:
            assert re.fullmatch(r"language-\S+", attrs["class"] or ""), html
    shown = parsed.text + [str(attrs.get("alt") or "") for _, attrs in parsed.seen]
    assert Counter(words(to_plain(blocks)) + words(" ".join(alts(blocks)))) <= Counter(
        words(" ".join(shown))
    ), (markdown, html)
    return markdown


def words(text: str) -> list[str]:
    return re.findall(r"[A-Za-z0-9]+", text)


def alts(nodes: tuple[Node | Run, ...]) -> list[str]:
    out: list[str] = []
    for node in nodes:
        if isinstance(node, Node):
            if node.tag == "image":
                out.append(str(node.attrs.get("alt") or ""))
            out.extend(alts(node.children))
    return out


def hostile_document(text: str, address: str) -> tuple[Node | Run, ...]:
    return (
        Node("heading", {"level": 2}, (Run(text),)),
        Node(
            "paragraph",
            {},
            (
                Run("before " + text + " "),
                Run("linked " + text, {"link": {"href": address}}),
                Run(" "),
                Run("coded " + text, {"code": {}}),
                Run(" "),
                Node("image", {"src": address, "alt": "alt " + text}),
                Run(" " + text, {"bold": {}, "italic": {}}),
            ),
        ),
        Node(
            "bulletList",
            {},
            (Node("listItem", {}, (Node("paragraph", {}, (Run(text),)),)),),
        ),
        Node("blockquote", {}, (Node("paragraph", {}, (Run(text),)),)),
        Node("codeBlock", {"language": text}, (Run(text),)),
    )


@pytest.mark.parametrize("hostile", HOSTILE)
def test_a_hostile_address_text_or_alt_exports_no_raw_html_and_no_unsafe_link(
    hostile: str,
) -> None:
    assert_safe(hostile_document(hostile, hostile))
    assert_safe(hostile_document("plain words", hostile))
    assert_safe(hostile_document(hostile, "https://safe.example/"))


@pytest.mark.parametrize(
    "address",
    ["https://x.example/a\n<script>alert(1)</script>", "x\n\n<img src=x onerror=alert(1)>"],
)
def test_the_issue_s_addresses_with_a_line_break_then_markup_render_as_plain_links(
    address: str,
) -> None:
    link = Run("see", {"link": {"href": address}})
    image = Node("image", {"src": address, "alt": "pic"})
    markdown = assert_safe((Node("paragraph", {}, (link, Run(" "), image)),))
    assert "%0A" in markdown and "<script>" not in markdown and "<img" not in markdown


def test_a_link_to_an_unsafe_scheme_keeps_its_text_as_the_html_export_does() -> None:
    blocks = (
        Node(
            "paragraph",
            {},
            (
                Run("click", {"link": {"href": "javascript:alert(1)"}}),
                Run(" and "),
                Node("image", {"src": "javascript:alert(1)", "alt": "a cat"}),
            ),
        ),
    )
    assert to_markdown(blocks) == "click and a cat\n"
    assert to_html(blocks) == "<p>click and </p>"


# Hostile pieces, put together at random: markup, line breaks, controls, schemes, entities.
PIECES = st.sampled_from(
    [
        "\n",
        "\r",
        "\t",
        " ",
        "\x00",
        "\x0b",
        "\u2028",
        "\u00a0",
        "<",
        ">",
        "`",
        "\\",
        "(",
        ")",
        "[",
        "]",
        '"',
        "'",
        "&",
        ";",
        "#",
        "*",
        "_",
        "~",
        "!",
        "javascript:",
        "data:",
        "https://",
        "script",
        "img",
        "onerror=",
        "&colon;",
        "&#x3a;",
        "&amp;",
        "&#10;",
        "- ",
        "1. ",
        "> ",
        "    ",
        "```",
        "<script>",
        "<svg onload=x>",
        "<!--",
        "-->",
        "word",
    ]
)
HOSTILE_TEXT = st.lists(PIECES, min_size=1, max_size=12).map("".join)


@settings(max_examples=400, deadline=None)
@given(text=HOSTILE_TEXT, address=HOSTILE_TEXT, alt=HOSTILE_TEXT)
def test_any_text_address_and_alt_export_safely(text: str, address: str, alt: str) -> None:
    document: Any = hostile_document(text, address)
    image = Node("image", {"src": address, "alt": alt})
    assert_safe((*document, Node("paragraph", {}, (Run(text + " "), image))))

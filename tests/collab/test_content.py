"""collab.content: a rich document's tree (as y-prosemirror writes it from Tiptap's StarterKit)
read as plain text, Markdown and HTML; a document without one reads as its plain ``content``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pycrdt import Doc, Text, XmlElement, XmlFragment, XmlText

from tests.jsclient import tiptap_document, tiptap_reads
from tether.collab.content.markdown_in import parse_markdown
from tether.collab.content.reading import read_content
from tether.collab.content.tree_write import replace_fragment


def text(value: str, **marks: Any) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "text", "text": value}
    if marks:
        node["marks"] = [
            {"type": name, **({"attrs": attrs} if attrs else {})} for name, attrs in marks.items()
        ]
    return node


def block(kind: str, *content: dict[str, Any], **attrs: Any) -> dict[str, Any]:
    node: dict[str, Any] = {"type": kind, "content": list(content)}
    if attrs:
        node["attrs"] = attrs
    return node


def item(*blocks: dict[str, Any]) -> dict[str, Any]:
    return block("listItem", *blocks)


def para(*content: dict[str, Any]) -> dict[str, Any]:
    return block("paragraph", *content)


SAMPLE = [
    block("heading", text("Title"), level=1),
    para(
        text("Some "),
        text("bold", bold={}),
        text(" and "),
        text("a link", link={"href": "https://x.org/a b"}),
        {"type": "hardBreak"},
        text("x = `1`", code={}),
    ),
    block(
        "bulletList",
        item(para(text("one")), block("orderedList", item(para(text("nested"))), start=3)),
        item(para(text("two"))),
    ),
    block("blockquote", para(text("quoted", italic={}))),
    block("codeBlock", text("print(1)\n```\nprint(2)"), language="py"),
    {"type": "horizontalRule"},
    block("heading", text("Small"), level=3),
]

EXPECTED_MARKDOWN = """# Title

Some **bold** and [a link](https://x.org/a%20b)\\
`` x = `1` ``

- one

  3. nested
- two

> *quoted*

````py
print(1)
```
print(2)
````

---

### Small
"""


def rich(content: list[dict[str, Any]]) -> Doc:
    doc = Doc()
    doc.apply_update(tiptap_document(content))
    return doc


def test_a_tiptap_document_reads_as_markdown_text_and_html() -> None:
    content = read_content(rich(SAMPLE))
    assert content.kind == "rich"
    assert content.markdown() == EXPECTED_MARKDOWN
    assert content.text() == (
        "Title\n\nSome bold and a link\nx = `1`\n\none\n\nnested\n\ntwo\n\nquoted\n\n"
        "print(1)\n```\nprint(2)\n\nSmall"
    )
    html = content.html()
    assert html.startswith("<h1>Title</h1><p>Some <strong>bold</strong> and ")
    assert '<a href="https://x.org/a b">a link</a><br><code>x = `1`</code></p>' in html
    assert '<ol start="3"><li><p>nested</p></li></ol>' in html
    assert "<blockquote><p><em>quoted</em></p></blockquote>" in html


def test_marks_open_and_close_only_where_they_change_with_spaces_outside() -> None:
    content = read_content(
        rich(
            [
                para(
                    text("a "),
                    text("bold ", bold={}),
                    text("both", bold={}, italic={}),
                    text(" tail", bold={}),
                    text(" ~*_[x]_*~ "),
                    text("struck", strike={}),
                )
            ]
        )
    )
    assert content.markdown() == ("a **bold *both* tail** \\~\\*\\_\\[x\\]\\_\\*\\~ ~~struck~~\n")


@pytest.mark.parametrize(
    ("written", "markdown"),
    [("# not a heading", "\\# not a heading"), ("- not a list", "\\- not a list")],
)
def test_a_paragraph_that_looks_like_syntax_stays_text(written: str, markdown: str) -> None:
    assert read_content(rich([para(text(written))])).markdown() == markdown + "\n"


def test_html_keeps_only_safe_links_and_escapes_everything() -> None:
    content = read_content(
        rich(
            [
                para(
                    text("<script>", bold={}),
                    text("click", link={"href": "javascript:alert(1)"}),
                )
            ]
        )
    )
    assert content.html() == "<p><strong>&lt;script&gt;</strong>click</p>"


def test_unknown_nodes_keep_their_text_and_a_plain_document_reads_as_itself() -> None:
    doc = Doc()
    fragment = doc.get("default", type=XmlFragment)
    table = fragment.children.append(XmlElement("table"))
    row = table.children.append(XmlElement("tableRow"))
    cell = row.children.append(XmlElement("tableCell"))
    cell.children.append(XmlText("in a cell"))
    content = read_content(doc)
    assert (content.kind, content.markdown(), content.text()) == (
        "rich",
        "in a cell\n",
        "in a cell",
    )
    plain = Doc()
    plain.get("content", type=Text).insert(0, "# Notes\n\nplain *markdown*")
    content = read_content(plain)
    assert (content.kind, content.markdown(), content.text()) == (
        "plain",
        "# Notes\n\nplain *markdown*",
        "# Notes\n\nplain *markdown*",
    )
    assert read_content(Doc()).kind == "plain" and "default" not in Doc().keys()
    assert read_content(rich(SAMPLE), "elsewhere").kind == "plain"  # another field named


def written(markdown: str) -> Doc:
    """A document whose fragment ``set_tree``'s writer filled from ``markdown``."""
    doc = Doc()
    with doc.transaction():
        replace_fragment(doc.get("default", type=XmlFragment), parse_markdown(markdown))
    return doc


def test_markdown_read_into_the_tree_writes_back_the_same_markdown() -> None:
    assert read_content(written(EXPECTED_MARKDOWN)).markdown() == EXPECTED_MARKDOWN
    # ... and Tiptap (StarterKit through y-prosemirror) reads the tree it holds as valid.
    pm = tiptap_reads(written(EXPECTED_MARKDOWN).get_update())
    kinds = [node["type"] for node in pm["content"]]
    assert kinds == [
        "heading",
        "paragraph",
        "bulletList",
        "blockquote",
        "codeBlock",
        "horizontalRule",
        "heading",
    ]
    assert pm["content"][0]["attrs"]["level"] == 1
    bold = pm["content"][1]["content"][1]
    assert bold == {"type": "text", "marks": [{"type": "bold"}], "text": "bold"}
    nested = pm["content"][2]["content"][0]["content"][1]
    assert nested["type"] == "orderedList" and nested["attrs"]["start"] == 3


@pytest.mark.parametrize(
    "markdown",
    [
        "plain paragraph\n",
        "a *b **c** d* ~~e~~ `f`\n",
        "1. one\n2. two\n   - under\n",
        "text with emoji \N{GRINNING FACE} and a [link](https://x.org)\n",
        "> quote\n>\n> two\n",
    ],
)
def test_supported_markdown_round_trips(markdown: str) -> None:
    assert read_content(written(markdown)).markdown() == markdown


def test_what_tiptap_has_no_node_for_keeps_its_text() -> None:
    doc = written("![a cat](https://x.org/cat.png) and <b>raw</b>\n\n<div>block</div>\n")
    assert read_content(doc).text() == "a cat and <b>raw</b>\n\n<div>block</div>"
    assert written("").get("default", type=XmlFragment).children[0].tag == "paragraph"


@pytest.mark.anyio
async def test_a_python_client_reads_a_rich_document_as_markdown(tmp_path: Path) -> None:
    """What a Tiptap editor wrote, sent by one Python client and read by another."""
    from tests.serverproc import ServerProcess
    from tether import read_content
    from tether.client import TetherClient

    with ServerProcess(tmp_path, ai_provider="none") as server:
        async with TetherClient(server.ws_url, token=server.token()) as writer:
            handle = await writer.open("handbook")
            handle.doc.apply_update(tiptap_document(SAMPLE))
            await handle.wait_acked()
        async with TetherClient(server.ws_url, token=server.token()) as reader:
            handle = await reader.open("handbook")
            await handle.wait_synced()
            assert read_content(handle.doc).markdown() == EXPECTED_MARKDOWN

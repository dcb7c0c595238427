"""Exports of rich documents over REST (issue 37) through the real server, of documents whose
attributes hold whatever an editor may write: every format answers, each attribute the
renderers read (a heading's level, a list's start, a task's checked, a code block's language,
a link's href, an image's src and alt) falls back to its default when it is out of type or
range (an ordered list starting at NaN answered 500), and the Markdown stays safe."""

from __future__ import annotations

import math
import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from markdown_it import MarkdownIt
from pycrdt import Doc, XmlElement, XmlFragment, XmlText

from tests.serverproc import ServerProcess

pytestmark = pytest.mark.anyio

OCTETS = {"Content-Type": "application/octet-stream"}
HOSTILE: list[Any] = [
    math.nan,
    math.inf,
    -math.inf,
    1e308,
    -1e308,
    2**63 - 1,
    -(2**63),
    1e30,
    5.5,
    -3,
    0,
    "7",
    "x\n<script>alert(1)</script>",
    "",
    [1, 2],
    {"a": 1},
    None,
    True,
    False,
    b"\x00\xff",
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(tmp_path_factory.mktemp("md-exports"), unload_grace=0.2) as running:
        yield running


@pytest.fixture
async def http(server: ServerProcess) -> AsyncIterator[httpx.AsyncClient]:
    headers = {"Authorization": f"Bearer {server.token()}"}
    async with httpx.AsyncClient(base_url=server.http_url, headers=headers, timeout=60) as client:
        yield client


def element(parent: XmlFragment | XmlElement, tag: str, **attrs: Any) -> XmlElement:
    node = parent.children.append(XmlElement(tag))
    for key, value in attrs.items():
        node.attributes[key] = value
    return node


def text(parent: XmlElement, value: str, marks: dict[str, Any] | None = None) -> None:
    parent.children.append(XmlText()).insert(0, value, marks)


def hostile_document(value: Any) -> bytes:
    """Every attribute the renderers read set to ``value``, each beside a word to find."""
    doc = Doc()
    fragment = doc.get("default", type=XmlFragment)
    with doc.transaction():
        text(element(fragment, "heading", level=value), "title")
        ordered = element(fragment, "orderedList", start=value)
        text(element(element(ordered, "listItem"), "paragraph"), "first")
        tasks = element(fragment, "taskList")
        text(element(element(tasks, "taskItem", checked=value), "paragraph"), "task")
        text(element(fragment, "codeBlock", language=value), "code")
        paragraph = element(fragment, "paragraph")
        text(paragraph, "linked", {"link": {"href": value}})
        element(paragraph, "image", src=value, alt=value)
        text(paragraph, " end")
    return doc.get_update()


@pytest.mark.parametrize("value", HOSTILE, ids=[repr(value)[:24] for value in HOSTILE])
async def test_every_format_renders_a_document_whose_attributes_are_out_of_range(
    http: httpx.AsyncClient, value: Any
) -> None:
    name = f"attrs-{abs(hash(repr(value)))}"
    put = await http.put(f"/api/documents/{name}", content=hostile_document(value), headers=OCTETS)
    assert put.status_code == 200, put.text
    got = {}
    for export in ("json", "text", "markdown", "html"):
        reply = await http.get(f"/api/documents/{name}?format={export}")
        assert reply.status_code == 200, (export, reply.text)
        got[export] = reply.text
    for word in ("title", "first", "task", "code", "linked", "end"):
        assert word in got["text"] and word in got["markdown"] and word in got["html"]
    html = got["html"]
    for level in re.findall(r"<h(\d)>", html):
        assert 1 <= int(level) <= 6
    for start in re.findall(r' start="([^"]*)"', html):
        assert start.isdigit() and int(start) <= 999_999_999
    assert "<script" not in html
    rendered = MarkdownIt("commonmark").render(got["markdown"])  # raw HTML on
    assert "<script" not in rendered


async def test_a_link_with_a_line_break_then_markup_exports_as_an_encoded_link(
    http: httpx.AsyncClient,
) -> None:
    doc = Doc()
    fragment = doc.get("default", type=XmlFragment)
    with doc.transaction():
        paragraph = element(fragment, "paragraph")
        text(paragraph, "see", {"link": {"href": "https://x.example/\n<script>alert(1)</script>"}})
        text(paragraph, " and ")
        text(paragraph, "this", {"link": {"href": "javascript:alert(1)"}})
    put = await http.put("/api/documents/hostile-link", content=doc.get_update(), headers=OCTETS)
    assert put.status_code == 200
    markdown = (await http.get("/api/documents/hostile-link?format=markdown")).text
    encoded = "https://x.example/%0A%3Cscript%3Ealert\\(1\\)%3C/script%3E"
    assert markdown == f"[see]({encoded}) and this\n"
    rendered = MarkdownIt("commonmark").render(markdown)
    assert "<script" not in rendered and "javascript:" not in rendered

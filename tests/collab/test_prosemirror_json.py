"""ProseMirror JSON in and out of a rich tree (``collab.content.prosemirror_json``) and the bounded
JSON reader under it (``collab.content.json_bounded``): a tree written to a document reads back
as the JSON it came from; what a document may not hold is refused with the limit it hit, or
(an address the exports would not link) kept as text."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pycrdt import Doc, Text, XmlElement, XmlFragment

from tether.collab.content.json_bounded import JsonRefused, load_json
from tether.collab.content.prosemirror_json import (
    TreeLimits,
    TreeRefused,
    parse_prosemirror,
    render_prosemirror,
    to_prosemirror,
)
from tether.collab.content.reading import Content, read_content
from tether.collab.content.tree_write import replace_fragment

EDITOR_DOC: dict[str, Any] = {
    "type": "doc",
    "content": [
        {"type": "heading", "attrs": {"level": 2}, "content": [{"type": "text", "text": "Title"}]},
        {
            "type": "paragraph",
            "content": [
                {"type": "text", "text": "Some "},
                {"type": "text", "text": "bold", "marks": [{"type": "bold"}]},
                {"type": "text", "text": " and "},
                {
                    "type": "text",
                    "text": "a link",
                    "marks": [
                        {
                            "type": "link",
                            "attrs": {
                                "class": None,
                                "href": "https://example.org/a?b=1",
                                "rel": "noopener noreferrer nofollow",
                                "target": "_blank",
                                "title": None,
                            },
                        },
                        {"type": "italic"},
                    ],
                },
                {"type": "hardBreak"},
                {"type": "text", "text": "after a break 😀"},
            ],
        },
        {
            "type": "orderedList",
            "attrs": {"start": 3, "type": None},
            "content": [
                {
                    "type": "listItem",
                    "content": [{"type": "paragraph", "content": [{"type": "text", "text": "x"}]}],
                }
            ],
        },
        {
            "type": "codeBlock",
            "attrs": {"language": None},
            "content": [{"type": "text", "text": "a = 1\n"}],
        },
        {"type": "horizontalRule"},
        {"type": "paragraph"},
        # A node of a team's own schema: kept as it is.
        {"type": "mention", "attrs": {"id": "u-42", "label": "Ada", "colwidth": [100, 200]}},
    ],
}


def written_and_read(value: dict[str, Any]) -> dict[str, Any]:
    """``value`` imported into a fresh document as REST imports it, then read back out."""
    doc = Doc()
    fragment = doc.get("default", type=XmlFragment)
    with doc.transaction():
        replace_fragment(fragment, parse_prosemirror(json.dumps(value).encode()))
    return to_prosemirror(read_content(doc))


def test_an_editors_document_reads_back_as_the_json_it_was_written_from() -> None:
    assert written_and_read(EDITOR_DOC) == EDITOR_DOC
    # As text: marks in StarterKit's order (link first), attributes by name, nothing spaced.
    text = render_prosemirror(read_content(_doc_of(EDITOR_DOC))).decode()
    assert '"marks":[{"type":"link","attrs":{"class":null,"href"' in text
    assert json.loads(text) == EDITOR_DOC


def _doc_of(value: dict[str, Any]) -> Doc:
    doc = Doc()
    with doc.transaction():
        replace_fragment(
            doc.get("default", type=XmlFragment), parse_prosemirror(json.dumps(value).encode())
        )
    return doc


def test_a_plain_document_is_one_paragraph_per_line_and_an_empty_one_one_paragraph() -> None:
    doc = Doc()
    doc.get("content", type=Text).insert(0, "first\n\nthird")
    assert to_prosemirror(read_content(doc)) == {
        "type": "doc",
        "content": [
            {"type": "paragraph", "content": [{"type": "text", "text": "first"}]},
            {"type": "paragraph"},
            {"type": "paragraph", "content": [{"type": "text", "text": "third"}]},
        ],
    }
    empty = {"type": "doc", "content": [{"type": "paragraph"}]}
    assert to_prosemirror(read_content(Doc())) == empty
    assert to_prosemirror(Content("rich", (), "")) == empty


def test_adjacent_text_with_the_same_marks_is_one_text_and_empty_text_is_left_out() -> None:
    value = {
        "type": "doc",
        "content": [
            {
                "type": "paragraph",
                "content": [
                    {"type": "text", "text": "a", "marks": [{"type": "bold"}]},
                    {"type": "text", "text": "", "marks": [{"type": "italic"}]},
                    {"type": "text", "text": "b", "marks": [{"type": "bold"}]},
                ],
            },
            {"type": "text", "text": "loose"},  # right in the document: given a paragraph
        ],
    }
    assert written_and_read(value)["content"] == [
        {
            "type": "paragraph",
            "content": [{"type": "text", "text": "ab", "marks": [{"type": "bold"}]}],
        },
        {"type": "paragraph", "content": [{"type": "text", "text": "loose"}]},
    ]


def test_links_and_images_to_addresses_the_exports_would_not_link_keep_only_their_text() -> None:
    value = {
        "type": "doc",
        "content": [
            {
                "type": "paragraph",
                "content": [
                    {
                        "type": "text",
                        "text": "click",
                        "marks": [{"type": "link", "attrs": {"href": "java\nscript:alert(1)"}}],
                    },
                    {"type": "image", "attrs": {"src": "javascript:alert(1)", "alt": "x"}},
                    {"type": "image", "attrs": {"src": "https://example.org/i.png", "alt": "ok"}},
                ],
            }
        ],
    }
    assert written_and_read(value)["content"] == [
        {
            "type": "paragraph",
            "content": [
                {"type": "text", "text": "click"},
                {"type": "image", "attrs": {"alt": "ok", "src": "https://example.org/i.png"}},
            ],
        }
    ]


@pytest.mark.parametrize(
    ("body", "limit", "words"),
    [
        (b"{", "malformed", "not JSON"),
        (b"\xff\xfe", "malformed", "UTF-8"),
        (b'{"type": "paragraph"}', "invalid_content", "ProseMirror document"),
        (b'{"type": "doc", "content": {}}', "invalid_content", "not a list"),
        (b'{"type": "doc", "content": [3]}', "invalid_content", "not a node"),
        (b'{"type": "doc", "content": [{"type": "<img>"}]}', "invalid_content", "type name"),
        (b'{"type": "doc", "content": [{"type": "doc"}]}', "invalid_content", "type name"),
        (
            b'{"type": "doc", "content": [{"type": "heading", "attrs": {"level": 7}}]}',
            "invalid_content",
            "level",
        ),
        (
            b'{"type": "doc", "content": [{"type": "heading", "attrs": {"level": "1"}}]}',
            "invalid_content",
            "level",
        ),
        (
            b'{"type": "doc", "content": [{"type": "orderedList", "attrs": {"start": 1e12}}]}',
            "invalid_content",
            "start",
        ),
        (
            b'{"type": "doc", "content": [{"type": "codeBlock", "attrs": {"language": "a b"}}]}',
            "invalid_content",
            "language",
        ),
        (
            b'{"type": "doc", "content": [{"type": "taskItem", "attrs": {"checked": 1}}]}',
            "invalid_content",
            "checked",
        ),
        (
            b'{"type": "doc", "content": [{"type": "p", "attrs": {"n": 1e300}}]}',
            "invalid_content",
            "JSON value",
        ),
        (b'{"type": "doc", "content": [{"type": "p", "attrs": [1]}]}', "invalid_content", "attrs"),
        (
            b'{"type": "doc", "content": [{"type": "p", "content": [{"type": "text"}]}]}',
            "invalid_content",
            "text",
        ),
        (
            b'{"type": "doc", "content": [{"type": "p", "content": '
            b'[{"type": "text", "text": "\\ud800"}]}]}',
            "invalid_content",
            "surrogate",
        ),
        (
            b'{"type": "doc", "content": [{"type": "p", "content": '
            b'[{"type": "text", "text": "a", "marks": [{"type": "b c"}]}]}]}',
            "invalid_content",
            "mark type",
        ),
    ],
)
def test_what_a_document_may_not_hold_is_refused_naming_why(
    body: bytes, limit: str, words: str
) -> None:
    with pytest.raises(TreeRefused) as refused:
        parse_prosemirror(body)
    assert refused.value.limit == limit and words in str(refused.value)


def test_too_many_nodes_or_nodes_nested_too_deep_are_refused_whole() -> None:
    paragraphs = {"type": "doc", "content": [{"type": "paragraph"}] * 11}
    parse_prosemirror(json.dumps(paragraphs).encode(), TreeLimits(max_nodes=11))
    with pytest.raises(TreeRefused) as refused:
        parse_prosemirror(json.dumps(paragraphs).encode(), TreeLimits(max_nodes=10))
    assert refused.value.limit == "max_import_nodes"

    def quotes(depth: int) -> dict[str, Any]:
        node: dict[str, Any] = {"type": "paragraph", "content": [{"type": "text", "text": "deep"}]}
        for _ in range(depth):
            node = {"type": "blockquote", "content": [node]}
        return {"type": "doc", "content": [node]}

    # The fragment 1, each quote one more, the paragraph, its text: 3 + quotes.
    parse_prosemirror(json.dumps(quotes(17)).encode(), TreeLimits(max_depth=20))
    with pytest.raises(TreeRefused) as refused:
        parse_prosemirror(json.dumps(quotes(18)).encode(), TreeLimits(max_depth=20))
    assert refused.value.limit == "max_nesting_depth"
    # JSON nested 100,000 deep is refused as the reader reaches the bound, not by recursion.
    with pytest.raises(TreeRefused) as refused:
        parse_prosemirror(b'{"type":"doc","content":' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    assert refused.value.limit == "max_nesting_depth"


def test_content_to_add_may_be_a_document_one_node_or_a_list() -> None:
    one = {"type": "paragraph", "content": [{"type": "text", "text": "one"}]}
    for body in ({"type": "doc", "content": [one]}, one, [one]):
        blocks = parse_prosemirror(json.dumps(body).encode(), shape="nodes")
        assert to_prosemirror(Content("rich", blocks, ""))["content"] == [one]
    assert parse_prosemirror(b"[]", shape="nodes") == ()


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**60), max_value=2**60)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(json_values, st.sampled_from([None, 0, 2]))
def test_the_bounded_reader_reads_what_json_reads(value: Any, indent: int | None) -> None:
    text = json.dumps(value, indent=indent)
    assert load_json(text, 64) == json.loads(text)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "[",
        "[1,]",
        '{"a"}',
        '{"a":1,}',
        "01",
        "nul",
        "[1 2]",
        "{1:2}",
        "NaN",
        "[]]",
        '"a',
        "-",
        "1e",
    ],
)
def test_the_bounded_reader_refuses_what_is_not_json(text: str) -> None:
    with pytest.raises(JsonRefused) as refused:
        load_json(text, 64)
    assert refused.value.limit == "malformed"


def test_attribute_values_json_cannot_hold_read_as_null_as_javascript_writes_nan() -> None:
    doc = Doc()
    with doc.transaction():
        fragment = doc.get("default", type=XmlFragment)
        heading = fragment.children.insert(0, XmlElement("heading"))
        for key, value in (("level", float("nan")), ("blob", b"\x00\xff"), ("big", float("inf"))):
            heading.attributes[key] = value
        heading.attributes["ok"] = [1.0, {"n": 2.5}]
    text = render_prosemirror(read_content(doc)).decode()
    assert json.loads(text) == {
        "type": "doc",
        "content": [
            {
                "type": "heading",
                "attrs": {"big": None, "blob": None, "level": None, "ok": [1, {"n": 2.5}]},
            }
        ],
    }

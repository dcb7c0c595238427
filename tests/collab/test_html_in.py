"""HTML read into a rich tree (``collab.content.html_in``): StarterKit's elements and marks kept,
whitespace read as a browser shows it, and nothing of a script, a handler or a ``javascript:``
address kept; malformed HTML of every shape html.parser finds hard is read in one pass (it was
quadratic: 100,000 unterminated comments took 84 s), and deep nesting is refused whole."""

from __future__ import annotations

from typing import Any

import pytest

from tether.collab.content.html_in import parse_html
from tether.collab.content.prosemirror_json import TreeLimits, TreeRefused, to_prosemirror
from tether.collab.content.reading import Content


def content_of(html: str) -> list[dict[str, Any]]:
    return list(to_prosemirror(Content("rich", parse_html(html), ""))["content"])


def text(value: str, *marks: str, href: str | None = None) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "text", "text": value}
    listed: list[dict[str, Any]] = [{"type": "link", "attrs": {"href": href}}] if href else []
    listed += [{"type": mark} for mark in marks]
    if listed:
        node["marks"] = listed
    return node


def paragraph(*children: dict[str, Any]) -> dict[str, Any]:
    return {"type": "paragraph", "content": list(children)} if children else {"type": "paragraph"}


def item(*children: dict[str, Any]) -> dict[str, Any]:
    return {"type": "listItem", "content": list(children)}


def test_starter_kit_elements_and_marks_are_read_into_the_tree() -> None:
    html = """
      <h2>Title</h2>
      <p>Some <strong>bold</strong>, <b><i>both</i></b>, <u>under</u>, <del>gone</del>,
         <code>x()</code> and <a href="https://example.org">a link</a><br>next line</p>
      <ul><li>one<li>two<ol start="7"><li><p>seven</p></li></ol></li></ul>
      <blockquote>quoted</blockquote>
      <pre><code class="language-python">
def f():
    return 1</code></pre>
      <hr>
    """
    assert content_of(html) == [
        {"type": "heading", "attrs": {"level": 2}, "content": [text("Title")]},
        paragraph(
            text("Some "),
            text("bold", "bold"),
            text(", "),
            text("both", "bold", "italic"),
            text(", "),
            text("under", "underline"),
            text(", "),
            text("gone", "strike"),
            text(", "),
            text("x()", "code"),
            text(" and "),
            text("a link", href="https://example.org"),
            {"type": "hardBreak"},
            text("next line"),
        ),
        {
            "type": "bulletList",
            "content": [
                item(paragraph(text("one"))),
                item(
                    paragraph(text("two")),
                    {
                        "type": "orderedList",
                        "attrs": {"start": 7},
                        "content": [item(paragraph(text("seven")))],
                    },
                ),
            ],
        },
        {"type": "blockquote", "content": [paragraph(text("quoted"))]},
        {
            "type": "codeBlock",
            "attrs": {"language": "python"},
            "content": [text("def f():\n    return 1")],
        },
        {"type": "horizontalRule"},
    ]


def test_hostile_html_keeps_only_its_safe_text() -> None:
    html = (
        "<p onclick='steal()' style='color:red'>Hello <script>alert('script')</script>"
        "<a href='javascript:alert(1)'>js link</a> <a href=' JaVa\nScRiPt:alert(2)'>two</a>"
        " <img src=x onerror=alert(3) alt=pic> <img src='javascript:alert(4)'>"
        "<iframe src='https://evil.example'>framed text</iframe>"
        "<svg><script>alert(5)</script><text>svg text</text></svg>"
        "<style>p { background: url(javascript:alert(6)) }</style>"
        "<template><p>templated</p></template><a href='https://ok.example'>fine</a></p>"
        "<object data='x'>object text</object><embed src='x'><noscript>noscript</noscript>"
    )
    assert content_of(html) == [
        paragraph(
            text("Hello js link two "),
            text("pic", href="x"),
            text(" "),
            text("fine", href="https://ok.example"),
        )
    ]


def test_text_outside_paragraphs_and_stray_list_items_are_given_the_nodes_they_need() -> None:
    html = "loose <li>orphan</li><div>in a div <span>spanned</span></div><table><td>cell</table>"
    assert content_of(html) == [
        paragraph(text("loose")),
        {"type": "bulletList", "content": [item(paragraph(text("orphan")))]},
        paragraph(text("in a div spanned")),
        paragraph(text("cell")),
    ]
    assert content_of("") == [paragraph()] and content_of("  \n ") == [paragraph()]
    assert content_of("<ul></ul><blockquote></blockquote><li></li>") == [
        {"type": "blockquote", "content": [paragraph()]},
        {"type": "bulletList", "content": [item(paragraph())]},
    ]


@pytest.mark.parametrize(
    "unit",
    ["<!--", "<!", "<?", "</a ", "<![CDATA[", "<a b='", '<a href="', "<x", "<a\n", "</", "<"],
)
def test_malformed_html_is_read_in_one_pass_as_text(unit: str) -> None:
    # html.parser's close() read each of these a character at a time, searching to the end
    # each time: 100,000 "<!--" took 84 s. Now one pass; what is unfinished is text.
    blocks = parse_html("ok " + unit * 100_000)
    content = to_prosemirror(Content("rich", blocks, ""))["content"]
    assert content[0]["content"][0]["text"].startswith("ok")


def test_nesting_deeper_than_the_tree_allows_is_refused_and_inline_nesting_costs_nothing() -> None:
    limits = TreeLimits(max_depth=20)
    # The fragment 1, each quote one more, a paragraph, its text: 3 + quotes.
    assert parse_html("<blockquote>" * 17 + "deep", limits)
    for deep in ("<blockquote>" * 18 + "deep", "<ul>" * 100_000 + "x"):
        with pytest.raises(TreeRefused) as refused:
            parse_html(deep, limits)
        assert refused.value.limit == "max_nesting_depth"
    for inline in ("<b>", "<span>", "<div>", '<a href="https://a.example">', "<template>"):
        assert len(parse_html(inline * 100_000 + "x", limits)) == 1


def test_more_nodes_than_the_cap_are_refused() -> None:
    assert len(parse_html("<p>a</p>" * 50, TreeLimits(max_nodes=100))) == 50
    with pytest.raises(TreeRefused) as refused:
        parse_html("<p>a</p>" * 51, TreeLimits(max_nodes=100))
    assert refused.value.limit == "max_import_nodes"

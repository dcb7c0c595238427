"""Markdown read into a rich tree of Tiptap's StarterKit nodes (``collab.content.tree`` values).

CommonMark (markdown-it) with strikethrough: headings, paragraphs, bullet and ordered lists (their
start kept), blockquotes, fenced and indented code (its language kept), rules, hard breaks, and the
marks bold, italic, strike, code and link. StarterKit has no image node: an image becomes its
alt text linked to its source. Raw HTML is kept as text. Pure; run in a worker thread.
"""

from __future__ import annotations

from typing import Any

from markdown_it import MarkdownIt
from markdown_it.token import Token

from .tree import Node, Run

_PARSER = MarkdownIt("commonmark").enable("strikethrough")
_CONTAINERS = {
    "bullet_list_open": "bulletList",
    "ordered_list_open": "orderedList",
    "list_item_open": "listItem",
    "blockquote_open": "blockquote",
    "paragraph_open": "paragraph",
    "heading_open": "heading",
}
_MARKS = {"strong_open": "bold", "em_open": "italic", "s_open": "strike"}
_MARK_CLOSES = {"strong_close": "bold", "em_close": "italic", "s_close": "strike"}


def parse_markdown(markdown: str) -> tuple[Node, ...]:
    """The document's blocks; an empty text gives one empty paragraph (what an editor holds)."""
    stack: list[tuple[str, dict[str, Any], list[Node | Run]]] = [("doc", {}, [])]
    for token in _PARSER.parse(markdown):
        kind = token.type
        if kind in _CONTAINERS:
            stack.append((_CONTAINERS[kind], _attrs(token), []))
        elif kind.endswith("_close") and len(stack) > 1:
            tag, attrs, children = stack.pop()
            stack[-1][2].append(Node(tag, attrs, tuple(children)))
        elif kind == "inline":
            stack[-1][2].extend(_inline(token.children or []))
        elif kind in ("fence", "code_block"):
            language = token.info.strip().split(" ")[0] if token.info else ""
            code = token.content[:-1] if token.content.endswith("\n") else token.content
            runs = (Run(code),) if code else ()
            stack[-1][2].append(Node("codeBlock", {"language": language or None}, runs))
        elif kind == "hr":
            stack[-1][2].append(Node("horizontalRule"))
        elif kind == "html_block":
            text = token.content.rstrip("\n")
            stack[-1][2].append(Node("paragraph", {}, (Run(text),) if text else ()))
    blocks = tuple(child for child in stack[0][2] if isinstance(child, Node))
    return blocks or (Node("paragraph"),)


def _attrs(token: Token) -> dict[str, Any]:
    if token.type == "heading_open":
        return {"level": int(token.tag[1])}
    if token.type == "ordered_list_open":
        start = token.attrGet("start")
        return {"start": int(start) if isinstance(start, int | str) and str(start).isdigit() else 1}
    return {}


def _inline(tokens: list[Token]) -> list[Node | Run]:
    out: list[Node | Run] = []
    marks: dict[str, dict[str, Any]] = {}

    def text(value: str, extra: dict[str, dict[str, Any]] | None = None) -> None:
        if not value:
            return
        current = {**marks, **(extra or {})}
        last = out[-1] if out else None
        if isinstance(last, Run) and dict(last.marks) == current:
            out[-1] = Run(last.text + value, current)  # one run while the marks stay the same
        else:
            out.append(Run(value, current))

    for token in tokens:
        kind = token.type
        if kind in ("text", "html_inline"):
            text(token.content)
        elif kind == "softbreak":
            text(" ")
        elif kind == "hardbreak":
            out.append(Node("hardBreak"))
        elif kind == "code_inline":
            text(token.content, {"code": {}})
        elif kind in _MARKS:
            marks[_MARKS[kind]] = {}
        elif kind in _MARK_CLOSES:
            marks.pop(_MARK_CLOSES[kind], None)
        elif kind == "link_open":
            marks["link"] = {"href": str(token.attrGet("href") or "")}
        elif kind == "link_close":
            marks.pop("link", None)
        elif kind == "image":
            alt = token.content or str(token.attrGet("alt") or "")
            text(alt or "image", {"link": {"href": str(token.attrGet("src") or "")}})
    return out

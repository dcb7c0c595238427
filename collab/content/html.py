"""A rich tree as an HTML fragment: the StarterKit's elements, everything escaped, and links and
images only to http(s), mailto or relative addresses (a ``javascript:`` link is kept as text)."""

from __future__ import annotations

from collections.abc import Mapping
from html import escape

from .attrs import alt_text, code_language, heading_level, list_start
from .markdown import INLINE_TAGS
from .tree import Node, Run, inline_runs
from .urls import safe_url

_BLOCKS = {
    "paragraph": "p",
    "blockquote": "blockquote",
    "bulletList": "ul",
    "orderedList": "ol",
    "taskList": "ul",
    "listItem": "li",
    "taskItem": "li",
}
_MARKS = (("bold", "strong"), ("italic", "em"), ("strike", "s"), ("underline", "u"))


def to_html(blocks: tuple[Node | Run, ...]) -> str:
    return "".join(_block(block) for block in blocks)


def _block(node: Node | Run) -> str:
    if isinstance(node, Run) or node.tag == "#text":
        return _inline([node])
    tag = node.tag
    if tag == "heading":
        n = heading_level(node.attrs.get("level"))
        return f"<h{n}>{_inline(node.children)}</h{n}>"
    if tag == "codeBlock":
        text = "".join(r.text for r in inline_runs(node.children) if isinstance(r, Run))
        language = code_language(node.attrs.get("language"))
        cls = f' class="language-{escape(language)}"' if language is not None else ""
        return f"<pre><code{cls}>{escape(text)}</code></pre>"
    if tag == "horizontalRule":
        return "<hr>"
    if tag in INLINE_TAGS:
        return _inline([node])
    element = _BLOCKS.get(tag)
    holds_text = any(
        isinstance(c, Run) or c.tag == "#text" or c.tag in INLINE_TAGS for c in node.children
    )
    inner = _inline(node.children) if holds_text else "".join(map(_block, node.children))
    if element is None:
        return f"<p>{inner}</p>" if holds_text else inner
    start = list_start(node.attrs.get("start")) if tag == "orderedList" else 1
    attrs = f' start="{start}"' if start != 1 else ""
    return f"<{element}{attrs}>{inner}</{element}>"


def _inline(children: list[Node | Run] | tuple[Node | Run, ...]) -> str:
    out: list[str] = []
    for piece in inline_runs(tuple(children)):
        if isinstance(piece, Node):
            out.append(_inline_node(piece))
            continue
        text = escape(piece.text)
        if "code" in piece.marks:
            text = f"<code>{text}</code>"
        for mark, element in reversed(_MARKS):
            if mark in piece.marks:
                text = f"<{element}>{text}</{element}>"
        link = piece.marks.get("link")
        href = safe_url(link.get("href")) if isinstance(link, Mapping) else None
        if href is not None:
            text = f'<a href="{escape(href)}">{text}</a>'
        out.append(text)
    return "".join(out)


def _inline_node(node: Node) -> str:
    if node.tag == "hardBreak":
        return "<br>"
    if node.tag == "image":
        src = safe_url(node.attrs.get("src"))
        if src is None:
            return ""
        alt = escape(alt_text(node.attrs.get("alt")))
        return f'<img src="{escape(src)}" alt="{alt}">'
    return _inline(node.children)

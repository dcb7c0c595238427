"""A rich tree as Markdown (CommonMark with GitHub's strikethrough).

Headings ``#``, emphasis, inline code, links, bullet and ordered lists with nesting, blockquotes,
fenced code blocks, rules, images and hard breaks (``\\`` at the end of a line). A node this does
not know keeps its text: as a block if it holds blocks, inline if it holds text. Marks are opened
and closed only where they change, with spaces kept outside them (``**bold **`` is not bold in
CommonMark), and text that Markdown would read as syntax is escaped.

Safe through any CommonMark renderer: nothing a document holds can end a construct early and
have what follows read as Markdown or raw HTML. A line break inside text is written as
``&#10;``, an address as a destination that percent-encodes controls, whitespace, ``<>`` and
backticks (``collab.content.urls``), and links and images only to the addresses the HTML export
keeps (http(s), mailto, relative): another link keeps its text, an image its alt text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .tree import Node, Run, inline_runs
from .urls import destination

_ESCAPED = re.compile(r"([\\`*_\[\]<>~|])")
_ENTITY = re.compile(r"&(?=#?[A-Za-z0-9]+;)")  # &copy; is read as ©: the & written \&
_BREAKS = {"\n": "&#10;", "\r": "&#13;"}
_BREAK = re.compile(r"[\n\r]")
_LANGUAGE = re.compile(r"[\w#+.-]+")
_BLOCK_START = re.compile(r"^(#{1,6}(?=\s|$)|>|[-+*](?=\s)|\d+[.)](?=\s)|={3,}|-{3,}$)")
_ORDER = ("link", "bold", "italic", "strike")  # outermost first; code is always innermost
_WRAP = {"bold": ("**", "**"), "italic": ("*", "*"), "strike": ("~~", "~~")}
INLINE_TAGS = frozenset({"hardBreak", "image", "mention", "emoji"})
TEXTBLOCKS = frozenset({"paragraph", "heading", "codeBlock"})
LISTS = frozenset({"bulletList", "orderedList", "taskList"})


def to_markdown(blocks: tuple[Node | Run, ...]) -> str:
    text = _blocks(blocks)
    return text + "\n" if text else ""


def _blocks(blocks: tuple[Node | Run, ...] | list[Node | Run]) -> str:
    return "\n\n".join(part for part in (_block(block) for block in blocks) if part)


def _block(node: Node | Run) -> str:
    if isinstance(node, Run) or node.tag == "#text":
        return _start_escaped(_inline([node]))
    tag = node.tag
    if tag == "heading":
        level = _level(node.attrs.get("level"))
        return "#" * level + " " + _inline(node.children).strip()
    if tag == "paragraph":
        return _start_escaped(_inline(node.children))
    if tag == "codeBlock":
        return _code_block(node)
    if tag == "blockquote":
        inner = _blocks(node.children)
        return "\n".join(">" if not line else "> " + line for line in inner.split("\n"))
    if tag in LISTS:
        return _list(node)
    if tag == "horizontalRule":
        return "---"
    if tag in INLINE_TAGS:
        return _inline([node])
    if _holds_text(node):
        return _start_escaped(_inline(node.children))
    return _blocks(node.children)  # unknown, holding blocks: they keep their text


def _list(node: Node) -> str:
    ordered = node.tag == "orderedList"
    number = _level(node.attrs.get("start"), default=1, high=10**9) if ordered else 0
    items = []
    for child in node.children:
        if isinstance(child, Run):
            continue
        if ordered:
            marker = f"{number}. "
            number += 1
        elif node.tag == "taskList" or child.tag == "taskItem":
            marker = "- [x] " if child.attrs.get("checked") else "- [ ] "
        else:
            marker = "- "
        body = _item_body(child.children)
        pad = " " * len(marker)
        lines = body.split("\n") if body else [""]
        rest = "".join("\n" + (pad + line if line else "") for line in lines[1:])
        items.append(marker + lines[0] + rest)
    return "\n".join(items)


def _item_body(blocks: tuple[Node | Run, ...]) -> str:
    """A list item's blocks, one per line (a tight list), but a blank line before an ordered
    list that does not start at 1: CommonMark would read it as the paragraph's text."""
    out = ""
    for block in blocks:
        part = _block(block)
        if not part:
            continue
        if out:
            starts_late = (
                isinstance(block, Node)
                and block.tag == "orderedList"
                and _level(block.attrs.get("start"), default=1, high=10**9) != 1
            )
            out += "\n\n" if starts_late else "\n"
        out += part
    return out


def _code_block(node: Node) -> str:
    text = "".join(run.text for run in inline_runs(node.children) if isinstance(run, Run))
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    language = node.attrs.get("language")
    info = language if isinstance(language, str) and _LANGUAGE.fullmatch(language) else ""
    return f"{fence}{info}\n{text}\n{fence}"


def _holds_text(node: Node) -> bool:
    return any(
        isinstance(child, Run) or child.tag == "#text" or child.tag in INLINE_TAGS
        for child in node.children
    )


def _level(value: Any, default: int = 1, high: int = 6) -> int:
    if isinstance(value, int | float) and 1 <= value <= high:
        return int(value)
    return default


def _start_escaped(text: str) -> str:
    """A block whose text begins like Markdown syntax (``# ``, ``- ``, ``1. ``) stays text."""
    return "\\" + text if _BLOCK_START.match(text) else text


def _inline(children: tuple[Node | Run, ...] | list[Node | Run]) -> str:
    out: list[str] = []
    open_marks: list[tuple[str, Mapping[str, Any]]] = []
    pending = ""  # spaces after the last text, kept outside marks that close after them

    def close(keep: int) -> None:
        while len(open_marks) > keep:
            name, attrs = open_marks.pop()
            out.append(_closer(name, attrs))

    for piece in inline_runs(tuple(children)):
        if isinstance(piece, Node):
            close(0)
            out.append(_breaks(pending))
            pending = ""
            out.append(_inline_node(piece))
            continue
        text = piece.text
        core = text.strip()
        if not core:
            pending += text
            continue
        lead, trail = text[: len(text) - len(text.lstrip())], text[len(text.rstrip()) :]
        wanted = [(name, _mark_attrs(name, piece.marks.get(name))) for name in _ORDER]
        wanted = [(name, attrs) for name, attrs in wanted if attrs is not None]
        # Marks already open stay open, in the order they were opened (so *a **b** c* stays
        # nested), up to the first one this run does not have.
        keep = 0
        while keep < len(open_marks) and open_marks[keep] in wanted:
            keep += 1
        close(keep)
        out.append(_breaks(pending + lead))
        for name, attrs in wanted:
            if (name, attrs) not in open_marks:
                out.append(_opener(name))
                open_marks.append((name, attrs))
        out.append(_code(core) if "code" in piece.marks else _text(core))
        pending = trail
    close(0)
    return "".join(out).rstrip(" ")


def _mark_attrs(name: str, attrs: Any) -> Mapping[str, Any] | None:
    """The mark as written, or None: absent, or a link to an address not kept."""
    if attrs is None:
        return None
    if name != "link":
        return attrs if isinstance(attrs, Mapping) else {}
    href = destination(attrs.get("href")) if isinstance(attrs, Mapping) else None
    return None if href is None else {"href": href}


def _text(text: str) -> str:
    return _breaks(_ENTITY.sub(r"\\&", _ESCAPED.sub(r"\\\1", text)))


def _breaks(text: str) -> str:
    """Line breaks inside text as character references: written as they are, they would end
    the paragraph, or begin a line Markdown reads as a heading, a list or raw HTML."""
    return _BREAK.sub(lambda match: _BREAKS[match.group()], text)


def _opener(name: str) -> str:
    return "[" if name == "link" else _WRAP[name][0]


def _closer(name: str, attrs: Mapping[str, Any]) -> str:
    if name == "link":
        return "](" + str(attrs["href"]) + ")"  # a destination already (_mark_attrs)
    return _WRAP[name][1]


def _code(text: str) -> str:
    """Inline code; a line break in it is written between two code spans (a code span cannot
    hold one: a blank line would end it and its paragraph)."""
    if _BREAK.search(text):
        pieces = re.split(r"([\n\r])", text)
        return "".join(_BREAKS[p] if p in _BREAKS else _code(p) if p else "" for p in pieces)
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _inline_node(node: Node) -> str:
    if node.tag == "hardBreak":
        return "\\\n"
    if node.tag == "image":
        alt = node.attrs.get("alt")
        alt = _text(alt) if isinstance(alt, str) else ""
        src = destination(node.attrs.get("src"))
        return alt if src is None else f"![{alt}]({src})"  # not kept: its alt text
    return _inline(node.children)  # a mention or any other inline node: its text

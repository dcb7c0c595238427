"""Markdown read into a rich tree of Tiptap's StarterKit nodes (``collab.content.tree`` values).

CommonMark (markdown-it) with strikethrough: headings, paragraphs, bullet and ordered lists (their
start kept), blockquotes, fenced and indented code (its language kept), rules, hard breaks, and the
marks bold, italic, strike, code and link. StarterKit has no image node: an image becomes its
alt text linked to its source. Raw HTML is kept as text, and so is a link to an address the
exports would not link (``collab.content.urls``: not http(s), mailto or relative). Pure; run
in a worker thread.

Bounded: markdown-it makes one token object (about 330 bytes) per byte of Markdown in the worst
case (512 KiB of ``-`` lines: 190 MB), so its tokens are not kept. Each block token is turned
into the tree as soon as markdown-it has finished with it (when the next one is pushed) and
replaced by a shared placeholder; each paragraph's inline tokens live only while that
paragraph is read. Reference definitions may follow the links that use them, so a text that
could hold one is read for them first (block tokens only, none kept). A tree of more than
``max_nodes`` nodes (elements and runs of text) is refused as soon as it grows past that.

Never cut: markdown-it's CommonMark preset stops at 20 levels of nesting and silently skips the
rest of the input (a list 12 deep lost its levels 10+ and the paragraph after). Here blocks may
nest as deep as the tree the update guard accepts (``max_depth``, its ``max_nesting_depth``:
the fragment, the containers, the text block and its text), and deeper is refused whole.
Inline nesting (links in links) keeps markdown-it's 20: past it, text stays text.

Deep quotes have one cost that does not grow with the bytes: markdown-it reads every line of a
quote once per level, so a line that continues a paragraph 120 quotes deep without its ``>``
markers (a lazy continuation line, two bytes) costs 120 line reads (100 KB of them: 61 s).
Such work past ``_QUOTE_WORK_PER_BYTE`` per byte is refused before parsing; a line that
writes its markers pays for its levels in bytes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.common.utils import unescapeAll
from markdown_it.rules_block.state_block import StateBlock
from markdown_it.rules_core.normalize import normalize
from markdown_it.rules_core.state_core import StateCore
from markdown_it.token import Token

from .tree import Node, Run
from .urls import safe_url

# A 50,000-paragraph document with a mark or two in each takes about 200,000.
DEFAULT_MAX_NODES = 300_000
DEFAULT_MAX_DEPTH = 128  # the update guard's default max_nesting_depth

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
# Line reads of quotes per byte of Markdown (about 10 µs each); a slack for short texts.
_QUOTE_WORK_PER_BYTE = 2
_QUOTE_WORK_SLACK = 65536
# A line's container markers: quotes (counted) and list markers between them.
_PREFIX = re.compile(r"[ \t]*(?:(?:>|[-+*](?=[ \t]|$)|\d{1,9}[.)](?=[ \t]|$))[ \t]*)*", re.M)
_NONE: MappingProxyType[str, Any] = MappingProxyType({})  # shared by every node without attrs
_SPENT = Token("", "", 0, level=-1)  # what a converted token's slot holds from then on


class MarkdownRefused(Exception):
    """The Markdown is not imported; ``limit`` names the setting or limit it hit, ``str(exc)``
    is safe to show the client."""

    def __init__(self, limit: str, reason: str) -> None:
        super().__init__(reason)
        self.limit = limit


@dataclass(frozen=True, slots=True)
class MarkdownLimits:
    max_nodes: int = DEFAULT_MAX_NODES  # elements and runs of text in the tree (max_import_nodes)
    max_depth: int = DEFAULT_MAX_DEPTH  # the tree's depth as the guard counts it, root = 1


@dataclass(frozen=True, slots=True)
class MarkdownSource:
    """A Markdown text to import and the limits it is read under."""

    text: str
    limits: MarkdownLimits = MarkdownLimits()

    def parse(self) -> tuple[Node, ...]:
        return parse_markdown(self.text, self.limits)


def parse_markdown(markdown: str, limits: MarkdownLimits = MarkdownLimits()) -> tuple[Node, ...]:
    """The document's blocks; an empty text gives one empty paragraph (what an editor holds).
    Raises ``MarkdownRefused`` past a limit."""
    md = _parser(limits.max_depth)
    state = StateCore(markdown, md, {})
    normalize(state)  # line endings and NUL, as markdown-it's first core rule does
    source = state.src
    _check_quote_work(source)
    env: dict[str, Any] = {}
    if "]:" in source:  # a reference definition is possible: read them all first
        md.block.parse(source, md, env, _Discarded())
        env = {"references": env.get("references", {})}
    tree = _TreeBuilder(_inline_parser(), env, limits.max_nodes)
    taken = _Taken(tree)
    md.block.parse(source, md, env, taken)
    taken.flush()
    return tree.finish()


def _check_quote_work(source: str) -> None:
    """Refuse a text whose quotes markdown-it would read more often than its size allows: per
    line, the quotes open around it (its own ``>`` markers, or for a line without any, those
    of the paragraph it may continue, until a blank line)."""
    work, depth, at, end = 0, 0, 0, len(source)
    while at <= end:
        stop = source.find("\n", at)
        stop = end if stop < 0 else stop
        prefix = _PREFIX.match(source, at, stop)
        quotes = prefix.group().count(">") if prefix else 0
        if quotes:
            depth = quotes
            work += quotes
        elif source[at:stop].strip():
            work += depth
        else:
            depth = 0
        at = stop + 1
    if work > _QUOTE_WORK_PER_BYTE * len(source) + _QUOTE_WORK_SLACK:
        raise MarkdownRefused(
            "markdown_quote_lines",
            "Markdown continues deeply nested quotes over many lines without their '>' markers;"
            " each such line is read once per level: write the markers",
        )


@lru_cache(maxsize=4)
def _parser(max_depth: int) -> MarkdownIt:
    """The block parser: blocks at markdown-it's level L make a text at the guard's depth L + 3
    (the fragment, L containers, the block, its text), so level ``max_depth - 2`` is refused.
    markdown-it's own limit is set past it: a list enters its items two levels down at once,
    and a limit it reached first would skip the rest silently."""
    deepest = max(max_depth - 3, 0)
    md = MarkdownIt("commonmark", {"maxNesting": deepest + 4}).enable("strikethrough")

    def too_deep(state: StateBlock, start: int, end: int, silent: bool) -> bool:
        if state.level > deepest:
            raise MarkdownRefused(
                "max_nesting_depth",
                f"Markdown nests blocks deeper than the tree allows (max_nesting_depth"
                f" {max_depth}: {deepest} levels of quotes, a list level counting two)",
            )
        return False

    md.block.ruler.before("table", "too_deep", too_deep)
    return md


@lru_cache(maxsize=1)
def _inline_parser() -> MarkdownIt:
    return MarkdownIt("commonmark").enable("strikethrough")


class _Discarded(list[Token]):
    """A block token list that keeps none of its tokens (the slots stay, for list rules that
    look back by index)."""

    def append(self, token: Token) -> None:
        super().append(_SPENT)


class _Taken(list[Token]):
    """A block token list that hands each token to the tree once the next one arrives:
    markdown-it sets a token's fields (a list's start, a fence's text) right after pushing it."""

    def __init__(self, tree: _TreeBuilder) -> None:
        super().__init__()
        self._tree = tree
        self._held: Token | None = None

    def append(self, token: Token) -> None:
        held = self._held
        if held is not None:
            self[-1] = _SPENT
            self._tree.take(held)
        super().append(token)
        self._held = token

    def flush(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            self[-1] = _SPENT
            self._tree.take(held)


class _TreeBuilder:
    """The tree made from block tokens in order, each paragraph's inline tokens read at once."""

    def __init__(self, md: MarkdownIt, env: dict[str, Any], max_nodes: int) -> None:
        self._md = md
        self._env = env
        self._max_nodes = max_nodes
        self._nodes = 0
        self._stack: list[tuple[str, Any, list[Node | Run]]] = [("doc", _NONE, [])]

    def count(self, more: int = 1) -> None:
        self._nodes += more
        if self._nodes > self._max_nodes:
            raise MarkdownRefused(
                "max_import_nodes",
                f"Markdown makes more than {self._max_nodes} nodes (max_import_nodes);"
                " import it in parts or as a Yjs update",
            )

    def take(self, token: Token) -> None:
        kind = token.type
        stack = self._stack
        if kind in _CONTAINERS:
            self.count()
            stack.append((_CONTAINERS[kind], _attrs(token), []))
        elif kind.endswith("_close") and len(stack) > 1:
            tag, attrs, children = stack.pop()
            if tag == "paragraph" and not children:  # "[](x)": no text, nothing to hold
                return
            stack[-1][2].append(Node(tag, attrs, tuple(children)))
        elif kind == "inline":
            children: list[Token] = []
            self._md.inline.parse(token.content, self._md, self._env, children)
            stack[-1][2].extend(_inline(children, self))
        elif kind in ("fence", "code_block"):
            # The info string's first word, its escapes and references read (as renderers do)
            language = unescapeAll(token.info).strip().split()[0] if token.info.strip() else ""
            code = token.content[:-1] if token.content.endswith("\n") else token.content
            runs = (Run(code),) if code else ()
            self.count(1 + len(runs))
            stack[-1][2].append(Node("codeBlock", {"language": language or None}, runs))
        elif kind == "hr":
            self.count()
            stack[-1][2].append(Node("horizontalRule", _NONE))
        elif kind == "html_block":
            text = token.content.rstrip("\n")
            runs = (Run(text, _NONE),) if text else ()
            self.count(1 + len(runs))
            stack[-1][2].append(Node("paragraph", _NONE, runs))

    def finish(self) -> tuple[Node, ...]:
        blocks = tuple(child for child in self._stack[0][2] if isinstance(child, Node))
        return blocks or (Node("paragraph", _NONE),)


def _attrs(token: Token) -> Any:
    if token.type == "heading_open":
        return {"level": int(token.tag[1])}
    if token.type == "ordered_list_open":
        start = token.attrGet("start")
        return {"start": int(start) if isinstance(start, int | str) and str(start).isdigit() else 1}
    return _NONE


def _inline(tokens: list[Token], tree: _TreeBuilder) -> list[Node | Run]:
    """One paragraph's runs: text pieces gathered while the marks stay the same and joined
    once (joining run by run is quadratic in a paragraph of many escapes or entities)."""
    out: list[Node | Run] = []
    marks: dict[str, Any] = {}
    pieces: list[str] = []
    current: Any = _NONE

    def end_run() -> None:
        if pieces:
            out.append(Run("".join(pieces), current))
            pieces.clear()

    def text(value: str, extra: dict[str, Any] | None = None) -> None:
        nonlocal current
        if not value:
            return
        wanted = {**marks, **extra} if extra else marks
        if not pieces or wanted != current:
            end_run()
            tree.count()
            current = MappingProxyType(dict(wanted)) if wanted else _NONE
        pieces.append(value)

    for token in tokens:
        kind = token.type
        if kind in ("text", "text_special", "html_inline"):
            text(token.content)
        elif kind == "softbreak":
            text(" ")
        elif kind == "hardbreak":
            end_run()
            tree.count()
            out.append(Node("hardBreak", _NONE))
        elif kind == "code_inline":
            text(token.content, {"code": _NONE})
        elif kind in _MARKS:
            marks[_MARKS[kind]] = _NONE
        elif kind in _MARK_CLOSES:
            marks.pop(_MARK_CLOSES[kind], None)
        elif kind == "link_open":
            href = safe_url(str(token.attrGet("href") or ""))
            if href is not None:  # else its text, as the exports keep it
                marks["link"] = {"href": href}
        elif kind == "link_close":
            marks.pop("link", None)
        elif kind == "image":
            alt = token.content or str(token.attrGet("alt") or "")
            src = safe_url(str(token.attrGet("src") or ""))
            text(alt or "image", None if src is None else {"link": {"href": src}})
    end_run()
    return out

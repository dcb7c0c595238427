"""HTML read into a rich tree of Tiptap's StarterKit nodes (``collab.content.tree`` values), keeping
only what a document can safely hold. Pure; run in a worker thread.

Read with the standard library's ``html.parser`` (no new dependency, nothing executed, entities
decoded): ``p``, ``h1``-``h6``, ``blockquote``, ``ul``/``ol`` (an ordered list's start kept) and
``li``, ``pre`` (a ``language-x`` class of its ``code`` kept), ``hr``, ``br``, and the marks
``strong``/``b``, ``em``/``i``, ``s``/``strike``/``del``, ``u``, ``code`` and ``a``. StarterKit has
no image node: an image becomes its alt text linked to its source, as a Markdown import makes it.

Safe: what scripts and embeds hold (``script``, ``style``, ``template``, ``iframe``, ``object``,
``svg``, ...) is dropped with its text, every attribute but a link's ``href``, an image's ``src``
and ``alt``, an ordered list's ``start`` and a code block's language is ignored (event handlers,
styles), and a link or image to an address the exports would not link (``collab.content.urls``:
``javascript:`` and the like) keeps only its text. Other elements (``div``, ``span``, tables)
keep their text: block-level ones end a paragraph, inline ones do not.

Whitespace is read as a browser shows it (runs of it are one space, none at a block's edges),
except in ``pre``. Bounded: elements that make tree levels nest at most ``max_depth`` deep as
the update guard counts (deeper: refused whole, 422), inline marks and unknown elements cost no
depth, an end tag finds its element in constant time, and more than ``max_nodes`` nodes are
refused as soon as the tree grows past them.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from html.parser import HTMLParser
from types import MappingProxyType
from typing import Any

from .attrs import MAX_START, code_language
from .prosemirror_json import TreeLimits, TreeRefused
from .tree import Node, Run
from .urls import safe_url

_NONE: MappingProxyType[str, Any] = MappingProxyType({})
_DEFAULT_LIMITS = TreeLimits()
# Elements whose content is never text of the document.
_DROPPED = frozenset(
    {
        "script",
        "style",
        "template",
        "iframe",
        "object",
        "applet",
        "svg",
        "math",
        "head",
        "title",
        "noscript",
        "noembed",
        "noframes",
        "frameset",
        "canvas",
        "audio",
        "video",
        "select",
        "textarea",
    }
)
_HEADINGS = {f"h{n}": n for n in range(1, 7)}
_CONTAINERS = {
    "blockquote": "blockquote",
    "ul": "bulletList",
    "ol": "orderedList",
    "li": "listItem",
}
_MARKS = {
    "strong": "bold",
    "b": "bold",
    "em": "italic",
    "i": "italic",
    "s": "strike",
    "strike": "strike",
    "del": "strike",
    "u": "underline",
    "code": "code",
}
# Elements that end a paragraph (their text is kept, in paragraphs of its own).
_BLOCKS = frozenset(
    {
        "address",
        "article",
        "aside",
        "body",
        "center",
        "dd",
        "details",
        "dialog",
        "dir",
        "div",
        "dl",
        "dt",
        "fieldset",
        "figcaption",
        "figure",
        "footer",
        "form",
        "header",
        "hgroup",
        "html",
        "main",
        "menu",
        "nav",
        "section",
        "summary",
        "table",
        "tbody",
        "td",
        "tfoot",
        "th",
        "thead",
        "tr",
        "caption",
        "legend",
        "option",
        "optgroup",
    }
)
_LISTS = frozenset({"bulletList", "orderedList"})
_SPACES = re.compile(r"[ \t\n\r\f]+")
_LANGUAGE = re.compile(r"(?:^|\s)language-(\S+)")
_MAX_LINKS = 64  # open <a> elements remembered; deeper ones are their text


@dataclass(frozen=True, slots=True)
class HtmlSource:
    """An HTML body to import and the limits it is read under."""

    text: str
    limits: TreeLimits = _DEFAULT_LIMITS

    def parse(self) -> tuple[Node, ...]:
        return parse_html(self.text, self.limits)


def parse_html(html: str, limits: TreeLimits = _DEFAULT_LIMITS) -> tuple[Node, ...]:
    """The document's blocks (one empty paragraph for nothing); raises ``TreeRefused``."""
    reader = _Reader(limits)
    reader.feed(html)
    # html.parser stops before a construct it has not seen the end of (a comment without
    # "-->", a tag whose quote never closes). Its close() would then read it as text a
    # character at a time, searching to the end of the input each time: quadratic (100,000
    # "<!--" took 84 s; CVE-2025-6069, fixed in Pythons after the 3.11.7 we run). What is
    # left is read as text instead, its "<" escaped: one pass, whatever it holds.
    reader.rawdata = reader.rawdata.replace("<", "&lt;")
    reader.close()
    return reader.finish()


@dataclass(slots=True)
class _Open:
    """A container being built: its node type and attributes, the HTML element that opened it
    ("" when implied, as a list item for text right in a list), and its children so far."""

    tag: str
    attrs: Any
    element: str
    children: list[Node | Run] = field(default_factory=list)


class _Reader(HTMLParser):
    def __init__(self, limits: TreeLimits) -> None:
        super().__init__(convert_charrefs=True)
        self.limits = limits
        self.nodes = 0
        self.stack: list[_Open] = [_Open("doc", _NONE, "")]
        self.open_elements: Counter[str] = Counter()  # HTML elements on the stack, by name
        self.block: _Open | None = None  # the paragraph, heading or code block being written
        self.pieces: list[str] = []  # its current run's text, joined once
        self.piece_marks: Any = _NONE
        self.marks: Counter[str] = Counter()
        self.links: list[str | None] = []  # the open <a> elements' addresses
        self.dropping: list[str] = []  # a dropped element is open: its content is not read
        self.pre = 0  # open <pre> elements
        self.after_space = True  # the text written so far ends a line or a space: no space next

    # -- html.parser's events -----------------------------------------------------------------

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.dropping:
            if tag == self.dropping[-1] and len(self.dropping) < 64:
                self.dropping.append(tag)  # nested in itself: its end tag is not the last
            return
        if tag in _DROPPED:
            self.dropping.append(tag)
            return
        if tag in ("embed", "input", "link", "meta", "base", "source", "track", "area"):
            return  # void elements with no text: nothing to keep
        if tag in _MARKS:
            self.marks[_MARKS[tag]] += 1
        elif tag == "a":
            href = dict(attrs).get("href")
            self.links.append(safe_url(href) if href is not None else None)
            if len(self.links) > _MAX_LINKS:
                self.links.pop(0)
        elif tag == "br":
            self._inline_node(Node("hardBreak", _NONE))
        elif tag == "img":
            found = dict(attrs)
            src = safe_url(found.get("src") or "")
            alt = _SPACES.sub(" ", found.get("alt") or "").strip()
            extra = {"link": {"href": src}} if src else None
            self._text(alt or ("image" if src else ""), extra)
        elif tag == "hr":
            self._end_block()
            self._count()
            self._container().children.append(Node("horizontalRule", _NONE))
        elif tag == "p":
            self._start_block("paragraph", _NONE, tag)
        elif tag in _HEADINGS:
            self._start_block("heading", {"level": _HEADINGS[tag]}, tag)
        elif tag == "pre":
            self.pre += 1
            self._start_block("codeBlock", {"language": _language(attrs)}, tag)
        elif tag in _CONTAINERS:
            attrs_of = {"start": _start(attrs)} if tag == "ol" else _NONE
            self._open(_CONTAINERS[tag], attrs_of, tag)
        elif tag in _BLOCKS:
            self._end_block()
        if tag == "code" and self.pre and self.block is not None:
            language = _language(attrs)
            if language is not None and self.block.tag == "codeBlock":
                self.block.attrs = {"language": language}

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in ("br", "img", "hr"):
            self.handle_endtag(tag)

    def handle_endtag(self, tag: str) -> None:
        if self.dropping:
            if tag == self.dropping[-1]:
                self.dropping.pop()
            return
        if tag in _MARKS:
            name = _MARKS[tag]
            if self.marks[name] > 0:
                self.marks[name] -= 1
        elif tag == "a":
            if self.links:
                self.links.pop()
        elif tag in ("p", "pre") or tag in _HEADINGS:
            if tag == "pre" and self.pre:
                self.pre -= 1
            if self.block is not None and self.block.element == tag:
                self._end_block()
        elif tag in _CONTAINERS:
            self._close(tag)
        elif tag in _BLOCKS:
            self._end_block()

    def handle_data(self, data: str) -> None:
        if self.dropping:
            return
        if self.block is not None and self.block.tag == "codeBlock":
            self._append(data, _NONE)
            return
        self._text(_SPACES.sub(" ", data), None)

    # -- the tree -------------------------------------------------------------------------------

    def finish(self) -> tuple[Node, ...]:
        self._end_block()
        while len(self.stack) > 1:
            self._pop()
        blocks = tuple(child for child in self.stack[0].children if isinstance(child, Node))
        return blocks or (Node("paragraph", _NONE),)

    def _container(self) -> _Open:
        """The container new blocks go in; text or a paragraph right in a list gets an item."""
        while self.stack[-1].tag in _LISTS and not self.stack[-1].element:
            self._pop()  # a list implied for stray items ends where other content starts
        if self.stack[-1].tag in _LISTS:
            self._push(_Open("listItem", _NONE, ""))
        return self.stack[-1]

    def _open(self, tag: str, attrs: Any, element: str) -> None:
        self._end_block()
        if tag == "listItem":
            # A new item ends the one before it (HTML lets </li> be left out); an item out of
            # any list gets one.
            if self.stack[-1].tag == "listItem" and self.stack[-2].tag in _LISTS:
                self._pop()
            if self.stack[-1].tag not in _LISTS:
                self._push(_Open("bulletList", _NONE, ""))
        else:
            self._container()
        self._push(_Open(tag, attrs, element))

    def _push(self, container: _Open) -> None:
        # The fragment is 1, this container one more than its parent, a text in it two more.
        if len(self.stack) + 3 > self.limits.max_depth:
            raise TreeRefused(
                "max_nesting_depth",
                f"the HTML nests lists and quotes deeper than the tree allows (max_nesting_depth"
                f" {self.limits.max_depth})",
            )
        self._count()
        self.stack.append(container)
        if container.element:
            self.open_elements[container.element] += 1

    def _close(self, element: str) -> None:
        """The containers up to the one ``element`` opened, if it is open (else nothing)."""
        if not self.open_elements[element]:
            return
        self._end_block()
        while len(self.stack) > 1:
            if self._pop() == element:
                return

    def _pop(self) -> str:
        """Close the innermost container; returns the element that opened it."""
        done = self.stack.pop()
        if done.element:
            self.open_elements[done.element] -= 1
        children = done.children
        if done.tag == "listItem" and not (
            children and isinstance(children[0], Node) and children[0].tag == "paragraph"
        ):
            self._count()
            children.insert(0, Node("paragraph", _NONE))  # a list item starts with a paragraph
        elif done.tag == "blockquote" and not children:
            self._count()
            children.append(Node("paragraph", _NONE))
        elif done.tag in ("bulletList", "orderedList") and not children:
            return done.element  # a list with no items: nothing to keep
        self.stack[-1].children.append(Node(done.tag, done.attrs, tuple(children)))
        return done.element

    def _start_block(self, tag: str, attrs: Any, element: str) -> None:
        self._end_block()
        self._container()
        if len(self.stack) + 2 > self.limits.max_depth:
            raise TreeRefused(
                "max_nesting_depth",
                f"the HTML nests deeper than the tree allows (max_nesting_depth"
                f" {self.limits.max_depth})",
            )
        self._count()
        self.block = _Open(tag, attrs, element)
        self.after_space = True

    def _end_block(self) -> None:
        block = self.block
        if block is None:
            return
        self._end_run()
        self.block = None
        children = block.children
        if block.tag != "codeBlock":
            _trim_end(children)
        if block.element == "" and not children:
            return  # an implied paragraph that got nothing but spaces
        self.stack[-1].children.append(Node(block.tag, block.attrs, tuple(children)))

    def _text(self, text: str, extra: dict[str, Any] | None) -> None:
        if not text:
            return
        if self.block is None:
            if not text.strip():
                return  # spaces between blocks
            self._start_block("paragraph", _NONE, "")
        if self.after_space:
            text = text.lstrip(" ")  # one space between words, none at a line's start
            if not text:
                return
        self.after_space = text.endswith(" ")
        marks = dict.fromkeys((name for name, n in self.marks.items() if n > 0), _NONE)
        if self.links and self.links[-1] is not None:  # the innermost link, if it may be one
            marks["link"] = {"href": self.links[-1]}
        if extra:
            marks.update(extra)
        self._append(text, MappingProxyType(marks) if marks else _NONE)

    def _append(self, text: str, marks: Any) -> None:
        if self.block is None:
            self._start_block("paragraph", _NONE, "")
        elif self.block.tag == "codeBlock" and not self.block.children and not self.pieces:
            text = text.removeprefix("\n")  # a browser ignores a line break right after <pre>
            if not text:
                return
        if self.pieces and marks != self.piece_marks:
            self._end_run()
        if not self.pieces:
            self._count()
            self.piece_marks = marks
        self.pieces.append(text)

    def _inline_node(self, node: Node) -> None:
        if self.block is None:
            return  # a line break between blocks: nothing to break
        self._end_run()
        _trim_end(self.block.children)
        self._count()
        self.block.children.append(node)
        self.after_space = True

    def _end_run(self) -> None:
        if self.pieces and self.block is not None:
            self.block.children.append(Run("".join(self.pieces), self.piece_marks))
        self.pieces = []

    def _count(self) -> None:
        self.nodes += 1
        if self.nodes > self.limits.max_nodes:
            raise TreeRefused(
                "max_import_nodes",
                f"the HTML makes more than {self.limits.max_nodes} nodes (max_import_nodes);"
                " import it in parts or as a Yjs update",
            )


def _trim_end(children: list[Node | Run]) -> None:
    """No space at the end of a line (before a line break or the block's end): a browser
    shows none."""
    if children and isinstance(children[-1], Run) and children[-1].text.endswith(" "):
        last = children.pop()
        if last.text.rstrip(" "):
            children.append(Run(last.text.rstrip(" "), last.marks))


def _language(attrs: list[tuple[str, str | None]]) -> str | None:
    found = _LANGUAGE.search(dict(attrs).get("class") or "")
    return code_language(found.group(1)) if found else None


def _start(attrs: list[tuple[str, str | None]]) -> int:
    raw = (dict(attrs).get("start") or "").strip()
    if raw.isascii() and raw.isdigit() and len(raw) <= 9 and int(raw) <= MAX_START:
        return int(raw)
    return 1

"""A rich tree (``collab.content.tree``) as ProseMirror JSON, what Tiptap's ``editor.getJSON()``
gives and ``setContent`` takes, and ProseMirror JSON read back into a tree, checked and bounded.

Out (``to_prosemirror``): ``{"type": "doc", "content": [...]}`` with the node and mark names and
attributes the document holds, as y-prosemirror reads them: attributes as stored (null ones
too), numbers that are whole as integers, text nodes with their marks in the order Tiptap's
StarterKit schema ranks them (link, bold, code, italic, strike, underline; others after, by
name). A mark y-prosemirror keys ``name--hash`` (marks that may overlap) is named ``name``.
A plain document reads as one paragraph per line of its text.

In (``parse_prosemirror``, in a worker thread): the JSON read by ``collab.content.json_bounded``
(the GIL let go as it goes, nesting bounded), then each node checked:

- any node type named like a Tiptap extension (a letter, then letters, digits, ``_`` or ``-``)
  is kept as it is, with its attributes: tether cannot know a team's schema (images, tables,
  mentions), and y-prosemirror writes whatever the schema has; the text, Markdown and HTML
  exports keep such a node's text;
- attributes are JSON values (finite numbers, at most ``MAX_ATTRS`` per node, nested at most
  ``_ATTR_DEPTH``); those the exports read are range checked as ``collab.content.attrs`` reads
  them, and a value it would not keep is refused (422), never stored: a heading's ``level``
  1-6, an ordered list's ``start`` 0-999,999,999, a code block's ``language`` one word or null,
  a task's ``checked`` a boolean;
- a link to an address the exports would not link (``collab.content.urls``: not http(s),
  mailto or relative) keeps its text without the link, and an image with such a source is
  dropped, as a Markdown import does;
- text must be Unicode (no lone surrogates); empty text nodes are left out (ProseMirror has
  none), and adjacent text with the same marks is joined;
- more than ``max_nodes`` nodes (elements and text nodes), or nodes nested deeper than
  ``max_depth`` as the update guard counts (the fragment 1, a top-level block 2, its text 3),
  are refused whole.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .attrs import MAX_START, code_language
from .json_bounded import JsonRefused, load_json
from .reading import Content
from .tree import Node, Run, inline_runs
from .urls import safe_url

DEFAULT_MAX_NODES = 300_000
DEFAULT_MAX_DEPTH = 128
MAX_ATTRS = 64  # attributes of one node or mark
MAX_MARKS = 16  # marks on one text node
_ATTR_DEPTH = 8  # lists and objects nested in one attribute value
_MAX_SAFE = 2**53  # a JSON number a JavaScript reader keeps exactly
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")
# Tiptap StarterKit's marks as its schema ranks them (link's priority puts it first).
_MARK_RANK = {"link": 0, "bold": 1, "code": 2, "italic": 3, "strike": 4, "underline": 5}


class TreeRefused(Exception):
    """The content is not imported; ``limit`` names the check (``malformed``: 400, else 422),
    ``str(exc)`` is safe to show the client."""

    def __init__(self, limit: str, reason: str) -> None:
        super().__init__(reason)
        self.limit = limit


@dataclass(frozen=True, slots=True)
class TreeLimits:
    max_nodes: int = DEFAULT_MAX_NODES  # max_import_nodes
    max_depth: int = DEFAULT_MAX_DEPTH  # the update guard's max_nesting_depth


@dataclass(frozen=True, slots=True)
class ProseMirrorSource:
    """A ProseMirror JSON body to import and the limits it is read under. ``shape`` "doc": a
    whole document (``{"type": "doc"}``); "nodes": content to add (a document, one node, or
    a list of nodes)."""

    body: bytes
    limits: TreeLimits = TreeLimits()
    shape: str = "doc"

    def parse(self) -> tuple[Node | Run, ...]:
        return parse_prosemirror(self.body, self.limits, self.shape)


# ---- out -----------------------------------------------------------------------------------


def to_prosemirror(content: Content) -> dict[str, Any]:
    """The document as ProseMirror JSON (``{"type": "doc", "content": [...]}``)."""
    parsed: dict[str, Any] = json.loads(render_prosemirror(content))
    return parsed


def render_prosemirror(content: Content) -> bytes:
    """The document as ProseMirror JSON text (UTF-8), written a node at a time: one
    ``json.dumps`` of the whole tree holds the GIL throughout (74 ms for 50,000 paragraphs),
    a node's is short and the loop gets the GIL between them."""
    out: list[str] = ['{"type":"doc","content":[']
    if content.kind != "rich":
        _lines(content.plain, out)
    else:
        stray: list[Node | Run] = []  # text right under the fragment (ProseMirror never has any)
        for block in content.blocks:
            if isinstance(block, Run) or block.tag == "#text":
                stray.append(block)
                continue
            if stray:
                _node(Node("paragraph", {}, tuple(stray)), out)
                stray = []
            _node(block, out)
        if stray:
            _node(Node("paragraph", {}, tuple(stray)), out)
        if len(out) == 1:
            out.append('{"type":"paragraph"},')
    out[-1] = out[-1].removesuffix(",")
    out.append("]}")
    return "".join(out).encode()


def _lines(text: str, out: list[str]) -> None:
    """A plain document's text: one paragraph per line (an empty line, an empty paragraph),
    what typing it into a Tiptap editor line by line gives."""
    for line in text.split("\n"):
        if line:
            out.append('{"type":"paragraph","content":[{"type":"text","text":')
            out.append(_dumps(line))
            out.append("}]},")
        else:
            out.append('{"type":"paragraph"},')


def _node(node: Node, out: list[str]) -> None:
    out.append('{"type":')
    out.append(_dumps(node.tag))
    if node.attrs:
        out.append(',"attrs":')
        out.append(_dumps({key: _whole(node.attrs[key]) for key in sorted(node.attrs)}))
    children = [c for c in inline_runs(node.children) if not isinstance(c, Run) or c.text]
    if children:
        out.append(',"content":[')
        for child in children:
            if isinstance(child, Run):
                _text(child, out)
            else:
                _node(child, out)
        out[-1] = out[-1].removesuffix(",")
        out.append("]")
    out.append("},")


def _text(run: Run, out: list[str]) -> None:
    out.append('{"type":"text","text":')
    out.append(_dumps(run.text))
    if run.marks:
        marks = []
        for key, attrs in run.marks.items():
            mark: dict[str, Any] = {"type": key.split("--", 1)[0]}
            if isinstance(attrs, Mapping) and attrs:
                mark["attrs"] = {name: _whole(attrs[name]) for name in sorted(attrs)}
            marks.append(mark)
        marks.sort(key=lambda m: (_MARK_RANK.get(m["type"], len(_MARK_RANK)), m["type"]))
        out.append(',"marks":')
        out.append(_dumps(marks))
    out.append("},")


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _whole(value: Any) -> Any:
    """An attribute's value as JSON: yrs keeps JSON numbers as floats, so whole ones are
    integers again, at any depth; what JSON cannot hold (NaN, the infinities, binary a peer
    stored) is null, as JavaScript's ``JSON.stringify`` writes NaN."""
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return int(value) if value.is_integer() else value
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, list | tuple):
        return [_whole(item) for item in value]
    if isinstance(value, Mapping):
        return {str(key): _whole(item) for key, item in value.items()}
    return None


# ---- in ------------------------------------------------------------------------------------


def parse_prosemirror(
    body: bytes, limits: TreeLimits = TreeLimits(), shape: str = "doc"
) -> tuple[Node | Run, ...]:
    """The blocks a ProseMirror JSON body holds (see the module docstring); raises
    ``TreeRefused``. A document without content gives one empty paragraph (what an editor
    holds); content to add may be empty."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise TreeRefused("malformed", "the body is not UTF-8 text") from None
    # Two JSON levels per tree level (a node, its content list), and room for a text node's
    # marks and their attributes.
    try:
        value = load_json(text, 2 * limits.max_depth + _ATTR_DEPTH + 4)
    except JsonRefused as exc:
        if exc.limit == "depth":
            raise TreeRefused("max_nesting_depth", _too_deep(limits)) from None
        raise TreeRefused("malformed", f"the body is not JSON: {exc}") from None
    del text
    reader = _Reader(limits)
    if shape == "doc" or (isinstance(value, dict) and value.get("type") == "doc"):
        if not isinstance(value, dict) or value.get("type") != "doc":
            raise TreeRefused(
                "invalid_content", 'expected a ProseMirror document: {"type": "doc", ...}'
            )
        blocks = reader.content(value, depth=1)
        return blocks or ((Node("paragraph"),) if shape == "doc" else ())
    items = value if isinstance(value, list) else [value]
    return reader.children(items, depth=1, where="the content")


def _too_deep(limits: TreeLimits) -> str:
    return (
        f"the document nests nodes deeper than the tree allows (max_nesting_depth"
        f" {limits.max_depth}, the fragment and each level counting one)"
    )


class _Reader:
    """Nodes read and checked; counts them against the cap."""

    def __init__(self, limits: TreeLimits) -> None:
        self.limits = limits
        self.nodes = 0

    def content(self, node: dict[str, Any], depth: int) -> tuple[Node | Run, ...]:
        content = node.get("content", [])
        if not isinstance(content, list):
            raise TreeRefused(
                "invalid_content", f"a {node.get('type')!r} node's content is not a list"
            )
        return self.children(content, depth, f"a {node.get('type')!r} node")

    def children(self, items: list[Any], depth: int, where: str) -> tuple[Node | Run, ...]:
        """``items`` as the children of a node at ``depth``, adjacent text with the same marks
        joined into one run (``collab.content.tree_write`` writes a block's runs as one text);
        right under the document (``depth`` 1), text goes in a paragraph."""
        if items and depth + 1 > self.limits.max_depth:
            raise TreeRefused("max_nesting_depth", _too_deep(self.limits))
        out: list[Node | tuple[Run, ...]] = []
        runs: list[Run] = []
        for item in items:
            if not isinstance(item, dict) or not isinstance(item.get("type"), str):
                raise TreeRefused("invalid_content", f"{where} holds something that is not a node")
            if item["type"] == "text":
                run = self.text(item)
                if run is None:
                    continue
                if runs and runs[-1].marks == run.marks:
                    runs[-1] = Run(runs[-1].text + run.text, run.marks)
                else:
                    runs.append(run)
                continue
            if runs:
                out.append(_runs(runs, depth))
                runs = []
            element = self.element(item, depth + 1)
            if element is not None:
                out.append(element)
        if runs:
            out.append(_runs(runs, depth))
        return tuple(_flat(out))

    def element(self, item: dict[str, Any], depth: int) -> Node | None:
        kind = item["type"]
        if not _NAME.fullmatch(kind) or kind == "doc":
            raise TreeRefused("invalid_content", f"{kind[:64]!r} is not a node type name")
        self._count()
        attrs = _attrs(item.get("attrs"), "node", kind)
        _check_known(kind, attrs)
        if kind == "image" and safe_url(attrs.get("src")) is None:
            return None  # an image the exports would not show: not stored either
        return Node(kind, attrs, self.content(item, depth))

    def text(self, item: dict[str, Any]) -> Run | None:
        text = item.get("text")
        if not isinstance(text, str):
            raise TreeRefused("invalid_content", "a text node without a 'text' string")
        _unicode(text)
        if not text:
            return None
        self._count()
        raw = item.get("marks", [])
        if not isinstance(raw, list) or len(raw) > MAX_MARKS:
            raise TreeRefused(
                "invalid_content", f"a text node's marks must be a list of at most {MAX_MARKS}"
            )
        marks: dict[str, Mapping[str, Any]] = {}
        for mark in raw:
            if not isinstance(mark, dict) or not isinstance(mark.get("type"), str):
                raise TreeRefused("invalid_content", 'a mark that is not {"type": ...}')
            name = mark["type"]
            if not _NAME.fullmatch(name):
                raise TreeRefused("invalid_content", f"{name[:64]!r} is not a mark type name")
            attrs = _attrs(mark.get("attrs"), "mark", name)
            if name == "link" and safe_url(attrs.get("href")) is None:
                continue  # its text stays, without a link the exports would not keep
            marks[name] = attrs
        return Run(text, marks)

    def _count(self) -> None:
        self.nodes += 1
        if self.nodes > self.limits.max_nodes:
            raise TreeRefused(
                "max_import_nodes",
                f"the document has more than {self.limits.max_nodes} nodes (max_import_nodes);"
                " import it in parts or as a Yjs update",
            )


def _runs(runs: list[Run], depth: int) -> Node | tuple[Run, ...]:
    """Runs in a node; right under the document, in a paragraph of their own."""
    return Node("paragraph", {}, tuple(runs)) if depth == 1 else tuple(runs)


def _flat(items: list[Node | tuple[Run, ...]]) -> list[Node | Run]:
    out: list[Node | Run] = []
    for item in items:
        if isinstance(item, tuple):
            out.extend(item)
        else:
            out.append(item)
    return out


def _attrs(raw: Any, what: str, kind: str) -> dict[str, Any]:
    """A node's or mark's attributes, checked (``what`` and ``kind`` name it in a refusal)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict) or len(raw) > MAX_ATTRS:
        raise TreeRefused(
            "invalid_content",
            f"a {kind[:64]!r} {what}'s attrs must be an object of at most {MAX_ATTRS} keys",
        )
    for key, value in raw.items():
        if not 0 < len(key) <= 256:
            raise TreeRefused(
                "invalid_content", f"a {kind[:64]!r} {what} has an attribute named {key[:64]!r}"
            )
        _unicode(key)
        if not _plain(value, 0):
            raise TreeRefused(
                "invalid_content",
                f"a {kind[:64]!r} {what}'s {key[:64]!r} is not a JSON value a document keeps"
                f" (finite numbers up to 2^53, nested at most {_ATTR_DEPTH} deep)",
            )
    return raw


def _plain(value: Any, depth: int) -> bool:
    """A JSON value yrs stores and a JavaScript reader reads back the same (strings are
    checked for lone surrogates, which raise)."""
    if value is None or isinstance(value, bool):
        return True
    if isinstance(value, int | float):
        return math.isfinite(value) and abs(value) <= _MAX_SAFE
    if isinstance(value, str):
        _unicode(value)
        return True
    if depth >= _ATTR_DEPTH:
        return False
    if isinstance(value, dict):
        for name in value:
            _unicode(name)
        return all(_plain(item, depth + 1) for item in value.values())
    return all(_plain(item, depth + 1) for item in value)


def _check_known(kind: str, attrs: dict[str, Any]) -> None:
    """The attributes the exports read (``collab.content.attrs``), in their ranges."""
    if kind == "heading" and "level" in attrs:
        level = attrs["level"]
        if not (_integer(level) and 1 <= level <= 6):
            raise TreeRefused("invalid_content", "a heading's level must be a whole number 1 to 6")
    elif kind == "orderedList" and attrs.get("start") is not None:
        start = attrs["start"]
        if not (_integer(start) and 0 <= start <= MAX_START):
            raise TreeRefused(
                "invalid_content",
                f"an ordered list's start must be a whole number 0 to {MAX_START}",
            )
    elif kind == "codeBlock" and attrs.get("language") is not None:
        if code_language(attrs["language"]) is None:
            raise TreeRefused(
                "invalid_content", "a code block's language must be one word (or null)"
            )
    elif kind == "taskItem" and "checked" in attrs and not isinstance(attrs["checked"], bool):
        raise TreeRefused("invalid_content", "a task item's checked must be true or false")


def _integer(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and float(value).is_integer()
    )


def _unicode(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise TreeRefused("invalid_content", "text holds a lone surrogate (not Unicode)") from None

"""A rich document (a ``Y.XmlFragment`` as y-prosemirror writes it) as the text the model reads.

The model reads structure as Markdown shows it: ``# `` before a heading, ``- `` or ``1. ``
before a list item (indented when nested), ``> `` before a quote, fences around code, blocks
apart by a blank line. Marks are not written: the view's characters inside a text are that
text's characters, one for one, so a place in the view is a place in one ``Y.XmlText`` (a
*slot*) and back. An empty textblock (a new paragraph) is a slot of no text: a suggestion there
creates its text.

Reading walks pycrdt's native objects in one transaction (its wrappers cost five times as
much), and a top-level block whose XML serialisation is unchanged reuses its last rendering:
a 1.3 MB document of 5,000 blocks reads in a few milliseconds once warm. That serialisation
does not escape text, so two different blocks can share one; whoever writes through a slot
checks its text first (``Slot.text``).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any

# pycrdt's native classes: the view is read through them, not through the Python wrappers.
from pycrdt._pycrdt import XmlElement as NativeElement
from pycrdt._pycrdt import XmlText as NativeText

LISTS = frozenset({"bulletList", "orderedList", "taskList"})
TEXTBLOCKS = frozenset({"paragraph", "heading", "codeBlock"})
BLOCK_SEPARATOR = "\n\n"


@dataclass(frozen=True, slots=True)
class Slot:
    """One text of the document, as it appears in the view."""

    start: int  # view index of its first character
    text: str
    # Child indexes from the fragment to the ``Y.XmlText``; for an empty textblock, to the
    # element (``holds_text`` False): writing there creates its text.
    path: tuple[int, ...]
    holds_text: bool = True

    @property
    def end(self) -> int:
        return self.start + len(self.text)


class View:
    """The view's text, and its slots block by block (a slot is built when asked for: a read
    makes none, so it costs the same however many texts the document has)."""

    __slots__ = ("_blocks", "_starts", "text")

    def __init__(self, text: str, blocks: list[_Block], starts: list[int]) -> None:
        self.text = text
        self._blocks = blocks
        self._starts = starts  # each top-level block's first view index

    def slot_at(self, index: int) -> tuple[Slot, int] | None:
        """The slot holding view index ``index`` (its end included: a cursor after its last
        character is in it) and the offset there; None in structure (a ``# ``, a separator)."""
        at = bisect.bisect_right(self._starts, index) - 1
        if at < 0:
            return None
        start = self._starts[at]
        for offset, text, path, holds_text in self._blocks[at].slots:
            if start + offset <= index <= start + offset + len(text):
                return Slot(start + offset, text, (at, *path), holds_text), index - start - offset
        return None

    def slot_of(self, path: tuple[int, ...]) -> Slot | None:
        if not path or not 0 <= path[0] < len(self._blocks):
            return None
        at, inner = path[0], path[1:]
        for offset, text, subpath, holds_text in self._blocks[at].slots:
            if subpath == inner:
                return Slot(self._starts[at] + offset, text, path, holds_text)
        return None

    @property
    def slots(self) -> list[Slot]:
        return [
            Slot(start + offset, text, (at, *path), holds_text)
            for at, (start, block) in enumerate(zip(self._starts, self._blocks, strict=True))
            for offset, text, path, holds_text in block.slots
        ]


@dataclass(frozen=True, slots=True)
class _Block:
    """One top-level block's rendering: its text and its slots, positions relative to it."""

    text: str
    slots: tuple[tuple[int, str, tuple[int, ...], bool], ...]


class RichReader:
    """Reads a fragment into a ``View``, reusing the renderings of unchanged top-level blocks.
    One per document; not thread-safe (the event loop reads it)."""

    def __init__(self) -> None:
        self._blocks: dict[str, _Block] = {}
        self.rendered = 0  # blocks rendered afresh (tests read it: reading must stay incremental)

    def read(self, fragment: Any, txn: Any, *, fresh: bool = False) -> View:
        """``fragment`` and ``txn`` are pycrdt's native objects (``XmlFragment.integrated``,
        ``Transaction._txn``). ``fresh`` renders every block again."""
        known = {} if fresh else self._blocks
        seen: dict[str, _Block] = {}
        blocks: list[_Block] = []
        starts: list[int] = []
        length = 0
        for child in fragment.children(txn):
            key = child.get_string(txn)
            block = known.get(key) or seen.get(key)
            if block is None:
                block = _render(child, txn)
                self.rendered += 1
            seen[key] = block
            starts.append(length)
            blocks.append(block)
            length += len(block.text) + len(BLOCK_SEPARATOR)
        self._blocks = seen
        return View(BLOCK_SEPARATOR.join(block.text for block in blocks), blocks, starts)


def text_of(node: Any, txn: Any) -> str | None:
    """A native ``XmlText``'s characters (marks dropped); None if it holds embeds, which have
    no characters for the model to read."""
    pieces = []
    for content, _attrs in node.diff(txn):
        if not isinstance(content, str):
            return None
        pieces.append(content)
    return "".join(pieces)


def _render(node: Any, txn: Any) -> _Block:
    writer = _Writer(txn)
    writer.block(node, (), "", 0)
    return _Block("".join(writer.parts), tuple(writer.slots))


class _Writer:
    def __init__(self, txn: Any) -> None:
        self.txn = txn
        self.parts: list[str] = []
        self.length = 0
        self.slots: list[tuple[int, str, tuple[int, ...], bool]] = []

    def put(self, text: str) -> None:
        if text:
            self.parts.append(text)
            self.length += len(text)

    def slot(self, text: str, path: tuple[int, ...], holds_text: bool = True) -> None:
        self.slots.append((self.length, text, path, holds_text))
        self.put(text)

    def block(self, node: Any, path: tuple[int, ...], lead: str, depth: int) -> None:
        """Write one block; ``lead`` goes before its first line (a list marker, ``> ``)."""
        txn = self.txn
        if isinstance(node, NativeText):
            self.put(lead)
            self.slot(text_of(node, txn) or "", path)
            return
        if not isinstance(node, NativeElement):
            return
        tag = node.tag() or ""
        children = node.children(txn)
        if tag in LISTS:
            number = _int(_attr(node, txn, "start"), 1)
            for index, item in enumerate(children):
                if index:
                    self.put("\n")
                marker = f"{number + index}. " if tag == "orderedList" else "- "
                self.list_item(item, (*path, index), lead + "  " * depth + marker, depth)
            return
        if tag in TEXTBLOCKS or any(isinstance(child, NativeText) for child in children):
            self.textblock(node, tag, children, path, lead)
            return
        inner = lead + "> " if tag == "blockquote" else lead
        for index, child in enumerate(children):
            if index:
                self.put(BLOCK_SEPARATOR)
            self.block(child, (*path, index), inner, depth)

    def list_item(self, item: Any, path: tuple[int, ...], lead: str, depth: int) -> None:
        if not isinstance(item, NativeElement):
            self.block(item, path, lead, depth)
            return
        for index, child in enumerate(item.children(self.txn)):
            if index:
                self.put("\n")
            nested = isinstance(child, NativeElement) and (child.tag() or "") in LISTS
            if index == 0:
                self.block(child, (*path, index), lead, depth + 1)
            elif nested:
                self.block(child, (*path, index), "", depth + 1)
            else:
                self.block(child, (*path, index), "  " * (depth + 1), depth + 1)

    def textblock(
        self, node: Any, tag: str, children: list[Any], path: tuple[int, ...], lead: str
    ) -> None:
        txn = self.txn
        if tag == "heading":
            lead += "#" * min(6, max(1, _int(_attr(node, txn, "level"), 1))) + " "
        elif tag == "codeBlock":
            lead += "```" + str(_attr(node, txn, "language") or "") + "\n"
        self.put(lead)
        wrote = False
        for index, child in enumerate(children):
            if isinstance(child, NativeText):
                self.slot(text_of(child, txn) or "", (*path, index))
                wrote = True
            elif isinstance(child, NativeElement) and child.tag() == "hardBreak":
                self.put("\n")
        if not wrote:
            self.slot("", path, holds_text=False)
        if tag == "codeBlock":
            self.put("\n```")


def _attr(node: Any, txn: Any, name: str) -> Any:
    try:
        return node.attribute(txn, name)
    except Exception:  # an attribute of a kind pycrdt cannot give back: as if absent
        return None


def _int(value: Any, default: int) -> int:
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return default

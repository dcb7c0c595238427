"""A rich document (a ``Y.XmlFragment`` as y-prosemirror writes it) as the text the model reads.

The model reads structure as Markdown shows it: ``# `` before a heading, ``- `` or ``1. ``
before a list item (indented when nested), ``> `` before a quote, fences around code, blocks
apart by a blank line. Marks are not written: the view's characters inside a text are that
text's characters, one for one, so a place in the view is a place in one ``Y.XmlText`` (a
*slot*) and back. An empty textblock (a new paragraph) is a slot of no text: a suggestion there
creates its text.

Reading walks pycrdt's native objects in one transaction (its wrappers cost five times as
much). The AI reads a *window*: the top-level blocks around a cursor plus the opening one,
each rendering kept by its index until an update touches that block (``touch``) or blocks come
and go before it (``inserted``/``deleted``; anything else ``reset``s): what an update costs the
reader is what it touched, and a read renders only what changed in its window, whatever the
document's size (a 50,000-paragraph document renders one block per keystroke). Finding a
block costs one walk of the fragment's children in yrs (nanoseconds each); a cold window
fetches its blocks either one by one or as the siblings after the first, whichever walks
less. ``read`` renders the whole document (tests and benchmarks), reusing a top-level block
whose XML serialisation is unchanged; that serialisation does not escape text, so two
different blocks can share one: whoever writes through a slot checks its text first
(``Slot.text``).
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
    makes none, so it costs the same however many texts the document has). A window's view
    holds some top-level blocks only (``indexes``: each one's index in the fragment, ascending);
    its slots' paths are the fragment's."""

    __slots__ = ("_blocks", "_indexes", "_starts", "text")

    def __init__(
        self,
        text: str,
        blocks: list[_Block],
        starts: list[int],
        indexes: list[int] | None = None,
    ) -> None:
        self.text = text
        self._blocks = blocks
        self._starts = starts  # each block's first view index
        self._indexes = list(range(len(blocks))) if indexes is None else indexes

    def slot_at(self, index: int) -> tuple[Slot, int] | None:
        """The slot holding view index ``index`` (its end included: a cursor after its last
        character is in it) and the offset there; None in structure (a ``# ``, a separator)."""
        at = bisect.bisect_right(self._starts, index) - 1
        if at < 0:
            return None
        start, top = self._starts[at], self._indexes[at]
        for offset, text, path, holds_text in self._blocks[at].slots:
            if start + offset <= index <= start + offset + len(text):
                return Slot(start + offset, text, (top, *path), holds_text), index - start - offset
        return None

    def slot_of(self, path: tuple[int, ...]) -> Slot | None:
        at = self._position(path[0]) if path else None
        if at is None:
            return None
        inner = path[1:]
        for offset, text, subpath, holds_text in self._blocks[at].slots:
            if subpath == inner:
                return Slot(self._starts[at] + offset, text, path, holds_text)
        return None

    def block_start(self, top: int) -> int | None:
        """Where top-level block ``top`` starts in the view; None if the view lacks it."""
        at = self._position(top)
        return None if at is None else self._starts[at]

    def block_at(self, index: int) -> int | None:
        """The top-level block holding view index ``index`` (a separator belongs to the block
        before it); None before the first."""
        at = bisect.bisect_right(self._starts, index) - 1
        return None if at < 0 else self._indexes[at]

    def block_text(self, top: int) -> str | None:
        at = self._position(top)
        return None if at is None else self._blocks[at].text

    def _position(self, top: int) -> int | None:
        at = bisect.bisect_left(self._indexes, top)
        return at if at < len(self._indexes) and self._indexes[at] == top else None

    @property
    def slots(self) -> list[Slot]:
        return [
            Slot(start + offset, text, (top, *path), holds_text)
            for top, start, block in zip(self._indexes, self._starts, self._blocks, strict=True)
            for offset, text, path, holds_text in block.slots
        ]


@dataclass(frozen=True, slots=True)
class _Block:
    """One top-level block's rendering: its text and its slots, positions relative to it."""

    text: str
    slots: tuple[tuple[int, str, tuple[int, ...], bool], ...]


ID = tuple[int, int]  # a Yjs item's (client, clock)

# A window holds at most this many blocks before its centre and after it: a document of empty
# paragraphs must not make one read fetch thousands of them.
MAX_BLOCKS_BEFORE = 512
MAX_BLOCKS_AFTER = 64
# Bounds on what the reader remembers: renderings, block IDs it knows the index of, touched
# blocks not yet found, texts before their last change (for "where did typing stop"),
# structural changes kept for places remembered by index. Past any, the oldest go (or all).
MAX_RENDERINGS = 4_096
MAX_KNOWN_IDS = 4_096
MAX_PENDING_TOUCHES = 16
MAX_PREVIOUS = 32
MAX_PREVIOUS_CHARS = 64 * 1024  # a longer block's old text is not kept
MAX_LOG = 1_024
# A walk of the fragment's children costs about this many times less per block than making
# a native object for one (8 ns against 1 us, measured here): a cold window's blocks come as
# the siblings after its first one when that makes fewer objects than separate fetches walk.
_WALK_PER_OBJECT = 125


class RichReader:
    """Reads a fragment into a ``View``: whole (``read``) or a window around a block
    (``window``), reusing renderings. One per document; not thread-safe (the event loop reads
    it). ``rendered`` counts blocks rendered afresh (tests read it: reading must stay
    incremental)."""

    def __init__(self) -> None:
        self._blocks: dict[str, _Block] = {}  # whole reads: by XML serialisation
        self.rendered = 0
        # Windows: renderings by top-level index, valid until the update tracking says not.
        self._near: dict[int, _Block] = {}
        self._ids: dict[ID, int] = {}  # top-level block items whose index is known
        self._touched: set[ID] = set()  # touched blocks whose index is not known yet
        self._previous: dict[ID, str] = {}  # a touched block's text before the touch
        self._length = -1  # the fragment's length the renderings are for
        self._log: list[tuple[int, int]] = []  # (+1 inserted / -1 deleted / 0 reset, index)
        self._logged = 0  # structural changes before the log's first entry (it is bounded)

    # ---- whole -------------------------------------------------------------------------------

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

    # ---- what changed (the owner calls these for every update it follows) ---------------------

    @property
    def tracking(self) -> bool:
        """Whether anything is kept that updates must be followed for."""
        return bool(self._near or self._ids)

    def touch(self, ident: ID) -> None:
        """An update changed something inside top-level block ``ident``."""
        index = self._ids.get(ident)
        if index is not None:
            self._forget(ident, index)
            return
        self._touched.add(ident)
        if len(self._touched) > MAX_PENDING_TOUCHES:
            self.reset()

    def forget(self, index: int) -> None:
        """Read top-level block ``index`` again when next asked for."""
        self._near.pop(index, None)

    def inserted(self, index: int) -> None:
        """A top-level block now at ``index`` was inserted (blocks from there on moved down)."""
        self._near = {(i + 1 if i >= index else i): b for i, b in self._near.items()}
        self._ids = {ident: (i + 1 if i >= index else i) for ident, i in self._ids.items()}
        self._length += 1
        self._record(1, index)

    def deleted(self, index: int) -> None:
        """The top-level block at ``index`` was deleted."""
        self._near = {(i - 1 if i > index else i): b for i, b in self._near.items() if i != index}
        self._ids = {
            ident: (i - 1 if i > index else i) for ident, i in self._ids.items() if i != index
        }
        self._length -= 1
        self._record(-1, index)

    def reset(self) -> None:
        """Something changed that was not followed: every rendering is read again."""
        self._near.clear()
        self._ids.clear()
        self._touched.clear()
        self._length = -1
        self._record(0, 0)

    @property
    def length(self) -> int:
        """The fragment's length the renderings are for (-1: none yet)."""
        return self._length

    # ---- remembered places ------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        """How many structural changes were followed: a place remembered by index is moved
        along those after its epoch (``moved``)."""
        return self._logged + len(self._log)

    def moved(self, index: int, epoch: int) -> int | None:
        """Where the top-level block at ``index`` at ``epoch`` is now; None if it was deleted.
        After a change that was not followed (or one too long ago) the index is kept as it
        was: the caller checks the text it finds there."""
        for sign, at in self._log[max(0, epoch - self._logged) :]:
            if sign > 0 and index >= at:
                index += 1
            elif sign < 0:
                if index == at:
                    return None
                if index > at:
                    index -= 1
        return index

    def learn(self, ident: ID, index: int) -> None:
        """Top-level block ``ident`` is at ``index`` now (as found by ``relative.locate``)."""
        if ident not in self._ids and len(self._ids) >= MAX_KNOWN_IDS:
            self._ids.pop(next(iter(self._ids)))
        self._ids[ident] = index

    def known_index(self, ident: ID) -> int | None:
        return self._ids.get(ident)

    def ident_at(self, index: int) -> ID | None:
        """The known item of the block at ``index``, if any."""
        return next((ident for ident, at in self._ids.items() if at == index), None)

    def previous(self, ident: ID) -> str | None:
        """Block ``ident``'s text as last read before it was last touched."""
        return self._previous.get(ident)

    # ---- windows ----------------------------------------------------------------------------

    def window(
        self,
        fragment: Any,
        txn: Any,
        center: int,
        before: int,
        after: int,
        index_of: Any,
        node: Any = None,
    ) -> View:
        """The blocks around top-level block ``center``: before it until ``before``
        characters (or the first block), after it until ``after`` (or the last), plus the
        opening block; ``index_of(ident)`` finds a touched block's index (None: deleted).
        ``node``: ``center``'s native node, if the caller has it at hand (no walk to it)."""
        count = fragment.len(txn)
        if count != self._length:
            self.reset()  # a change that was not followed: nothing kept can be trusted
            self._length = count
        for ident in list(self._touched):
            index = index_of(ident)
            if index is not None:
                self._forget(ident, index)
                self.learn(ident, index)
        self._touched.clear()
        if count == 0:
            return View("", [], [], [])
        center = min(max(center, 0), count - 1)
        fetch = _Fetcher(self, fragment, txn, count)
        if node is not None and center not in self._near:
            fetch._render(center, node)
        fetch.fill(center, center)
        low, chars = center, 0
        while low > 0 and chars < before and center - low < MAX_BLOCKS_BEFORE:
            low -= 1
            if low not in self._near:
                most = MAX_BLOCKS_BEFORE - (center - low) + 1
                seen = (chars + len(self._near[center].text), center - low)
                wanted = fetch.estimate(before - chars, most, seen)
                fetch.fill(max(0, low - wanted + 1), low)
            chars += len(self._near[low].text) + len(BLOCK_SEPARATOR)
        high, chars = center, -len(BLOCK_SEPARATOR)
        while high < count and chars < after and high - center <= MAX_BLOCKS_AFTER:
            if high not in self._near:
                most = MAX_BLOCKS_AFTER - (high - center) + 1
                seen = (chars + len(self._near[center].text), high - center)
                wanted = fetch.estimate(after - chars, most, seen)
                fetch.fill(high, min(count, high + wanted) - 1)
            chars += len(self._near[high].text) + len(BLOCK_SEPARATOR)
            high += 1
        if low > 0 and 0 not in self._near:
            fetch.fill(0, 0)
        indexes = ([0] if low > 0 else []) + list(range(low, high))
        blocks = [self._near[i] for i in indexes]
        if len(self._near) > MAX_RENDERINGS:  # keep this window's; the rest is read again
            self._near = dict(zip(indexes, blocks, strict=True))
        starts: list[int] = []
        length = 0
        for block in blocks:
            starts.append(length)
            length += len(block.text) + len(BLOCK_SEPARATOR)
        return View(BLOCK_SEPARATOR.join(block.text for block in blocks), blocks, starts, indexes)

    def _forget(self, ident: ID, index: int) -> None:
        old = self._near.pop(index, None)
        if old is None:
            return
        self._previous.pop(ident, None)
        if len(old.text) <= MAX_PREVIOUS_CHARS:
            self._previous[ident] = old.text
            if len(self._previous) > MAX_PREVIOUS:
                self._previous.pop(next(iter(self._previous)))

    def _record(self, sign: int, index: int) -> None:
        self._log.append((sign, index))
        if len(self._log) > MAX_LOG:
            drop = len(self._log) - MAX_LOG // 2
            del self._log[:drop]
            self._logged += drop


class _Fetcher:
    """Renders a window's missing blocks into its reader, fetching their native nodes with
    the fewest walks: one ``get`` each (a walk from the fragment's start), or one ``get`` and
    the ``siblings`` after it (a native object for every block to the fragment's end)."""

    def __init__(self, reader: RichReader, fragment: Any, txn: Any, count: int) -> None:
        self.reader = reader
        self.fragment = fragment
        self.txn = txn
        self.count = count

    def estimate(self, chars: int, most: int, seen: tuple[int, int]) -> int:
        """How many blocks ``chars`` more characters likely take, given ``seen`` (characters,
        blocks) read so far."""
        average = max(16, seen[0] // seen[1]) if seen[0] > 0 and seen[1] else 64
        return max(1, min(most, -(-chars // average) + 1))

    def fill(self, first: int, last: int) -> None:
        """Render every block from ``first`` to ``last`` (inclusive) the reader lacks."""
        near, txn = self.reader._near, self.txn
        missing = [i for i in range(first, last + 1) if i not in near]
        if not missing:
            return
        first = missing[0]
        walked = sum(missing)  # each get walks from the fragment's start
        made = _WALK_PER_OBJECT * (self.count - first)
        if len(missing) > 1 and first + made < walked:
            node = self.fragment.get(txn, first)
            nodes = [node]
            if isinstance(node, (NativeElement, NativeText)):
                nodes += node.siblings(txn)[: missing[-1] - first]
            wanted = set(missing)
            for offset, node in enumerate(nodes):
                if first + offset in wanted:
                    self._render(first + offset, node)
            return
        for index in missing:
            self._render(index, self.fragment.get(txn, index))

    def _render(self, index: int, node: Any) -> None:
        self.reader._near[index] = _render(node, self.txn)
        self.reader.rendered += 1


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

"""Resolving an editor's Yjs relative position to a place in the server's document.

A relative position names the character next to the cursor by its ID. Which text holds that
character comes from the update guard's index (every item's parent); where that text sits
in the tree, and where the character sits in that text, from yrs: ``StickyIndex.get_offset``
gives a child's index exactly, but for a character it adds the UTF-8 length of the items
before the character's own item to the UTF-16 distance inside it (y-crdt/pycrdt#382), which
no single number can undo. So the distance inside the item is found by stepping back one
clock at a time while yrs's offsets fall by exactly one (still the same live item), and the
rest is converted from bytes: exact for any text, and free when the text before the cursor
is ASCII, as most is. Each step costs one ``get_offset`` (a walk of the text's items in yrs),
so the steps are bounded in number (``MAX_STEPS``) and in time (``STEP_BUDGET_SECONDS``, for a
text of very many items, where one walk takes milliseconds): the clock is read before every
step, so stepping holds the loop at most the budget and one step; past either, the anchor is
refused ("send pos with path") rather than walked on while the event loop waits. Finding the
text itself costs a walk per level of the tree (one, for a live character's ancestors).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from pycrdt import Doc, Text, XmlFragment
from pycrdt._pycrdt import XmlElement as NativeElement
from pycrdt._pycrdt import XmlText as NativeText
from pycrdt._pycrdt import decode_sticky_index

from tether.protocol.wire.relative_position import ID, RelativePosition

from ..errors import BadRequest
from .rich_view import text_of

MAX_STEPS = 8_192  # characters of one item before the cursor that are stepped back over
STEP_BUDGET_SECONDS = 0.02
_ANCHOR_GONE = "the anchor's text was deleted or is not in this document; ask again"
_NOT_IN_TEXT = "the anchor is not inside text (between blocks, or beside an inline node)"
_TOO_COSTLY = (
    "the anchor is too costly to resolve (deep inside one long insertion); send 'pos' with 'path'"
)


class ItemIndex(Protocol):
    """What the update guard knows of every item: the parent it hangs under."""

    def knows(self, ident: ID) -> bool: ...

    def parent_of(self, ident: ID) -> str | ID | None: ...


@dataclass(frozen=True, slots=True)
class Place:
    """A cursor in the document: the text it is in, by child indexes from the rich root
    (``()`` with ``root`` the plain text's name for a plain document), and code points into
    that text. ``holds_text`` is False for an empty textblock (the path ends at its element)."""

    root: str
    path: tuple[int, ...]
    offset: int
    holds_text: bool = True
    # The top-level block's item, when the position names one in the rich tree: how the block
    # is found again after blocks above it come and go (``ai.text.rich_view.RichReader``).
    block: ID | None = field(default=None, compare=False)
    # The text it is in, as the tree holds it now (what a kept rendering must still say).
    text: str | None = field(default=None, compare=False, repr=False)
    block_hash: int | None = field(default=None, compare=False)  # ``BlockHint``'s hash
    # The block's native node: read it at once (before the document next changes), or never.
    block_node: Any = field(default=None, compare=False, repr=False)


# Where a top-level block was last seen: its index and its native node's hash (pycrdt hashes
# a node by its item's ID), or None. A hint that proves itself: a block found at that index
# with that hash is the block, without walking the fragment to it.
BlockHint = Callable[[ID], tuple[int, int] | None]


def locate(
    doc: Doc,
    position: RelativePosition,
    items: ItemIndex,
    rich_root: str,
    plain_root: str,
    seen: BlockHint | None = None,
) -> Place:
    """Where ``position`` is in ``doc`` now; ``BadRequest`` (safe to show) when it is not in a
    text of either root. ``seen`` may say where its top-level block was last seen."""
    with doc.transaction() as txn:
        native = txn._txn
        assert native is not None
        return _Locator(doc, native, items, rich_root, plain_root, seen).place(position)


def child_index(txn: Any, ident: ID) -> int | None:
    """The index among its parent's children of the live child item ``ident`` (a block of the
    rich tree), or None if it was deleted; ``txn`` is pycrdt's native transaction. Two walks of
    the parent's children in yrs (a few nanoseconds each)."""
    index = _offset(txn, ident, 0)
    if index is None or _offset(txn, ident, -1) != index + 1:
        return None
    return index


def child_offset(txn: Any, ident: ID) -> int | None:
    """How many live children precede child item ``ident``, live or deleted (for a deleted
    one: the index it had, less the deleted ones before it)."""
    return _offset(txn, ident, 0)


class _Locator:
    def __init__(
        self,
        doc: Doc,
        txn: Any,
        items: ItemIndex,
        rich_root: str,
        plain_root: str,
        seen: BlockHint | None = None,
    ) -> None:
        self.doc = doc
        self.txn = txn
        self.items = items
        self.rich_root = rich_root
        self.plain_root = plain_root
        self.seen = seen
        self.block: ID | None = None  # the top-level block the position is in, once found
        self.block_hash: int | None = None  # its native node's hash
        self.block_node: Any = None
        self.text: str | None = None  # the text the place is in, once read
        # The whole resolution's budget: finding the text's walks count against it too.
        self.deadline = time.perf_counter() + STEP_BUDGET_SECONDS
        self._offsets: dict[tuple[ID, int], int | None] = {}  # each walk made once

    def place(self, position: RelativePosition) -> Place:
        self.block = self.text = self.block_hash = self.block_node = None
        place = self._place(position)
        if self.block is None or place.root != self.rich_root:
            return place
        text = self.text if place.holds_text else ""
        return replace(
            place,
            block=self.block,
            block_hash=self.block_hash,
            block_node=self.block_node,
            text=text,
        )

    def _place(self, position: RelativePosition) -> Place:
        if position.tname is not None:
            if position.tname != self.plain_root or self.plain_root not in self.doc.keys():
                raise BadRequest(_NOT_IN_TEXT)
            text = str(self.doc.get(self.plain_root, type=Text))
            return Place(self.plain_root, (), 0 if position.assoc < 0 else len(text))
        if position.type_id is not None:
            root, path, node = self._node(position.type_id)
            return self._at_node_edge(root, path, node, position.assoc < 0)
        assert position.item is not None
        item = position.item
        parent = self._parent(item)
        if isinstance(parent, str):
            if parent == self.plain_root:
                text = str(self.doc.get(self.plain_root, type=Text))
                index = self._char_index(text, item, parent, position.assoc)
                return Place(parent, (), index)
            raise BadRequest(_NOT_IN_TEXT)  # a top-level block: between blocks
        # A live item's ancestors are live (yrs deletes a type's content with it): each is then
        # found with one walk of its parent's children, not two.
        here = self._offset(item, 0)
        alive = here is not None and self._offset(item, -1) == here + 1
        root, path, node = self._node(parent, alive=alive)
        if isinstance(node, NativeText):
            text = text_of(node, self.txn)
            if text is None:
                raise BadRequest("the anchor's text holds embedded objects")
            self.text = text
            return Place(root, path, self._char_index(text, item, parent, position.assoc))
        # The item is a child node (an inline node or a block): the cursor is beside it.
        index = self._index_in_parent(item)
        return self._beside_child(root, path, node, index, after=position.assoc < 0)

    # ---- where a type is ------------------------------------------------------------------

    def _parent(self, ident: ID) -> str | ID:
        if not self.items.knows(ident):
            raise BadRequest(_ANCHOR_GONE)
        parent = self.items.parent_of(ident)
        if parent is None:
            raise BadRequest(_ANCHOR_GONE)  # garbage-collected
        return parent

    def _node(self, type_id: ID, *, alive: bool = False) -> tuple[str, tuple[int, ...], Any]:
        """The native node ``type_id`` creates, found by its index in each ancestor (``alive``:
        known to be live, as every ancestor then is)."""
        chain = [type_id]
        parent = self._parent(type_id)
        while not isinstance(parent, str):
            if len(chain) > 256:
                raise BadRequest(_NOT_IN_TEXT)
            chain.append(parent)
            parent = self._parent(parent)
        if parent != self.rich_root or self.rich_root not in self.doc.keys():
            raise BadRequest(_NOT_IN_TEXT)
        fragment: Any = self.doc.get(self.rich_root, type=XmlFragment).integrated
        top, block = self._top(fragment, chain[-1], alive)
        inner = tuple(self._index_in_parent(ident, alive=alive) for ident in reversed(chain[:-1]))
        node = block
        for index in inner:
            if isinstance(node, NativeText) or index >= node.len(self.txn):
                raise BadRequest(_ANCHOR_GONE)
            node = node.get(self.txn, index)
        self.block, self.block_hash, self.block_node = chain[-1], hash(block), block
        return parent, (top, *inner), node

    def _top(self, fragment: Any, ident: ID, alive: bool) -> tuple[int, Any]:
        """The index and native node of top-level block ``ident``: where it was last seen if
        the node there is it, else found by walking the fragment."""
        hint = self.seen(ident) if self.seen is not None else None
        count = fragment.len(self.txn)
        if hint is not None and 0 <= hint[0] < count:
            node = fragment.get(self.txn, hint[0])
            if hash(node) == hint[1]:
                return hint[0], node
        index = self._index_in_parent(ident, alive=alive)
        if index >= count:
            raise BadRequest(_ANCHOR_GONE)
        return index, fragment.get(self.txn, index)

    def _index_in_parent(self, ident: ID, *, alive: bool = False) -> int:
        """A child's index among its parent's children (each child counts one in yrs), or
        ``BadRequest`` if it was deleted (checked unless known ``alive``)."""
        index = self._offset(ident, 0)
        if index is None or (not alive and self._offset(ident, -1) != index + 1):
            raise BadRequest(_ANCHOR_GONE)
        return index

    def _at_node_edge(self, root: str, path: tuple[int, ...], node: Any, start: bool) -> Place:
        """A position naming a type: its start (assoc < 0) or its end."""
        if isinstance(node, NativeText):
            text = text_of(node, self.txn)
            if text is None:
                raise BadRequest("the anchor's text holds embedded objects")
            self.text = text
            return Place(root, path, 0 if start else len(text))
        if not isinstance(node, NativeElement):
            raise BadRequest(_NOT_IN_TEXT)
        count = node.len(self.txn)
        if count == 0:
            return Place(root, path, 0, holds_text=False)  # an empty paragraph
        return self._beside_child(root, path, node, 0 if start else count - 1, after=not start)

    def _beside_child(
        self, root: str, path: tuple[int, ...], parent: Any, index: int, *, after: bool
    ) -> Place:
        """Before (or after) child ``index`` of ``parent``: the end of the text before it or
        the start of the text after it."""
        if not isinstance(parent, NativeElement):
            raise BadRequest(_NOT_IN_TEXT)
        txn = self.txn
        count = parent.len(txn)
        left, right = (index, index + 1) if after else (index - 1, index)
        for at, at_end in ((left, True), (right, False)):
            if 0 <= at < count:
                child = parent.get(txn, at)
                if isinstance(child, NativeText):
                    text = text_of(child, txn)
                    if text is not None:
                        self.text = text
                        return Place(root, (*path, at), len(text) if at_end else 0)
        raise BadRequest(_NOT_IN_TEXT)

    # ---- where a character is -------------------------------------------------------------

    def _offset(self, ident: ID, assoc: int) -> int | None:
        """yrs's offset of ``ident``: a walk of its parent's items, made once per locate."""
        key = (ident, assoc)
        if key not in self._offsets:
            self._offsets[key] = _offset(self.txn, ident, assoc)
        return self._offsets[key]

    def _char_index(self, text: str, item: ID, parent: str | ID, assoc: int) -> int:
        """The cursor's code-point index in ``text``, the text holding ``item``."""
        here = self._offset(item, 0)
        if here is None:
            raise BadRequest(_ANCHOR_GONE)
        encoded = text.encode("utf-8")
        if self._offset(item, -1) != here + 1:  # deleted: yrs gives where it was, in bytes
            return _index_at_byte(text, encoded, here)
        inside = False  # the clock is the second UTF-16 unit of an emoji
        if encoded[:here].isascii():  # bytes, UTF-16 units and code points agree before it
            index = here
        else:
            index, inside = self._walked_index(text, encoded, item, parent, here)
        if index >= len(text):
            raise BadRequest(_ANCHOR_GONE)
        if assoc >= 0:
            return index
        # assoc < 0: the cursor is one UTF-16 unit after the item, rounded down as JS rounds a
        # cursor inside an emoji.
        return index + 1 if inside or ord(text[index]) <= 0xFFFF else index

    def _walked_index(
        self, text: str, encoded: bytes, item: ID, parent: str | ID, here: int
    ) -> tuple[int, bool]:
        client, clock = item
        steps = 0
        while steps < clock:
            # Every step walks the text's items twice (milliseconds, in a text of very many):
            # the clock is read before each.
            if steps >= MAX_STEPS or time.perf_counter() > self.deadline:
                raise BadRequest(_TOO_COSTLY)
            previous = (client, clock - steps - 1)
            if self.items.parent_of(previous) != parent:
                break
            offset = self._offset(previous, 0)
            if offset != here - steps - 1:
                break
            if time.perf_counter() > self.deadline:
                raise BadRequest(_TOO_COSTLY)
            if self._offset(previous, -1) != offset + 1:
                break
            steps += 1
        # ``steps`` UTF-16 units of the item lie before the character; the items before it
        # take ``here - steps`` bytes.
        index = _index_at_byte(text, encoded, here - steps)
        units = 0
        while units < steps and index < len(text):
            units += 2 if ord(text[index]) > 0xFFFF else 1
            index += 1
        if units > steps:  # the item's clock points between a character's two UTF-16 units
            return index - 1, True  # (a JS cursor inside an emoji): before that character
        if units < steps:
            raise BadRequest(_ANCHOR_GONE)
        return index, False


def _offset(txn: Any, ident: ID, assoc: int) -> int | None:
    raw = RelativePosition(item=ident, assoc=assoc).encode()
    try:
        offset = decode_sticky_index(raw).get_offset(txn)
    except BaseException as exc:  # a yrs panic is a BaseException: contain it
        if not isinstance(exc, Exception) and type(exc).__name__ != "PanicException":
            raise
        return None
    return offset if isinstance(offset, int) else None


def _index_at_byte(text: str, encoded: bytes, byte: int) -> int:
    if byte < 0 or byte > len(encoded):
        raise BadRequest(_ANCHOR_GONE)
    try:
        return len(encoded[:byte].decode("utf-8"))
    except UnicodeDecodeError:
        raise BadRequest(_ANCHOR_GONE) from None

"""What the AI reads of one document: the plain ``Y.Text`` as it is, or a window of the rich tree
(``ai.text.rich_view``) around a place, whichever kind the document is (the same rule as
REST's: the rich tree when its fragment holds anything).

Everything downstream (context, cache keys, anchors, prefetch, type-ahead) works on one string,
a ``Reading``: the whole plain text, or the rich view's blocks around a cursor plus the opening
block, so a request on a 50,000-paragraph document reads a few thousand characters. A place
that must be found again after concurrent edits (a suggestion's anchor, an editor's last
cursor) is a ``TextAnchor`` that names its top-level block (``spot``): its index counts from
that block's start, and the block is found again by its item (when known) or by its index
moved along the blocks that came and went (``RichReader.moved``). Only where a cursor comes in
(a relative position) and where text goes out (accept) does the rich kind need its slots.

Every update is followed in O(its size) on the sync path (``changed``): its items' parents (the
update guard's index) name the top-level blocks it touched, inserted or deleted, and only
those are read again. An update too big to follow that way (or one whose parents are unknown)
makes the next read fetch its window afresh: never more than a window.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from pycrdt import Doc, Text, XmlFragment

from tether.protocol.updates.update_scan import MalformedUpdate, scan_update

from ..text.anchors import SPAN, TYPED_LIMIT, TextAnchor, Where
from ..text.relative import ItemIndex, child_index, child_offset
from ..text.rich_view import ID, RichReader, View
from .records import TEXT_NAME

# What a window holds after its centre block by default: what an anchor compares (its ``after``)
# and what typing at it may insert before that (``TextAnchor.typed``).
AFTER_CHARS = TYPED_LIMIT + SPAN
# Before its centre block, by default: what a prompt may use (``ContextBuilder.context_chars``).
BEFORE_CHARS = 5_600
# An update is followed item by item up to these sizes; a bigger one (a paste of a chapter, a
# document's first load) makes the next read fetch its window afresh instead.
MAX_FOLLOWED_BYTES = 64 * 1024
MAX_FOLLOWED_ITEMS = 512
MAX_FOLLOWED_DELETES = 4_096  # deleted units, each one parent lookup
MAX_STRUCTURAL = 16  # top-level blocks inserted or deleted by one update
# Delete ranges already followed. An update made from a state vector (``Doc.get_update``: the
# server's own edits) carries every delete the document ever had, not only its own.
MAX_SEEN_DELETES = 16_384
MAX_DEPTH = 256
MAX_KNOWN_BLOCKS = 4_096
_UNKNOWN = ("unknown", (0, 0))


@dataclass(frozen=True, slots=True)
class Reading:
    text: str
    view: View | None = None  # None: a plain document

    @property
    def rich(self) -> bool:
        return self.view is not None


class DocumentText:
    def __init__(self, rich_root: str, *, before: int = BEFORE_CHARS) -> None:
        self.rich_root = rich_root
        self.before = before  # characters a window holds before its centre block
        self.reader = RichReader()
        self._last: Reading | None = None  # the whole document (``read``)
        self._doc: Doc | None = None  # the document the reader's renderings are of
        self._touched_by: dict[int, ID] = {}  # peer id → the block its last update touched
        self._rich: bool | None = None  # whether the document is rich, until it changes
        self._seen_deletes: set[tuple[int, int, int]] = set()
        self._hashes: dict[ID, int] = {}  # top-level block → its native node's hash

    # ---- following updates ------------------------------------------------------------------

    def mark_dirty(self) -> None:
        """The document changed in a way not followed: everything is read afresh."""
        self._last = None
        self._rich = None
        self.reader.reset()

    def changed(
        self, doc: Doc, update: bytes, items: ItemIndex | None, peer_id: int | None = None
    ) -> None:
        """``update`` was applied to ``doc`` (and admitted to ``items``, the update guard):
        forget what it changed. O(update); nothing is read."""
        self._last = None
        self._rich = None
        if doc is not self._doc or not self.reader.tracking:
            return
        if items is None or len(update) > MAX_FOLLOWED_BYTES:
            self.reader.reset()
            return
        try:
            followed = self._follow(doc, update, items, peer_id)
        except MalformedUpdate:
            followed = False
        if not followed:
            self.reader.reset()

    def forget_block(self, top: int) -> None:
        """Top-level block ``top``'s rendering disagrees with the tree: read it again."""
        self.reader.forget(top)

    def touched_by(self, peer_id: int) -> ID | None:
        """The top-level block the editor's last followed update touched."""
        return self._touched_by.get(peer_id)

    def forget_peer(self, peer_id: int) -> None:
        self._touched_by.pop(peer_id, None)

    def _follow(self, doc: Doc, update: bytes, items: ItemIndex, peer_id: int | None) -> bool:
        scan = scan_update(update)
        seen = self._seen_deletes
        deletes = [entry for entry in scan.deletes if entry not in seen]
        if len(seen) + len(deletes) > MAX_SEEN_DELETES:
            seen.clear()
        seen.update(deletes)
        if len(scan.items) > MAX_FOLLOWED_ITEMS:
            return False
        if sum(length for _client, _clock, length in deletes) > MAX_FOLLOWED_DELETES:
            return False
        tops: dict[ID, tuple[str, ID] | None] = {}  # a type's top-level block, per update
        inserted: list[ID] = []
        deleted: list[ID] = []
        touched: list[ID] = []
        for item in scan.items:
            found = self._block_of(items, (item.client, item.clock), tops)
            if found is None:
                continue
            kind, block = found
            if kind == "self" and (not item.makes_type or item.parent_sub is not None):
                return False  # not a child block (text or an attribute of the fragment itself)
            if kind == "unknown":
                return False
            (inserted if kind == "self" else touched).append(block)
        for client, clock, length in deletes:
            for unit in range(clock, clock + length):
                found = self._block_of(items, (client, unit), tops)
                if found is None:
                    continue
                kind, block = found
                if kind == "unknown":
                    return False
                (deleted if kind == "self" else touched).append(block)
        if inserted or deleted:
            gone = set(inserted) & set(deleted)  # made and deleted in one update: no change
            inserted = [ident for ident in inserted if ident not in gone]
            deleted = [ident for ident in deleted if ident not in gone]
            if (inserted and deleted) or len(inserted) + len(deleted) > MAX_STRUCTURAL:
                return False
            if not self._moved(doc, inserted, deleted):
                return False
        for block in touched:
            if block not in deleted:  # a deleted block's content goes with it
                self.reader.touch(block)
        last = (inserted or touched or [None])[-1]
        if peer_id is not None and last is not None:
            self._touched_by[peer_id] = last
        return True

    def _moved(self, doc: Doc, inserted: list[ID], deleted: list[ID]) -> bool:
        """Move the renderings along top-level blocks inserted (or deleted) by one update.
        False when the fragment's length says otherwise (a delete range that was not this
        update's own, say): then nothing is moved and everything is read afresh."""
        fragment = doc.get(self.rich_root, type=XmlFragment)
        with doc.transaction() as txn:
            native = txn._txn
            expected = self.reader.length + len(inserted) - len(deleted)
            if fragment.integrated.len(native) != expected:
                return False
            if inserted:  # live: made by this update and not deleted by it
                places = [child_offset(native, ident) for ident in inserted]
                if None in places:
                    return False
                for index in sorted(p for p in places if p is not None):
                    self.reader.inserted(index)  # in the final order: each counts those before
                return True
            offsets = [child_offset(native, ident) for ident in deleted]
            if None in offsets:
                return False
            # Each deleted block's offset counts the live blocks before it now; before the
            # update the deleted ones before it counted too.
            old = [
                offset + n for n, offset in enumerate(sorted(o for o in offsets if o is not None))
            ]
            for index in reversed(old):
                self.reader.deleted(index)
            return True

    def _block_of(
        self, items: ItemIndex, ident: ID, tops: dict[ID, tuple[str, ID] | None]
    ) -> tuple[str, ID] | None:
        """Where item ``ident`` is: ("self", it) if it is a top-level block itself, ("in",
        block) inside one, None outside the rich tree, ``_UNKNOWN`` if the index cannot say."""
        if not items.knows(ident):
            return _UNKNOWN
        parent = items.parent_of(ident)
        if parent is None:
            return _UNKNOWN
        if isinstance(parent, str):
            return ("self", ident) if parent == self.rich_root else None
        return self._top(items, parent, tops)

    def _top(
        self, items: ItemIndex, node: ID, tops: dict[ID, tuple[str, ID] | None]
    ) -> tuple[str, ID] | None:
        """The top-level block holding type ``node`` (see ``_block_of``); every type climbed
        through is remembered in ``tops``, so an update's items cost their distinct types."""
        climbed: list[ID] = []
        found: tuple[str, ID] | None = _UNKNOWN
        for _ in range(MAX_DEPTH):
            if node in tops:
                found = tops[node]
                break
            climbed.append(node)
            up = items.parent_of(node) if items.knows(node) else None
            if up is None:
                break
            if isinstance(up, str):
                found = ("in", node) if up == self.rich_root else None
                break
            node = up
        for ident in climbed:
            tops[ident] = found
        return found

    # ---- reading ------------------------------------------------------------------------------

    def read(self, doc: Doc, *, fresh: bool = False) -> Reading:
        """The whole document now (tests and benchmarks: the engine reads ``around`` places).
        ``fresh`` renders every rich block again."""
        if self._last is not None and self._doc is doc and not fresh:
            return self._last
        self._adopt(doc)
        fragment = self._fragment(doc)
        reading = None
        if fragment is not None:
            with doc.transaction() as txn:
                view = self.reader.read(fragment.integrated, txn._txn, fresh=fresh)
                reading = Reading(view.text, view)
        if reading is None:
            reading = Reading(_plain(doc))
        self._last = reading
        return reading

    def around(
        self,
        doc: Doc,
        where: Where | None,
        *,
        before: int | None = None,
        after: int = AFTER_CHARS,
    ) -> Reading:
        """What the AI reads near ``where``: the plain text whole, or the rich blocks around
        it (``before`` characters before it, by default what a prompt may use, and ``after``
        after it) plus the opening block. ``where`` None on a rich document: its end."""
        return self._window(doc, where, before, after)[0]

    def _window(
        self,
        doc: Doc,
        where: Where | None,
        before: int | None,
        after: int,
        node: Any = None,
    ) -> tuple[Reading, int]:
        """``around``'s reading, and the index of the block it is around (0: plain)."""
        self._adopt(doc)
        fragment = self._fragment(doc)
        if fragment is None:
            if self._last is None or self._last.rich:
                self._last = Reading(_plain(doc))  # kept until the next change
            return self._last, 0
        with doc.transaction() as txn:
            native = txn._txn
            center = self._index(native, where) if where is not None else 1 << 62
            view = self.reader.window(
                fragment.integrated,
                native,
                center,
                self.before if before is None else before,
                after,
                # One walk: a touched block deleted since would only make a block be read
                # again (a followed delete already moved the renderings along).
                lambda ident: child_offset(native, ident),
                node,
            )
        return Reading(view.text, view), center

    def at(
        self,
        doc: Doc,
        top: int,
        ident: ID | None = None,
        digest: int | None = None,
        *,
        node: Any = None,
        before: int | None = None,
    ) -> Reading:
        """The window around top-level block ``top`` (a cursor just found there: ``ident`` is
        the block's item, ``digest`` its node's hash and ``node`` the node, when known; the
        node only if no change came since it was found)."""
        self._adopt(doc)
        if ident is not None:
            self.reader.learn(ident, top)
            if digest is not None:
                if len(self._hashes) >= MAX_KNOWN_BLOCKS:
                    self._hashes.clear()
                self._hashes[ident] = digest
        where = Where(top, self.reader.epoch, ident)
        return self._window(doc, where, before, AFTER_CHARS, node)[0]

    def seen(self, ident: ID) -> tuple[int, int] | None:
        """Where top-level block ``ident`` was last seen and its node's hash, if known: a hint
        for ``relative.locate``, which checks it."""
        index = self.reader.known_index(ident)
        digest = self._hashes.get(ident)
        return None if index is None or digest is None else (index, digest)

    def find(
        self,
        doc: Doc,
        anchor: TextAnchor,
        *,
        before: int | None = None,
        after: int = AFTER_CHARS,
    ) -> tuple[Reading, TextAnchor]:
        """The reading around ``anchor`` (one ``spot`` made) and the anchor in it: its index
        where its block is now, for ``TextAnchor.resolve`` to find its text from."""
        reading, top = self._window(doc, anchor.block, before, after)
        if anchor.block is None or reading.view is None:
            return reading, replace(anchor, block=None)
        start = reading.view.block_start(top)
        if start is None:  # the block is gone: its text is looked for from the window's start
            start = 0
        return reading, replace(anchor, index=start + anchor.index, block=None)

    def spot(self, reading: Reading, anchor: TextAnchor) -> TextAnchor:
        """``anchor`` (an index in ``reading``) as a place to find again later (``find``)."""
        if reading.view is None:
            return anchor
        top = reading.view.block_at(anchor.index)
        start = reading.view.block_start(top) if top is not None else None
        if top is None or start is None:
            return anchor  # an empty view: the document's start
        where = Where(top, self.reader.epoch, self.reader.ident_at(top))
        return replace(anchor, index=anchor.index - start, block=where)

    def previous_block_text(self, ident: ID) -> str | None:
        return self.reader.previous(ident)

    def index_of(self, doc: Doc, ident: ID) -> int | None:
        """Where top-level block ``ident`` is now; None if it was deleted."""
        known = self.reader.known_index(ident)
        if known is not None:
            return known
        with doc.transaction() as txn:
            return child_index(txn._txn, ident)

    def _index(self, txn: Any, where: Where) -> int:
        if where.ident is not None:
            known = self.reader.known_index(where.ident)
            if known is not None:
                return known
            found = child_index(txn, where.ident)
            if found is not None:
                self.reader.learn(where.ident, found)
                return found
        moved = self.reader.moved(where.index, where.epoch)
        return where.index if moved is None else moved

    def _adopt(self, doc: Doc) -> None:
        if doc is not self._doc:  # a new document (a rebuild from storage): nothing carries over
            self._doc = doc
            self._last = None
            self._rich = None
            self.reader.reset()
            self._touched_by.clear()

    def is_rich(self, doc: Doc) -> bool:
        return self._fragment(doc) is not None

    def _fragment(self, doc: Doc) -> XmlFragment | None:
        """The rich tree, if the document is rich (its fragment holds anything)."""
        if doc is not self._doc:
            self._adopt(doc)
        if self._rich is False or self.rich_root not in doc.keys():  # ``get`` would create it
            return None
        fragment = doc.get(self.rich_root, type=XmlFragment)
        if self._rich is None:
            with doc.transaction() as txn:
                self._rich = fragment.integrated.len(txn._txn) > 0
        return fragment if self._rich else None


def _plain(doc: Doc) -> str:
    return str(doc.get(TEXT_NAME, type=Text)) if TEXT_NAME in doc.keys() else ""

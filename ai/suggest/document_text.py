"""What the AI reads of one document: the plain ``Y.Text`` as it is, or the rich tree as a view
(``ai.text.rich_view``), whichever kind the document is (the same rule as REST's: the rich tree
when its fragment holds anything).

Everything downstream (context, cache keys, anchors, prefetch, type-ahead) works on this one
string; only where a cursor comes in (a relative position) and where text goes out (accept) does
the rich kind need its slots. A reading is kept until the document changes (``mark_dirty`` on
every update, O(1)) or is replaced by a rebuild.
"""

from __future__ import annotations

from dataclasses import dataclass

from pycrdt import Doc, Text, XmlFragment

from ..text.rich_view import RichReader, View
from .records import TEXT_NAME


@dataclass(frozen=True, slots=True)
class Reading:
    text: str
    view: View | None = None  # None: a plain document

    @property
    def rich(self) -> bool:
        return self.view is not None


class DocumentText:
    def __init__(self, rich_root: str) -> None:
        self.rich_root = rich_root
        self.reader = RichReader()
        self._last: Reading | None = None
        self._doc: Doc | None = None

    def mark_dirty(self) -> None:
        self._last = None

    def read(self, doc: Doc, *, fresh: bool = False) -> Reading:
        """The document's text now. ``fresh`` renders every rich block again (a writer whose
        slot's text disagrees with the tree asks for it: see ``ai.text.rich_view``)."""
        if self._last is not None and self._doc is doc and not fresh:
            return self._last
        roots = doc.keys()  # ``get`` would create the roots a document does not have
        reading = None
        if self.rich_root in roots:
            fragment = doc.get(self.rich_root, type=XmlFragment)
            with doc.transaction() as txn:
                native, native_txn = fragment.integrated, txn._txn
                if native.len(native_txn) > 0:
                    view = self.reader.read(native, native_txn, fresh=fresh)
                    reading = Reading(view.text, view)
        if reading is None:
            plain = str(doc.get(TEXT_NAME, type=Text)) if TEXT_NAME in roots else ""
            reading = Reading(plain)
        self._last, self._doc = reading, doc
        return reading

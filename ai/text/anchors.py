"""Where a suggestion belongs, found again after concurrent edits, by the text around it.

pycrdt 0.14's sticky indexes mix UTF-8 and UTF-16 offsets on non-ASCII text and panic on some
inputs (y-crdt/pycrdt#382), so the engine anchors by content: the text just before and after
the cursor at request time. Resolving finds that text again nearest to where it was. Pure
functions over strings; Python code-point indexes throughout.

On a rich document the AI reads a window of blocks around a place, so an anchor kept for later
names its top-level block too (``Where``) and counts its index from that block's start; whoever
reads around it again (``ai.suggest.document_text.DocumentText.find``) rebases the index into
the new window before resolving.
"""

from __future__ import annotations

from dataclasses import dataclass

SPAN = 48
SHORT_SPAN = 12
TYPED_LIMIT = 400  # characters typed at an anchor that still count as typed there


@dataclass(frozen=True, slots=True)
class Where:
    """A top-level block of a rich document: its index at ``epoch`` (the reader's count of
    blocks inserted and deleted), and its item when known, which finds it exactly."""

    index: int
    epoch: int
    ident: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class TextAnchor:
    index: int  # in the text resolved against; from the start of ``block``, when it is set
    before: str
    after: str
    block: Where | None = None

    @classmethod
    def at(cls, text: str, index: int, span: int = SPAN) -> TextAnchor:
        return cls(index, text[max(0, index - span) : index], text[index : index + span])

    def resolve(self, text: str) -> int | None:
        """The anchor's index in ``text`` now, or None if the text before it is gone. When
        the text before it occurs more than once (a repeated sentence), the occurrence still
        followed by the text that was after it wins over a merely nearer one: edits elsewhere
        shift indexes, so nearness alone can pick the wrong copy."""
        if not self.before:
            return 0
        for probe in (self.before, self.before[-SHORT_SPAN:]):
            ends = _ends(text, probe)
            if ends:
                return min(ends, key=lambda end: (self._fit(text, end), abs(end - self.index)))
        return None

    def _fit(self, text: str, end: int) -> int:
        """How well an occurrence ending at ``end`` fits: 0 when what was after the anchor
        follows at once, 1 when it follows after some text (typed at the anchor since), 2 when
        it does not follow."""
        if not self.after:
            rest = len(text) - end
            return 0 if rest == 0 else 1 if rest <= TYPED_LIMIT else 2
        if text.startswith(self.after, end):
            return 0
        return 1 if text.find(self.after, end, end + TYPED_LIMIT + len(self.after)) >= 0 else 2

    def intact(self, text: str, span: int | None = None) -> bool:
        """Both sides unchanged: nothing was typed or deleted right at the anchor. With
        ``span``, only that many characters either side count: what an in-flight completion
        is judged by, since in a short document a collaborator typing at its top is within
        the whole span of a cursor at its end, and concurrent inserts there may interleave
        with the text that was (a CRDT orders them by client)."""
        index = self.resolve(text)
        if index is None:
            return False
        before = self.before if span is None else self.before[-span:]
        if text[max(0, index - len(before)) : index] != before:
            return False
        if not self.after:  # it was at the end: anything after it now was typed there
            return index == len(text)
        return text.startswith(self.after if span is None else self.after[:span], index)

    def typed(self, text: str, limit: int = TYPED_LIMIT, span: int | None = None) -> str | None:
        """What was inserted right at the anchor since: the text now between its before and
        after parts ("" when nothing was). None when either side changed otherwise; with
        ``span``, only the ``span`` characters before it count (as in ``intact``)."""
        index = self.resolve(text)
        before = self.before if span is None else self.before[-span:]
        if index is None or text[max(0, index - len(before)) : index] != before:
            return None
        if not self.after:
            inserted = text[index:]
            return inserted if len(inserted) <= limit else None
        found = text.find(self.after, index, index + limit + len(self.after))
        return None if found < 0 else text[index:found]


def _ends(text: str, needle: str, most: int = 256) -> list[int]:
    """End indexes of the (first ``most``) occurrences of ``needle`` in ``text``."""
    ends: list[int] = []
    start = text.find(needle)
    while start >= 0 and len(ends) < most:
        ends.append(start + len(needle))
        start = text.find(needle, start + 1)
    return ends

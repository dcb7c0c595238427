"""Where a suggestion belongs, found again after concurrent edits, by the text around it.

pycrdt 0.14's sticky indexes mix UTF-8 and UTF-16 offsets on non-ASCII text and panic on some
inputs (y-crdt/pycrdt#382), so the engine anchors by content: the text just before and after
the cursor at request time. Resolving finds that text again nearest to where it was. Pure
functions over strings; Python code-point indexes throughout.
"""

from __future__ import annotations

from dataclasses import dataclass

SPAN = 48
SHORT_SPAN = 12


@dataclass(frozen=True, slots=True)
class TextAnchor:
    index: int
    before: str
    after: str

    @classmethod
    def at(cls, text: str, index: int, span: int = SPAN) -> TextAnchor:
        return cls(index, text[max(0, index - span) : index], text[index : index + span])

    def resolve(self, text: str) -> int | None:
        """The anchor's index in ``text`` now, or None if the text before it is gone."""
        if not self.before:
            return 0
        for probe in (self.before, self.before[-SHORT_SPAN:]):
            found = _nearest_end(text, probe, self.index)
            if found is not None:
                return found
        return None

    def intact(self, text: str) -> bool:
        """Both sides unchanged: nothing was typed or deleted right at the anchor."""
        index = self.resolve(text)
        if index is None:
            return False
        if text[max(0, index - len(self.before)) : index] != self.before:
            return False
        if not self.after:  # it was at the end: anything after it now was typed there
            return index == len(text)
        return text[index : index + len(self.after)] == self.after

    def typed(self, text: str, limit: int = 400) -> str | None:
        """What was inserted right at the anchor since: the text now between its before and
        after parts ("" when nothing was). None when either side changed otherwise."""
        index = self.resolve(text)
        if index is None or text[max(0, index - len(self.before)) : index] != self.before:
            return None
        if not self.after:
            inserted = text[index:]
            return inserted if len(inserted) <= limit else None
        found = text.find(self.after, index, index + limit + len(self.after))
        return None if found < 0 else text[index:found]


def _nearest_end(text: str, needle: str, near: int) -> int | None:
    """End index of the occurrence of ``needle`` whose end is nearest to ``near``."""
    best: int | None = None
    start = text.find(needle)
    while start >= 0:
        end = start + len(needle)
        if best is None or abs(end - near) < abs(best - near):
            best = end
        elif end > near:
            break  # occurrences only move further away from here on
        start = text.find(needle, start + 1)
    return best

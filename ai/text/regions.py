"""A document split into regions (paragraphs), recomputed lazily and only where text changed.

Per keystroke the sync path only calls ``mark_dirty`` (O(1)); pycrdt's delta events cost grows
with the document, so we never read them. When a suggestion needs context, ``refresh`` splits
the text it is given (the context builder's cut of the document near the cursor: a few
thousand characters, whatever the document's size) and reuses every region whose text is
unchanged (looked up by content), so token counts, and the cache's embeddings, are computed
only for regions that changed. A
region's tokens are counted when first asked for: the context builder asks only for the
paragraphs near the cursor that fit its budget and the opening one, so an exact tokenizer
(``ai.model.token_counter``) reads those, never the whole document (1 MB of text would hold
the event loop about half a second). Knows nothing of models or sockets: token counting is a
function handed in.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

SEPARATOR = "\n\n"


@dataclass(slots=True)
class _Count:
    """A paragraph's token count, computed on first use and shared by every ``Region`` of the
    same text (each refresh makes new ones)."""

    count: Callable[[str], int]
    value: int = -1


@dataclass(slots=True)
class Region:
    text: str
    start: int  # Python index of its first character in the document
    key: bytes
    counted: _Count
    born: float = 0.0  # when this exact text first appeared (monotonic seconds)
    extra: dict[str, object] = field(default_factory=dict)  # e.g. an embedding

    @property
    def end(self) -> int:
        return self.start + len(self.text)

    @property
    def tokens(self) -> int:
        counted = self.counted
        if counted.value < 0:
            counted.value = counted.count(self.text)
        return counted.value


class RegionIndex:
    def __init__(self, count_tokens: Callable[[str], int], max_cached: int = 4096) -> None:
        self._count_tokens = count_tokens
        self._max_cached = max_cached
        self._by_key: dict[bytes, Region] = {}
        self.regions: list[Region] = []
        self.dirty = True
        self.recomputed = 0  # regions new to the index (their counts, if asked, are computed)
        self._text = ""

    def mark_dirty(self) -> None:
        self.dirty = True

    def refresh(self, text: str) -> list[Region]:
        if not self.dirty and text == self._text:
            return self.regions
        regions: list[Region] = []
        fresh: dict[bytes, Region] = {}
        start = 0
        for part in split_paragraphs(text):
            key = hashlib.blake2b(part.encode("utf-8"), digest_size=16).digest()
            known = self._by_key.get(key) or fresh.get(key)
            if known is None:
                self.recomputed += 1
                counted = _Count(self._count_tokens)
                known = Region(part, start, key, counted, time.monotonic())
            region = Region(part, start, key, known.counted, known.born, known.extra)
            fresh[key] = region
            regions.append(region)
            start += len(part)
        if len(fresh) < self._max_cached:
            # keep recently seen paragraphs too: undo/redo brings them back
            for key, region in list(self._by_key.items())[: self._max_cached - len(fresh)]:
                fresh.setdefault(key, region)
        self._by_key = fresh
        self.regions = regions
        self._text = text
        self.dirty = False
        return regions

    def region_at(self, index: int) -> int:
        """Position in ``regions`` of the region holding Python index ``index``."""
        for position, region in enumerate(self.regions):
            if index < region.end:
                return position
        return max(len(self.regions) - 1, 0)


def split_paragraphs(text: str) -> list[str]:
    """Paragraphs with their trailing separator kept, so the parts join back to ``text``."""
    if not text:
        return []
    parts = []
    start = 0
    while True:
        cut = text.find(SEPARATOR, start)
        if cut < 0:
            parts.append(text[start:])
            return parts
        end = cut + len(SEPARATOR)
        while end < len(text) and text[end] == "\n":
            end += 1
        parts.append(text[start:end])
        start = end
        if start >= len(text):
            return parts

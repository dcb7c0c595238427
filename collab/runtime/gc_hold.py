"""Holds off the cyclic GC's full collections while a big input is read and applied.

Why: a full (oldest-generation) collection walks every tracked object, holding the GIL, so the
event loop waits it out even when the allocating work runs in a thread. Reading a 7 MB update
allocates a few objects per struct; the heap grows by a quarter again and again, and each growth
triggers a full pass: up to 0.3 s each, which slicing the work cannot shorten. Young collections
(bounded by their thresholds) go on; the full pass runs once the input is done, when its objects
are gone, and walks only what lives on. Holds nest (one per input under way); loop thread only.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

# Generation 2's threshold while held: never reached (its count grows by one per gen-1 pass).
_NEVER = 1 << 30

_holders = 0
_threshold2 = 0


@contextmanager
def full_collections_held() -> Iterator[None]:
    global _holders, _threshold2
    if _holders == 0:
        young0, young1, _threshold2 = gc.get_threshold()
        gc.set_threshold(young0, young1, _NEVER)
    _holders += 1
    try:
        yield
    finally:
        _holders -= 1
        if _holders == 0:
            young0, young1, _ = gc.get_threshold()
            gc.set_threshold(young0, young1, _threshold2)

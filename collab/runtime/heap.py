"""Gives the memory a worker thread freed back to the system (glibc's ``malloc_trim``); a no-op
where there is no glibc (musl, macOS). Knows nothing else.

Why: glibc keeps what a thread frees in that thread's arena, resident. A render of a
50,000-paragraph document in the renders pool left the server ~80 MB bigger for good (rendered
on the loop it had left 16 MB); trimmed after the render, 14-19 MB (tether bench attacks
render-*). ``malloc_trim`` walks the heap, a few ms per hundred MB, and ctypes lets the GIL go
meanwhile: call it in the worker, after big work only.
"""

from __future__ import annotations

import ctypes
import ctypes.util


def _load_libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "malloc_trim") else None


_LIBC = _load_libc()


def give_back_freed() -> None:
    """Return the freed pages of every arena to the system (in the calling thread)."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)

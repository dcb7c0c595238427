"""The OS name of the calling thread, so ``top -H``, ``perf`` and ``tether bench sync``'s
per-thread CPU can tell the server's threads apart (Python 3.11 names its threads only for
itself). Linux only, 15 bytes, and silent where it cannot: a name is a convenience, never a
reason to fail."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

_PR_SET_NAME = 15


def name_os_thread(name: str) -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_NAME, name.encode("ascii", "replace")[:15], 0, 0, 0)
    except (OSError, AttributeError):
        return

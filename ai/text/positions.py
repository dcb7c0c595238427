"""Converting positions between the three ways of counting text.

JS (and our wire) counts UTF-16 code units, Python counts code points, pycrdt counts UTF-8 bytes.
Pure functions; every editor-supplied position goes through here at the boundary.
"""

from __future__ import annotations

from ..errors import BadRequest


def utf16_to_index(text: str, units: int) -> int:
    """Python index of a UTF-16 offset; an offset inside a surrogate pair rounds down."""
    if units < 0:
        raise BadRequest("position is negative")
    # A character is one or two units: the position lies within the first ``units`` of them,
    # so only those are read (not a whole document per request).
    prefix = text[:units]
    if prefix.isascii():
        if len(prefix) < units:
            raise BadRequest(f"position {units} is past the end of the document")
        return units
    encoded = prefix.encode("utf-16-le")
    if units * 2 > len(encoded):
        raise BadRequest(f"position {units} is past the end of the document")
    head = encoded[: units * 2]
    if head and 0xD8 <= head[-1] <= 0xDB:  # ends on a high surrogate: step back before it
        head = head[:-2]
    return len(head.decode("utf-16-le"))


def index_to_utf16(text: str, index: int) -> int:
    return len(text[:index].encode("utf-16-le")) // 2


def index_to_utf8(text: str, index: int) -> int:
    """pycrdt's offset for a Python index."""
    return len(text[:index].encode("utf-8"))


def utf16_length(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def common_prefix(a: str, b: str) -> int:
    """The length of the longest common prefix, by bisection over slice comparisons (C speed):
    where two versions of a text start to differ."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low

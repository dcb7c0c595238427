"""Byte sizes as operators write them (``16MiB``, ``64 KiB``, ``512B``) and as help shows them.

Knows nothing of settings or flags: ``collab.config`` says which settings are sizes.
"""

from __future__ import annotations

import re
from decimal import Decimal

UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}

# Binary units only: "MB" means 10**6 to some tools and 2**20 to others (Docker, Java), so a
# value written with it is refused with both readings rather than silently taken as one.
_BINARY = {unit.lower(): scale for unit, scale in UNITS.items()}
_AMBIGUOUS = {"k": 1, "kb": 1, "m": 2, "mb": 2, "g": 3, "gb": 3, "t": 4, "tb": 4}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*", re.IGNORECASE)


def parse_size(text: str, plain: str = "bytes") -> int:
    """Bytes in ``text``: a number of bytes, or one with a binary unit (B, KiB, MiB, GiB, TiB;
    any case, a space allowed before it). ``plain`` names what a bare number counts where the
    caller reads those itself, for the error message. Raises ValueError whose message follows
    the quoted text: ``f"{text!r} {exc}"`` reads as one sentence."""
    match = _SIZE.fullmatch(text)
    if match is None or match[2].lower() not in ("", *_BINARY, *_AMBIGUOUS):
        raise ValueError(f"is not a size (use e.g. 16MiB, 64KiB or {plain})")
    number, unit = Decimal(match[1]), match[2].lower()
    if unit in _AMBIGUOUS:
        raise ValueError(_ambiguous(number, _AMBIGUOUS[unit]))
    size = number * _BINARY.get(unit, 1)
    if size != size.to_integral_value():
        raise ValueError("is not a whole number of bytes")
    return int(size)


def format_size(size: int) -> str:
    """``size`` in the largest binary unit that holds it exactly: 16MiB, 512KiB, 1000B."""
    for unit, scale in reversed(UNITS.items()):
        if size and size % scale == 0:
            return f"{size // scale}{unit}"
    return f"{size}B"


def _ambiguous(number: Decimal, power: int) -> str:
    prefix = "KMGT"[power - 1]
    binary = _plain(number * 1024**power)
    decimal = _plain(number * 1000**power)
    return (
        f"is ambiguous (binary or SI?): write {_plain(number)}{prefix}iB for {binary} bytes,"
        f" or {decimal}B"
    )


def _plain(number: Decimal) -> str:
    return format(number.normalize(), "f")

"""Numbers a client sends in a query, a header or a JSON body, read strictly: ASCII digits
within what storage can hold, or refused (400 with a reason, never a 500)."""

from __future__ import annotations

from typing import TypeGuard

MAX_ID = 2**63 - 1  # SQLite's INTEGER and PostgreSQL's BIGINT


def parse_counter(raw: str) -> int | None:
    """A version id, a sequence number, an ack: ASCII digits only (``str.isdigit`` also takes
    "²" and other digits ``int`` refuses), no sign, at most 18 of them."""
    if not (0 < len(raw) <= 18 and raw.isascii() and raw.isdigit()):
        return None
    return int(raw)


def valid_id(value: object) -> TypeGuard[int]:
    """A JSON number that can name a stored row: an int (not a bool) from 0 to ``MAX_ID``."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_ID

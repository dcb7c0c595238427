"""The attributes the renderers read from a tree, each checked for its type and range: a
document holds whatever its editors wrote (a list's ``start`` may be NaN, a huge number, a
string or a list), and one bad value must render as the default, never fail the export.

``level`` of a heading (1-6), ``start`` of an ordered list (0-999,999,999, what CommonMark
can write), ``checked`` of a task item (True only), ``language`` of a code block (text without
whitespace or controls), an image's ``alt`` (text). Links' ``href`` and images' ``src`` are
checked by ``collab.content.urls``.
"""

from __future__ import annotations

import re
from typing import Any

MAX_START = 999_999_999  # an ordered list's number has at most 9 digits in CommonMark
_LANGUAGE_UNSAFE = re.compile(r"[\s\x00-\x1f\x7f]")


def heading_level(value: Any) -> int:
    """A heading level, 1 to 6 (1 for anything else: NaN, infinities, strings, lists)."""
    return int(value) if _number(value) and 1 <= value <= 6 else 1


def list_start(value: Any) -> int:
    """An ordered list's first number, 0 to 999,999,999 (1 for anything else)."""
    return int(value) if _number(value) and 0 <= value <= MAX_START else 1


def task_checked(value: Any) -> bool:
    return value is True


def code_language(value: Any) -> str | None:
    """A code block's language if it is one word of text, else None."""
    if not isinstance(value, str) or not value or _LANGUAGE_UNSAFE.search(value):
        return None
    return value


def alt_text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _number(value: Any) -> bool:
    """A real number (not a bool); NaN and the infinities fail every range check after."""
    return isinstance(value, int | float) and not isinstance(value, bool)

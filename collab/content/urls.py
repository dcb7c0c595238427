"""Which link and image addresses a rendered document may keep, and how an address is written as
a Markdown destination; shared by the HTML and Markdown exports so both keep the same ones.

Kept: http(s), mailto and addresses without a scheme (relative). The scheme is read as a
browser reads it: ASCII controls and whitespace anywhere in it do not count, so
``java\\nscript:`` is ``javascript:`` and dropped.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

SAFE_SCHEMES = frozenset({"http", "https", "mailto"})
_IGNORED = re.compile(r"[\x00-\x20\x7f]+")
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")
# What a destination cannot hold as it is: ASCII controls and whitespace (a line break ends the
# link and what follows is read as Markdown, raw HTML included), other controls and whitespace,
# and <, >, ` (an autolink, raw HTML, a code span), all percent-encoded ...
_ENCODED = re.compile(r"[\x00-\x20\x7f-\x9f<>`\s]")
# ... and what Markdown would read in a destination: backslash escapes, parentheses (which end
# it unless balanced) and entities, each kept literal by a backslash.
_ESCAPED = re.compile(r"[\\()]|&(?=#?[A-Za-z0-9]+;)")


def safe_url(url: Any) -> str | None:
    """``url`` if a document may link to it, else None."""
    if not isinstance(url, str):
        return None
    scheme = _SCHEME.match(_IGNORED.sub("", url))
    return url if scheme is None or scheme.group(1).lower() in SAFE_SCHEMES else None


def destination(url: Any) -> str | None:
    """``url`` written as a Markdown link destination that reads back as ``url`` and cannot end
    early, or None when it may not be linked (see ``safe_url``)."""
    safe = safe_url(url)
    if safe is None:
        return None
    encoded = _ENCODED.sub(lambda match: quote(match.group(), safe=""), safe)
    return _ESCAPED.sub(lambda match: "\\" + match.group(), encoded)

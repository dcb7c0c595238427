"""What a presence (awareness) state may carry into other editors' pages: safe ``user`` fields.

Editors render a peer's ``user.color`` into a ``style`` attribute (y-codemirror.next puts it in
the remote caret's and selection's inline style) and ``user.name`` into the page. A colour like
``red;background:url(http://x)`` is CSS injection: it can cover the page and make every viewer's
browser fetch a URL. So a colour must be a hex colour (``#rgb`` or ``#rrggbb``; ``colorLight``,
which y-codemirror derives as colour + alpha, may also be ``#rrggbbaa``), and a name a string of
bounded length. Offending fields are dropped one by one (editors fall back to their defaults);
the rest of the state (cursor positions, the editor's own fields) passes unchanged, and so does
a ``user`` that is not an object (it has no fields to read).

Pure: JSON text in, JSON text out. Knows nothing of rooms or sockets.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from .sync_payloads import AwarenessEntry, decode_awareness, encode_awareness

MAX_NAME_CHARS = 64  # a display name; longer ones are cut (a name is not a document)

_COLOR = re.compile(r"#(?:[0-9a-fA-F]{3}|[0-9a-fA-F]{6})")
_COLOR_LIGHT = re.compile(r"#(?:[0-9a-fA-F]{3}|[0-9a-fA-F]{6}|[0-9a-fA-F]{8})")
_COLOR_FIELDS = {"color": _COLOR, "colorLight": _COLOR_LIGHT}


def sanitize_state(state: str, max_name_chars: int = MAX_NAME_CHARS) -> str | None:
    """``state`` (one awareness entry's JSON) with its ``user`` made safe: the same string when
    nothing needed changing, a re-encoded one when something did, None to refuse the entry
    (not a JSON object, or not JSON at all). ``"null"`` (the editor left) passes."""
    if state == "null":
        return state
    try:
        parsed = json.loads(state, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        return None
    if not isinstance(parsed, dict):
        return None
    user = parsed.get("user")
    if not isinstance(user, dict):
        return state  # no fields to read: editors use their defaults for a string or a list
    changed = False
    for name, pattern in _COLOR_FIELDS.items():
        if name in user and not (isinstance(user[name], str) and pattern.fullmatch(user[name])):
            del user[name]  # the editor falls back to its default colour
            changed = True
    if "name" in user:
        display = user["name"]
        if not isinstance(display, str):
            del user["name"]
            changed = True
        elif len(display) > max_name_chars:
            user["name"] = display[:max_name_chars]
            changed = True
    return _encode(parsed) if changed else state


@dataclass(frozen=True, slots=True)
class CheckedAwareness:
    payload: bytes  # the input itself when nothing changed
    changed: int  # entries whose user fields were fixed
    refused: int  # entries dropped


def sanitize_awareness(payload: bytes, max_name_chars: int = MAX_NAME_CHARS) -> CheckedAwareness:
    """An awareness update (the varUint-counted entries) with every entry's state made safe.
    Raises ``DecodeError`` as ``decode_awareness`` does."""
    entries = decode_awareness(payload)
    kept: list[AwarenessEntry] = []
    changed = refused = 0
    for entry in entries:
        state = sanitize_state(entry.state, max_name_chars)
        if state is None:
            refused += 1
            continue
        if state is not entry.state:
            changed += 1
            entry = AwarenessEntry(entry.client_id, entry.clock, state)
        kept.append(entry)
    if not changed and not refused:
        return CheckedAwareness(payload, 0, 0)
    return CheckedAwareness(encode_awareness(kept), changed, refused)


def _encode(value: object) -> str:
    # ensure_ascii: a lone surrogate that json.loads let through stays an escape, valid UTF-8.
    return json.dumps(value, separators=(",", ":"))


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")

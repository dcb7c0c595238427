"""Reads a Yjs v1 update's structure without applying it: which items it creates, where each
one hangs, and which ranges it deletes.

Sans-IO and pure. The server scans every update before pycrdt sees it, because yrs trusts
structure it should not: a chain of nested types tens of thousands deep overflows its stack when
deleted (SIGSEGV, the whole process), a value nested deep in a ``ContentAny`` recurses in its
decoder, and an update whose dependencies are missing is parked as *pending* where a snapshot
cannot see it. A scan refuses what no real Yjs client produces (unknown content kinds, the legacy
JSON content that yrs misreads, nesting in values beyond ``MAX_VALUE_DEPTH``) and hands the rest
to ``collab.updates.guard`` as plain data.

Format (lib0 v1, as ``Y.encodeStateAsUpdate`` writes it): clients, each with its structs from
a start clock; each struct a GC, a Skip or an Item (info byte, optional origin, right origin or
parent, then content); then the delete set.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..wire.lib0 import MAX_SAFE_INTEGER, DecodeError, Decoder

# Value nesting (JSON-like ``Any``) deeper than this is refused: editors' data is shallow, and
# each level costs the decoders (ours and yrs's) a stack frame.
MAX_VALUE_DEPTH = 64

# Content kinds (the low five bits of an item's info byte).
DELETED, JSON, BINARY, STRING, EMBED, FORMAT, TYPE, ANY, DOC = 1, 2, 3, 4, 5, 6, 7, 8, 9
_GC, _SKIP = 0, 10
_XML_ELEMENT, _XML_HOOK = 3, 5
_MAX_TYPE_REF = 6

ID = tuple[int, int]  # (client, clock)


class MalformedUpdate(ValueError):
    """The bytes are not an update a Yjs client writes; ``str(exc)`` is safe to show."""


# ScannedItem and ScannedUpdate are read-only by convention but not frozen: one of each is built
# for every update on the sync path, and a frozen dataclass's __init__ (object.__setattr__ per
# field) costs about three times a plain one's.
@dataclass(slots=True)
class ScannedItem:
    client: int
    clock: int
    length: int
    origin: ID | None
    right_origin: ID | None
    parent_root: str | None  # a root type's name, when the parent is written as one
    parent_id: ID | None  # the nested type's item, when the parent is written as one
    parent_sub: str | None
    content: int
    makes_type: bool
    # Offsets (from ``clock``) of the first unit of each character that takes two UTF-16 units:
    # a boundary right after one splits a character (see collab.updates.guard).
    pairs: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ScannedRange:
    """A GC or Skip struct: clocks it covers without an item."""

    client: int
    clock: int
    length: int
    skip: bool


@dataclass(slots=True)
class ScannedUpdate:
    items: list[ScannedItem]
    ranges: list[ScannedRange]
    deletes: list[tuple[int, int, int]]  # (client, clock, length)
    starts: dict[int, int]  # client → the first clock this update writes
    ends: dict[int, int]  # client → one past the last clock this update writes


def scan_update(update: bytes) -> ScannedUpdate:
    simple = _scan_text_items(update)
    if simple is not None:
        return simple
    try:
        return _scan(Decoder(update))
    except DecodeError as exc:
        raise MalformedUpdate(f"malformed update: {exc}") from exc


def _uint(data: bytes, pos: int) -> tuple[int, int]:
    """A varUint at ``pos`` and the position after it; (-1, pos) where ``_scan`` would fail."""
    if pos < len(data):
        byte = data[pos]
        if byte < 0x80:
            return byte, pos + 1
    value = 0
    shift = 0
    at = pos
    end = min(pos + 8, len(data))
    while at < end:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (value, at) if value <= MAX_SAFE_INTEGER else (-1, pos)
        shift += 7
    return -1, pos


def _scan_text_items(data: bytes) -> ScannedUpdate | None:
    """``_scan``'s result for the usual update, whose structs are all text items (what typing
    sends), read without a decoder object; None for anything else or anything ``_scan`` would
    refuse, which ``_scan`` then reads (and refuses) itself. Same result, a few times faster."""
    items: list[ScannedItem] = []
    starts: dict[int, int] = {}
    ends: dict[int, int] = {}
    size = len(data)
    clients, pos = _uint(data, 0)
    if clients < 0:
        return None
    for _ in range(clients):
        count, pos = _uint(data, pos)
        client, pos = _uint(data, pos)
        clock, pos = _uint(data, pos)
        if count < 0 or client < 0 or clock < 0 or client in starts:
            return None
        starts[client] = clock
        for _ in range(count):
            if pos >= size:
                return None
            info = data[pos]
            pos += 1
            if info & 0x1F != STRING:
                return None
            origin = right_origin = parent_id = None
            parent_root = parent_sub = None
            if info & 0x80:
                origin_client, pos = _uint(data, pos)
                origin_clock, pos = _uint(data, pos)
                if origin_client < 0 or origin_clock < 0:
                    return None
                origin = (origin_client, origin_clock)
            if info & 0x40:
                right_client, pos = _uint(data, pos)
                right_clock, pos = _uint(data, pos)
                if right_client < 0 or right_clock < 0:
                    return None
                right_origin = (right_client, right_clock)
            if not info & 0xC0:
                tag, pos = _uint(data, pos)
                if tag == 1:
                    parent_root, pos = _str(data, pos)
                    if parent_root is None:
                        return None
                elif tag < 0:
                    return None
                else:
                    parent_client, pos = _uint(data, pos)
                    parent_clock, pos = _uint(data, pos)
                    if parent_client < 0 or parent_clock < 0:
                        return None
                    parent_id = (parent_client, parent_clock)
                if info & 0x20:
                    parent_sub, pos = _str(data, pos)
                    if parent_sub is None:
                        return None
            text, pos = _str(data, pos)
            if not text:  # None (unreadable) or empty (a struct of length 0)
                return None
            length, pairs = _string(text)
            items.append(
                ScannedItem(
                    client,
                    clock,
                    length,
                    origin,
                    right_origin,
                    parent_root,
                    parent_id,
                    parent_sub,
                    STRING,
                    False,
                    pairs,
                )
            )
            clock += length
        ends[client] = clock
    deletes: list[tuple[int, int, int]] = []
    delete_clients, pos = _uint(data, pos)
    if delete_clients < 0:
        return None
    for _ in range(delete_clients):
        client, pos = _uint(data, pos)
        ranges, pos = _uint(data, pos)
        if client < 0 or ranges < 0:
            return None
        for _ in range(ranges):
            start, pos = _uint(data, pos)
            length, pos = _uint(data, pos)
            if start < 0 or length < 0:
                return None
            deletes.append((client, start, length))
    if pos != size:
        return None
    return ScannedUpdate(items, [], deletes, starts, ends)


def _str(data: bytes, pos: int) -> tuple[str | None, int]:
    length, pos = _uint(data, pos)
    end = pos + length
    if length < 0 or end > len(data):
        return None, pos
    try:
        return data[pos:end].decode("utf-8"), end
    except UnicodeDecodeError:
        return None, pos


def _scan(d: Decoder) -> ScannedUpdate:
    items: list[ScannedItem] = []
    ranges: list[ScannedRange] = []
    starts: dict[int, int] = {}
    ends: dict[int, int] = {}
    for _ in range(d.read_var_uint()):
        count = d.read_var_uint()
        client = d.read_var_uint()
        clock = d.read_var_uint()
        if client in starts:
            raise MalformedUpdate("malformed update: a client's structs appear twice")
        starts[client] = clock
        for _ in range(count):
            info = _byte(d)
            kind = info & 0x1F
            if kind in (_GC, _SKIP):
                length = d.read_var_uint()
                ranges.append(ScannedRange(client, clock, length, kind == _SKIP))
            else:
                item = _item(d, info, client, clock)
                items.append(item)
                length = item.length
            if length < 1:
                raise MalformedUpdate("malformed update: a struct of length 0")
            clock += length
        ends[client] = clock
    deletes: list[tuple[int, int, int]] = []
    for _ in range(d.read_var_uint()):
        client = d.read_var_uint()
        for _ in range(d.read_var_uint()):
            start, length = d.read_var_uint(), d.read_var_uint()
            deletes.append((client, start, length))
    if not d.at_end():
        raise MalformedUpdate("malformed update: trailing bytes")
    return ScannedUpdate(items, ranges, deletes, starts, ends)


ItemHeader = tuple[ID | None, ID | None, str | None, ID | None, str | None]


def read_item_header(d: Decoder, info: int) -> ItemHeader:
    """An item's header after its info byte: (origin, right origin, parent root, parent id,
    parent sub). Yjs writes the parent only when neither origin is written."""
    origin = (d.read_var_uint(), d.read_var_uint()) if info & 0x80 else None
    right_origin = (d.read_var_uint(), d.read_var_uint()) if info & 0x40 else None
    parent_root: str | None = None
    parent_id: ID | None = None
    parent_sub: str | None = None
    if not info & 0xC0:
        if d.read_var_uint() == 1:
            parent_root = d.read_var_string()
        else:
            parent_id = (d.read_var_uint(), d.read_var_uint())
        if info & 0x20:
            parent_sub = d.read_var_string()
    return origin, right_origin, parent_root, parent_id, parent_sub


def _item(d: Decoder, info: int, client: int, clock: int) -> ScannedItem:
    origin, right_origin, parent_root, parent_id, parent_sub = read_item_header(d, info)
    kind = info & 0x1F
    pairs: tuple[int, ...] = ()
    if kind == STRING:
        length, pairs = _string(d.read_var_string())
    else:
        length = _content(d, kind)
    return ScannedItem(
        client,
        clock,
        length,
        origin,
        right_origin,
        parent_root,
        parent_id,
        parent_sub,
        kind,
        kind == TYPE,
        pairs,
    )


def skip_content(d: Decoder, kind: int) -> int:
    """Reads past an item's content of ``kind``; its length in clock units."""
    return _content(d, kind)


def skip_values(d: Decoder, count: int) -> None:
    """Reads past ``count`` values of a ``ContentAny`` (after its count)."""
    for _ in range(count):
        _any(d, 0)


def _string(text: str) -> tuple[int, tuple[int, ...]]:
    """A string's length in clock units (UTF-16 code units, as in JavaScript) and where its
    two-unit characters start."""
    if text.isascii():
        return len(text), ()
    units = len(text.encode("utf-16-le")) // 2
    if units == len(text):
        return units, ()
    pairs = []
    offset = 0
    for char in text:
        if ord(char) > 0xFFFF:
            pairs.append(offset)
            offset += 2
        else:
            offset += 1
    return units, tuple(pairs)


def _content(d: Decoder, kind: int) -> int:
    """Skips the content and returns its length in clock units."""
    if kind == STRING:
        return _string(d.read_var_string())[0]
    if kind == DELETED:
        return d.read_var_uint()
    if kind == JSON:
        # Yjs writes a count and that many strings; yrs reads one string more (its own encoding
        # does not read back), so what follows would be one struct to us and another to yrs.
        # No Yjs since v13 writes JSON content.
        raise MalformedUpdate("update refused: JSON content (a legacy kind yrs misreads)")
    if kind == BINARY:
        d.read_var_uint8_array()
        return 1
    if kind == EMBED:
        d.read_var_string()
        return 1
    if kind == FORMAT:
        d.read_var_string()
        d.read_var_string()
        return 1
    if kind == TYPE:
        ref = d.read_var_uint()
        if ref > _MAX_TYPE_REF:
            raise MalformedUpdate(f"malformed update: unknown shared type {ref}")
        if ref in (_XML_ELEMENT, _XML_HOOK):
            d.read_var_string()
        return 1
    if kind == ANY:
        count = d.read_var_uint()
        skip_values(d, count)
        return count
    if kind == DOC:
        d.read_var_string()
        _any(d, 0)
        return 1
    raise MalformedUpdate(f"malformed update: unknown content kind {kind}")


def _any(d: Decoder, depth: int) -> None:
    if depth > MAX_VALUE_DEPTH:
        raise MalformedUpdate(f"update refused: a value nested deeper than {MAX_VALUE_DEPTH}")
    tag = _byte(d)
    if tag in (127, 126, 121, 120):  # undefined, null, false, true
        return
    if tag == 125:
        d.read_var_int()
    elif tag == 124:
        d.read_bytes(4)
    elif tag in (123, 122):
        d.read_bytes(8)
    elif tag == 119:
        d.read_var_string()
    elif tag == 118:
        for _ in range(d.read_var_uint()):
            d.read_var_string()
            _any(d, depth + 1)
    elif tag == 117:
        for _ in range(d.read_var_uint()):
            _any(d, depth + 1)
    elif tag == 116:
        d.read_var_uint8_array()
    else:
        raise MalformedUpdate(f"malformed update: unknown value tag {tag}")


def _byte(d: Decoder) -> int:
    return d.read_bytes(1)[0]

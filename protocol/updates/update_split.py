"""Splits one Yjs v1 update into several smaller updates that, applied in any order, make the
same document: how a big initial sync (or a big forwarded update) fits under a message cap.

Sans-IO and pure. Each piece is a complete v1 update (clients' struct runs, then a delete set):
structs are cut at struct boundaries, and a string or deleted run longer than the budget is cut
inside, the way Yjs itself encodes an item from an offset (the tail's left origin is the head's
last character, its right origin and parent are the item's). Pieces carry each client's structs
in clock order from the start of the update, so a client that has applied some of them has a
state vector that skips them: a reconnecting client is asked only for what it still lacks. The
delete set comes last, in its own pieces, once every struct it may refer to was sent.

Contents that cannot be cut (a binary blob, an embed, a ``ContentAny``/``ContentJSON`` run)
and are larger than the budget are sent alone, as one piece over the budget.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from ..protocol_errors import DecodeError
from ..wire.lib0 import Decoder, write_var_uint, write_var_uint8_array
from .update_scan import STRING, read_item_header, skip_content

_GC, _SKIP = 0, 10
_ORIGIN = 0x80
# Room for a piece's own framing (client count, struct count, client id, clock, delete set).
_PIECE_OVERHEAD = 64
EMPTY_DELETE_SET = b"\x00"


@dataclass(slots=True)
class _Run:
    """Consecutive structs of one client inside the piece being built."""

    client: int
    clock: int
    count: int = 0
    parts: list[bytes] = field(default_factory=list)


@dataclass(slots=True)
class _Piece:
    runs: list[_Run] = field(default_factory=list)
    size: int = 0

    def add(self, client: int, clock: int, struct: bytes) -> None:
        if not self.runs or self.runs[-1].client != client:
            self.runs.append(_Run(client, clock))
            self.size += 24  # the run's header: count, client, clock
        run = self.runs[-1]
        run.count += 1
        run.parts.append(struct)
        self.size += len(struct)

    def encode(self) -> bytes:
        out = [write_var_uint(len(self.runs))]
        for run in self.runs:
            out += [
                write_var_uint(run.count),
                write_var_uint(run.client),
                write_var_uint(run.clock),
            ]
            out += run.parts
        out.append(EMPTY_DELETE_SET)
        return b"".join(out)


def split_update(update: bytes, max_bytes: int) -> Iterator[bytes]:
    """Valid updates of at most ``max_bytes`` each (see the module docstring for the one
    exception) whose union is ``update``. An update that fits is yielded unchanged; otherwise
    the last piece is the delete set (``b"\\x00\\x00"`` when there is none)."""
    if len(update) <= max_bytes:
        yield update
        return
    budget = max(1, max_bytes - _PIECE_OVERHEAD)
    d = Decoder(update)
    piece = _Piece()
    for _ in range(d.read_var_uint()):
        count = d.read_var_uint()
        client = d.read_var_uint()
        clock = d.read_var_uint()
        for _ in range(count):
            struct, length = _read_struct(d, update, client, clock)
            while True:
                item = struct if isinstance(struct, _StringItem) else None
                size = item.size if item is not None else len(struct)
                if piece.size + size <= budget:
                    piece.add(client, clock, item.encode() if item is not None else struct)
                    break
                room = budget - piece.size - 24
                head = item.cut(room) if item is not None and room > 0 else None
                if head is not None:
                    head_bytes, head_length, struct = head
                    piece.add(client, clock, head_bytes)
                    clock += head_length
                    length -= head_length
                if piece.runs:
                    yield piece.encode()
                    piece = _Piece()
                elif head is None:  # indivisible and larger than a whole piece: alone
                    piece.add(client, clock, item.encode() if item is not None else struct)
                    yield piece.encode()
                    piece = _Piece()
                    break
            clock += length
    if piece.runs:
        yield piece.encode()
    yield from _split_delete_set(d, budget)


def _split_delete_set(d: Decoder, budget: int) -> Iterator[bytes]:
    """The delete set as struct-less updates of at most ``budget`` bytes; at least one."""
    entries: list[bytes] = []  # one encoded (client, ranges) entry each
    size = 0
    for _ in range(d.read_var_uint()):
        client = d.read_var_uint()
        ranges: list[bytes] = []
        for _ in range(d.read_var_uint()):
            encoded = write_var_uint(d.read_var_uint()) + write_var_uint(d.read_var_uint())
            if size + len(encoded) + 24 > budget and (ranges or entries):
                if ranges:
                    entries.append(_delete_entry(client, ranges))
                yield _delete_set_update(entries)
                entries, ranges, size = [], [], 0
            ranges.append(encoded)
            size += len(encoded)
        if ranges:
            entries.append(_delete_entry(client, ranges))
            size += 24
    yield _delete_set_update(entries)


def _delete_entry(client: int, ranges: list[bytes]) -> bytes:
    return write_var_uint(client) + write_var_uint(len(ranges)) + b"".join(ranges)


def _delete_set_update(entries: list[bytes]) -> bytes:
    return b"\x00" + write_var_uint(len(entries)) + b"".join(entries)


class _StringItem:
    """A string item that can be cut: its header as written and its text as a byte range of the
    update (no copy: cutting a 20 MB string into pieces must not copy the rest each time), plus
    what a tail needs to continue it (client, first clock, right origin, info byte)."""

    __slots__ = ("client", "clock", "end", "header", "info", "right_origin", "source", "start")

    def __init__(
        self,
        header: bytes,
        source: bytes,
        span: tuple[int, int],
        info: int,
        client: int,
        clock: int,
        right_origin: tuple[int, int] | None,
    ) -> None:
        self.header, self.source, (self.start, self.end) = header, source, span
        self.info, self.client, self.clock, self.right_origin = info, client, clock, right_origin

    @property
    def size(self) -> int:
        length = self.end - self.start
        return len(self.header) + len(write_var_uint(length)) + length

    def encode(self) -> bytes:
        text = self.source[self.start : self.end]
        return self.header + write_var_uint8_array(text)

    def cut(self, room: int) -> tuple[bytes, int, _StringItem] | None:
        """(head struct, head clocks, the rest as an item), the head at most ``room`` bytes;
        None if not even one character fits."""
        source, start = self.source, self.start
        end = min(self.end - 1, start + room - len(self.header) - 8)
        while end > start and source[end] & 0xC0 == 0x80:  # never inside a UTF-8 sequence
            end -= 1
        if end <= start:
            return None
        head_text = source[start:end]
        head_length = utf16_length(head_text)
        last = self.clock + head_length - 1
        tail_header = bytes([self.info | _ORIGIN]) + write_var_uint(self.client)
        tail_header += write_var_uint(last)
        if self.right_origin is not None:
            tail_header += write_var_uint(self.right_origin[0])
            tail_header += write_var_uint(self.right_origin[1])
        # With a left origin Yjs reads no parent; the parent-sub bit stays as the item had it.
        tail = _StringItem(
            tail_header,
            source,
            (end, self.end),
            self.info,
            self.client,
            last + 1,
            self.right_origin,
        )
        return self.header + write_var_uint8_array(head_text), head_length, tail


def _read_struct(
    d: Decoder, update: bytes, client: int, clock: int
) -> tuple[bytes | _StringItem, int]:
    """One struct and its length in clocks: a string item, which can be cut, or the bytes of a
    struct that is never cut (a GC, Skip or deleted run is a few bytes however long it is)."""
    start = d.pos
    info = d.read_bytes(1)[0]
    kind = info & 0x1F
    if kind in (_GC, _SKIP):
        length = d.read_var_uint()
        return update[start : d.pos], length
    right_origin = read_item_header(d, info)[1]
    header = update[start : d.pos]
    if kind == STRING:
        size = d.read_var_uint()
        text_start = d.pos
        d.skip(size)
        span = (text_start, d.pos)
        item = _StringItem(header, update, span, info, client, clock, right_origin)
        return item, utf16_length(update[text_start : d.pos])
    length = skip_content(d, kind)
    return update[start : d.pos], length


def utf16_length(text: bytes) -> int:
    """A UTF-8 string's length in clocks: UTF-16 code units (a four-byte sequence, outside the
    BMP, is a surrogate pair)."""
    if text.isascii():
        return len(text)
    try:
        points = len(text.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise DecodeError("string is not valid UTF-8") from exc
    return points + sum(text.count(lead) for lead in (b"\xf0", b"\xf1", b"\xf2", b"\xf3", b"\xf4"))

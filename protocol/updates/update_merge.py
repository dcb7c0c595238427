"""Re-encodes a Yjs v1 update so that each run of one client's items that Yjs would have sent as
ONE item is one item: the same update, as the client's own encoder would have written it.

Sans-IO and pure. yrs merges such a run on integration by recounting it on every merge
(``Item::try_squash``): an update of N one-character items of one client costs O(N²) and, for
array values, as much memory (88 KB of them took 2.9 GB). Merged beforehand, the run is one item
and costs O(N). Items merge when each continues the one before: same client, next clock, its
origin the previous item's last clock, the same right origin, the same content kind among those
yrs squashes (text, deleted, array values), and no map key (a map entry replaces the one before
it; yrs never squashes those). Splitting a merged item gives back exactly those origins, so the
document is the same; the merged update is what the server applies, stores and broadcasts. A run
is held apart where the update itself would cut the merged item again (``held_apart``): each cut
copies the item's tail, which is the next shape to avoid (``collab.updates.item_cuts``).

``scan_merged`` is the entry point: one scan, and on the usual update (nothing to merge: one
item, or items already merged by the client) one comparison per item and no copy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..wire.lib0 import Decoder, write_var_uint
from .update_scan import (
    ANY,
    DELETED,
    ID,
    STRING,
    ScannedUpdate,
    read_item_header,
    scan_update,
    skip_content,
    skip_values,
)
from .update_split import utf16_length

MERGEABLE = frozenset((STRING, DELETED, ANY))
_GC, _SKIP = 0, 10
_MAP_KEY = 0x20  # the info bit Yjs sets on an item of a map entry, written or not


def scan_merged(update: bytes) -> tuple[bytes, ScannedUpdate]:
    """``update`` with its runs merged (itself when none merges) and its scan."""
    scan = scan_update(update)
    if not has_runs(scan):
        return update, scan
    merged = merge_runs(update, held_apart(scan))
    if merged is None:
        return update, scan  # only map entries, or runs held apart
    return merged, scan_update(merged)


def has_runs(scan: ScannedUpdate) -> bool:
    """Whether two items in a row of ``scan`` may merge (``merge_runs`` then checks map keys,
    which a scan does not keep)."""
    items = scan.items
    for at in range(1, len(items)):
        item = items[at]
        origin = item.origin
        if origin is None or item.content not in MERGEABLE:
            continue
        before = items[at - 1]
        end = before.clock + before.length
        if (
            item.clock == end
            and origin[1] == end - 1
            and origin[0] == item.client == before.client
            and item.right_origin == before.right_origin
            and item.content == before.content
        ):
            return True
    return False


def held_apart(scan: ScannedUpdate) -> set[ID]:
    """The clocks where a run must not be merged across, because yrs would not squash there and
    a merged item would only be cut again (each cut copies the item's tail): the bounds of the
    update's own deletes (deleted and kept text never squash), and the places another item of
    the update is typed between two of the run's items (its origin and right origin are both
    the run's, one clock apart: it sits between them for good)."""
    apart: set[ID] = set()
    for client, clock, length in scan.deletes:  # yrs cuts at each range's ends, touching or not
        apart.update(((client, clock), (client, clock + length)))
    for item in scan.items:
        origin, right = item.origin, item.right_origin
        if origin is not None and right is not None and right == (origin[0], origin[1] + 1):
            apart.add(right)
    return apart


@dataclass(slots=True)
class _Run:
    """Items of one client being merged into the first one's header."""

    header: bytes
    kind: int
    client: int
    right_origin: ID | None
    last: int  # the run's last clock
    apart: set[ID]  # clocks not to merge across (``held_apart``)
    count: int = 0  # array values, or deleted length
    parts: list[bytes] = field(default_factory=list)  # text bytes, or encoded values

    def continues(self, info: int, origin: ID | None, right_origin: ID | None) -> bool:
        return (
            info & 0x1F == self.kind
            and not info & _MAP_KEY
            and origin == (self.client, self.last)
            and right_origin == self.right_origin
            and (self.client, self.last + 1) not in self.apart
        )

    def add(self, content: _Content, length: int) -> None:
        self.count += content.count
        if content.data:
            self.parts.append(content.data)
        self.last += length

    def encode(self) -> bytes:
        if self.kind == STRING:
            text = b"".join(self.parts)
            return self.header + write_var_uint(len(text)) + text
        return self.header + write_var_uint(self.count) + b"".join(self.parts)


@dataclass(slots=True)
class _Content:
    count: int  # array values, or deleted length (0 for text)
    data: bytes  # text bytes, or encoded values (empty for deleted)


def merge_runs(update: bytes, apart: set[ID] | None = None) -> bytes | None:
    """``update`` re-encoded with every mergeable run of items as one item (the delete set and
    every other struct copied as they are), never across a clock in ``apart``; None if no run
    merges."""
    d = Decoder(update)
    clients = d.read_var_uint()
    out = [write_var_uint(clients)]
    merged = False
    for _ in range(clients):
        count = d.read_var_uint()
        client = d.read_var_uint()
        first_clock = d.read_var_uint()
        structs = _merged_structs(d, update, (client, first_clock), count, apart or set())
        merged = merged or len(structs) < count
        out += [write_var_uint(len(structs)), write_var_uint(client), write_var_uint(first_clock)]
        out += structs
    out.append(update[d.pos :])  # the delete set
    return b"".join(out) if merged else None


def _merged_structs(
    d: Decoder, update: bytes, start: ID, count: int, apart: set[ID]
) -> list[bytes]:
    client, clock = start
    structs: list[bytes] = []
    run: _Run | None = None
    for _ in range(count):
        at = d.pos
        info = d.read_bytes(1)[0]
        kind = info & 0x1F
        if kind in (_GC, _SKIP):
            length = d.read_var_uint()
            origin = right_origin = None
            content = None
        else:
            origin, right_origin = read_item_header(d, info)[:2]
            header_end = d.pos
            content, length = _read_content(d, update, kind)
        if content is not None and run is not None and run.continues(info, origin, right_origin):
            run.add(content, length)
        else:
            if run is not None:
                structs.append(run.encode())
                run = None
            if content is not None and not info & _MAP_KEY:
                run = _Run(update[at:header_end], kind, client, right_origin, clock - 1, apart)
                run.add(content, length)
            else:
                structs.append(update[at : d.pos])
        clock += length
    if run is not None:
        structs.append(run.encode())
    return structs


def _read_content(d: Decoder, update: bytes, kind: int) -> tuple[_Content | None, int]:
    """A mergeable item's content, or None for any other kind (skipped), and its length."""
    if kind == STRING:
        size = d.read_var_uint()
        text = d.read_bytes(size)
        return _Content(0, text), utf16_length(text)
    if kind == DELETED:
        length = d.read_var_uint()
        return _Content(length, b""), length
    if kind == ANY:
        values = d.read_var_uint()
        start = d.pos
        skip_values(d, values)
        return _Content(values, update[start : d.pos]), values
    return None, skip_content(d, kind)

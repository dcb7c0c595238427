"""A big update cut into slices the event loop can take one at a time, with what it needs of
the document checked first, and into pieces the broadcast can send; pure, run in a worker
thread. Knows nothing of rooms or sockets.

Why: the guard's Python per struct (about 7 µs: its checks, then what ``admit`` records) and
yrs' apply (about 0.08 µs per byte, holding the GIL, so a thread does not help) are linear, but
a frame may hold 16 MiB of structs: one update of a million map entries held the loop 4-7 s.
Cut into slices of about a thousand structs in dependency order (``protocol.updates.update_order``),
each slice is checked, applied and admitted as an update of its own, and the loop runs other
rooms between slices (``collab.updates.sliced_apply``). What the guard allows one update to cost
(its cuts, their count, its walks) is shared by its slices (``collab.updates.guard.Spend``): cut
finer, an update the guard refuses whole would otherwise pass slice by slice.

Slices change where a failure shows: slice 7 refused after six applied leaves the document
holding part of the update, as a failed apply does, and the room rebuilds it from storage. So
what would be refused for missing history is found before anything is applied: ``needs`` is,
per client, the clock the document must know up to for the update to build only on what it has.
"""

from __future__ import annotations

from dataclasses import dataclass

from tether.protocol.updates.update_order import in_slices
from tether.protocol.updates.update_scan import ScannedUpdate, scan_update
from tether.protocol.updates.update_split import split_update

from .update_reads import ReadUpdate

# A slice's work on the loop: about 8 ms of guard and yrs for structs (measured 33 ms at 4,096,
# doubled or more while another thread runs Python, e.g. an import's parse), 5 ms for bytes.
# The budgets meant per update hold across its slices however small (``guard.Spend``).
SLICE_STRUCTS = 1024
SLICE_BYTES = 64 * 1024
# Up to this much an update is applied whole: slicing it costs a thread hop and a re-encode.
WHOLE_STRUCTS = 4096
WHOLE_BYTES = 1024 * 1024
# A stored update is loaded in a worker thread, where slices only let the loop have the GIL
# between yrs' applies: a larger slice, fewer re-encodes.
LOAD_STRUCTS = 4096
LOAD_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class SlicedUpdate:
    slices: list[ReadUpdate]  # each slice and its scan, in the order they are applied
    needs: dict[int, int]  # client → the clock the document must know up to


def wants_slices(update: bytes, scan: ScannedUpdate) -> bool:
    """Whether applying ``update`` whole could hold the loop past a few slices' work."""
    structs = len(scan.items) + len(scan.ranges) + len(scan.deletes)
    return structs > WHOLE_STRUCTS or (structs > 1 and len(update) > WHOLE_BYTES)


def slice_update(update: bytes, scan: ScannedUpdate) -> SlicedUpdate | None:
    """``update`` (runs merged, as applied) in slices with their scans; None when it cannot be
    put in dependency order, which no Yjs client's history gives."""
    try:
        pieces = in_slices(update, SLICE_STRUCTS, SLICE_BYTES)
    except Exception:  # the scan read it, so a failure here is the cut's: judged whole instead
        return None
    if pieces is None:
        return None
    return SlicedUpdate([(piece, scan_update(piece)) for piece in pieces], needs_of(scan))


def load_slices(update: bytes) -> list[bytes] | None:
    """A stored update's slices, for a load (in a worker thread, where the document is new and
    nobody else's: no hold, no checks between them); None to apply it whole."""
    try:
        return in_slices(update, LOAD_STRUCTS, LOAD_BYTES)
    except Exception:
        return None


def broadcast_pieces(update: bytes, cap: int) -> list[bytes] | None:
    """``update`` cut into updates of at most ``cap`` bytes for the broadcast (in a worker thread:
    cutting is Python per struct), or None if it cannot be (then the broadcast cuts it, and
    fails, as it would have)."""
    try:
        return list(split_update(update, cap))
    except Exception:
        return None


def needs_of(scan: ScannedUpdate) -> dict[int, int]:
    """Client → the clock the document must know up to: where each client's structs start, the
    ends of skipped ranges and of deletes past the update's own structs, and every origin,
    right origin and parent outside the update. ``UpdateGuard.check`` refuses an update for
    missing history on exactly these."""
    needs: dict[int, int] = {}
    starts, ends = scan.starts, scan.ends

    def need(client: int, clock: int) -> None:
        if clock > needs.get(client, 0):
            needs[client] = clock

    for client, start in starts.items():
        need(client, start)
    for gap in scan.ranges:
        if gap.skip:
            need(gap.client, gap.clock + gap.length)
    for client, clock, length in scan.deletes:
        if clock + length > ends.get(client, 0):
            need(client, clock + length)
    for item in scan.items:
        for ident in (item.origin, item.right_origin, item.parent_id):
            if ident is None:
                continue
            client, clock = ident
            if not starts.get(client, clock + 1) <= clock < ends.get(client, 0):
                need(client, clock + 1)
    return needs

"""Where a document's items are cut, per client, and what an update would cost yrs in cutting
more of them: known before the update is applied.

yrs keeps each client's items as one list of blocks. Cutting an item (a delete that starts or
ends inside it, an item typed inside it) walks the item's text up to the cut (about 0.85 ns per
character on this machine), copies the rest into a new block (0.024-0.078 ns per unit) and inserts
that block into the list, moving every block after it (about 0.3 ns each). So one update of N
one-character deletes over one long item of L characters costs O(N·L) (1.27 MB held the event
loop 5.7 s), N inserts typed from the end of one long item backwards O(N·L) at the walking rate,
and N cuts of N separate items O(N²).

``ItemCuts`` remembers, for every client, the clocks where its items are known to be cut: where a
chain of typing breaks, where an item continues one with another right origin or kind, the bounds
of every delete and garbage-collected range, and every place an item was typed into. ``cost`` then
prices an update's cuts in units of about one copied character: for each item it cuts, in the order
yrs makes the cuts (the update's items in clock order, then its delete ranges as written: yrs
neither sorts nor joins them), ``WALK_WEIGHT`` per character walked, one per character copied,
``BLOCK_WEIGHT`` per block moved. Where the order is not known (several clients cutting one item,
cuts inside the update's own items) each cut is priced as if it were the first in its item. The
guard refuses an update whose cost exceeds its budget (``collab.updates.guard``).

The estimate errs high: it knows no cut yrs healed by squashing deleted neighbours, and a cut
into a healed item is priced at the longer item. Knows nothing of pycrdt: plain clocks, and the
update as ``protocol.updates.update_scan`` reads it.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterator

from tether.protocol.updates.update_scan import ID, ScannedUpdate

# Weights per unit of one copied UTF-16 unit. Measured here (pycrdt 0.14, 2-core EPYC): a unit
# copied 0.024 ns (ASCII) to 0.078 ns (three-byte characters); a character walked 0.85-1.9 ns;
# a block moved 0.3-0.5 ns. So a unit of the estimate is 0.023-0.073 ns of yrs for every shape
# tried (docs/benchmarks.md).
WALK_WEIGHT = 24
BLOCK_WEIGHT = 5
# The live budget: at most ~110 ms of yrs at the slowest rate, ~35 ms copying ASCII. Honest edits
# measured (docs/benchmarks.md): typing, select-and-delete and 200 offline inserts price under
# 1.5e7; a find-and-replace of 245 matches in one pasted 100 KB item 3.1e8 back to front; 2,500
# inserts front to back into one 1 MB item 1.3e9 (30-84 ms); but a find-and-replace of 2,459
# matches in one pasted 1 MB item made back to front 3.0e10, where yrs walks the item from its
# start at every cut (1.2 s): that one is refused.
DEFAULT_MAX_CUT_COST = 1_500_000_000

# Cuts one update may make at all, whatever they cost: the estimate itself takes about a
# microsecond per cut, so a delete set of a million ranges is refused without pricing them all.
# The largest honest edit measured, a find-and-replace of 2,459 matches, makes 4,918.
MAX_CUTS = 10_000

_ItemKind = tuple[ID | None, int]  # an item's right origin and content kind


class ItemCuts:
    __slots__ = ("_cuts", "_tails", "total")

    def __init__(self) -> None:
        self._cuts: dict[int, array[int]] = {}  # client → sorted clocks where a block starts
        self.total = 0  # cuts known, over all clients: about the document's blocks
        # client → right origin and kind of its item at its last known clock: the next item
        # continues that block only if it has the same.
        self._tails: dict[int, _ItemKind] = {}

    def cost(self, scan: ScannedUpdate, known: dict[int, int], budget: int) -> int:
        """What applying ``scan`` would cost yrs in cutting items (see the module docstring),
        given ``known`` (client → one past its last clock the document has); counting stops
        once it passes ``budget``."""
        return self.priced(scan, known, budget)[0]

    def priced(
        self, scan: ScannedUpdate, known: dict[int, int], budget: int, max_cuts: int = MAX_CUTS
    ) -> tuple[int, int]:
        """``cost`` and how many cuts it counted; past ``budget`` or ``max_cuts`` the cost is
        over ``budget`` and counting stops. A slice of a bigger update is priced with what the
        slices before it left of both (``collab.updates.guard.Spend``)."""
        fresh: _FreshItems | None = None
        items: dict[tuple[int, int], _CutItem] = {}
        total = cuts = 0
        for (client, clock), cutter in _cut_points(scan):
            end = known.get(client, 0)
            if clock <= 0:
                continue
            if clock >= end:
                if client not in scan.starts:
                    continue  # at the end of what the document has: nothing to cut there
                fresh = fresh or _FreshItems(scan)
                price = fresh.cut(client, clock)
                total += price
                cuts += price > 0
            else:
                item = self._item_at(client, clock, end, items)
                if item is not None:
                    item.add(clock, cutter)
                    cuts += 1
            if total > budget or cuts > max_cuts:
                return max(total, budget + 1), cuts
        for cut in items.values():
            total += cut.cost()
            if total > budget:
                break
        return total, cuts

    def _item_at(
        self, client: int, clock: int, end: int, items: dict[tuple[int, int], _CutItem]
    ) -> _CutItem | None:
        """The known item that ``clock`` cuts (None if a block starts there already)."""
        cuts = self._cuts.get(client)
        at = 0
        if cuts is not None:
            at = bisect.bisect_left(cuts, clock)
            if at < len(cuts) and cuts[at] == clock:
                return None
        start = cuts[at - 1] if cuts is not None and at else 0
        item = items.get((client, start))
        if item is None:
            stop = bisect.bisect_left(cuts, end, at) if cuts is not None else 0
            following = cuts[at] if cuts is not None and at < stop else end
            item = items[(client, start)] = _CutItem(start, following, stop - at)
        return item

    def record(self, scan: ScannedUpdate, known: dict[int, int]) -> None:
        """Remember the cuts ``scan`` makes; called as it is admitted, with ``known`` as it was
        before."""
        for (client, clock), _ in _cut_points(scan):
            self._add(client, clock)
        for gap in scan.ranges:
            self._add(gap.client, gap.clock)
            self._add(gap.client, gap.clock + gap.length)
        previous: dict[int, tuple[int, _ItemKind]] = {}  # client → end and kind of its last item
        for item in scan.items:
            end = item.clock + item.length
            if end <= known.get(item.client, 0):
                continue  # a duplicate of what the document has
            kind = (item.right_origin, item.content)
            before = previous.get(item.client)
            if before is None and item.clock == known.get(item.client, 0):
                before = (item.clock, self._tails.get(item.client, (None, -1)))
            continues = (
                before is not None
                and before[0] == item.clock
                and before[1] == kind
                and item.origin == (item.client, item.clock - 1)
            )
            if not continues:
                self._add(item.client, item.clock)
            previous[item.client] = (end, kind)
        for client, (end, kind) in previous.items():
            if end >= known.get(client, 0):
                self._tails[client] = kind

    def count(self, client: int) -> int:
        """How many cuts of ``client``'s items are known."""
        cuts = self._cuts.get(client)
        return 0 if cuts is None else len(cuts)

    def _add(self, client: int, clock: int) -> None:
        if clock <= 0:
            return
        cuts = self._cuts.get(client)
        if cuts is None:
            self._cuts[client] = array("q", (clock,))
        elif cuts[-1] < clock:
            cuts.append(clock)
        else:
            at = bisect.bisect_left(cuts, clock)
            if cuts[at] == clock:
                return
            cuts.insert(at, clock)
        self.total += 1


_DELETES = -1  # the "client" cutting at a delete's bound: yrs applies deletes after all items


def _cut_points(scan: ScannedUpdate) -> Iterator[tuple[ID, int]]:
    """The clocks where ``scan`` needs a block to start, each once, in the order yrs cuts
    there, with who cuts (the inserting client, or ``_DELETES``): after every origin (but that
    of an item typed on after its own client's previous one) and at every right origin, item by
    item, then at both ends of every delete range as written (yrs neither sorts nor joins them:
    40,000 touching one-character ranges cut 40,000 times). Lazy, so pricing can stop early."""
    seen: set[ID] = set()
    for item in scan.items:
        origin = item.origin
        if origin is not None and (origin[0] != item.client or origin[1] != item.clock - 1):
            point = (origin[0], origin[1] + 1)
            if point not in seen:
                seen.add(point)
                yield point, item.client
        right = item.right_origin
        if right is not None and right not in seen:
            seen.add(right)
            yield right, item.client
    for client, clock, length in scan.deletes:
        for point in ((client, clock), (client, clock + length)):
            if point not in seen:
                seen.add(point)
                yield point, _DELETES


class _CutItem:
    """One known item and the cuts the update makes in it, in the order yrs makes them: the
    update's items' cuts first, in their order, then its deletes' cuts, as written."""

    __slots__ = ("after", "cutters", "deletes", "end", "inserts", "start")

    def __init__(self, start: int, end: int, after: int) -> None:
        self.start, self.end, self.after = start, end, after  # after: blocks after this item
        self.inserts: list[int] = []
        self.deletes: list[int] = []
        self.cutters: set[int] = set()

    def add(self, clock: int, cutter: int) -> None:
        if cutter == _DELETES:
            self.deletes.append(clock)
        else:
            self.inserts.append(clock)
            self.cutters.add(cutter)

    def cost(self) -> int:
        """Each cut, in order, walks from the cut below it and copies up to the cut above it
        (bounds of the item, or cuts made before), and moves every block after it."""
        bounds = [self.start, self.end]  # sorted: where the item is cut so far
        total = 0
        if len(self.cutters) > 1:
            # Several clients: yrs's order among them is its own, so each as if first.
            total += sum(self._price(bounds, clock) for clock in self.inserts)
            bounds = sorted({*bounds, *self.inserts})
        else:
            total += self._cut_in_order(bounds, self.inserts)
        return total + self._cut_in_order(bounds, self.deletes)

    def _cut_in_order(self, bounds: list[int], clocks: list[int]) -> int:
        total = 0
        for clock in clocks:
            total += self._price(bounds, clock)
            bisect.insort(bounds, clock)
        return total

    def _price(self, bounds: list[int], clock: int) -> int:
        at = bisect.bisect_left(bounds, clock)
        left, right = bounds[at - 1], bounds[at]
        moved = self.after + len(bounds) - 1 - at  # blocks after: beyond the item, and cuts
        return WALK_WEIGHT * (clock - left) + (right - clock) + BLOCK_WEIGHT * moved


class _FreshItems:
    """The update's own items by client, to price a cut inside one of them."""

    def __init__(self, scan: ScannedUpdate) -> None:
        self._starts: dict[int, list[int]] = {}
        self._ends: dict[int, list[int]] = {}
        structs = [(i.client, i.clock, i.length) for i in scan.items]
        structs += [(r.client, r.clock, r.length) for r in scan.ranges]
        for client, clock, length in sorted(structs):
            self._starts.setdefault(client, []).append(clock)
            self._ends.setdefault(client, []).append(clock + length)

    def cut(self, client: int, clock: int) -> int:
        starts = self._starts.get(client)
        if starts is None:
            return 0
        at = bisect.bisect_right(starts, clock) - 1
        if at < 0 or starts[at] == clock or clock >= self._ends[client][at]:
            return 0  # at an item's start, or past this update's clocks
        end = self._ends[client][at]
        after = len(starts) - at - 1
        return WALK_WEIGHT * (clock - starts[at]) + end - clock + BLOCK_WEIGHT * after

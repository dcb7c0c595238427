"""What a document's own history says about the order of two items, without walking it.

Two facts hold for good in a Yjs sequence. yrs (like Yjs) places every item to the right of its
origin: integration starts there and only moves right. And the order of two integrated items
never changes. So each client's clocks fall into *chains*, runs where every item's origin is the
client's previous clock (someone typing on), which sit in clock order; and the item that starts
a chain sits right of that chain's origin.

``check_origin_order`` asks, for every new item, whether its right origin is right of its
origin. Asking yrs costs two sticky-index resolutions per item, each a linear walk of the
sequence, so a reconnect that brings thousands of offline edits was quadratic: seconds of event
loop on a fragmented document. Most pairs are settled here instead, by following origins back
from the right origin (a few hops of bisection) until the left one is reached. A fact can only
show a pair in order or out of order; what it cannot show is left to yrs.
"""

from __future__ import annotations

import bisect
from array import array

from tether.protocol.update_scan import ID, ScannedUpdate

# How many chain origins to follow back from a right origin before giving up on the facts.
MAX_HOPS = 4

_NONE = -1  # an origin client/clock slot for a chain that starts with no origin


class _ClientChains:
    """One client's chain starts, sorted by clock, each with the origin of its first item."""

    __slots__ = ("origin_clients", "origin_clocks", "starts")

    def __init__(self) -> None:
        self.starts = array("q")
        self.origin_clients = array("q")
        self.origin_clocks = array("q")

    def add(self, clock: int, origin: ID | None) -> None:
        at = len(self.starts)
        if at and self.starts[-1] >= clock:
            at = bisect.bisect_left(self.starts, clock)
            if self.starts[at] == clock:
                return  # already a start (e.g. a gap's end); the first fact stands
        client, origin_clock = origin if origin is not None else (_NONE, _NONE)
        self.starts.insert(at, clock)
        self.origin_clients.insert(at, client)
        self.origin_clocks.insert(at, origin_clock)

    def holding(self, clock: int) -> tuple[int, ID | None] | None:
        """The start of the chain holding ``clock`` and that chain's origin."""
        at = bisect.bisect_right(self.starts, clock) - 1
        if at < 0:
            return None
        client = self.origin_clients[at]
        origin = None if client == _NONE else (client, self.origin_clocks[at])
        return self.starts[at], origin

    def starts_within(self, low: int, high: int) -> bool:
        """Whether a chain starts at a clock in ``(low, high]``."""
        at = bisect.bisect_right(self.starts, low)
        return at < len(self.starts) and self.starts[at] <= high


class Chains:
    """The chains of one document (or of one update's new clocks)."""

    __slots__ = ("_clients",)

    def __init__(self) -> None:
        self._clients: dict[int, _ClientChains] = {}

    def add(self, client: int, clock: int, origin: ID | None) -> None:
        chains = self._clients.get(client)
        if chains is None:
            chains = self._clients[client] = _ClientChains()
        chains.add(clock, origin)

    def record(self, scan: ScannedUpdate, known: dict[int, int]) -> None:
        """Add the chains that ``scan`` starts beyond ``known`` (client → one past its last
        known clock); a gap (GC or Skip) is a chain of its own, with no order known across it."""
        for gap in scan.ranges:
            seen = known.get(gap.client, 0)
            if gap.clock + gap.length > seen:
                self.add(gap.client, max(gap.clock, seen), None)
                self.add(gap.client, gap.clock + gap.length, None)
        for item in scan.items:
            if item.clock >= known.get(item.client, 0) and item.origin != (
                item.client,
                item.clock - 1,
            ):
                self.add(item.client, item.clock, item.origin)

    def holding(self, ident: ID) -> tuple[int, ID | None] | None:
        chains = self._clients.get(ident[0])
        return None if chains is None else chains.holding(ident[1])

    def starts_within(self, client: int, low: int, high: int) -> bool:
        chains = self._clients.get(client)
        return chains is not None and chains.starts_within(low, high)


class OrderFacts:
    """Order read off a document's chains, plus (for pairs that involve an update's own items)
    the chains that update adds. Every fact used is true once the update is integrated."""

    def __init__(self, known: Chains, fresh: Chains | None = None) -> None:
        self._layers = (known,) if fresh is None else (known, fresh)

    def left_of(self, left: ID, right: ID) -> bool:
        """Whether ``left`` is shown to sit left of ``right`` (False: not shown either way)."""
        current, strict = right, True
        for _ in range(MAX_HOPS):
            if current[0] == left[0] and self._one_chain(left, current, strict):
                return True
            chain = self._holding(current)
            if chain is None or chain[1] is None:
                return False
            current, strict = chain[1], False  # the origin sits left of the whole chain
        return False

    def _one_chain(self, low: ID, high: ID, strict: bool) -> bool:
        if low[1] > high[1] or (strict and low[1] == high[1]):
            return False
        return not any(layer.starts_within(low[0], low[1], high[1]) for layer in self._layers)

    def _holding(self, ident: ID) -> tuple[int, ID | None] | None:
        found: tuple[int, ID | None] | None = None
        for layer in self._layers:  # the nearest start wins: the fresh layer starts later
            chain = layer.holding(ident)
            if chain is not None and (found is None or chain[0] > found[0]):
                found = chain
        return found

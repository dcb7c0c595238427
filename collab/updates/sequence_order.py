"""What a document's own history says about the order of two items, without walking it.

Three facts hold for good in a Yjs sequence. yrs (like Yjs) places every item to the right of
its origin: integration starts there and only moves right. It places it left of its right origin:
integration stops there. And the order of two integrated items never changes. So each client's
clocks fall into *chains*, runs where every item's origin is the client's previous clock (someone
typing on), which sit in clock order; the item that starts a chain sits right of that chain's
origin; and every item sits left of its own right origin, which ``RightOrigins`` keeps per run of
clocks that share one.

``check_origin_order`` asks, for every new item, whether its right origin is right of its
origin. Asking yrs costs two sticky-index resolutions per item, each a linear walk of the
sequence, so a reconnect that brings thousands of offline edits was quadratic: seconds of event
loop on a fragmented document. Most pairs are settled here instead, by following origins back
from the right origin (a few hops of bisection) until the left one is reached, or right origins
forward from the left one (a word typed between two others hangs on the first and has the second
as its right origin). A fact can only show a pair in order or out of order; what it cannot show
is left to yrs.
"""

from __future__ import annotations

import bisect
from array import array

from tether.protocol.updates.update_scan import ID, ScannedUpdate

# How many chain origins to follow back from a right origin before giving up on the facts.
MAX_HOPS = 4
# How many right origins to follow forward from a left one (each then searched back from).
MAX_RIGHT_HOPS = 2

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


class RightOrigins:
    """Each client's clocks as runs that share one right origin (None: none, or unknown, as in a
    garbage-collected range): every item sits left of its own right origin."""

    __slots__ = ("_clients",)

    def __init__(self) -> None:
        # client → (run starts, right origin clients, right origin clocks), by start
        self._clients: dict[int, tuple[array[int], array[int], array[int]]] = {}

    def record(self, scan: ScannedUpdate, known: dict[int, int]) -> None:
        """Add the runs of the clocks ``scan`` adds beyond ``known``."""
        for gap in scan.ranges:
            seen = known.get(gap.client, 0)
            if gap.clock + gap.length > seen:
                self._add(gap.client, max(gap.clock, seen), None)
        for item in scan.items:
            seen = known.get(item.client, 0)
            if item.clock + item.length > seen:
                self._add(item.client, max(item.clock, seen), item.right_origin)

    def of(self, ident: ID) -> tuple[int, ID | None] | None:
        """The start of the run holding ``ident`` and its right origin; None if unknown."""
        runs = self._clients.get(ident[0])
        if runs is None:
            return None
        at = bisect.bisect_right(runs[0], ident[1]) - 1
        if at < 0:
            return None
        client = runs[1][at]
        return runs[0][at], None if client == _NONE else (client, runs[2][at])

    def _add(self, client: int, clock: int, right: ID | None) -> None:
        runs = self._clients.get(client)
        if runs is None:
            runs = self._clients[client] = (array("q"), array("q"), array("q"))
        starts, clients, clocks = runs
        right_client, right_clock = right if right is not None else (_NONE, _NONE)
        at = len(starts)
        if at and starts[-1] >= clock:
            at = bisect.bisect_left(starts, clock)
            if starts[at] == clock:
                return  # already recorded; the first record stands
        elif at and clients[-1] == right_client and clocks[-1] == right_clock:
            return  # the run before goes on
        starts.insert(at, clock)
        clients.insert(at, right_client)
        clocks.insert(at, right_clock)


class OrderFacts:
    """Order read off a document's chains and right origins, plus (for pairs that involve an
    update's own items) those that update adds. Every fact used is true once the update is
    integrated."""

    def __init__(
        self,
        known: Chains,
        fresh: Chains | None = None,
        rights: tuple[RightOrigins, ...] = (),
    ) -> None:
        self._layers = (known,) if fresh is None else (known, fresh)
        self._rights = rights

    def left_of(self, left: ID, right: ID) -> bool:
        """Whether ``left`` is shown to sit left of ``right`` (False: not shown either way)."""
        if self._back_to(left, right):
            return True
        current = left
        for _ in range(MAX_RIGHT_HOPS):
            ahead = self._right_origin(current)  # current sits left of it
            if ahead is None:
                return False
            if ahead == right or self._back_to(ahead, right):
                return True
            current = ahead
        return False

    def _right_origin(self, ident: ID) -> ID | None:
        found: tuple[int, ID | None] | None = None
        for layer in self._rights:  # the nearest start wins, as for chains
            run = layer.of(ident)
            if run is not None and (found is None or run[0] > found[0]):
                found = run
        return None if found is None else found[1]

    def _back_to(self, left: ID, right: ID) -> bool:
        """Whether following origins back from ``right`` shows ``left`` left of it."""
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

"""Checks each update against what the document already holds, before pycrdt applies it.

One guard per loaded document. It keeps a compact index of the document's structure: for every
client, runs of clocks that hang under the same parent (a root name or a nested type's item),
and the nesting depth of every nested type. With it, an update is refused before it is applied
or stored when

- it nests shared types deeper than ``max_depth`` (yrs deletes nested types recursively: tens of
  thousands of levels overflow the stack and kill the process, and the document stays armed);
- it depends on structs the document does not have (a gap in a client's clocks, an origin, parent
  or deleted range beyond what is known): yrs would park it as *pending*, acknowledge nothing it
  could integrate, and drop it from every snapshot (``Doc.get_update`` leaves pending structs out),
  so an ack would not mean the edit survives compaction. The sender is asked to resend from our
  state vector instead, which a Yjs client answers with everything we lack, in order;
- an item's origin and right origin hang under different parents, or its parent is not a shared
  type: no Yjs client writes that, and yrs integrates it in ways a reload does not reproduce;
- it inserts or deletes at a boundary inside a character of two UTF-16 units (an emoji): clocks
  count UTF-16 units, but yrs keeps text as UTF-8 and cannot split there, so it integrates such
  an item in one place live and another after a reload (Yjs in JavaScript writes U+FFFD over
  both halves instead: a third result). The guard remembers where each such character starts;
- it would cut the document's items into so many pieces that yrs, which walks and copies an item
  and moves its block list at every cut, would hold the event loop for more than about 100 ms
  (``collab.updates.item_cuts``: one 1.27 MB delete set of one-character ranges over one long
  item took 5.7 s);
- it would give one map more than ``max_map_keys`` keys, or the document more than
  ``max_root_types`` root types or ``max_clients`` clients: yrs keeps each in a hash table
  that doubles as it grows, and a doubling rehashes every entry in one call the loop waits
  out, however the update is sliced (106 ms at 458,000 keys, 380 ms near a million).
  Documents read back from storage are not held to these, so one stored before them loads.

A big update is checked in slices (``collab.updates.slicing``), each against the document as
the slices before it left it. Budgets that bound what the document becomes (nesting depth,
clients, root types, map keys) carry from slice to slice through what was admitted. Budgets on
what one update may cost (its cuts, their count, its walks) do not: smaller slices would each fit
under a budget the whole update exceeds, so the slices of one update share a ``Spend``.

Knows nothing of sockets or storage. ``check`` is pure with respect to the guard; ``admit`` records
an update once pycrdt has applied it (every change to the document must be admitted, the server's
own edits included, or later updates that build on them look like missing dependencies).
"""

from __future__ import annotations

import bisect
from array import array
from dataclasses import dataclass

from pycrdt import Assoc, Doc, StickyIndex, Transaction

from tether.protocol.updates.update_scan import ID, ScannedItem, ScannedUpdate

from .item_cuts import DEFAULT_MAX_CUT_COST, MAX_CUTS, ItemCuts
from .sequence_order import Chains, OrderFacts, RightOrigins
from .yrs_panics import is_rust_panic

DEFAULT_MAX_NESTING_DEPTH = 128
# Below the doubling past 2^18 entries (yrs' tables double at 7/8 full): 52 ms of rehash at
# 229,000 keys on a 2-vCPU VM, the next one 106 ms. Far above what editors write (a Y.Map of
# settings, comments or cells: hundreds to thousands).
DEFAULT_MAX_MAP_KEYS = 1 << 18
DEFAULT_MAX_ROOT_TYPES = 1 << 16
# Each Yjs session writes as a client of its own; a document with this many writers sends a
# 2.6 MB state vector on every sync. yrs' client table doubles past it in 0.1-0.3 s.
DEFAULT_MAX_CLIENTS = 1 << 18
# Items whose place history cannot settle are placed by walking the document (two sticky-index
# resolutions each, 4-13 ns per block here): an update may have this many walked at any
# document size (an honest keystroke has at most one pair), and more only while their count
# times the document's blocks stays under MAX_WALKED_BLOCKS (about 50 ms). History settles
# every pair of an honest burst of 2,000 offline edits (tests/collab/test_sequence_order.py).
# Both per update: a sliced update's slices share them (``Spend``).
FREE_WALKS = 4
MAX_WALKED_BLOCKS = 4_000_000
# A stored update is checked against this many times the live budget for cuts: the estimate
# from a folded snapshot knows fewer cuts than it did live, and a document must not become
# unloadable for that. An update that was costly before the guard priced cuts stays far above.
STORED_CUT_COST_FACTOR = 2

Parent = str | ID | None  # a root's name, a nested type's item, or unknown (garbage-collected)
OriginPair = tuple[ID, ID]  # an item's origin and right origin


class UpdateRefused(Exception):
    """The update was not applied; ``str(exc)`` is safe to show the sender, ``limit`` names why."""

    def __init__(self, message: str, limit: str) -> None:
        super().__init__(message)
        self.limit = limit


class MissingDependencies(UpdateRefused):
    """The update builds on structs this document does not have (yet)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "missing-dependencies")


@dataclass(slots=True)
class Spend:
    """What the slices of one update checked so far have used of the budgets that are per
    update, not per document: the cost of its cuts and their count (``max_cut_cost``,
    ``item_cuts.MAX_CUTS``) and its walks (``FREE_WALKS``, ``MAX_WALKED_BLOCKS``). A slice is
    priced against what the slices before it left, so an update refused whole is refused sliced,
    however finely; only a check that passes adds to it."""

    cut_cost: int = 0  # in ``item_cuts`` units
    cuts: int = 0
    walks: int = 0  # items whose place was read off the document
    walked_blocks: int = 0  # each walk times the blocks the document had then


class _Runs:
    """One client's clocks, as runs that share a parent; clocks only grow, so runs only append."""

    __slots__ = ("parents", "starts")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.parents: list[Parent] = []

    def add(self, clock: int, parent: Parent) -> None:
        if self.parents and self.parents[-1] == parent:
            return  # the run before already covers it
        self.starts.append(clock)
        self.parents.append(parent)

    def parent_at(self, clock: int) -> Parent:
        return self.parents[bisect.bisect_right(self.starts, clock) - 1]


class UpdateGuard:
    def __init__(
        self,
        max_depth: int,
        max_cut_cost: int = DEFAULT_MAX_CUT_COST,
        *,
        max_map_keys: int = DEFAULT_MAX_MAP_KEYS,
        max_root_types: int = DEFAULT_MAX_ROOT_TYPES,
        max_clients: int = DEFAULT_MAX_CLIENTS,
    ) -> None:
        self.max_depth = max_depth
        self.max_cut_cost = max_cut_cost
        self.max_map_keys = max_map_keys
        self.max_root_types = max_root_types
        self.max_clients = max_clients
        # Keys set for the first time in each map (an entry without an origin), and the roots'
        # names by their hashes (a name may be long; a collision only undercounts by one).
        self._keys: dict[Parent, int] = {}
        self._roots: set[int] = set()
        self.cuts = ItemCuts()  # where the document's items are cut (collab.updates.item_cuts)
        self._known: dict[int, int] = {}  # client → one past its last known clock
        self._runs: dict[int, _Runs] = {}
        self._depth: dict[ID, int] = {}  # nested type's item → how deep it sits (roots' are 1)
        # Where two-unit characters start (a split after one is refused): client → its items
        # that hold any, as (start clocks, offsets from each start); one entry per item, not
        # per character, so a paragraph of 400,000 emoji costs one array, not a Python loop.
        self._pairs: dict[int, tuple[list[int], list[array[int]]]] = {}
        # What history says about order (collab.updates.sequence_order).
        self.chains = Chains()
        self.rights = RightOrigins()

    def check(
        self, scan: ScannedUpdate, *, stored: bool = False, spent: Spend | None = None
    ) -> dict[int, Parent]:
        """Raise ``UpdateRefused`` if ``scan`` may not be applied; else return the parent of each
        new item (by index in ``scan.items``) for ``admit``. ``stored``: read back from storage,
        where the budget for cuts is ``STORED_CUT_COST_FACTOR`` times larger. ``spent``: ``scan``
        is one slice of an update, whose slices before it used that much of the budgets per
        update; it is added to once this slice passes (nothing else here changes)."""
        known = self._known
        for client, start in scan.starts.items():
            if start > known.get(client, 0):
                raise MissingDependencies(
                    f"update refused: it starts at clock {start} of client {client}, "
                    f"but this document has that client only up to {known.get(client, 0)}"
                )
        for gap in scan.ranges:
            if gap.skip and gap.clock + gap.length > known.get(gap.client, 0):
                raise MissingDependencies("update refused: it skips structs this document lacks")
        for client, clock, length in scan.deletes:
            if clock + length > max(known.get(client, 0), scan.ends.get(client, 0)):
                raise MissingDependencies("update refused: it deletes structs this document lacks")
        self._check_character_boundaries(scan)
        # Per update (``Spend``): what yrs would spend cutting items for this update.
        cut_cost, cuts = self._check_cut_cost(scan, STORED_CUT_COST_FACTOR if stored else 1, spent)
        # Per document, cumulative through what earlier slices admitted: nesting depth (each
        # type's depth is recorded as it is admitted) and the table sizes below.
        parents = _Resolver(self, scan).resolve_all()
        if not stored:
            self._check_table_sizes(scan, parents)
        if spent is not None:
            spent.cut_cost += cut_cost
            spent.cuts += cuts
        return parents

    def _check_table_sizes(self, scan: ScannedUpdate, parents: dict[int, Parent]) -> None:
        # Sizes of the document, not of one update: ``admit`` counts each slice's clients, roots
        # and keys in, so the next slice is held to what the document holds by then.
        roots, known = self._roots, self._known
        fresh_clients = sum(1 for client in scan.starts if client not in known)
        if fresh_clients and len(known) + fresh_clients > self.max_clients:
            raise UpdateRefused(
                f"update refused: a document holds at most {self.max_clients} clients",
                "clients",
            )
        fresh_roots: set[int] = set()
        keys: dict[Parent, int] = {}
        for index, item in enumerate(scan.items):
            if item.clock + item.length <= known.get(item.client, 0):
                continue  # a duplicate of what the document has
            if item.parent_root is not None and hash(item.parent_root) not in roots:
                fresh_roots.add(hash(item.parent_root))
            if item.parent_sub is not None and item.origin is None:
                parent = parents[index]
                keys[parent] = keys.get(parent, 0) + 1
        if fresh_roots and len(roots) + len(fresh_roots) > self.max_root_types:
            raise UpdateRefused(
                f"update refused: a document holds at most {self.max_root_types} root types",
                "root-types",
            )
        for parent, count in keys.items():
            if self._keys.get(parent, 0) + count > self.max_map_keys:
                raise UpdateRefused(
                    f"update refused: a map holds at most {self.max_map_keys} keys", "map-keys"
                )

    def _check_cut_cost(
        self, scan: ScannedUpdate, factor: int, spent: Spend | None
    ) -> tuple[int, int]:
        """The cost and count of ``scan``'s cuts, refused past what the update (of which it may
        be a slice, ``spent`` the slices before it) has left of the budget and of ``MAX_CUTS``."""
        budget, max_cuts = self.max_cut_cost * factor, MAX_CUTS
        if spent is not None:
            budget, max_cuts = budget - spent.cut_cost, max_cuts - spent.cuts
        cost, cuts = self.cuts.priced(scan, self._known, budget, max_cuts)
        if cost > budget:
            raise UpdateRefused(
                "update refused: it cuts this document's text into too many pieces at once"
                " (yrs would hold the server for too long); send it in parts",
                "item-cuts",
            )
        return cost, cuts

    def _check_character_boundaries(self, scan: ScannedUpdate) -> None:
        fresh: dict[int, tuple[list[int], list[tuple[int, ...]]]] = {}
        for item in scan.items:  # in clock order per client
            if item.pairs:
                starts, offsets = fresh.setdefault(item.client, ([], []))
                starts.append(item.clock)
                offsets.append(item.pairs)
        if not fresh and not self._pairs:
            return  # no two-unit character anywhere: nothing to split

        def splits(client: int, clock: int) -> bool:
            """Whether the boundary right after ``clock`` is inside a character."""
            return _starts_pair(fresh.get(client), clock) or _starts_pair(
                self._pairs.get(client), clock
            )

        for item in scan.items:
            if (item.origin is not None and splits(*item.origin)) or (
                item.right_origin is not None
                and splits(item.right_origin[0], item.right_origin[1] - 1)
            ):
                raise _splits_character()
        for client, clock, length in scan.deletes:
            if splits(client, clock - 1) or splits(client, clock + length - 1):
                raise _splits_character()

    def admit(self, scan: ScannedUpdate, parents: dict[int, Parent]) -> None:
        known = self._known
        self.chains.record(scan, known)
        self.rights.record(scan, known)
        self.cuts.record(scan, known)
        for gap in scan.ranges:
            if gap.clock + gap.length > known.get(gap.client, 0):
                self._runs_of(gap.client).add(max(gap.clock, known.get(gap.client, 0)), None)
        for index, item in enumerate(scan.items):
            end = item.clock + item.length
            seen = known.get(item.client, 0)
            if end <= seen:
                continue  # a duplicate of what the document has
            parent = parents[index]
            self._runs_of(item.client).add(max(item.clock, seen), parent)
            if item.parent_root is not None:
                self._roots.add(hash(item.parent_root))
            if item.parent_sub is not None and item.origin is None:
                self._keys[parent] = self._keys.get(parent, 0) + 1
            if item.pairs:
                starts, offsets = self._pairs.setdefault(item.client, ([], []))
                start, pairs = item.clock, array("q", item.pairs)
                if start < seen:  # partly known: keep what is new, from where it starts
                    pairs = array("q", (o - (seen - start) for o in pairs if start + o >= seen))
                    start = seen
                if pairs:
                    starts.append(start)
                    offsets.append(pairs)
            if item.makes_type:
                self._depth[(item.client, item.clock)] = self._depth_under(parent, {}) + 1
        for client, end in scan.ends.items():
            if end > known.get(client, 0):
                known[client] = end

    @property
    def known_clocks(self) -> dict[int, int]:
        """Client → one past its last clock this document has (read-only for callers)."""
        return self._known

    def knows(self, ident: ID) -> bool:
        return ident[1] < self._known.get(ident[0], 0)

    def lacking(self, needs: dict[int, int]) -> MissingDependencies | None:
        """What ``check`` would refuse for missing history, given an update's needs (client →
        the clock it must be known up to; ``collab.updates.slicing.needs_of``)."""
        known = self._known
        for client, clock in needs.items():
            if clock > known.get(client, 0):
                return MissingDependencies(
                    f"update refused: it builds on client {client} up to clock {clock}, but"
                    f" this document has that client only up to {known.get(client, 0)}"
                )
        return None

    def parent_of(self, ident: ID) -> Parent:
        return self._runs[ident[0]].parent_at(ident[1])

    def depth_of_type(self, ident: ID) -> int | None:
        return self._depth.get(ident)

    def _depth_under(self, parent: Parent, fresh: dict[ID, int]) -> int:
        if parent is None or isinstance(parent, str):
            return 0
        depth = fresh.get(parent)
        if depth is None:
            depth = self._depth.get(parent, 0)
        return depth

    def _runs_of(self, client: int) -> _Runs:
        runs = self._runs.get(client)
        if runs is None:
            runs = self._runs[client] = _Runs()
        return runs


class _Resolver:
    """Finds the parent of every new item of one update, some of which hang on others in it."""

    def __init__(self, guard: UpdateGuard, scan: ScannedUpdate) -> None:
        self.guard = guard
        self.scan = scan
        self.parents: dict[int, Parent] = {}
        self.fresh_depth: dict[ID, int] = {}
        # Built on the first lookup of an ID the document lacks (``_local``): an update that
        # builds only on what the document has, as every keystroke does, never needs them.
        self._index: dict[int, tuple[list[int], list[int]]] | None = None
        self._gaps: dict[int, tuple[list[int], list[int]]] | None = None

    @property
    def index(self) -> dict[int, tuple[list[int], list[int]]]:
        """client → (clocks, item indices) of this update's items, for lookups by ID."""
        if self._index is None:
            self._index = {}
            for position, item in enumerate(self.scan.items):
                clocks, positions = self._index.setdefault(item.client, ([], []))
                clocks.append(item.clock)
                positions.append(position)
        return self._index

    @property
    def gaps(self) -> dict[int, tuple[list[int], list[int]]]:
        """client → (starts, ends) of this update's GC/Skip ranges: a lookup bisects, so an
        update of many ranges and many references costs n log n, not n * m on the event loop."""
        if self._gaps is None:
            self._gaps = {}
            for gap in sorted(self.scan.ranges, key=lambda g: (g.client, g.clock)):
                starts, ends = self._gaps.setdefault(gap.client, ([], []))
                starts.append(gap.clock)
                ends.append(gap.clock + gap.length)
        return self._gaps

    def resolve_all(self) -> dict[int, Parent]:
        for position in range(len(self.scan.items)):
            if position not in self.parents:
                self._resolve(position)
        return self.parents

    def _resolve(self, first: int) -> None:
        # Depth-first without recursion: an update may chain thousands of items on each other.
        stack = [first]
        on_stack = {first}
        while stack:
            position = stack[-1]
            item = self.scan.items[position]
            dependency = self._unresolved_dependency(item)
            if dependency is not None:
                if dependency in on_stack:
                    raise UpdateRefused(
                        "update refused: items that hang on each other", "malformed"
                    )
                stack.append(dependency)
                on_stack.add(dependency)
                continue
            self.parents[position] = self._parent(item)
            stack.pop()
            on_stack.discard(position)

    def _unresolved_dependency(self, item: ScannedItem) -> int | None:
        """An item of this update that ``item``'s parent (or depth) is found through and whose
        own parent is not known yet."""
        for ident in (item.parent_id, item.origin, item.right_origin):
            if ident is not None:
                local = self._local(ident)
                if local is not None and local not in self.parents:
                    return local
        return None

    def _local(self, ident: ID) -> int | None:
        """This update's item holding ``ident``, if the document does not have it already."""
        if self.guard.knows(ident):
            return None
        entry = self.index.get(ident[0])
        if entry is not None:
            clocks, positions = entry
            at = bisect.bisect_right(clocks, ident[1]) - 1
            if at >= 0:
                item = self.scan.items[positions[at]]
                if ident[1] < item.clock + item.length:
                    return positions[at]
        gaps = self.gaps.get(ident[0])
        if gaps is not None:
            at = bisect.bisect_right(gaps[0], ident[1]) - 1
            if at >= 0 and ident[1] < gaps[1][at]:
                return None  # garbage-collected: parent unknown
        raise MissingDependencies(
            f"update refused: it builds on {ident[0]}:{ident[1]}, which this document lacks"
        )

    def _parent_of_id(self, ident: ID) -> Parent:
        if self.guard.knows(ident):
            return self.guard.parent_of(ident)
        local = self._local(ident)
        return None if local is None else self.parents[local]

    def _parent(self, item: ScannedItem) -> Parent:
        if item.parent_root is not None:
            parent: Parent = item.parent_root
        elif item.parent_id is not None:
            parent = item.parent_id
            self._check_is_type(parent)
        elif item.origin is not None:
            parent = self._parent_of_id(item.origin)
            if item.right_origin is not None:
                other = self._parent_of_id(item.right_origin)
                if other != parent and None not in (other, parent):
                    raise UpdateRefused(
                        "update refused: an item's origin and right origin are in different types",
                        "inconsistent-origins",
                    )
        else:
            assert item.right_origin is not None
            parent = self._parent_of_id(item.right_origin)
        if item.makes_type:
            depth = self.guard._depth_under(parent, self.fresh_depth) + 1
            if depth > self.guard.max_depth:
                raise UpdateRefused(
                    f"update refused: shared types nested deeper than {self.guard.max_depth}",
                    "nesting-depth",
                )
            self.fresh_depth[(item.client, item.clock)] = depth
        return parent

    def _check_is_type(self, ident: ID) -> None:
        if self.guard.knows(ident):
            if self.guard.depth_of_type(ident) is None and self.guard.parent_of(ident) is not None:
                raise UpdateRefused("update refused: its parent is not a shared type", "malformed")
            return
        local = self._local(ident)
        if local is not None and not self.scan.items[local].makes_type:
            raise UpdateRefused("update refused: its parent is not a shared type", "malformed")


def _starts_pair(
    runs: tuple[list[int], list[tuple[int, ...]]] | tuple[list[int], list[array[int]]] | None,
    clock: int,
) -> bool:
    """Whether a two-unit character starts at ``clock`` in ``runs`` (start clocks, and each
    run's sorted offsets of such characters from its start)."""
    if runs is None:
        return False
    starts, offsets = runs
    at = bisect.bisect_right(starts, clock) - 1
    if at < 0:
        return False
    offset, pairs = clock - starts[at], offsets[at]
    found = bisect.bisect_left(pairs, offset)
    return found < len(pairs) and pairs[found] == offset


def check_origin_order(
    doc: Doc, scan: ScannedUpdate, guard: UpdateGuard, spent: Spend | None = None
) -> list[OriginPair]:
    """Refuse an item whose right origin is not to the right of its origin; return the pairs
    that involve this update's own items, for ``check_applied_origin_order`` once it is applied.
    ``spent``: ``scan`` is one slice of an update, and the walks are priced with those of the
    slices before it (the budget is per update); added to once this slice passes.

    Yjs's conflict resolution assumes the right origin is right of the origin (a client takes
    both from adjacent items). When it is not, yrs integrates the item in one place live and in
    another when a snapshot is rebuilt, so live editors and every later reader diverge for good.
    Most pairs are settled by the document's history (``collab.updates.sequence_order``: chains of
    typing and the origins they hang on), in a few bisections. The rest is read off yrs's
    sticky indices, a linear walk per item: an item's offset with
    ``Assoc.AFTER`` counts the visible units before it, with ``Assoc.BEFORE`` also its own unit
    if visible. That decides every case except two deleted items with nothing visible between
    them, where the order cannot be seen and the item is let through. Where an origin is one of
    this update's own items its place is only known once the update is integrated, so those pairs
    are checked after applying (a failure there means the doc must be rebuilt from storage).
    """
    known: list[OriginPair] = []
    later: list[OriginPair] = []
    asked: set[ID] = set()  # the items of ``known``: each a walk of the document
    walked_before = 0 if spent is None else spent.walks
    facts: OrderFacts | None = None
    shown: set[int] = set()  # this update's items whose own pair is shown in order already
    for position, item in enumerate(scan.items):
        origin, right = item.origin, item.right_origin
        if origin is None or right is None:
            continue
        if facts is None:
            fresh, fresh_rights = Chains(), RightOrigins()
            fresh.record(scan, guard.known_clocks)
            fresh_rights.record(scan, guard.known_clocks)
            facts = OrderFacts(guard.chains, fresh, (guard.rights, fresh_rights))
        if facts.left_of(origin, right):
            shown.add(position)
            continue  # shown in order by history: nothing to ask yrs
        if origin == right or facts.left_of(right, origin):
            raise _inconsistent()
        if guard.knows(origin) and guard.knows(right):
            known.append((origin, right))
            asked.update((origin, right))
            if walked_before + len(asked) > FREE_WALKS:
                _bound_walks(guard, len(asked), spent)  # refused early, not after every pair
        else:
            later.append((origin, right))
    later = _not_shown(later, shown, scan)
    walks = 0
    if asked or later:
        walks = len(asked.union(ident for pair in later for ident in pair))
        _bound_walks(guard, walks, spent)
    undecided: list[OriginPair] = []
    if known:
        undecided = _check_pairs(doc, known, unplaceable_is_inconsistent=True)
        if later:
            unseen = set(undecided)
            shown.update(
                position
                for position, item in enumerate(scan.items)
                if item.origin is not None
                and item.right_origin is not None
                and guard.knows(item.origin)
                and guard.knows(item.right_origin)
                and (item.origin, item.right_origin) not in unseen
            )
            later = _not_shown(later, shown, scan)
    if spent is not None:
        spent.walks += walks
        spent.walked_blocks += walks * (guard.cuts.total + 1)
    # Pairs the walk cannot order now (two deleted items, nothing visible between) are asked
    # again once this update's own items are in: they may show the order then.
    return later + undecided


def _not_shown(later: list[OriginPair], shown: set[int], scan: ScannedUpdate) -> list[OriginPair]:
    """``later`` without the pairs an item of ``scan`` whose own pair is ``shown`` in order
    settles: it sits left of its right origin, every unit of it, so a pair from inside it to
    that same right origin is in order too."""
    if not later or not shown:
        return later
    shown_by_right: dict[ID, list[ScannedItem]] = {}
    for position in shown:
        item = scan.items[position]
        assert item.right_origin is not None
        shown_by_right.setdefault(item.right_origin, []).append(item)
    return [
        (left, right)
        for left, right in later
        if not any(
            item.client == left[0] and item.clock <= left[1] < item.clock + item.length
            for item in shown_by_right.get(right, ())
        )
    ]


def _bound_walks(guard: UpdateGuard, walks: int, spent: Spend | None) -> None:
    """Refuse an update whose pairs history cannot order would have yrs walk the document too
    many times: each distinct item asked costs a walk of up to every block of the document.
    ``walks`` are this slice's; ``spent``, the walks of the update's slices before it."""
    blocks = walks * (guard.cuts.total + 1)
    if spent is not None:
        walks, blocks = walks + spent.walks, blocks + spent.walked_blocks
    if walks > FREE_WALKS and blocks > MAX_WALKED_BLOCKS:
        raise UpdateRefused(
            f"update refused: the order of {walks} of its items' neighbours cannot be told from"
            " this document's history, and reading it off the document would take too long",
            "origin-walks",
        )


def check_applied_origin_order(doc: Doc, pairs: list[OriginPair]) -> None:
    """The same rule for pairs that involve an update's own items, on the doc it went into."""
    _check_pairs(doc, pairs, unplaceable_is_inconsistent=False)  # still unseen: let through


def _check_pairs(
    doc: Doc, pairs: list[OriginPair], *, unplaceable_is_inconsistent: bool
) -> list[OriginPair]:
    """Raise for a pair shown out of order; return the pairs whose order cannot be seen."""
    undecided: list[OriginPair] = []
    offsets: dict[ID, tuple[int, int]] = {}  # each resolution walks the sequence: once per ID

    def offsets_of(ident: ID) -> tuple[int, int]:
        found = offsets.get(ident)
        if found is None:
            found = offsets[ident] = _offsets(txn, ident)
        return found

    with doc.transaction() as txn:
        for left, right in pairs:
            if left == right:
                raise _inconsistent()
            try:
                left_after, left_before = offsets_of(left)
                right_after, right_before = offsets_of(right)
            except BaseException as exc:  # an ID yrs cannot place (a GC'd one: a panic)
                if not isinstance(exc, Exception) and not is_rust_panic(exc):
                    raise
                if unplaceable_is_inconsistent:
                    raise _inconsistent() from exc
                continue  # e.g. garbage-collected in the same update: nothing to order
            if left_before > left_after:  # the origin is visible
                consistent = right_after >= left_before
            elif right_before > right_after:  # only the right origin is visible
                consistent = left_after <= right_after
            elif left_after == right_after:
                undecided.append((left, right))  # both deleted, nothing visible between
                continue
            else:
                consistent = left_after < right_after
            if not consistent:
                raise _inconsistent()
    return undecided


def _offsets(txn: Transaction, ident: ID) -> tuple[int, int]:
    item = {"client": ident[0], "clock": ident[1]}
    after = StickyIndex.from_json({"item": item, "assoc": int(Assoc.AFTER)})
    before = StickyIndex.from_json({"item": item, "assoc": int(Assoc.BEFORE)})
    return after.get_index(txn), before.get_index(txn)


def _inconsistent() -> UpdateRefused:
    return UpdateRefused(
        "update refused: an item's right origin is not to the right of its origin",
        "inconsistent-origins",
    )


def _splits_character() -> UpdateRefused:
    return UpdateRefused(
        "update refused: it splits a character of two UTF-16 units (an emoji)", "split-character"
    )

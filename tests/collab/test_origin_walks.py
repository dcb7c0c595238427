"""The guard's origin-order check reads order off history (origins back, right origins forward)
and walks the document only for what history cannot settle, a bounded number of times: an update
that would need more walks than the document can afford is refused before any walk."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pycrdt import Doc, Text

from tether.bench.shape_updates import (
    ATTACKER,
    OWNER,
    backwards_pairs,
    item,
    string,
    typed_backwards,
    update,
)
from tether.collab.updates import guard as update_guard
from tether.collab.updates.guard import UpdateGuard, UpdateRefused, check_origin_order
from tether.collab.updates.sequence_order import Chains, OrderFacts, RightOrigins
from tether.protocol.updates.update_scan import STRING, ScannedUpdate, scan_update


def admitted(*updates: bytes) -> tuple[Doc, UpdateGuard]:
    doc, guard = Doc(), UpdateGuard(128)
    for each in updates:
        scan = scan_update(each)
        guard.admit(scan, guard.check(scan))
        doc.apply_update(each)
    return doc, guard


def facts_for(guard: UpdateGuard, scan: ScannedUpdate) -> OrderFacts:
    fresh, fresh_rights = Chains(), RightOrigins()
    fresh.record(scan, guard.known_clocks)
    fresh_rights.record(scan, guard.known_clocks)
    return OrderFacts(guard.chains, fresh, (guard.rights, fresh_rights))


def between(*pairs: tuple[int, int]) -> bytes:
    """One attacker item between the ``OWNER`` clocks of each pair (origin, right origin)."""
    structs = [
        item(STRING, string("x"), origin=(OWNER, left), right=(OWNER, right))
        for left, right in pairs
    ]
    return update([(ATTACKER, 0, structs)])


def test_neighbours_in_a_document_typed_backwards_are_settled_by_right_origins() -> None:
    doc, guard = admitted(typed_backwards(2000))
    for gap in (1, 2):
        scan = scan_update(between(*[(j, j - gap) for j in range(gap, 2000, 7)]))
        facts = facts_for(guard, scan)
        assert all(facts.left_of(i.origin, i.right_origin) for i in scan.items)  # type: ignore[arg-type]
        assert check_origin_order(doc, scan, guard) == []


def test_more_unsettled_pairs_than_the_document_affords_to_walk_are_refused() -> None:
    shape = backwards_pairs(20_000)  # 5,000 pairs three characters apart
    doc, guard = admitted(*shape.setup)
    scan = scan_update(shape.attack)
    guard.check(scan)
    with pytest.raises(UpdateRefused) as refused:
        check_origin_order(doc, scan, guard)
    assert refused.value.limit == "origin-walks"


def test_a_few_unsettled_pairs_are_still_walked_and_checked() -> None:
    doc, guard = admitted(typed_backwards(20_000))
    fine = scan_update(between((9000, 8997)))
    guard.check(fine)
    assert check_origin_order(doc, fine, guard) == []
    reversed_pair = scan_update(between((8997, 9000)))  # right origin left of the origin
    with pytest.raises(UpdateRefused) as refused:
        check_origin_order(doc, reversed_pair, guard)
    assert refused.value.limit == "inconsistent-origins"


edits = st.lists(
    st.tuples(st.integers(0, 2), st.floats(0, 1), st.sampled_from(["ab", "c", "de f", "x"])),
    min_size=5,
    max_size=60,
)


@settings(max_examples=40, deadline=None)
@given(steps=edits, seed=st.integers(0, 1000))
def test_what_history_settles_agrees_with_yrs(steps: list[tuple[int, float, str]], seed: int):
    """Three editors typing at random places, each sometimes offline: every pair of the last
    update that history shows in order is in order in yrs, and none is shown reversed."""
    rng = random.Random(seed)
    clients = [Doc(client_id=500 + i) for i in range(3)]
    server, guard = Doc(), UpdateGuard(128)
    for who, where, chars in steps:
        doc = clients[who]
        before = doc.get_state()
        text = doc.get("content", type=Text)
        text.insert(int(where * len(text)), chars)
        change = doc.get_update(before)
        scan = scan_update(change)
        facts = facts_for(guard, scan)
        pairs = [(i.origin, i.right_origin) for i in scan.items if i.origin and i.right_origin]
        assert not [p for p in pairs if facts.left_of(p[1], p[0])]
        settled = [p for p in pairs if facts.left_of(*p)]
        guard.admit(scan, guard.check(scan))
        server.apply_update(change)
        update_guard._check_pairs(server, settled, unplaceable_is_inconsistent=False)
        if rng.random() < 0.6:  # the others hear of it now, or later
            for other in clients:
                other.apply_update(server.get_update(other.get_state()))

"""Order read off a document's history (collab.updates.sequence_order) never contradicts yrs, and it
settles the pairs of an honest offline burst without asking yrs."""

from __future__ import annotations

import random

import pytest
from pycrdt import Doc, Text

from tether.collab.updates import guard as update_guard
from tether.collab.updates.guard import UpdateGuard, UpdateRefused, check_origin_order
from tether.collab.updates.sequence_order import Chains, OrderFacts, RightOrigins
from tether.protocol.updates.update_scan import scan_update


def guarded(doc: Doc) -> UpdateGuard:
    guard = UpdateGuard(128)
    scan = scan_update(doc.get_update())
    guard.admit(scan, guard.check(scan))
    return guard


def authored(seed: int, authors: int, words: int) -> Doc:
    """A text written by several authors typing words at random places, synced as they go."""
    rng = random.Random(seed)
    docs = [Doc(client_id=seed * 10 + k + 1) for k in range(authors)]
    for _ in range(words):
        doc = rng.choice(docs)
        text = doc.get("t", type=Text)
        state = doc.get_state()
        text.insert(rng.randint(0, len(text)), rng.choice(["lorem ", "ipsum ", "do "]))
        update = doc.get_update(state)
        for other in docs:
            if other is not doc:
                other.apply_update(update)
    return docs[0]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_facts_agree_with_yrs_on_every_pair_they_settle(seed: int) -> None:
    rng = random.Random(seed)
    server = authored(seed, 3, 300)
    guard = guarded(server)
    offline = Doc(client_id=999)
    offline.apply_update(server.get_update())
    text = offline.get("t", type=Text)
    state = offline.get_state()
    for _ in range(300):
        if len(text) and rng.random() < 0.2:
            start = rng.randrange(len(text))
            del text[start : start + 1]
        else:
            text.insert(rng.randint(0, len(text)), rng.choice("xyz"))
    scan = scan_update(offline.get_update(state))
    fresh, fresh_rights = Chains(), RightOrigins()
    fresh.record(scan, guard.known_clocks)
    fresh_rights.record(scan, guard.known_clocks)
    facts = OrderFacts(guard.chains, fresh, (guard.rights, fresh_rights))
    pairs = [(i.origin, i.right_origin) for i in scan.items if i.origin and i.right_origin]
    settled = [pair for pair in pairs if facts.left_of(*pair)]
    assert not [pair for pair in pairs if facts.left_of(pair[1], pair[0])]  # honest: none reversed
    # Origins back and right origins forward settle every pair: nothing to walk.
    assert len(settled) == len(pairs)
    server.apply_update(offline.get_update(state))
    # The walk agrees with every pair the facts settled (it raises on one out of order).
    update_guard._check_pairs(server, settled, unplaceable_is_inconsistent=True)


def test_a_pair_read_backwards_along_one_chain_is_refused_without_a_walk() -> None:
    doc = Doc(client_id=1)
    doc.get("t", type=Text).insert(0, "hello world")
    guard = guarded(doc)
    forged = bytes([1, 1, 77, 0, 0x80 | 0x40 | 4, 1, 6, 1, 2, 1]) + b"X" + bytes([0])
    scan = scan_update(forged)  # origin "w" (1:6), right origin "l" (1:2): left of it
    guard.check(scan)
    with pytest.raises(UpdateRefused):
        check_origin_order(doc, scan, guard)

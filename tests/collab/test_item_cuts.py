"""collab.updates.item_cuts through the update guard: an update that would cut the document's
items into thousands of pieces (each cut walks, copies and moves in yrs) is refused before yrs
sees it, and honest edits (typing, select-and-delete, find-and-replace) pass with room to spare."""

from __future__ import annotations

import re

import pytest
from pycrdt import Doc, Text

from tether.bench.shape_updates import (
    ATTACKER,
    OWNER,
    fragmenting_deletes,
    fragmenting_inserts,
    item,
    long_item,
    string,
    update,
)
from tether.collab.updates.guard import UpdateGuard, UpdateRefused
from tether.collab.updates.item_cuts import DEFAULT_MAX_CUT_COST, MAX_CUTS
from tether.protocol.updates.update_merge import scan_merged
from tether.protocol.updates.update_scan import STRING, scan_update

WORDS = ("of", "and", "lorem", "ipsum", "dolor", "sit", "amet", "consectetur")


def prose(words: int) -> str:
    """Text with "the" every 60 words (about 300 in 100 KB)."""
    return " ".join("the" if i % 60 == 0 else WORDS[(i * 7 + i // 3) % 8] for i in range(words))


def admitted(*updates: bytes, guard: UpdateGuard | None = None) -> UpdateGuard:
    guard = guard or UpdateGuard(128)
    for each in updates:
        _, scan = scan_merged(each)
        guard.admit(scan, guard.check(scan))
    return guard


def cost(guard: UpdateGuard, update: bytes) -> int:
    return guard.cuts.cost(scan_merged(update)[1], guard.known_clocks, 10**15)


def edit(doc: Doc, change) -> bytes:  # type: ignore[no-untyped-def]
    before = doc.get_state()
    with doc.transaction():
        change(doc.get("content", type=Text))
    return doc.get_update(before)


def replace_all(text: Text, word: str, by: str, *, backwards: bool) -> None:
    """What an editor's replace-all does in one transaction, front to back or back to front."""
    current = str(text)  # ASCII: pycrdt's byte indices are character indices
    matches = list(re.finditer(rf"\b{word}\b", current))
    shift = 0
    for match in reversed(matches) if backwards else matches:
        at = match.start() + shift
        del text[at : at + len(word)]
        text.insert(at, by)
        if not backwards:
            shift += len(by) - len(word)


def test_one_character_deletes_over_one_long_item_are_refused_with_a_reason() -> None:
    shape = fragmenting_deletes(20_000)  # 20,000 ranges over one item of 80,000 characters
    guard = admitted(*shape.setup)
    with pytest.raises(UpdateRefused, match="too many pieces") as refused:
        guard.check(scan_update(shape.attack))
    assert refused.value.limit == "item-cuts"


def test_one_character_items_typed_into_one_long_item_are_refused_too() -> None:
    shape = fragmenting_inserts(40_000)
    guard = admitted(*shape.setup)
    with pytest.raises(UpdateRefused) as refused:
        guard.check(scan_update(shape.attack))
    assert refused.value.limit == "item-cuts"


def test_a_few_such_cuts_pass() -> None:
    shape = fragmenting_deletes(1_000)
    guard = admitted(*shape.setup)
    guard.check(scan_update(shape.attack))


def test_a_find_and_replace_over_one_pasted_item_passes_in_either_order() -> None:
    client = Doc(client_id=7)
    pasted = edit(client, lambda text: text.insert(0, prose(20_000)))  # ~110 KB, one item
    guard = admitted(pasted)
    other = Doc(client_id=8)
    other.apply_update(pasted)
    forwards = edit(client, lambda text: replace_all(text, "the", "THE", backwards=False))
    backwards = edit(other, lambda text: replace_all(text, "the", "THE", backwards=True))
    assert len(scan_update(forwards).items) > 300
    guard.check(scan_update(forwards))
    guard.check(scan_update(backwards))
    # Back to front, yrs walks the item from its start at every cut: it costs far more.
    assert cost(guard, backwards) > 10 * cost(guard, forwards)
    assert cost(guard, backwards) < DEFAULT_MAX_CUT_COST


def test_a_select_and_delete_over_a_much_edited_document_cuts_nothing_new() -> None:
    client = Doc(client_id=9)
    guard = UpdateGuard(128)
    deleted: set[int] = set()
    for i in range(300):
        word = f"word{i} "
        admitted(edit(client, lambda text, w=word: text.insert(len(text), w)), guard=guard)
        if i % 3 == 0:  # a typo fixed now and then
            fix = edit(client, lambda text: text.__delitem__(len(text) - 1))
            deleted.update(c for _, s, n in scan_update(fix).deletes for c in range(s, s + n))
            admitted(fix, guard=guard)
        if i % 20 == 0:  # and something added earlier in the text
            admitted(edit(client, lambda text: text.insert(len(text) // 2, "more ")), guard=guard)
    everything = edit(client, lambda text: text.__delitem__(slice(0, len(text))))
    assert cost(guard, everything) == 0
    # Yjs writes only what it deletes now, sorted and joined: ranges between the characters
    # deleted before.
    ranges: list[tuple[int, int]] = []
    for clock in range(guard.known_clocks[9]):
        if clock in deleted:
            continue
        if ranges and sum(ranges[-1]) == clock:
            ranges[-1] = (ranges[-1][0], ranges[-1][1] + 1)
        else:
            ranges.append((clock, 1))
    yjs_like = update([], [(9, ranges)])
    assert len(scan_update(yjs_like).deletes) > 50
    assert cost(guard, yjs_like) == 0


def test_typing_on_at_the_end_costs_nothing_and_remembers_no_cut() -> None:
    client = Doc(client_id=10)
    guard = UpdateGuard(128)
    for i in range(500):
        char = "abc"[i % 3]
        keystroke = edit(client, lambda text, c=char: text.insert(len(text), c))
        assert cost(guard, keystroke) == 0
        admitted(keystroke, guard=guard)
    assert guard.cuts.count(10) == 0


def test_a_stored_update_gets_a_larger_budget_so_a_folded_document_still_loads() -> None:
    shape = fragmenting_deletes(1_000)
    guard = admitted(*shape.setup)
    scan = scan_update(shape.attack)
    priced = guard.cuts.cost(scan, guard.known_clocks, 10**15)
    guard.max_cut_cost = priced * 2 // 3  # refused live, within twice that when stored
    with pytest.raises(UpdateRefused):
        guard.check(scan)
    guard.check(scan, stored=True)


def test_more_cuts_than_any_honest_edit_makes_are_refused_however_cheap() -> None:
    """Many separate items, each cut once near its end: cheap each, but pricing a million of
    them would itself hold the loop."""
    count = MAX_CUTS + 10
    backwards = [item(STRING, string("ab"))]  # each item typed before the one before it
    backwards += [item(STRING, string("ab"), right=(OWNER, 2 * (i - 1))) for i in range(1, count)]
    guard = admitted(update([(OWNER, 0, backwards)]))
    cuts = update([], [(OWNER, [(2 * i + 1, 1) for i in range(count)])])
    with pytest.raises(UpdateRefused) as refused:
        guard.check(scan_update(cuts))
    assert refused.value.limit == "item-cuts"


def test_cuts_where_the_document_was_cut_before_are_free() -> None:
    shape = fragmenting_deletes(1_000)
    guard = admitted(*shape.setup, shape.attack)
    between = item(STRING, string("x"), origin=(OWNER, 1), right=(OWNER, 2))
    again = update([(ATTACKER, 0, [between])])
    assert cost(guard, again) == 0


def test_touching_delete_ranges_each_cut_since_yrs_does_not_join_them() -> None:
    """40,000 one-character ranges side by side over one long item: yrs cuts at every one of
    them (0.35 s here; back to front 1.1 s), not once as for the one range they add up to."""
    guard = admitted(long_item(400_000))
    one = update([], [(OWNER, [(0, 40_000)])])
    touching = update([], [(OWNER, [(i, 1) for i in range(40_000)])])
    assert cost(guard, one) < 10**7
    with pytest.raises(UpdateRefused) as refused:
        guard.check(scan_update(touching))
    assert refused.value.limit == "item-cuts"

"""The guard's budgets meant per update hold across the slices a big update is applied in: an
update refused whole for what it would cost (its cuts, their count, its walks) is refused sliced
too, however finely, where each slice alone would pass; and a slice is a bounded amount of work,
counted in structs."""

from __future__ import annotations

import pytest
from pycrdt import Doc, XmlFragment

from tether.bench.shape_updates import (
    ATTACKER,
    OWNER,
    backwards_pairs,
    fragmenting_deletes,
    item,
    long_item,
    many_clients,
    map_entries,
    string,
    update,
)
from tether.collab.content.markdown_in import MarkdownSource
from tether.collab.rooms.document_edits import _tree_update
from tether.collab.updates.guard import (
    Spend,
    UpdateGuard,
    UpdateRefused,
    check_applied_origin_order,
    check_origin_order,
)
from tether.collab.updates.item_cuts import DEFAULT_MAX_CUT_COST, MAX_CUTS
from tether.collab.updates.slicing import SLICE_BYTES, SLICE_STRUCTS, slice_update
from tether.protocol.updates.update_merge import scan_merged
from tether.protocol.updates.update_order import in_slices
from tether.protocol.updates.update_scan import STRING, scan_update

Case = tuple[list[bytes], bytes]  # what the document holds, and the one update sent


def costly_cuts() -> Case:
    """4,000 one-character inserts into one 1,000,000-character item, front to back: fewer cuts
    than ``MAX_CUTS``, but each copies the rest of the item (about 4e9 units)."""
    structs = [
        item(STRING, string("b"), origin=(OWNER, 2 * i), right=(OWNER, 2 * i + 1))
        for i in range(4_000)
    ]
    return [long_item(1_000_000)], update([(ATTACKER, 0, structs)])


def many_cheap_cuts() -> Case:
    """One delete inside each of ``MAX_CUTS`` + 10 separate short items: cheap each, too many."""
    count = MAX_CUTS + 10
    backwards = [item(STRING, string("ab"))]  # each item typed before the one before it
    backwards += [item(STRING, string("ab"), right=(OWNER, 2 * (i - 1))) for i in range(1, count)]
    deletes = update([], [(OWNER, [(2 * i + 1, 1) for i in range(count)])])
    return [update([(OWNER, 0, backwards)])], deletes


def unsettled_walks() -> Case:
    """2,500 items between characters of a document typed backwards, which history cannot
    order: about 2,500 walks of 2,500 blocks."""
    shape = backwards_pairs(2_500, pairs=2_500)
    return shape.setup, shape.attack


PRICED = {
    "cut-cost": (costly_cuts, "item-cuts"),
    "cut-count": (many_cheap_cuts, "item-cuts"),
    "origin-walks": (unsettled_walks, "origin-walks"),
}


def admitted(setup: list[bytes]) -> tuple[Doc, UpdateGuard]:
    doc, guard = Doc(), UpdateGuard(128)
    for each in setup:
        each, scan = scan_merged(each)
        guard.admit(scan, guard.check(scan))
        doc.apply_update(each)
    return doc, guard


def refusal_whole(case: Case) -> str | None:
    doc, guard = admitted(case[0])
    scan = scan_merged(case[1])[1]
    try:
        guard.check(scan)
        check_origin_order(doc, scan, guard)
    except UpdateRefused as exc:
        return exc.limit
    return None


def refusal_sliced(case: Case, structs: int, spent: Spend | None) -> str | None:
    """Each slice checked, applied and admitted as ``collab.updates.sliced_apply`` does, all
    sharing ``spent`` (None: each slice priced alone, as before budgets were shared)."""
    doc, guard = admitted(case[0])
    pieces = in_slices(scan_merged(case[1])[0], structs, SLICE_BYTES)
    assert pieces is not None and len(pieces) > 1
    for piece in pieces:
        scan = scan_update(piece)
        try:
            parents = guard.check(scan, spent=spent)
            pairs = check_origin_order(doc, scan, guard, spent)
        except UpdateRefused as exc:
            return exc.limit
        doc.apply_update(piece)
        if pairs:
            check_applied_origin_order(doc, pairs)
        guard.admit(scan, parents)
    return None


@pytest.mark.parametrize("structs", [64, SLICE_STRUCTS])
@pytest.mark.parametrize("kind", list(PRICED))
def test_an_update_refused_whole_for_its_cost_is_refused_however_finely_it_is_sliced(
    kind: str, structs: int
) -> None:
    build, limit = PRICED[kind]
    case = build()
    assert refusal_whole(case) == limit
    assert refusal_sliced(case, structs, None) is None  # each slice alone fits the budget
    assert refusal_sliced(case, structs, Spend()) == limit


def test_the_cut_cost_case_is_refused_for_its_cost_and_the_count_case_for_its_count() -> None:
    _, guard = admitted(costly_cuts()[0])
    cost, cuts = guard.cuts.priced(scan_update(costly_cuts()[1]), guard.known_clocks, 10**15)
    assert cost > DEFAULT_MAX_CUT_COST and cuts < MAX_CUTS
    setup, deletes = many_cheap_cuts()
    _, guard = admitted(setup)
    cost, cuts = guard.cuts.priced(scan_update(deletes), guard.known_clocks, 10**15, 10**9)
    assert cost < DEFAULT_MAX_CUT_COST and cuts > MAX_CUTS


def test_a_refused_slice_adds_nothing_to_what_the_update_has_spent() -> None:
    setup, attack = costly_cuts()
    _, guard = admitted(setup)
    spent = Spend(cut_cost=DEFAULT_MAX_CUT_COST)  # slices before it took the whole budget
    with pytest.raises(UpdateRefused):
        guard.check(scan_update(attack), spent=spent)
    assert spent == Spend(cut_cost=DEFAULT_MAX_CUT_COST)


def markdown_import(kib: int) -> bytes:
    """What a ``PUT text/markdown`` of ``kib`` KiB of ``*a* `` makes: one update of one client,
    a run and a format item per word."""
    source = MarkdownSource("*a* " * (kib * 1024 // 4))
    return _tree_update(Doc().get_update(), source, "rich")


@pytest.mark.parametrize(
    "attack",
    [
        markdown_import(16),
        fragmenting_deletes(20_000).attack,
        many_clients(5_000).attack,
        map_entries(10_000).attack,
    ],
    ids=["markdown-import", "delete-ranges", "many-clients", "map-entries"],
)
def test_each_slice_of_a_big_update_is_at_most_a_slice_of_structs_and_together_they_are_it(
    attack: bytes,
) -> None:
    read = scan_merged(attack)
    sliced = slice_update(*read)
    assert sliced is not None
    counts = [len(s.items) + len(s.ranges) + len(s.deletes) for _, s in sliced.slices]
    assert max(counts) <= SLICE_STRUCTS
    assert sum(counts) == len(read[1].items) + len(read[1].ranges) + len(read[1].deletes)
    assert len(sliced.slices) > 1
    whole, pieces = Doc(), Doc()
    whole.apply_update(read[0])
    for piece, _ in sliced.slices:
        pieces.apply_update(piece)
    assert pieces.get_state() == whole.get_state()


def test_an_honest_import_sliced_finely_spends_nothing_of_the_budgets_per_update() -> None:
    attack = markdown_import(16)
    spent = Spend()
    doc, guard = Doc(), UpdateGuard(128)
    for piece, scan in slice_update(*scan_merged(attack)).slices:  # type: ignore[union-attr]
        parents = guard.check(scan, spent=spent)
        assert check_origin_order(doc, scan, guard, spent) == []
        doc.apply_update(piece)
        guard.admit(scan, parents)
    assert spent == Spend()
    assert len(doc.get("rich", type=XmlFragment).children) > 0

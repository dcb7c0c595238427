"""protocol.updates.update_order: an update cut into layers in dependency order makes, applied layer
by layer in one transaction, the document the update makes whole; many clients each typing after
the one before become one layer each (what yrs integrates without a pending set)."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pycrdt import Array, Doc, Text, merge_updates

from tests.protocol.test_update_merge import _history, edits
from tether.bench.shape_updates import (
    ATTACKER,
    TEXT,
    fragmenting_deletes,
    item,
    many_clients,
    map_entries,
    string,
    update,
)
from tether.protocol.updates.update_order import in_dependency_order, in_slices
from tether.protocol.updates.update_scan import STRING, scan_update


def whole(update_: bytes) -> Doc:
    doc = Doc()
    doc.apply_update(update_)
    return doc


def layered(layers: list[bytes]) -> Doc:
    doc = Doc()
    with doc.transaction(origin="test"):
        for layer in layers:
            doc.apply_update(layer)
    return doc


def assert_same(left: Doc, right: Doc) -> None:
    assert left.get_state() == right.get_state()
    assert str(left.get("content", type=Text)) == str(right.get("content", type=Text))
    assert left.get("list", type=Array).to_py() == right.get("list", type=Array).to_py()
    # The same delete set: nothing more to send either way.
    assert whole(left.get_update()).get_update(right.get_state()) == right.get_update(
        right.get_state()
    )


def test_a_chain_of_clients_becomes_one_layer_per_client_and_the_same_text() -> None:
    attack = many_clients(500).attack
    layers = in_dependency_order(attack)
    assert layers is not None and len(layers) == 500 + 1  # and the delete set
    assert_same(whole(attack), layered(layers))
    assert str(layered(layers).get("content", type=Text)) == "a" * 500


def test_a_chain_whose_ids_fall_is_ordered_too() -> None:
    top = 2_000_000
    clients = [(top, 0, [item(STRING, string("x"), root=TEXT)])]
    clients += [
        (top - i, 0, [item(STRING, string("x"), origin=(top - i + 1, 0))]) for i in range(1, 300)
    ]
    attack = update(clients)
    layers = in_dependency_order(attack)
    assert layers is not None and len(layers) == 301
    assert_same(whole(attack), layered(layers))


def test_few_clients_or_a_gap_are_left_whole() -> None:
    one = update([(ATTACKER, 0, [item(STRING, string("hello"), root=TEXT)])])
    assert in_dependency_order(one) is None
    gapped = update([(ATTACKER, 0, [item(STRING, string("x")), b"\x0a\x02"])])
    assert in_dependency_order(gapped, min_clients=1) is None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=edits, seed=st.integers(0, 2**16))
def test_any_history_in_one_update_makes_the_same_document_layer_by_layer(
    steps: list[tuple[int, str, float, str]], seed: int
) -> None:
    originals = _history(steps)
    together = merge_updates(*originals)
    layers = in_dependency_order(together, min_clients=1)
    if layers is None:
        assert together[0] == 0  # deletes only: nothing to order
        return
    assert_same(whole(together), layered(layers))
    # On top of part of the history, too: dependencies already in the document count.
    cut = random.Random(seed).randint(0, len(originals))
    base = whole(merge_updates(*originals[:cut])) if cut else Doc()
    rest = merge_updates(*originals[cut:]) if cut < len(originals) else None
    if rest is None:
        return
    rest_layers = in_dependency_order(rest, min_clients=1)
    if rest_layers is None:
        assert rest[0] == 0
        return
    expected = whole(base.get_update())
    expected.apply_update(rest)
    with base.transaction(origin="test"):
        for layer in rest_layers:
            base.apply_update(layer)
    assert_same(expected, base)


def sliced(slices: list[bytes], base: Doc | None = None) -> Doc:
    """Each slice in a transaction of its own, as the room applies them between loop turns."""
    doc = base or Doc()
    for piece in slices:
        doc.apply_update(piece)
    return doc


def structs_of(piece: bytes) -> int:
    scan = scan_update(piece)
    return len(scan.items) + len(scan.ranges) + len(scan.deletes)


def test_a_big_update_is_cut_into_bounded_slices_that_make_the_same_document() -> None:
    for attack in (many_clients(3_000).attack, map_entries(5_000).attack):
        slices = in_slices(attack, 256, 4096)
        assert slices is not None and len(slices) > 10
        assert all(structs_of(piece) <= 256 and len(piece) < 4096 + 512 for piece in slices)
        assert_same(whole(attack), sliced(slices))


def test_deletes_are_cut_too_and_come_after_every_struct() -> None:
    shape = fragmenting_deletes(2_000)
    base = whole(merge_updates(*shape.setup))
    slices = in_slices(shape.attack, 300, 1 << 20)
    assert slices is not None and len(slices) >= 2_000 // 300
    assert all(structs_of(piece) <= 300 for piece in slices)
    expected = whole(base.get_update())
    expected.apply_update(shape.attack)
    assert_same(expected, sliced(slices, base))


def test_a_skip_is_kept_and_an_impossible_order_is_refused() -> None:
    gapped = update([(ATTACKER, 0, [item(STRING, string("x")), b"\x0a\x02"])])
    slices = in_slices(gapped, 1, 1 << 20)
    assert slices is not None and len(slices) == 2  # the item, the skip (no deletes)
    # An item whose origin is a later clock of its own client: no Yjs history makes that.
    loop = update([(ATTACKER, 0, [item(STRING, string("x"), origin=(ATTACKER, 5))])])
    assert in_slices(loop, 16, 1 << 20) is None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=edits, seed=st.integers(0, 2**16), size=st.integers(1, 6))
def test_any_history_in_one_update_makes_the_same_document_slice_by_slice(
    steps: list[tuple[int, str, float, str]], seed: int, size: int
) -> None:
    originals = _history(steps)
    if not originals:
        return
    cut = random.Random(seed).randint(0, len(originals) - 1)
    base_updates, rest = originals[:cut], merge_updates(*originals[cut:])
    slices = in_slices(rest, size, 64)
    assert slices is not None
    assert all(structs_of(piece) <= size for piece in slices)
    expected = whole(merge_updates(*base_updates)) if base_updates else Doc()
    expected.apply_update(rest)
    base = whole(merge_updates(*base_updates)) if base_updates else Doc()
    assert_same(expected, sliced(slices, base))

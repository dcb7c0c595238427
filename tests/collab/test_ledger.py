"""The node's ledger (collab.cluster.ledger) as a pure unit: watermarks and incarnations, no
database, no bus."""

from __future__ import annotations

from tether.collab.cluster.ledger import Ledger, SeqWatermark


def test_a_watermark_advances_only_over_a_contiguous_run():
    mark = SeqWatermark()
    for seq in (2, 3, 5):
        mark.add(seq)
    assert mark.mark == 0 and mark.holds(5) and not mark.holds(4)
    mark.add(1)
    assert mark.mark == 3
    mark.raise_to(4)
    assert mark.mark == 5 and not mark.ahead


def test_a_copied_watermark_moves_on_its_own():
    mark = SeqWatermark()
    mark.add(2)
    copied = mark.copy()
    copied.add(1)
    assert copied.mark == 2 and mark.mark == 0 and mark.holds(2)


def test_a_load_holds_exactly_what_was_read():
    ledger = Ledger()
    ledger.committed("doc", 9)  # held before: a reload replaces it
    ledger.loaded("doc", 7, 3, [4, 6])
    assert ledger.epoch("doc") == 7
    mark = ledger.watermark("doc")
    assert mark.mark == 4 and mark.holds(6) and not mark.holds(5) and not mark.holds(9)


def test_commits_advance_the_watermark_and_the_first_one_adopts_its_incarnation():
    ledger = Ledger()
    ledger.loaded("doc", -4, 0, [])  # absent, its incarnation 4 deleted
    ledger.committed("doc", 1)
    ledger.landed("doc", 5)
    ledger.landed("doc", 6)  # only the first: the incarnation held stays
    assert ledger.epoch("doc") == 5 and ledger.watermark("doc").mark == 1


def test_a_delete_starts_the_numbers_again_and_awaits_a_newer_incarnation():
    ledger = Ledger()
    ledger.loaded("doc", 5, 0, [1, 2])
    ledger.deleted("doc", 5)
    assert ledger.epoch("doc") == -5 and ledger.watermark("doc").mark == 0
    assert not ledger.accepts("doc", 5)
    assert ledger.accepts("doc", 6) and ledger.epoch("doc") == 6  # adopted


def test_only_the_incarnation_held_is_accepted():
    ledger = Ledger()
    ledger.loaded("doc", 5, 0, [])
    assert ledger.accepts("doc", 5) and not ledger.accepts("doc", 6)
    ledger.lift_floor("doc", 9)  # an incarnation is held: nothing to lift
    assert ledger.epoch("doc") == 5


def test_a_delete_heard_of_before_adopting_lifts_the_floor():
    ledger = Ledger()
    ledger.loaded("doc", -2, 0, [])
    ledger.lift_floor("doc", 4)
    ledger.lift_floor("doc", 3)  # an older one changes nothing
    assert ledger.epoch("doc") == -4
    assert not ledger.accepts("doc", 4) and ledger.accepts("doc", 5)


def test_a_forgotten_document_holds_nothing():
    ledger = Ledger()
    ledger.loaded("doc", 5, 2, [3])
    ledger.forget("doc")
    assert ledger.epoch("doc") == 0 and ledger.watermark("doc").mark == 0

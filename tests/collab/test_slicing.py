"""collab.updates.slicing: what an update needs of the document is found before any slice is
applied, exactly where the guard would refuse it whole for missing history; slices of an update
checked and admitted one by one give the guard what the whole would."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pycrdt import merge_updates

from tests.protocol.test_update_merge import _history, edits
from tether.collab.updates.guard import MissingDependencies, UpdateGuard, UpdateRefused
from tether.collab.updates.slicing import needs_of, slice_update
from tether.protocol.updates.update_merge import scan_merged


def guard_of(updates: list[bytes]) -> UpdateGuard:
    guard = UpdateGuard(64)
    for stored in updates:
        scan = scan_merged(stored)[1]
        try:
            guard.admit(scan, guard.check(scan))
        except MissingDependencies:
            continue  # after a hole: the document never had it
    return guard


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=edits, seed=st.integers(0, 2**16))
def test_needs_say_missing_history_exactly_when_the_guard_does(
    steps: list[tuple[int, str, float, str]], seed: int
) -> None:
    originals = _history(steps)
    if len(originals) < 2:
        return
    rng = random.Random(seed)
    cut = rng.randint(1, len(originals) - 1)
    base = originals[:cut]
    if rng.random() < 0.5:
        base = [u for i, u in enumerate(base) if i != rng.randrange(len(base))]  # a hole
    update, scan = scan_merged(merge_updates(*originals[cut:]))
    guard = guard_of(base)
    try:
        guard.check(scan)
        refused = False
    except MissingDependencies:
        refused = True
    except UpdateRefused:
        return  # refused for another reason: not what needs are about
    assert (guard.lacking(needs_of(scan)) is not None) == refused
    if refused:
        return
    # Slices checked and admitted one by one pass, and leave the guard knowing what the whole
    # update would have taught it.
    sliced = slice_update(update, scan)
    assert sliced is not None
    whole = guard_of(base)
    whole.admit(scan, whole.check(scan))
    for _piece, piece_scan in sliced.slices:
        guard.admit(piece_scan, guard.check(piece_scan))
    assert guard.known_clocks == whole.known_clocks

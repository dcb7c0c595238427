"""collab.updates.guard: an edit at a boundary inside a character of two UTF-16 units is refused,
whether that character came in an earlier update, in the same one, or partly in both; the index
keeps one entry per item, so a paragraph of 400,000 emoji is checked and admitted without a
Python loop per character."""

from __future__ import annotations

import pytest

from tether.bench.shape_updates import OWNER, item, string, update
from tether.collab.updates.guard import UpdateGuard, UpdateRefused
from tether.protocol.updates.update_merge import scan_merged
from tether.protocol.updates.update_scan import STRING

OTHER = OWNER + 1
EMOJI = "\N{GRINNING FACE}"  # two UTF-16 units


def admit(guard: UpdateGuard, update_: bytes) -> None:
    scan = scan_merged(update_)[1]
    guard.admit(scan, guard.check(scan))


def refused(guard: UpdateGuard, update_: bytes) -> bool:
    scan = scan_merged(update_)[1]
    try:
        guard.check(scan)
    except UpdateRefused as exc:
        assert exc.limit == "split-character"
        return True
    return False


def text_of(client: int, clock: int, text: str, origin: tuple[int, int] | None = None) -> bytes:
    return update([(client, clock, [item(STRING, string(text), origin=origin)])])


def test_an_insert_or_delete_inside_an_emoji_is_refused_wherever_the_emoji_came_from() -> None:
    guard = UpdateGuard(128)
    admit(guard, text_of(OWNER, 0, "a" + EMOJI + "b"))  # clocks: a 0, emoji 1-2, b 3
    assert refused(guard, text_of(OTHER, 0, "X", origin=(OWNER, 1)))  # between its two units
    assert not refused(guard, text_of(OTHER, 0, "X", origin=(OWNER, 2)))  # after it
    assert refused(guard, update([], deletes=[(OWNER, [(2, 1)])]))  # its second half
    assert not refused(guard, update([], deletes=[(OWNER, [(1, 2)])]))  # all of it
    # The emoji and the edit inside it in one update (another client's item after it).
    together = update(
        [
            (OTHER + 1, 0, [item(STRING, string(EMOJI * 3), origin=(OWNER, 3))]),
            (OTHER + 2, 0, [item(STRING, string("Y"), origin=(OTHER + 1, 2))]),
        ]
    )
    assert refused(guard, together)


def test_a_long_run_of_emoji_and_an_item_partly_known_are_indexed_by_item() -> None:
    guard = UpdateGuard(128)
    admit(guard, text_of(OWNER, 0, EMOJI * 400_000))
    assert len(guard._pairs[OWNER][0]) == 1  # one entry for the whole item
    assert refused(guard, text_of(OTHER, 0, "X", origin=(OWNER, 799_998)))  # the last one's
    assert not refused(guard, text_of(OTHER, 0, "X", origin=(OWNER, 799_999)))
    # An update that repeats the last emoji and adds one: only the new one is indexed.
    admit(guard, text_of(OWNER, 799_998, EMOJI * 2, origin=(OWNER, 799_997)))
    assert guard._pairs[OWNER][0] == [0, 800_000]
    assert refused(guard, text_of(OTHER, 0, "X", origin=(OWNER, 800_000)))
    assert not refused(guard, text_of(OTHER, 0, "X", origin=(OWNER, 800_001)))


@pytest.mark.parametrize("start", [0, 1])
def test_the_same_update_admitted_twice_changes_nothing(start: int) -> None:
    guard = UpdateGuard(128)
    first = text_of(OWNER, 0, "a" * start + EMOJI * 2)
    admit(guard, first)
    admit(guard, first)  # a duplicate: nothing new to index
    assert len(guard._pairs[OWNER][0]) == 1
    assert refused(guard, text_of(OTHER, 0, "X", origin=(OWNER, start)))

"""A plain-text PUT or restore replaces only the part of the text that differs
(``collab.rooms.document_edits``): the span between the common prefix and suffix, found at C
speed on the loop, and right for any pair of texts."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tether.collab.rooms.document_edits import _differing_span

texts = st.text(alphabet="ab😀\n", max_size=80)


def _span_by_steps(current: str, target: str) -> tuple[int, int, int]:
    limit = min(len(current), len(target))
    start = 0
    while start < limit and current[start] == target[start]:
        start += 1
    tail = 0
    while tail < limit - start and current[-1 - tail] == target[-1 - tail]:
        tail += 1
    return start, len(current) - tail, len(target) - tail


@given(texts, texts)
def test_the_differing_span_is_what_a_step_by_step_comparison_finds(a: str, b: str) -> None:
    assert _differing_span(a, b) == _span_by_steps(a, b)


@given(texts, st.integers(0, 80), texts)
def test_one_insertion_is_found_as_exactly_what_was_inserted(
    text: str, at: int, inserted: str
) -> None:
    at = min(at, len(text))
    target = text[:at] + inserted + text[at:]
    start, end_current, end_target = _differing_span(text, target)
    assert end_current == start  # nothing of the text is deleted
    assert end_target - start == len(inserted)  # an equal run may shift it, never grow it
    assert text[:start] + target[start:end_target] + text[start:] == target


def test_a_one_character_change_in_the_middle_of_megabytes_spans_that_character() -> None:
    text = "pier " * 600_000
    target = text[:1_500_000] + "X" + text[1_500_001:]
    assert _differing_span(text, target) == (1_500_000, 1_500_001, 1_500_001)

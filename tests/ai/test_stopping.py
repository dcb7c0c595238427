"""The stopping rules and healing on a stream, against the whole-text rules the quality bench
scores: for any stream, ``shape`` yields exactly ``stop_at(heal_output(text))``, and stops
reading the stream once the rule has decided (the generation ends there)."""

from __future__ import annotations

import asyncio
import random

import pytest

from tether.ai.text.stopping import STOP_RULES, heal_output, shape, stop_at

ALPHABET = ["a", "b", "e.g", " ", "  ", ",", ".", "!", "\n", "x y", "é", " the", ". ", "?\n"]


def _shaped(pieces: list[str], leftover: str, rule: str) -> tuple[str, int]:
    read = 0

    async def source():
        nonlocal read
        for piece in pieces:
            read += 1
            yield piece

    async def collect() -> str:
        return "".join([piece async for piece in shape(source(), leftover=leftover, rule=rule)])

    return asyncio.run(collect()), read


@pytest.mark.parametrize("rule", STOP_RULES)
def test_shape_matches_the_bench_rules_on_random_streams(rule: str) -> None:
    rng = random.Random(f"stopping-{rule}")
    for _ in range(400):
        pieces = [rng.choice(ALPHABET) for _ in range(rng.randrange(0, 9))]
        leftover = rng.choice(["", " ", "  "])
        shown, _ = _shaped(pieces, leftover, rule)
        assert shown == stop_at(heal_output("".join(pieces), leftover), rule), (pieces, leftover)


def test_word_stops_reading_the_model_once_the_word_ended() -> None:
    shown, read = _shaped([" quick", " brown", " fox", " jumps"], " ", "word")
    assert shown == "quick"
    assert read == 2  # " brown" told it the word was over: the model was not asked for more


def test_a_model_that_does_not_write_the_typed_space_shows_nothing() -> None:
    shown, read = _shaped(["xt", " words"], " ", "word")
    assert (shown, read) == ("", 1)


@pytest.mark.parametrize(
    ("stream", "shown", "read"),
    [
        ([",", " and", " the", " sea"], ", and", 3),  # the clause mark comes with its word
        ([".", "\n\n", "The"], ".", 2),  # a line break after it: the mark alone
        ([" and", ",", " then"], " and", 2),  # marks after the word are not part of it
        ([";", " ", "\t", "so", "."], "; \tso", 5),
    ],
)
def test_a_word_after_clause_marks_takes_them_along(
    stream: list[str], shown: str, read: int
) -> None:
    assert _shaped(stream, "", "word") == (shown, read)
    assert stop_at("".join(stream), "word") == shown

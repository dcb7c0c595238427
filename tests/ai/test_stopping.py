"""The stopping rules and healing on a stream, against the whole-text rules the quality bench
scores: for any stream, ``shape`` yields exactly ``stop_at(heal_output(text))``, and stops
reading the stream once the rule has decided (the generation ends there)."""

from __future__ import annotations

import asyncio
import random

import pytest

from tether.ai.model.providers.base import Piece
from tether.ai.text.stopping import (
    STOP_RULES,
    SURE,
    heal_output,
    shape,
    stop_at,
    sure_cut,
)

ALPHABET = ["a", "b", "e.g", " ", "  ", ",", ".", "!", "\n", "x y", "é", " the", ". ", "?\n"]


def _shaped(
    pieces: list[str], leftover: str, rule: str, sure: float = 0.5, line_start: bool = False
) -> tuple[str, int]:
    read = 0

    async def source():
        nonlocal read
        for piece in pieces:
            read += 1
            yield piece

    async def collect() -> str:
        shaped = shape(source(), leftover=leftover, rule=rule, sure=sure, line_start=line_start)
        return "".join([piece async for piece in shaped])

    return asyncio.run(collect()), read


@pytest.mark.parametrize("rule", [rule for rule in STOP_RULES if rule != SURE])
def test_shape_matches_the_bench_rules_on_random_streams(rule: str) -> None:
    rng = random.Random(f"stopping-{rule}")
    for _ in range(400):
        pieces = [rng.choice(ALPHABET) for _ in range(rng.randrange(0, 9))]
        leftover = rng.choice(["", " ", "  "])
        line_start = not leftover and rng.random() < 0.5
        shown, _ = _shaped(pieces, leftover, rule, line_start=line_start)
        healed = heal_output("".join(pieces), leftover, line_start)
        assert shown == stop_at(healed, rule), (pieces, leftover, line_start)


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


def _ends(pieces: list[str], skip: int) -> list[tuple[int, float | None]]:
    """Where each piece ends in the healed text (``skip`` characters of the model's text are
    not in it), and its confidence."""
    out, at = [], -skip
    for piece in pieces:
        at += len(piece)
        out.append((at, getattr(piece, "confidence", None)))
    return out


def test_sure_on_a_stream_is_the_whole_text_rule_and_stops_reading_once_decided() -> None:
    rng = random.Random("stopping-sure")
    for _ in range(600):
        pieces = [
            Piece(rng.choice(ALPHABET), rng.choice([None, 0.1, 0.45, 0.5, 0.8, 1.0]))
            for _ in range(rng.randrange(0, 9))
        ]
        leftover = rng.choice(["", " "])
        line_start = not leftover and rng.random() < 0.5
        threshold = rng.choice([0.3, 0.5, 0.9])
        shown, read = _shaped(pieces, leftover, SURE, threshold, line_start)
        whole = "".join(pieces)
        healed = heal_output(whole, leftover, line_start)
        skip = len(leftover) + (len(whole) - len(leftover) - len(healed))
        expected = sure_cut(healed, _ends(pieces, skip), threshold, final=True)[0]
        assert shown == (expected if whole.startswith(leftover) else ""), (pieces, leftover)
        # The first word is the word rule's, whatever the confidence: never less than today.
        if whole.startswith(leftover):
            assert shown.startswith(stop_at(healed, "word"))
        assert read <= len(pieces)


@pytest.mark.parametrize(
    ("stream", "shown", "read"),
    [
        # The first word whatever its confidence; then words while each is sure.
        (
            [(" United", 0.2), (" States", 0.9), (" of", 0.8), (" America", 0.4)],
            " United States of",
            4,
        ),
        ([(" as", 0.9), (" soon", 0.3), (" as", 0.99)], " as", 2),  # stops at the unsure word
        ([(" It", 0.2), (" works", 0.9), (".", 0.9), (" Then", 0.99)], " It works.", 4),
        ([(" one", 0.9), (" two", 0.9), ("\n", 0.9), ("three", 0.9)], " one two", 3),
        ([(" no", None), (" confidence", None)], " no", 2),  # a provider that gives none: a word
        ([(" Wash", 0.2), ("ington", 0.9), (" D", 0.3)], " Washington", 3),
    ],
)
def test_sure_extends_while_the_model_is_sure(
    stream: list[tuple[str, float | None]], shown: str, read: int
) -> None:
    pieces = [Piece(text, confidence) for text, confidence in stream]
    assert _shaped(pieces, "", SURE, 0.5) == (shown, read)


def test_at_a_line_start_the_model_s_own_line_breaks_are_dropped() -> None:
    # After a blank line SmolLM2 writes one more line break before its word: the cursor is on
    # a fresh line already, so the editor is shown the word alone.
    assert _shaped(["\n", "The", " file"], "", "word", line_start=True) == ("The", 3)
    assert _shaped(["\n", "The", " file"], "", "word") == ("\nThe", 3)
    assert heal_output("\n\nSo", "", line_start=True) == "So"


def test_sure_decides_after_at_most_32_words_however_sure_the_model_is() -> None:
    # Bounded work per piece, and no ghost text longer than a writer would read.
    pieces = [Piece(f" w{i}", 1.0) for i in range(200)]
    shown, read = _shaped(pieces, "", SURE, 0.5)
    assert len(shown.split()) == 32
    assert read == 33  # the 33rd word's start told it the 32nd was whole

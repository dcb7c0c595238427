"""The embedded model's logits processor on made-up logits (no model): what ``must_start`` bans
until the answer has begun, and the confidence it reports for each token."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tether.ai.model.providers.steering import BannedTokens, Steering

# A vocabulary of six tokens: what each one's text is.
VOCABULARY = ["<|im_end|>", "\n", " ", " The", "\n\n", "cat"]
EOS = 0


def text_of(tokens: list[int]) -> str:
    return "".join(VOCABULARY[token] for token in tokens)


def steering(**options: bool) -> Steering:
    banned = BannedTokens.of(len(VOCABULARY), lambda token: VOCABULARY[token], EOS)
    return Steering(2, banned, text_of, **options)


def logits(**values: float) -> np.ndarray:
    row = np.zeros(len(VOCABULARY), dtype=np.single)
    for token, value in values.items():
        row[int(token[1:])] = value
    return row


def test_the_vocabulary_is_sorted_into_ends_and_breaks() -> None:
    banned = BannedTokens.of(len(VOCABULARY), lambda token: VOCABULARY[token], EOS)
    assert banned.ends.tolist() == [0]
    assert banned.breaks.tolist() == [1, 4]


def test_must_start_bans_ends_and_breaks_until_a_word_is_written() -> None:
    steer = steering(must_start=True)
    prompt = np.array([3, 5])  # two prompt tokens
    first = steer(prompt, logits(t0=9.0, t1=8.0, t3=1.0))
    assert np.isneginf(first[[0, 1, 4]]).all()
    assert int(np.argmax(first)) == 3  # " The": the end of the turn was likelier
    # Only a space written so far: the answer has not started, the bans hold.
    after_space = steer(np.array([3, 5, 2]), logits(t0=9.0))
    assert np.isneginf(after_space[0])
    # A word written: free to end.
    after_word = steer(np.array([3, 5, 3]), logits(t0=9.0))
    assert after_word[0] == pytest.approx(9.0)


def test_at_a_line_start_breaks_are_allowed_and_ends_are_not() -> None:
    steer = steering(must_start=True, line_start=True)
    out = steer(np.array([3, 4]), logits(t0=9.0, t1=8.0))
    assert np.isneginf(out[0]) and out[1] == pytest.approx(8.0)


def test_without_must_start_nothing_is_banned() -> None:
    steer = steering()
    out = steer(np.array([3, 5]), logits(t0=9.0))
    assert out[0] == pytest.approx(9.0)


def test_confidence_is_the_likeliest_token_s_probability_after_the_bans() -> None:
    steer = steering(must_start=True)
    steer(np.array([3, 5]), logits(t0=50.0, t3=math.log(3.0)))  # " The" 3 : 1 each other
    expected = 3.0 / (3.0 + 1 + 1)  # " The" against " " and "cat"; the rest banned
    assert steer.take() == pytest.approx(expected, rel=1e-5)
    # A piece released with no new token (a held-back stop prefix) shares the last one's.
    assert steer.take() == pytest.approx(expected, rel=1e-5)
    steer(np.array([3, 5, 3]), logits(t5=20.0))
    steer(np.array([3, 5, 3, 5]), logits(t2=0.0))
    assert steer.take() == pytest.approx(1.0 / len(VOCABULARY), rel=1e-5)  # the lower of two

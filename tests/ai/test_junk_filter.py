"""The junk filter's decisions (``ai.text.junk.JunkScreen``): what it holds back, when it releases,
where it stops; the same whatever pieces the stream comes in, and the same as ``screen`` on
the whole text, which is what ``tether bench quality`` scores its "junk filter" views with."""

from __future__ import annotations

import asyncio
import random
import unicodedata

import pytest

from tether.ai.text.context import ContextBuilder, most_tokens
from tether.ai.text.junk import (
    CHAT,
    ECHO,
    EMPTY,
    KINDS,
    LANGUAGE,
    LOOP,
    Before,
    JunkScreen,
    RewriteScreen,
    junk_kind,
    screen,
    screened,
    words,
)
from tether.ai.text.stopping import PHRASE, SENTENCE, STOP_RULES, TOKENS, WORD
from tether.protocol.wire.ai_messages import END_REASONS, JUNK_KINDS, JUNK_PREFIX, SuggestionEnd

BEFORE = "The keeper climbed the stairs at dusk. He lit the lamp and wrote in the "

CASES = [
    " logbook",
    " the",  # echo of the word just typed
    "",
    " .",
    " logbook, as he did every night.",
    " logbook and the logbook and the logbook.",  # a loop after a clean start
    " Sure! Here is the next sentence.",
    " Certainly, I can help with that.",
    " journal это другой язык совсем",
    " 这是中文的句子",
    " lamp lamp lamp",
    " logbook<|im_end|>",
    " climbed the stairs at dusk and slept.",  # copies 4 words of the text before
    " log-book, then (quietly) slept.\nThe end",
    " e.g. the tide, the wind, the wind, the wind.",
    " über den Wolken, said the café owner.",
]


def _stream(pieces: list[str], rule: str, before: str = BEFORE) -> tuple[list[str], str | None]:
    """What a JunkScreen releases for each piece, then at the end."""
    screen_ = JunkScreen(before, rule)
    released = [screen_.feed(piece) for piece in pieces]
    if screen_.kind is None:
        released.append(screen_.close())
    return released, screen_.kind


def _splits(text: str):
    yield [text]
    yield list(text)  # one character at a time
    for cut in range(len(text) + 1):
        yield [text[:cut], text[cut:]]


@pytest.mark.parametrize("rule", STOP_RULES)
@pytest.mark.parametrize("text", CASES)
def test_split_anywhere_the_stream_shows_what_screen_shows(text: str, rule: str) -> None:
    whole = screen(text, BEFORE, rule)
    for pieces in _splits(text):
        released, kind = _stream(pieces, rule)
        assert ("".join(released), kind) == whole, pieces


def test_random_streams_split_at_random_places_agree_with_the_whole_text() -> None:
    rng = random.Random("junk-filter")
    vocabulary = [" the", " lamp", " logbook", ",", ".", "!", " Sure", " sea", " и", " море"]
    vocabulary += [" 海", "\n", " ", "-", "'s", " wrote", " in", " dusk", " at", " stairs"]
    for _ in range(600):
        text = "".join(rng.choice(vocabulary) for _ in range(rng.randrange(0, 12)))
        rule = rng.choice(STOP_RULES)
        cuts = sorted(rng.sample(range(len(text) + 1), min(len(text) + 1, rng.randrange(1, 5))))
        pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
        released, kind = _stream(pieces, rule)
        assert ("".join(released), kind) == screen(text, BEFORE, rule), (pieces, rule)


@pytest.mark.parametrize("rule", STOP_RULES)
@pytest.mark.parametrize("text", CASES)
def test_what_is_shown_is_a_clean_prefix_and_junk_shows_the_reason(text: str, rule: str) -> None:
    shown, kind = screen(text, BEFORE, rule)
    assert text.startswith(shown)
    if shown:
        assert junk_kind(shown, BEFORE) is None
    if kind is None:
        assert shown == text and junk_kind(text, BEFORE) is None
    else:
        assert kind in KINDS and (shown != text or not text)


@pytest.mark.parametrize("rule", [WORD, PHRASE])
@pytest.mark.parametrize("text", CASES)
def test_short_rules_judge_the_whole_suggestion_as_the_bench_does(text: str, rule: str) -> None:
    kind = junk_kind(text, BEFORE)
    assert screen(text, BEFORE, rule) == (("", kind) if kind else (text, None))
    # ... and nothing of it is released before the stream has ended
    released, _ = _stream(list(text), rule)
    assert not any(released[:-1])


def test_the_default_word_is_held_whole_then_released() -> None:
    screen_ = JunkScreen(BEFORE, WORD)
    assert screen_.feed(" log") == ""
    assert screen_.feed("book") == ""
    assert screen_.text == " logbook"  # what the model wrote, held back
    assert screen_.close() == " logbook" and screen_.kind is None


@pytest.mark.parametrize(
    ("word", "kind"),
    [(" the", ECHO), ("", EMPTY), (" .", EMPTY), (" море", LANGUAGE), (" 海", LANGUAGE)],
)
def test_a_junk_word_releases_nothing_and_names_its_kind(word: str, kind: str) -> None:
    released, found = _stream(list(word), WORD)
    assert ("".join(released), found) == ("", kind)


def test_longer_rules_hold_the_first_phrase_then_release_word_by_word() -> None:
    screen_ = JunkScreen(BEFORE, SENTENCE)
    assert screen_.feed(" logbook") == ""
    assert screen_.feed(",") == ""  # the phrase ended, but the word after may change things
    assert screen_.feed(" as") == " logbook, "  # a new word began: the phrase is judged
    assert screen_.feed(" he") == "as "
    assert screen_.feed(" did.") == "he "
    assert screen_.close() == "did." and screen_.kind is None


def test_a_four_word_phrase_is_held_until_the_fifth_word_begins() -> None:
    screen_ = JunkScreen(BEFORE, TOKENS)
    released = [screen_.feed(piece) for piece in [" an", " old", " sea", " log", " now"]]
    assert released == ["", "", "", "", " an old sea log "]  # " n" ended the phrase


def test_chat_talk_is_caught_before_any_of_it_is_shown() -> None:
    screen_ = JunkScreen(BEFORE, SENTENCE)
    assert [screen_.feed(p) for p in [" Sure", "!", " Here"]] == ["", "", ""]
    assert screen_.kind == CHAT


def test_the_stream_ends_before_the_word_that_makes_a_loop() -> None:
    screen_ = JunkScreen(BEFORE, TOKENS)
    pieces = [" logbook", " and", " the", " logbook", " and", " the", " logbook", "."]
    released = []
    for piece in pieces:
        released.append(screen_.feed(piece))
        if screen_.kind is not None:
            break
    assert screen_.kind == LOOP
    shown = "".join(released)
    assert shown == " logbook and the logbook and "
    assert junk_kind(shown, BEFORE) is None


def test_a_copy_of_the_text_before_is_stopped_at_its_fourth_word() -> None:
    shown, kind = screen(" and then climbed the stairs at dusk.", BEFORE, SENTENCE)
    assert kind == ECHO
    assert shown == " and then climbed the stairs "  # "climbed the stairs at" is the copy


def test_a_switch_of_script_mid_stream_ends_it() -> None:
    shown, kind = screen(" logbook, и потом он ушёл домой спать.", BEFORE, TOKENS)
    assert kind == LANGUAGE
    assert shown.startswith(" logbook, ") and "спать" not in shown


def test_a_stream_that_stops_on_junk_stops_reading_the_model() -> None:
    read = 0

    async def model():
        nonlocal read
        for piece in [" Sure", "!", " I", " can", " help", " with", " that", "."]:
            read += 1
            yield piece

    async def run() -> list[str]:
        screen_ = JunkScreen(BEFORE, SENTENCE)
        return [piece async for piece in screened(model(), screen_)]

    assert asyncio.run(run()) == []
    assert read == 3  # " I" began a word: "Sure!" was judged, and the model asked no more


def test_the_text_before_is_read_once_and_gives_the_same_verdicts() -> None:
    before = Before(BEFORE)
    for text in CASES:
        assert junk_kind(text, before) == junk_kind(text, BEFORE)


def test_what_is_read_of_the_text_before_is_what_the_plain_rules_read() -> None:
    """``Before`` finds the last word from the end and the scripts with an ASCII shortcut; both
    must agree with splitting the whole text and naming every letter."""
    rng = random.Random("before")
    pieces = ["the", "lamp", " ", "  ", ", ", ".\n", "é", "море", "海", "x" * 90, "-", "😀"]
    for _ in range(400):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(0, 60)))
        before = Before(text)
        plain = words(text[-400:])
        assert before.last_word == (plain[-1] if plain else ""), text
        assert before.grams(2) == {tuple(plain[i : i + 2]) for i in range(len(plain) - 1)}
        named = {unicodedata.name(ch).split(" ")[0] for ch in text[-2000:] if ch.isalpha()}
        assert before.scripts == named, text


def test_the_script_rule_reads_only_the_last_2000_characters_before() -> None:
    russian_then_english = "Текст на русском. " + "English words only here. " * 100
    assert junk_kind(" кошка", russian_then_english) == LANGUAGE


def test_the_wire_names_the_same_kinds() -> None:
    assert JUNK_KINDS == KINDS
    assert [JUNK_PREFIX + kind for kind in KINDS] == list(END_REASONS[3:])
    assert SuggestionEnd("s", "junk:loop").junk == LOOP
    assert SuggestionEnd("s", "done").junk is None


@pytest.mark.parametrize(
    ("stream", "shown", "kind"),
    [
        (
            ["The meeting has ", "been moved to ", "Thursday."],
            "The meeting has been moved to Thursday.",
            None,
        ),
        (["Sure! Here is ", "the rewritten passage:"], "", CHAT),
        (["Here is the rewritten ", "passage: The meeting"], "", CHAT),
        (["The meeting was moved.", "<|im_end|>"], "The meeting was moved.", CHAT),
        (["", " "], "", EMPTY),
    ],
)
def test_a_rewrite_is_the_passage_and_never_talk_about_it(
    stream: list[str], shown: str, kind: str | None
) -> None:
    """Issue 28, item 3: a rewrite is screened for chat talk (held until its first phrase is
    complete), never for echoes, which are a rewrite's point."""
    screen_ = RewriteScreen()
    out = "".join(screen_.feed(piece) for piece in stream) + screen_.close()
    assert (out, screen_.kind) == (shown, kind)


def test_a_rewrite_of_a_one_paragraph_passage_stops_at_a_blank_line() -> None:
    builder = ContextBuilder(most_tokens)
    one = builder.rewrite("a passage to fix.", 0, 17)
    assert "\n\n" in one.stop
    two = builder.rewrite("first part.\n\nsecond part.", 0, 25)
    assert "\n\n" not in two.stop  # its own blank line must come through

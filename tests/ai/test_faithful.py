"""The faithful-rewrite check (ai/text/faithful.py): what a rewrite dropped of its passage, kind
by kind, kept-versus-dropped pairs, the guards against false alarms (capitals at a sentence's
start, "I", quotes, titles, reordered clauses, "5" written "five"), its bounds, and the wire
fields it rides on (``suggestion.end``'s ``dropped``, ``accept``'s ``confirm_dropped``)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.ai.text.faithful import (
    KINDS,
    MOST_CHARS,
    MOST_LOSSES,
    READ_CHARS,
    Loss,
    dropped,
    summary,
)
from tether.protocol.wire import ai_messages as ai
from tether.protocol.wire.ai_messages import (
    Accept,
    Dropped,
    InvalidAiMessage,
    SuggestionEnd,
    decode_client_message,
    decode_server_message,
)


def lost(passage: str, rewrite: str) -> list[tuple[str, str]]:
    return [(loss.kind, loss.text) for loss in dropped(passage, rewrite)]


def test_the_issue_example_loses_the_decision_and_the_day() -> None:
    passage = "We need to talk about many thing and decide ship it friday."
    assert lost(passage, "We discussed many things.") == [
        ("clause", "decide ship it friday"),
        ("weekday", "friday"),
    ]
    assert lost(passage, "We need to discuss many things and decide to ship it on Friday.") == []


@pytest.mark.parametrize(
    ("passage", "kept", "dropped_by", "loss"),
    [
        # numbers: digits, number words, "5" and "five" the same
        ("We need 5 chairs.", "Five chairs are needed.", "Chairs are needed.", ("number", "5")),
        ("We need five chairs.", "We need 5 chairs.", "We need chairs.", ("number", "five")),
        ("It costs 1,500 euros.", "It costs 1500 euros.", "It is costly.", ("number", "1,500")),
        ("Add twenty-five rows.", "Add 25 rows.", "Add rows.", ("number", "twenty-five")),
        ("Meet at 10:30 sharp.", "Meet at 10:30.", "Meet early.", ("number", "10:30")),
        ("Growth: 3.5 points.", "Growth: 3.50 points.", "Growth was small.", ("number", "3.5")),
        # dates: day and month in any order or form, ISO, numeric, relative days, months
        ("Ship on 3 March.", "Ship on March 3rd.", "Ship in March.", ("date", "3 March")),
        ("Due 2026-12-06.", "Due 6 December 2026.", "Due in December.", ("date", "2026-12-06")),
        ("Due 12/6 at noon.", "Due on 6 December at noon.", "Due at noon.", ("date", "12/6")),
        ("Call them tomorrow.", "Tomorrow, call them.", "Call them.", ("date", "tomorrow")),
        ("We launch in May.", "The launch is in May.", "We launch soon.", ("date", "May")),
        ("Paid the 3rd of March.", "Paid 3 March.", "Paid in March.", ("date", "3rd of March")),
        # weekdays, in any case, abbreviated
        ("Ship it friday.", "Ship it on Friday.", "Ship it soon.", ("weekday", "friday")),
        ("Review on Tue.", "Review on Tuesday.", "Review soon.", ("weekday", "Tue")),
        # names: kept anywhere, in any case; runs of capitals are one name
        ("Send it to Alice today.", "Alice gets it today.", "Send it today.", ("name", "Alice")),
        ("We met the New York team.", "We met the team in new york.", "We met the team.",
         ("name", "New York")),
        ("Ask Bob's manager.", "Ask the manager of Bob.", "Ask the manager.", ("name", "Bob's")),
        # negations: "n't" is "not"; another negation stands for one
        ("We don't ship on weekends.", "We do not ship on weekends.", "We ship on weekends.",
         ("negation", "don't ship")),
        ("We never ship late.", "We do not ever ship late.", "We ship late.",
         ("negation", "never ship")),
        ("Ship it without tests.", "Ship it without any tests.", "Ship it with tests.",
         ("negation", "without tests")),
        # clauses: a coordinated or subordinate clause with a verb, all of its words gone
        ("We met and agreed to cancel the contract.", "We met and agreed to end the contract.",
         "We met.", ("clause", "agreed to cancel the contract")),
        ("Ship it, because the client signed yesterday.",
         "The client signed, so ship it.", "Ship it.", ("clause", "the client signed yesterday")),
    ],
)  # fmt: skip
def test_each_kind_is_kept_by_a_faithful_rewrite_and_named_when_dropped(
    passage: str, kept: str, dropped_by: str, loss: tuple[str, str]
) -> None:
    assert loss not in lost(passage, kept)
    assert loss in lost(passage, dropped_by)


@pytest.mark.parametrize(
    ("passage", "rewrite"),
    [
        # capitals at a sentence start, after a colon, a bullet, an opening quote
        ("The plan works. Everyone agrees.", "The plan works and everyone agrees."),
        ("Note: Please review it.", "Note: review it, please."),
        ("- Buy milk\n- Call home", "Buy milk and call home."),
        ('She said, "We ship now."', "She said they ship now."),
        # "I" and its contractions; titles before a name
        ("I think I'll go. I'm sure.", "I will go, surely."),
        ("We met Dr. Smith there.", "We met Smith there."),
        # a title's capitals (a line with no full stop, every word capitalised)
        ("Launch Plan For Acme Widgets\nThe team meets.",
         "Acme's widget launch plan\nThe team meets."),
        # reordered clauses, a word in another inflection
        ("Because the tests failed, we postponed the launch.",
         "We postponed the launch because the tests failed."),
        ("We decided to ship the release.", "The release ships; we decided."),
        # numbers written differently; "one" as a pronoun; an ordinal word for a day
        ("Order 5 boxes and 2 crates.", "Order five boxes and two crates."),
        ("The one we liked is gone.", "The option we liked is gone."),
        ("Paid on March 3.", "Paid on the third of March."),
        # a rephrased first clause (its verb swapped for another)
        ("We need to talk about many thing.", "We discussed many things."),
    ],
)  # fmt: skip
def test_faithful_rewrites_are_not_flagged(passage: str, rewrite: str) -> None:
    assert lost(passage, rewrite) == []


def test_a_capital_at_a_sentence_start_is_no_name_but_a_later_one_is() -> None:
    assert lost("Tomorrow works. Mark agrees.", "It works for all.") == [
        ("date", "Tomorrow")
    ]  # "Mark" starts a sentence: not checked
    assert ("name", "Mark") in lost("Tomorrow works, and Mark agrees.", "It works for all.")


def test_a_quoted_name_mid_sentence_is_a_name() -> None:
    assert lost('We call it the "Apollo" plan.', "We call it the plan.") == [("name", "Apollo")]


def test_negations_are_counted_not_placed() -> None:
    # One negation moved to another word is still one: a known miss, documented.
    assert lost("We will not ship on Friday.", "We will ship, not on Friday.") == []
    assert lost("No one came and nothing changed.", "Someone came and nothing changed.") == [
        ("negation", "No one")
    ]


def test_losses_are_in_the_passage_order_and_summarised_for_people() -> None:
    losses = dropped("Alice pays 40 euros on 3 March.", "Someone pays.")
    assert [(loss.kind, loss.text) for loss in losses] == [("number", "40"), ("date", "3 March")]
    assert summary(losses) == "the number '40' and the date '3 March'"
    many = [Loss("number", str(i)) for i in range(8)]
    assert summary(many).endswith("and 3 more")


def test_an_empty_rewrite_drops_everything_and_an_empty_passage_nothing() -> None:
    assert {kind for kind, _ in lost("Bob pays 5 on Friday, not later.", "")} == {
        "clause",
        "number",
        "weekday",
        "negation",
    }  # "Bob" starts the sentence: no name
    assert lost("", "Anything at all, 5 times on Friday.") == []


def test_the_losses_are_bounded_in_count_and_length() -> None:
    passage = " ".join(f"Item {i} goes to Person{i} on day {i + 100}." for i in range(200))
    losses = dropped(passage, "Nothing.")
    assert len(losses) == MOST_LOSSES
    long_clause = "We ship it and " + " ".join(f"review{i} everything{i}" for i in range(60))
    clause = [loss for loss in dropped(long_clause + ".", "We ship it.") if loss.kind == "clause"]
    assert clause and len(clause[0].text) == MOST_CHARS and clause[0].text.endswith("…")


def test_only_the_first_read_chars_of_each_text_are_read() -> None:
    filler = "word " * (READ_CHARS // 5)
    assert lost(filler + "and Zelda.", filler) == []  # past the bound: not read
    # A rewrite is read up to 4 times its passage's length and 256 characters more.
    assert lost("We saw Zelda.", "x " * 160 + "Zelda") == [("name", "Zelda")]
    assert lost("We saw Zelda.", "x " * 100 + "Zelda") == []


@pytest.mark.parametrize(
    "shape",
    ["e" * READ_CHARS, "7" * READ_CHARS, "1-" * (READ_CHARS // 2), "A " * (READ_CHARS // 2),
     "and " * (READ_CHARS // 4), "'" * READ_CHARS, ". " * (READ_CHARS // 2)],
)  # fmt: skip
def test_shapes_made_to_be_costly_are_read_in_one_pass(shape: str) -> None:
    # Each is read once, word by word (a quadratic step here would take minutes, not ms).
    assert len(dropped(shape, shape[::-1])) <= MOST_LOSSES
    assert dropped(shape, shape) == []


def test_a_run_of_number_words_cannot_grow_without_end() -> None:
    passage = "hundred " * 5000 + "thousand"
    assert lost(passage, "a lot") != []  # read, and no huge number was built


# ---- properties ---------------------------------------------------------------------------

VOCABULARY = [
    "Alice", "bob", "We", "ship", "shipped", "it", "on", "Friday", "friday", "3", "March", "May",
    "may", "five", "5", "twenty", "-", "one", "not", "don't", "never", "and", "because", ",",
    ".", ":", '"', "\n", "2026-12-06", "12/6", "tomorrow", "I", "Dr", "decide", "the", "plan",
    "1,500", "3rd", "of", "hundred", "\u2019", "é", "😀",
]  # fmt: skip
texts = st.lists(st.sampled_from(VOCABULARY), max_size=40).map(" ".join) | st.text(max_size=200)


@settings(max_examples=300, deadline=None)
@given(texts, texts)
def test_any_two_texts_give_bounded_losses_of_known_kinds(passage: str, rewrite: str) -> None:
    losses = dropped(passage, rewrite)
    assert len(losses) <= MOST_LOSSES
    assert len(set(losses)) == len(losses)
    for loss in losses:
        assert loss.kind in KINDS
        assert 0 < len(loss.text) <= MOST_CHARS


@settings(max_examples=300, deadline=None)
@given(texts, texts)
def test_a_rewrite_that_keeps_the_passage_whole_drops_nothing(passage: str, extra: str) -> None:
    assert dropped(passage, passage) == []
    assert dropped(passage, passage + "\n\n" + extra) == []


# ---- the wire ------------------------------------------------------------------------------


def test_suggestion_end_carries_dropped_only_when_something_was_lost() -> None:
    end = SuggestionEnd("s1", "done", 12.5, 9, (Dropped("date", "3 March"),))
    body = json.loads(end.encode())
    assert body["dropped"] == [{"kind": "date", "text": "3 March"}]
    assert decode_server_message(end.encode()) == end
    for nothing in (None, ()):
        assert "dropped" not in json.loads(SuggestionEnd("s1", "done", None, 1, nothing).encode())
    assert decode_server_message(SuggestionEnd("s1", "done").encode()).dropped is None


@pytest.mark.parametrize(
    "bad",
    [
        '"3 March"',
        '[{"kind":"date"}]',
        '[{"kind":1,"text":"x"}]',
        '["date"]',
    ],
)
def test_a_malformed_dropped_list_is_refused(bad: str) -> None:
    payload = f'{{"type":"suggestion.end","id":"s1","reason":"done","tokens":1,"dropped":{bad}}}'
    with pytest.raises(InvalidAiMessage, match="dropped"):
        decode_server_message(payload)


def test_a_kind_this_client_does_not_know_is_accepted() -> None:
    payload = (
        '{"type":"suggestion.end","id":"s1","reason":"done","tokens":1,'
        '"dropped":[{"kind":"unit","text":"kg"}]}'
    )
    assert decode_server_message(payload).dropped == (Dropped("unit", "kg"),)
    assert "unit" not in ai.DROPPED_KINDS


def test_accept_carries_confirm_dropped_only_when_true() -> None:
    assert json.loads(Accept("s1", True).encode()) == {
        "type": "accept",
        "id": "s1",
        "confirm_dropped": True,
    }
    assert json.loads(Accept("s1").encode()) == {"type": "accept", "id": "s1"}
    for flag, expected in (("true", True), ("false", False), ("null", False)):
        payload = f'{{"type":"accept","id":"s1","confirm_dropped":{flag}}}'
        assert decode_client_message(payload) == Accept("s1", expected)


@pytest.mark.parametrize("flag", ['"yes"', "1", "[]"])
def test_a_confirm_dropped_that_is_not_a_boolean_is_refused(flag: str) -> None:
    with pytest.raises(InvalidAiMessage, match="confirm_dropped") as caught:
        decode_client_message(f'{{"type":"accept","id":"s1","confirm_dropped":{flag}}}')
    assert caught.value.request_id == "s1"

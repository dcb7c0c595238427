"""protocol.wire.presence_safety: only hex colours and bounded names in a presence's ``user``."""

from __future__ import annotations

import json

import pytest

from tether.protocol.protocol_errors import DecodeError
from tether.protocol.wire.presence_safety import MAX_NAME_CHARS, sanitize_awareness, sanitize_state
from tether.protocol.wire.sync_payloads import AwarenessEntry, decode_awareness, encode_awareness


@pytest.mark.parametrize("color", ["#abc", "#ABCDEF", "#30bced", "#000"])
def test_hex_colours_pass_unchanged_as_the_same_string(color: str) -> None:
    state = json.dumps({"user": {"name": "Ada", "color": color}, "cursor": {"anchor": 1}})
    assert sanitize_state(state) is state


@pytest.mark.parametrize(
    "color",
    [
        "red;background:url(http://x)",
        "red",
        "#30bced;background:red",
        "#30bced33",  # alpha only in colorLight
        "#ggg",
        " #abc",
        "#abc\n",
        "rgb(1,2,3)",
        "",
        12,
        None,
        ["#abc"],
    ],
)
def test_anything_else_as_a_colour_is_dropped(color: object) -> None:
    state = json.dumps({"user": {"name": "Eve", "color": color}, "other": [1, 2]})
    cleaned = json.loads(sanitize_state(state) or "")
    assert cleaned == {"user": {"name": "Eve"}, "other": [1, 2]}


def test_color_light_may_carry_alpha_but_nothing_else() -> None:
    ok = json.dumps({"user": {"color": "#30bced", "colorLight": "#30bced33"}})
    assert sanitize_state(ok) is ok
    bad = json.dumps({"user": {"color": "#30bced", "colorLight": "#fff;x:url(y)"}})
    assert json.loads(sanitize_state(bad) or "") == {"user": {"color": "#30bced"}}


def test_names_are_cut_and_non_string_names_dropped() -> None:
    long = json.dumps({"user": {"name": "n" * 5000, "color": "#abc"}})
    assert json.loads(sanitize_state(long) or "")["user"] == {
        "name": "n" * MAX_NAME_CHARS,
        "color": "#abc",
    }
    assert json.loads(sanitize_state('{"user":{"name":{"x":1}}}') or "") == {"user": {}}


@pytest.mark.parametrize("state", ['"a string"', "[1,2]", "42", "not json", "[" * 100_000])
def test_states_that_are_not_objects_are_refused(state: str) -> None:
    assert sanitize_state(state) is None


def test_removal_and_states_without_user_pass() -> None:
    assert sanitize_state("null") == "null"
    state = '{"cursor":null}'
    assert sanitize_state(state) is state
    state = '{"user":"mallory"}'  # no fields to read: editors show their defaults
    assert sanitize_state(state) is state


def test_a_whole_update_is_rewritten_only_when_needed() -> None:
    good = encode_awareness([AwarenessEntry(1, 1, '{"user":{"color":"#abc"}}')])
    checked = sanitize_awareness(good)
    assert checked.payload is good and checked.changed == checked.refused == 0
    mixed = encode_awareness(
        [
            AwarenessEntry(1, 2, '{"user":{"color":"#abc"}}'),
            AwarenessEntry(2, 3, '{"user":{"color":"red;background:url(http://x)"}}'),
            AwarenessEntry(3, 4, '"string"'),
            AwarenessEntry(4, 5, "null"),
        ]
    )
    checked = sanitize_awareness(mixed)
    assert (checked.changed, checked.refused) == (1, 1)
    assert decode_awareness(checked.payload) == [
        AwarenessEntry(1, 2, '{"user":{"color":"#abc"}}'),
        AwarenessEntry(2, 3, '{"user":{}}'),
        AwarenessEntry(4, 5, "null"),
    ]
    with pytest.raises(DecodeError):
        sanitize_awareness(b"\x05")

"""The AI message codecs (protocol/wire/ai_messages.py) against the rules in PROTOCOL.md's AI
section.

Round trips for every message, the validation rules one by one, and properties: whatever text a
client sends, ``decode_client_message`` either returns a message that keeps the documented
constraints or raises ``InvalidAiMessage`` (the server answers that with suggestion.error, so
anything else escaping would be a dropped reply); whatever the server encodes fits in a frame.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tether.protocol.wire import ai_messages as ai
from tether.protocol.wire.ai_messages import (
    Accept,
    AiStatus,
    Cancel,
    InvalidAiMessage,
    Suggest,
    SuggestionAccepted,
    SuggestionDelta,
    SuggestionEnd,
    SuggestionError,
    SuggestionStart,
    WatchStatus,
    decode_client_message,
    decode_server_message,
)
from tether.protocol.wire.messages import Stateless, decode_frame

fast = settings(max_examples=200, deadline=None)

# Text as a client can produce it: JSON escapes can carry lone surrogates ("\ud800"), which
# have no UTF-8 form; hypothesis rarely draws them on its own.
texts = st.text(
    st.one_of(
        st.characters(exclude_categories=()),
        st.sampled_from(["\ud800", "\udfff", "😀", "é", '"', "\\", "\0"]),
    ),
    max_size=40,
)
ids = st.text(min_size=1, max_size=ai.MAX_ID_LENGTH)
uint = st.integers(min_value=0, max_value=2**53)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=6,
)
extras = st.one_of(st.integers(), texts, st.lists(st.integers(), max_size=3))
anchors = st.binary(min_size=1, max_size=24).map(lambda b: base64.b64encode(b).decode())


def frame_of(payload: str) -> bytes:
    """What the server writes: it must be able to (UTF-8), and the frame must read back."""
    data = Stateless("doc", payload).encode()
    assert decode_frame(data) == Stateless("doc", payload)
    return data


def error_of(payload: str) -> InvalidAiMessage:
    with pytest.raises(InvalidAiMessage) as caught:
        decode_client_message(payload)
    return caught.value


def suggest(**fields: Any) -> str:
    return json.dumps({"type": "suggest", "id": "s1", **fields})


# ---- round trips ------------------------------------------------------------------------------

CLIENT_MESSAGES = [
    Suggest("s1", "complete", pos=5),
    Suggest("s1", "complete", pos=5, max_tokens=8),
    Suggest("s5", "complete", pos=4, anchor="AAEEAA==", max_tokens=16),
    Suggest("s6", "complete", anchor="AAEEAA=="),
    Suggest("s2", "rewrite", start=0, end=5),
    Suggest("s3", "rewrite", start=7, end=7, max_tokens=1024),
    Suggest("é😀", "complete", pos=0),
    Cancel("s1"),
    Accept("s1"),
    WatchStatus("ai-status"),
]
SERVER_MESSAGES = [
    SuggestionStart("s1", "model"),
    *(SuggestionStart("s1", source) for source in ai.SOURCES),
    SuggestionDelta("s1", " wörld 😀"),
    SuggestionDelta("s1", ""),
    SuggestionEnd("s1", "done", 41.37, 4),
    SuggestionEnd("s1", "done", None, 0),
    SuggestionEnd("s2", "superseded"),
    SuggestionEnd("s3", "cancelled"),
    SuggestionError(None, "bad_request", "payload is not JSON"),
    SuggestionError("s4", "busy", "the model is busy; try again shortly"),
    SuggestionAccepted("s1"),
    AiStatus("ai-status", "ready", "", "qwen2.5-0.5b-instruct", "q4_k_m"),
    *(AiStatus("x", state, "the model worker crashed (SIGSEGV)") for state in ai.AI_STATES),
]


@pytest.mark.parametrize("message", CLIENT_MESSAGES, ids=repr)
def test_client_messages_round_trip(message):
    payload = message.encode()
    assert decode_client_message(payload) == message
    assert decode_client_message(decode_frame(frame_of(payload)).payload) == message


@pytest.mark.parametrize("message", SERVER_MESSAGES, ids=repr)
def test_server_messages_round_trip(message):
    payload = message.encode()
    assert decode_server_message(payload) == message
    assert decode_server_message(decode_frame(frame_of(payload)).payload) == message


@fast
@given(
    ids,
    st.sampled_from(ai.KINDS),
    st.none() | uint,
    st.none() | uint,
    st.none() | uint,
    st.none() | anchors,
    st.none() | st.integers(1, ai.MAX_TOKENS_LIMIT),
    st.none() | st.lists(st.integers(0, ai.MAX_POSITION), min_size=1, max_size=8),
)
def test_every_valid_suggest_round_trips(request_id, kind, pos, a, b, anchor, max_tokens, path):
    start, end = (None, None) if a is None or b is None else sorted((a, b))
    if kind == "complete" and pos is None and anchor is None:
        pos = 0
    if kind == "rewrite" and start is None:
        start, end = 0, 0
    anchor_end = anchor if kind == "rewrite" else None  # a rewrite's selection: both ends
    if anchor is not None:
        path = None  # 'path' goes with positions, not anchors
    message = Suggest(
        request_id,
        kind,
        pos,
        start,
        end,
        anchor,
        max_tokens,
        anchor_end,
        tuple(path) if path is not None else None,
    )
    assert decode_client_message(message.encode()) == message


@pytest.mark.parametrize(
    ("body", "complaint"),
    [
        ({"kind": "rewrite", "anchor": "AA=="}, "both 'anchor' and 'anchor_end'"),
        ({"kind": "complete", "pos": 1, "anchor_end": "AA=="}, "'anchor_end' is for 'rewrite'"),
        ({"kind": "complete", "pos": 1, "path": []}, "'path' must be a list"),
        ({"kind": "complete", "pos": 1, "path": [0, -1]}, "'path' must be a list"),
        ({"kind": "complete", "pos": 1, "path": "0"}, "'path' must be a list"),
        ({"kind": "complete", "anchor": "AA==", "path": [0]}, "not 'anchor'"),
    ],
)
def test_rich_cursor_fields_are_checked(body, complaint):
    with pytest.raises(InvalidAiMessage, match=complaint):
        decode_client_message(json.dumps({"type": "suggest", "id": "x", **body}))


@fast
@given(ids, texts, texts, st.none() | st.floats(allow_nan=False), uint)
def test_every_server_message_round_trips_and_fits_a_frame(request_id, text, other, ttft, tokens):
    for message in (
        SuggestionStart(request_id, text),
        SuggestionDelta(request_id, text),
        SuggestionEnd(request_id, text, ttft, tokens),
        SuggestionError(request_id, text, other),
        SuggestionError(None, text, other),
        SuggestionAccepted(request_id),
    ):
        payload = message.encode()
        frame_of(payload)  # even a lone surrogate in the id or text can be written
        assert decode_server_message(payload) == message


@fast
@given(ids)
def test_cancel_and_accept_round_trip_any_id(request_id):
    for message in (Cancel(request_id), Accept(request_id)):
        assert decode_client_message(message.encode()) == message


def test_a_status_request_decodes_as_a_subscription_to_the_ai_state():
    assert decode_client_message('{"type":"status","id":"x"}') == WatchStatus("x")
    assert WatchStatus("x").encode() == '{"type":"status","id":"x"}'


def test_an_ai_status_round_trips_with_its_reason_and_leaves_out_an_unknown_model():
    status = AiStatus("x", "degraded", "the model worker failed its self-test")
    assert json.loads(status.encode()) == {
        "type": "ai.status",
        "id": "x",
        "state": "degraded",
        "reason": "the model worker failed its self-test",
    }
    assert decode_server_message(status.encode()) == status


def test_an_ai_status_with_an_undocumented_state_is_refused():
    with pytest.raises(InvalidAiMessage):
        decode_server_message('{"type":"ai.status","id":"x","state":"sleepy","reason":""}')


# ---- the wire form ----------------------------------------------------------------------------


def test_the_wire_names_are_from_and_to_and_unset_fields_are_left_out():
    assert json.loads(Suggest("s2", "rewrite", start=1, end=2).encode()) == {
        "type": "suggest",
        "id": "s2",
        "kind": "rewrite",
        "from": 1,
        "to": 2,
    }
    assert Cancel("s1").encode() == '{"type":"cancel","id":"s1"}'
    assert Accept("s1").encode() == '{"type":"accept","id":"s1"}'


def test_server_messages_are_compact_utf8_with_id_always_and_ttft_only_when_known():
    assert SuggestionDelta("s1", "wörld 😀").encode() == (
        '{"type":"suggestion.delta","id":"s1","text":"wörld 😀"}'
    )
    assert SuggestionEnd("s2", "superseded").encode() == (
        '{"type":"suggestion.end","id":"s2","reason":"superseded","tokens":0}'
    )
    assert SuggestionError(None, "bad_request", "x").encode() == (
        '{"type":"suggestion.error","id":null,"code":"bad_request","message":"x"}'
    )
    assert SuggestionAccepted("s1").encode() == '{"type":"suggestion.accepted","id":"s1"}'


def test_a_lone_surrogate_id_is_escaped_so_the_reply_can_be_sent():
    (request,) = [decode_client_message(r'{"type":"cancel","id":"\ud800x"}')]
    assert request.id == "\ud800x"
    payload = SuggestionStart(request.id, "model").encode()
    assert payload.isascii() and r"\ud800" in payload
    frame_of(payload)
    assert decode_server_message(payload).id == "\ud800x"


def test_non_ascii_from_a_client_may_come_escaped_or_raw():
    assert decode_client_message('{"type":"accept","id":"\\u00e9\\ud83d\\ude00"}') == Accept("é😀")
    assert decode_client_message('{"type":"accept","id":"é😀"}') == Accept("é😀")


# ---- properties of the client decoder -------------------------------------------------------


def assert_documented(message: ai.ClientAiMessage, body: Any) -> None:
    """An accepted message keeps every constraint PROTOCOL.md states, and says what was sent."""
    assert isinstance(body, dict)
    assert isinstance(message.id, str) and 1 <= len(message.id) <= ai.MAX_ID_LENGTH
    assert message.id == body["id"]
    frame_of(SuggestionStart(message.id, "model").encode())  # the server can answer it
    if not isinstance(message, Suggest):
        assert body["type"] == {Cancel: "cancel", Accept: "accept"}[type(message)]
        return
    assert body["type"] == "suggest"
    assert message.kind in ai.KINDS and message.kind == body.get("kind", "complete")
    for value, key in ((message.pos, "pos"), (message.start, "from"), (message.end, "to")):
        assert value == body.get(key)
        assert value is None or (type(value) is int and value >= 0)
    assert message.max_tokens == body.get("max_tokens")
    assert message.max_tokens is None or (
        type(message.max_tokens) is int and 1 <= message.max_tokens <= ai.MAX_TOKENS_LIMIT
    )
    assert message.anchor == body.get("anchor")
    if message.anchor is not None:
        assert isinstance(message.anchor, str) and message.anchor
        base64.b64decode(message.anchor, validate=True)
    assert message.anchor_end == body.get("anchor_end")
    assert message.path == (tuple(body["path"]) if "path" in body else None)
    if message.path is not None:
        assert message.anchor is None and 1 <= len(message.path) <= ai.MAX_PATH_DEPTH
        assert all(type(step) is int and step >= 0 for step in message.path)
    if message.kind == "complete":
        assert message.pos is not None or message.anchor is not None
        assert message.anchor_end is None
    elif message.anchor is not None or message.anchor_end is not None:
        assert message.anchor is not None and message.anchor_end is not None
    else:
        assert message.start is not None and message.end is not None
        assert message.start <= message.end
    assert decode_client_message(message.encode()) == message


def decode_or_refuse(payload: str) -> ai.ClientAiMessage | None:
    """Only InvalidAiMessage may escape the decoder (anything else fails the test)."""
    try:
        message = decode_client_message(payload)
    except InvalidAiMessage as exc:
        assert str(exc)
        assert exc.request_id is None or isinstance(exc.request_id, str)
        # the server sends str(exc) back: it must fit a frame
        frame_of(SuggestionError(exc.request_id, "bad_request", str(exc)).encode())
        return None
    assert_documented(message, json.loads(payload))
    return message


@fast
@given(st.text(max_size=200))
@example("")
@example("[" * 100_000)
@example('{"id":"a","type":' + "[" * 900 + "]" * 900 + "}")
@example("NaN")
@example('{"type":"suggest","id":"a","pos":' + "9" * 5000 + "}")
def test_decoding_any_text_returns_a_message_or_raises_invalid_ai_message(payload):
    decode_or_refuse(payload)


@fast
@given(json_values)
def test_decoding_any_json_value_returns_a_message_or_raises_invalid_ai_message(value):
    decode_or_refuse(json.dumps(value))


FIELD_VALUES = st.one_of(
    json_values,
    st.sampled_from(["suggest", "cancel", "accept", "complete", "rewrite", "AAEEAA==", "%%%"]),
    st.integers(-3, 3),
    st.integers(ai.MAX_TOKENS_LIMIT - 2, ai.MAX_TOKENS_LIMIT + 2),
    st.sampled_from([0.0, 1.5, 5.0, True, False, None, "5", "", "x" * (ai.MAX_ID_LENGTH + 1)]),
    anchors,
    ids,
)
SUGGEST_KEYS = [
    "type",
    "id",
    "kind",
    "pos",
    "from",
    "to",
    "anchor",
    "anchor_end",
    "path",
    "max_tokens",
    "extra",
]


def mostly(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``good`` three times in four, else any of FIELD_VALUES."""
    return st.integers(0, 3).flatmap(lambda i: good if i else FIELD_VALUES)


positions = mostly(st.integers(-1, 40))
# Mostly right, often slightly wrong: most draws reach the deeper rules, many are accepted.
near_suggests = st.fixed_dictionaries(
    {
        "type": st.sampled_from(["suggest", "suggest", "suggest", "cancel", "accept", "wat"]),
        "id": mostly(ids),
    },
    optional={
        "kind": mostly(st.sampled_from(ai.KINDS)),
        "pos": positions,
        "from": positions,
        "to": positions,
        "anchor": mostly(anchors),
        "anchor_end": mostly(anchors),
        "path": mostly(st.lists(st.integers(-1, 3), max_size=3)),
        "max_tokens": mostly(st.integers(0, ai.MAX_TOKENS_LIMIT + 1)),
        "extra": extras,
    },
)


@settings(max_examples=400, deadline=None)
@given(near_suggests)
def test_objects_near_the_schema_decode_to_documented_messages_or_are_refused(body):
    decode_or_refuse(json.dumps(body))


@fast
@given(
    st.fixed_dictionaries(
        {"type": st.just("suggest"), "id": ids, "kind": st.sampled_from(ai.KINDS)},
        optional={
            "pos": uint,
            "from": uint,
            "to": uint,
            "anchor": anchors,
            "anchor_end": anchors,
            "max_tokens": st.integers(1, ai.MAX_TOKENS_LIMIT),
            "extra": extras,
        },
    )
)
def test_well_formed_suggests_are_accepted_exactly_when_the_rules_say(body):
    if body["kind"] == "complete":
        ok = ("pos" in body or "anchor" in body) and "anchor_end" not in body
    elif "anchor" in body or "anchor_end" in body:
        ok = "anchor" in body and "anchor_end" in body  # a selection of two positions
    else:
        ok = "from" in body and "to" in body and body["from"] <= body["to"]
    assert (decode_or_refuse(json.dumps(body)) is not None) == ok


# ---- each documented validation rule ----------------------------------------------------------

LONGEST_ID = "i" * ai.MAX_ID_LENGTH

REFUSED: list[tuple[str, str, str | None]] = [
    # (rule, payload, the id the error answers to)
    ("not JSON", "not json", None),
    ("not JSON: empty", "", None),
    ("not JSON: too deep", "[" * 100_000, None),
    ("not an object: array", "[]", None),
    ("not an object: string", '"suggest"', None),
    ("not an object: number", "1", None),
    ("not an object: null", "null", None),
    ("no id", '{"type":"suggest","kind":"complete","pos":1}', None),
    ("id null", suggest(id=None, kind="complete", pos=1), None),
    ("id a number", suggest(id=5, kind="complete", pos=1), None),
    ("id a list", suggest(id=["s1"], kind="complete", pos=1), None),
    ("id empty", suggest(id="", kind="complete", pos=1), None),
    ("id too long", suggest(id=LONGEST_ID + "i", kind="complete", pos=1), None),
    ("id of 10 KB", suggest(id="i" * 10_000, kind="complete", pos=1), None),
    ("id of 129 emoji", suggest(id="😀" * (ai.MAX_ID_LENGTH + 1), kind="complete", pos=1), None),
    ("unknown type", '{"type":"wat","id":"s1"}', "s1"),
    ("unknown type of 10 KB", json.dumps({"type": "x" * 10_000, "id": "s1"}), "s1"),
    ("no type", '{"id":"s1","kind":"complete","pos":1}', "s1"),
    ("type not a string", '{"type":["suggest"],"id":"s1"}', "s1"),
    ("a server type", '{"type":"suggestion.delta","id":"s1","text":"x"}', "s1"),
    ("kind unknown", suggest(kind="nope", pos=1), "s1"),
    ("kind null", suggest(kind=None, pos=1), "s1"),
    ("kind a number", suggest(kind=1, pos=1), "s1"),
    ("pos negative", suggest(kind="complete", pos=-1), "s1"),
    ("pos fractional", suggest(kind="complete", pos=1.5), "s1"),
    ("pos a float", '{"type":"suggest","id":"s1","kind":"complete","pos":5.0}', "s1"),
    ("pos an exponent", '{"type":"suggest","id":"s1","kind":"complete","pos":5e0}', "s1"),
    ("pos a boolean", suggest(kind="complete", pos=True), "s1"),
    ("pos a string", suggest(kind="complete", pos="5"), "s1"),
    ("pos a list", suggest(kind="complete", pos=[5]), "s1"),
    ("from invalid on a complete", suggest(kind="complete", pos=1, **{"from": -1}), "s1"),
    ("to invalid on a complete", suggest(kind="complete", pos=1, to="x"), "s1"),
    ("complete without pos or anchor", suggest(kind="complete"), "s1"),
    ("complete with only from/to", suggest(kind="complete", **{"from": 1, "to": 2}), "s1"),
    ("rewrite without from", suggest(kind="rewrite", to=2), "s1"),
    ("rewrite without to", suggest(kind="rewrite", **{"from": 1}), "s1"),
    ("rewrite with only pos", suggest(kind="rewrite", pos=1), "s1"),
    ("rewrite with from > to", suggest(kind="rewrite", **{"from": 5, "to": 2}), "s1"),
    ("rewrite with a negative from", suggest(kind="rewrite", **{"from": -1, "to": 2}), "s1"),
    ("anchor a number", suggest(kind="complete", anchor=5), "s1"),
    ("anchor empty", suggest(kind="complete", anchor=""), "s1"),
    ("anchor empty beside pos", suggest(kind="complete", pos=1, anchor=""), "s1"),
    ("anchor not base64", suggest(kind="complete", anchor="%%%"), "s1"),
    ("anchor unpadded", suggest(kind="complete", anchor="AAEEAA"), "s1"),
    ("anchor url-safe alphabet", suggest(kind="complete", anchor="AA-_AA=="), "s1"),
    ("anchor with a space", suggest(kind="complete", anchor="AAEE AA=="), "s1"),
    ("anchor not ASCII", suggest(kind="complete", anchor="ÄÄÄÄ"), "s1"),
    ("max_tokens 0", suggest(kind="complete", pos=1, max_tokens=0), "s1"),
    ("max_tokens over the limit", suggest(kind="complete", pos=1, max_tokens=1025), "s1"),
    ("max_tokens negative", suggest(kind="complete", pos=1, max_tokens=-1), "s1"),
    ("max_tokens a float", suggest(kind="complete", pos=1, max_tokens=8.5), "s1"),
    ("max_tokens a boolean", suggest(kind="complete", pos=1, max_tokens=True), "s1"),
    ("max_tokens a string", suggest(kind="complete", pos=1, max_tokens="8"), "s1"),
    ("cancel without id", '{"type":"cancel"}', None),
    ("accept with a numeric id", '{"type":"accept","id":1}', None),
]


@pytest.mark.parametrize(("rule", "payload", "request_id"), REFUSED, ids=[r[0] for r in REFUSED])
def test_each_documented_rule_refuses_with_the_right_id(rule, payload, request_id):
    error = error_of(payload)
    assert error.request_id == request_id
    assert str(error)
    reply = SuggestionError(error.request_id, "bad_request", str(error)).encode()
    assert len(frame_of(reply)) < 300  # a 10 KB id or type is not echoed back


def test_an_unknown_type_is_named_briefly_and_safely_in_the_message():
    assert "'wat'" in str(error_of('{"type":"wat","id":"s1"}'))
    long_type = error_of(json.dumps({"type": "x" * 10_000, "id": "s1"}))
    assert len(str(long_type)) < 100
    surrogate = error_of('{"type":"\\ud800","id":"s1"}')
    frame_of(SuggestionError("s1", "bad_request", str(surrogate)).encode())
    nested = error_of('{"type":' + "[" * 500 + "]" * 500 + ',"id":"s1"}')
    assert "list" in str(nested)


ACCEPTED: list[tuple[str, str, ai.ClientAiMessage]] = [
    (
        "kind defaults to complete",
        '{"type":"suggest","id":"s1","pos":0}',
        Suggest("s1", "complete", 0),
    ),
    ("pos 0", suggest(kind="complete", pos=0), Suggest("s1", "complete", pos=0)),
    (
        "a position far past any document (the server, not the codec, checks the end)",
        suggest(kind="complete", pos=2**53),
        Suggest("s1", "complete", pos=2**53),
    ),
    (
        "anchor alone",
        suggest(kind="complete", anchor="AAEEAA=="),
        Suggest("s1", "complete", anchor="AAEEAA=="),
    ),
    (
        "anchor beside pos (the server prefers the anchor)",
        suggest(kind="complete", pos=4, anchor="AAEEAA=="),
        Suggest("s1", "complete", pos=4, anchor="AAEEAA=="),
    ),
    (
        "an empty selection",
        suggest(kind="rewrite", **{"from": 3, "to": 3}),
        Suggest("s1", "rewrite", start=3, end=3),
    ),
    (
        "rewrite ignores (but keeps) a valid pos",
        suggest(kind="rewrite", pos=9, **{"from": 0, "to": 3}),
        Suggest("s1", "rewrite", pos=9, start=0, end=3),
    ),
    (
        "max_tokens 1",
        suggest(kind="complete", pos=1, max_tokens=1),
        Suggest("s1", "complete", 1, max_tokens=1),
    ),
    (
        "max_tokens at the limit",
        suggest(kind="complete", pos=1, max_tokens=1024),
        Suggest("s1", "complete", 1, max_tokens=1024),
    ),
    (
        "null optional members count as absent",
        suggest(kind="complete", pos=1, anchor=None, max_tokens=None, to=None),
        Suggest("s1", "complete", pos=1),
    ),
    (
        "extra fields are ignored",
        suggest(kind="complete", pos=2, text="ignored", extra={"x": [1, None]}, source="model"),
        Suggest("s1", "complete", pos=2),
    ),
    (
        "the longest id",
        suggest(id=LONGEST_ID, kind="complete", pos=1),
        Suggest(LONGEST_ID, "complete", 1),
    ),
    ("an emoji id", suggest(id="😀", kind="complete", pos=1), Suggest("😀", "complete", 1)),
    (
        "ids count code points: 128 emoji (256 UTF-16 units)",
        suggest(id="😀" * ai.MAX_ID_LENGTH, kind="complete", pos=1),
        Suggest("😀" * ai.MAX_ID_LENGTH, "complete", 1),
    ),
    ("cancel", '{"type":"cancel","id":"s1","reason":"ignored"}', Cancel("s1")),
    ("accept", '{"type":"accept","id":"s1","pos":-5}', Accept("s1")),
]


@pytest.mark.parametrize(("rule", "payload", "expected"), ACCEPTED, ids=[r[0] for r in ACCEPTED])
def test_each_documented_rule_accepts(rule, payload, expected):
    assert decode_client_message(payload) == expected


def test_ai_error_is_a_protocol_error_carrying_the_id():
    from tether.protocol.protocol_errors import ProtocolError

    error = error_of(suggest(kind="nope", pos=1))
    assert isinstance(error, ProtocolError) and error.request_id == "s1"


# ---- the server-message decoder ---------------------------------------------------------------


def test_decode_server_message_ignores_extra_fields():
    payload = '{"type":"suggestion.delta","id":"s1","text":"x","model":"smol","seq":3,"type2":1}'
    assert decode_server_message(payload) == SuggestionDelta("s1", "x")
    end = '{"tokens":4,"reason":"done","id":"s1","type":"suggestion.end","ttft_ms":12,"x":{}}'
    assert decode_server_message(end) == SuggestionEnd("s1", "done", 12, 4)


def test_decode_server_message_reads_an_error_with_a_null_or_missing_id():
    with_null = '{"type":"suggestion.error","id":null,"code":"bad_request","message":"m"}'
    assert decode_server_message(with_null) == SuggestionError(None, "bad_request", "m")
    without = '{"type":"suggestion.error","code":"bad_request","message":"m"}'
    assert decode_server_message(without) == SuggestionError(None, "bad_request", "m")


def test_decode_server_message_reads_the_engines_hand_built_accepted():
    # ai/engine.py writes it with json.dumps (non-ASCII escaped)
    payload = '{"type":"suggestion.accepted","id":' + json.dumps("é😀") + "}"
    assert decode_server_message(payload) == SuggestionAccepted("é😀")


def test_an_end_without_ttft_or_tokens_reads_with_the_defaults():
    payload = '{"type":"suggestion.end","id":"s1","reason":"cancelled"}'
    assert decode_server_message(payload) == SuggestionEnd("s1", "cancelled", None, 0)


@pytest.mark.parametrize(
    "payload",
    [
        "not json",
        "[]",
        "null",
        '"suggestion.delta"',
        "[" * 100_000,
        "{}",
        '{"type":"suggestion.nope","id":"s1"}',
        '{"type":["suggestion.start"],"id":"s1"}',
        '{"type":"suggest","id":"s1","kind":"complete","pos":1}',  # a client message
        '{"type":"suggestion.start","id":"s1"}',  # no source
        '{"type":"suggestion.delta","id":"s1"}',  # no text
        '{"type":"suggestion.delta","id":null,"text":"x"}',  # only errors may have a null id
        '{"type":"suggestion.delta","id":5,"text":"x"}',
        '{"type":"suggestion.delta","id":"s1","text":null}',
        '{"type":"suggestion.delta","id":"s1","text":["x"]}',
        '{"type":"suggestion.start","id":"s1","source":1}',
        '{"type":"suggestion.end","id":"s1"}',  # no reason
        '{"type":"suggestion.end","id":"s1","reason":"done","ttft_ms":"12"}',
        '{"type":"suggestion.end","id":"s1","reason":"done","ttft_ms":true}',
        '{"type":"suggestion.end","id":"s1","reason":"done","tokens":-1}',
        '{"type":"suggestion.end","id":"s1","reason":"done","tokens":1.5}',
        '{"type":"suggestion.end","id":"s1","reason":"done","tokens":true}',
        '{"type":"suggestion.error","id":"s1","code":"busy"}',  # no message
        '{"type":"suggestion.error","id":"s1","code":null,"message":"m"}',
        '{"type":"suggestion.error","id":7,"code":"busy","message":"m"}',
        '{"type":"suggestion.accepted"}',
    ],
)
def test_decode_server_message_refuses_malformed_messages(payload):
    with pytest.raises(InvalidAiMessage):
        decode_server_message(payload)


@fast
@given(st.one_of(st.text(max_size=200), json_values.map(json.dumps)))
def test_decoding_any_server_text_returns_a_message_or_raises_invalid_ai_message(payload):
    try:
        message = decode_server_message(payload)
    except InvalidAiMessage:
        return
    assert decode_server_message(message.encode()) == message


near_server_messages = st.fixed_dictionaries(
    {"type": mostly(st.sampled_from(list(ai._SERVER_TYPES)))},
    optional={
        "id": mostly(ids),
        "source": mostly(st.sampled_from(ai.SOURCES)),
        "text": mostly(texts),
        "reason": mostly(st.sampled_from(ai.END_REASONS)),
        "ttft_ms": mostly(st.floats(0, 1e6)),
        "tokens": mostly(st.integers(-1, 100)),
        "code": mostly(st.sampled_from(["busy", "bad_request", "internal"])),
        "message": mostly(texts),
        "extra": extras,
    },
)


@settings(max_examples=200, deadline=None)
@given(near_server_messages)
def test_server_objects_near_the_schema_decode_to_well_typed_messages_or_are_refused(body):
    try:
        message = decode_server_message(json.dumps(body))
    except InvalidAiMessage:
        return
    assert body["type"] in ai._SERVER_TYPES
    assert isinstance(message.id, str) or (
        message.id is None and body["type"] == "suggestion.error"
    )
    assert decode_server_message(message.encode()) == message

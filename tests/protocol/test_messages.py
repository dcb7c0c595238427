from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.protocol.test_sync import mutations, simple_awareness_payloads, sync_messages
from tether.protocol.protocol_errors import (
    DecodeError,
    FrameTooLarge,
    ProtocolError,
    UnknownMessageType,
)
from tether.protocol.wire import messages as m
from tether.protocol.wire.lib0 import write_var_string, write_var_uint
from tether.protocol.wire.sync_payloads import EMPTY_UPDATE, SyncStep1, SyncUpdate
from tether.protocol.wire.yws_frames import (
    YAwareness,
    YPermissionDenied,
    YQueryAwareness,
    YSync,
    decode_yws_frame,
)

channels = (
    st.text(max_size=12)
    | st.text(alphabet="dé😀/\0", max_size=12)
    | st.tuples(st.text(max_size=8), st.text(max_size=8)).map("\0".join)  # sessionAwareness
)
texts = st.text(max_size=20) | st.text(alphabet="aé€😀\0", max_size=20)
optional_texts = st.none() | texts

tokens = st.one_of(
    st.builds(m.AuthToken, channels, texts, optional_texts),
    st.builds(m.AuthToken, channels, st.none(), st.none()),  # the server's token request
)
channel_messages = st.one_of(
    st.builds(m.Sync, channels, sync_messages),
    st.builds(m.Awareness, channels, st.binary(max_size=40) | simple_awareness_payloads),
    tokens,
    st.builds(m.PermissionDenied, channels, texts),
    st.builds(m.Authenticated, channels, st.sampled_from([m.SCOPE_READ_WRITE, m.SCOPE_READONLY])),
    st.builds(m.QueryAwareness, channels),
    st.builds(m.Stateless, channels, texts),
    st.builds(m.Close, channels, optional_texts),
    st.builds(m.SyncStatus, channels, st.booleans()),
)
all_messages = channel_messages | st.just(m.Ping()) | st.just(m.Pong())
yws_messages = st.one_of(
    st.builds(YSync, sync_messages),
    st.builds(YAwareness, st.binary(max_size=40) | simple_awareness_payloads),
    st.builds(YPermissionDenied, texts),
    st.just(YQueryAwareness()),
)

fast = settings(max_examples=200, deadline=None)
fuzz = settings(max_examples=300, deadline=None)


def _frame(channel: str, kind: int, body: bytes = b"") -> bytes:
    return write_var_string(channel) + write_var_uint(kind) + body


# ---- round trips -------------------------------------------------------------------------------


@fast
@given(all_messages)
@example(m.AuthToken("doc", "secret", "4.8.0"))
@example(m.AuthToken("doc", "secret"))
@example(m.AuthToken("doc", None))
@example(m.Close("doc"))
@example(m.Close("doc", "bye"))
@example(m.Sync("doc\0session", SyncUpdate(EMPTY_UPDATE)))
def test_every_multiplexed_message_decodes_to_what_it_encodes(message):
    assert m.decode_frame(message.encode()) == message


@fast
@given(channel_messages)
def test_a_frame_starts_with_its_channel_name_then_its_type(message):
    frame = message.encode()
    assert frame.startswith(write_var_string(message.channel))


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        (m.Sync("d", SyncStep1(b"")), m.SYNC),
        (m.Awareness("d", b""), m.AWARENESS),
        (m.AuthToken("d", "t"), m.AUTH),
        (m.PermissionDenied("d", "r"), m.AUTH),
        (m.Authenticated("d", "readonly"), m.AUTH),
        (m.QueryAwareness("d"), m.QUERY_AWARENESS),
        (m.Stateless("d", "{}"), m.STATELESS),
        (m.Close("d"), m.CLOSE),
        (m.SyncStatus("d", True), m.SYNC_STATUS),
    ],
)
def test_each_message_carries_its_hocuspocus_type_number(message, kind):
    assert message.encode()[2] == kind  # after varString("d") = 01 64


def test_ping_and_pong_are_one_byte_with_no_channel():
    assert m.Ping().encode() == m.PING_FRAME == b"\x09"
    assert m.Pong().encode() == m.PONG_FRAME == b"\x0a"
    assert m.decode_frame(b"\x09") == m.Ping()
    assert m.decode_frame(b"\x0a") == m.Pong()


def test_a_token_carries_the_provider_version_after_the_token():
    frame = m.AuthToken("doc", "secret", "4.8.0").encode()
    assert frame == _frame("doc", 2, b"\x00" + write_var_string("secret") + b"\x054.8.0")


def test_sync_status_is_one_for_applied_and_zero_for_rejected():
    assert m.SyncStatus("doc", True).encode() == _frame("doc", 8, b"\x01")
    assert m.SyncStatus("doc", False).encode() == _frame("doc", 8, b"\x00")


def test_a_sync_status_other_than_one_reads_as_not_applied():
    assert m.decode_frame(_frame("doc", 8, b"\x02")) == m.SyncStatus("doc", False)


def test_bytes_after_a_complete_body_are_ignored_like_the_js_readers_do():
    assert m.decode_frame(_frame("doc", 3, b"\xff")) == m.QueryAwareness("doc")


@pytest.mark.parametrize(
    ("channel", "document"),
    [("doc", "doc"), ("doc\0s1", "doc"), ("a/b\0s\0t", "a/b"), ("", ""), ("😀\0x", "😀")],
)
def test_a_channel_addresses_the_document_before_its_first_nul(channel, document):
    assert m.document_of(channel) == document


# ---- refusals ----------------------------------------------------------------------------------


def test_an_empty_frame_is_a_decode_error():
    with pytest.raises(DecodeError):
        m.decode_frame(b"")


@pytest.mark.parametrize("kind", [4, 6, 11, 127, 300])
def test_a_type_we_do_not_speak_is_unknown_message_type(kind):
    with pytest.raises(UnknownMessageType):
        m.decode_frame(_frame("doc", kind))


def test_an_unknown_auth_subtype_is_unknown_message_type():
    with pytest.raises(UnknownMessageType):
        m.decode_frame(_frame("doc", 2, b"\x03"))


@pytest.mark.parametrize(
    "name", [b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf0\x9f\x98", b"doc\x80"]
)
def test_a_channel_name_that_is_not_utf8_is_a_decode_error(name):
    with pytest.raises(DecodeError):
        m.decode_frame(write_var_uint(len(name)) + name + b"\x03")


def test_a_token_that_is_not_utf8_is_a_decode_error():
    with pytest.raises(DecodeError):
        m.decode_frame(_frame("doc", 2, b"\x00\x01\xff"))


@pytest.mark.parametrize(
    "frame",
    [
        b"\x05doc",  # name shorter than its length
        b"\x03doc",  # no type
        _frame("doc", 0),  # no sync type
        _frame("doc", 0, b"\x02\x05\x00"),  # update shorter than its length
        _frame("doc", 1, b"\xff\xff\xff\xff\x0f"),  # a 4 GiB awareness update
        _frame("doc", 2),  # no auth type
        _frame("doc", 2, b"\x01"),  # PermissionDenied without a reason
        _frame("doc", 5),  # Stateless without a payload
        _frame("doc", 8),  # SyncStatus without a status
        b"\xff" * 9,  # a name length longer than any varUint
    ],
)
def test_a_truncated_or_overlong_frame_is_a_decode_error(frame):
    with pytest.raises(DecodeError):
        m.decode_frame(frame)


def test_a_frame_over_the_limit_is_frame_too_large_before_it_is_parsed():
    frame = m.Stateless("doc", "x" * 100).encode()
    assert m.decode_frame(frame, max_frame_bytes=len(frame)) == m.Stateless("doc", "x" * 100)
    with pytest.raises(FrameTooLarge):
        m.decode_frame(frame, max_frame_bytes=len(frame) - 1)
    with pytest.raises(FrameTooLarge):
        m.decode_frame(b"\xff" * 50, max_frame_bytes=10)  # garbage, but too big first


def test_every_protocol_error_is_marked_as_the_remote_peers_fault():
    with pytest.raises(ProtocolError) as caught:
        m.decode_frame(b"")
    assert caught.value.remote


# ---- fuzzing: the decoder never raises anything but ProtocolError ------------------------------


def _decodes_or_refuses(data: bytes) -> None:
    try:
        message = m.decode_frame(data, max_frame_bytes=1 << 20)
    except ProtocolError:
        return
    # Whatever is accepted can be sent on: it re-encodes to a frame that decodes the same.
    assert m.decode_frame(message.encode()) == message


@fuzz
@given(st.binary(max_size=48))
def test_decode_frame_raises_nothing_but_protocol_error_on_random_bytes(data):
    _decodes_or_refuses(data)


@fuzz
@given(all_messages.map(lambda msg: msg.encode()).flatmap(mutations))
def test_decode_frame_raises_nothing_but_protocol_error_on_damaged_frames(data):
    _decodes_or_refuses(data)


# ---- y-websocket frames ------------------------------------------------------------------------


@fast
@given(yws_messages)
def test_every_y_websocket_message_decodes_to_what_it_encodes(message):
    assert decode_yws_frame(message.encode()) == message


def test_y_websocket_frames_have_no_channel_name():
    assert YSync(SyncStep1(b"\x00")).encode() == b"\x00\x00\x01\x00"
    assert YAwareness(b"\x00").encode() == b"\x01\x01\x00"
    assert YPermissionDenied("no").encode() == b"\x02\x00\x02no"
    assert YQueryAwareness().encode() == b"\x03"


def test_the_keepalive_frame_is_an_empty_awareness_update():
    assert decode_yws_frame(b"\x01\x01\x00") == YAwareness(b"\x00")


def test_an_empty_y_websocket_frame_is_a_decode_error():
    with pytest.raises(DecodeError):
        decode_yws_frame(b"")


@pytest.mark.parametrize("kind", [4, 5, 8, 9, 127])
def test_a_y_websocket_type_we_do_not_speak_is_unknown_message_type(kind):
    with pytest.raises(UnknownMessageType):
        decode_yws_frame(write_var_uint(kind) + b"\x00")


def test_a_y_websocket_frame_over_the_limit_is_frame_too_large():
    frame = YSync(SyncUpdate(b"\x00" * 100)).encode()
    assert decode_yws_frame(frame, max_frame_bytes=len(frame)) == YSync(SyncUpdate(b"\x00" * 100))
    with pytest.raises(FrameTooLarge):
        decode_yws_frame(frame, max_frame_bytes=len(frame) - 1)


def test_a_y_websocket_reason_that_is_not_utf8_is_a_decode_error():
    with pytest.raises(DecodeError):
        decode_yws_frame(b"\x02\x00\x01\xff")


def _yws_decodes_or_refuses(data: bytes) -> None:
    try:
        message = decode_yws_frame(data, max_frame_bytes=1 << 20)
    except ProtocolError:
        return
    assert decode_yws_frame(message.encode()) == message


@fuzz
@given(st.binary(max_size=48))
def test_decode_yws_frame_raises_nothing_but_protocol_error_on_random_bytes(data):
    _yws_decodes_or_refuses(data)


@fuzz
@given(yws_messages.map(lambda msg: msg.encode()).flatmap(mutations))
def test_decode_yws_frame_raises_nothing_but_protocol_error_on_damaged_frames(data):
    _yws_decodes_or_refuses(data)

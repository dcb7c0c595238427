from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pycrdt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.protocol.protocol_errors import DecodeError, ProtocolError, UnknownMessageType
from tether.protocol.wire.lib0 import Decoder, write_var_string, write_var_uint
from tether.protocol.wire.messages import Sync, decode_frame
from tether.protocol.wire.sync_payloads import (
    EMPTY_UPDATE,
    AwarenessEntry,
    SyncStep1,
    SyncStep2,
    SyncUpdate,
    decode_awareness,
    encode_awareness,
    read_sync_message,
)
from tether.protocol.wire.yws_frames import YAwareness, YSync, decode_yws_frame

MAX_SAFE = (1 << 53) - 1
TESTS_DIR = Path(__file__).resolve().parents[1]

# ---- strategies (test_messages.py imports these) -----------------------------------------------

texts = st.text(max_size=20) | st.text(alphabet='aé€😀\0"\\', max_size=20)
payloads = st.binary(max_size=64)
sync_messages = st.one_of(
    st.builds(SyncStep1, payloads),
    st.builds(SyncStep2, payloads),
    st.builds(SyncUpdate, payloads),
)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-MAX_SAFE, MAX_SAFE)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)
json_texts = json_values.map(lambda v: json.dumps(v, ensure_ascii=False, separators=(",", ":")))
awareness_entries = st.builds(
    AwarenessEntry, st.integers(0, MAX_SAFE), st.integers(0, MAX_SAFE), json_texts
)
awareness_payloads = st.lists(awareness_entries, max_size=4).map(encode_awareness)
# Cheaper to draw than the recursive JSON above, for tests that only damage the bytes.
simple_awareness_payloads = st.lists(
    st.builds(
        AwarenessEntry,
        st.integers(0, MAX_SAFE),
        st.integers(0, MAX_SAFE),
        st.sampled_from(["{}", "null", '{"name":"Zoë 😀"}', "[1,2]", '"x"']),
    ),
    max_size=3,
).map(encode_awareness)

# Length prefixes that promise far more than any frame holds, or overflow a varUint.
HUGE_LENGTHS = [
    b"\xff\xff\xff\xff\x0f",  # 4 GiB
    b"\xff" * 7 + b"\x0f",  # 2**53 - 1
    b"\xff" * 7 + b"\x7f",  # 2**56 - 1: fits 8 bytes, not a JS safe integer
    b"\xff" * 9,  # longer than any varUint
]


def _flip(data: bytes, index: int, bit: int) -> bytes:
    return data[:index] + bytes([data[index] ^ (1 << bit)]) + data[index + 1 :]


def mutations(data: bytes) -> st.SearchStrategy[bytes]:
    """A valid encoding damaged: truncated, a bit flipped, a huge length put in or over it."""
    if not data:
        return st.just(data)
    n = len(data)
    return st.one_of(
        st.integers(0, n - 1).map(lambda i: data[:i]),
        st.tuples(st.integers(0, n - 1), st.integers(0, 7)).map(lambda t: _flip(data, *t)),
        st.tuples(st.integers(0, n), st.sampled_from(HUGE_LENGTHS)).map(
            lambda t: data[: t[0]] + t[1] + data[t[0] :]
        ),
        st.tuples(st.integers(0, n - 1), st.sampled_from(HUGE_LENGTHS)).map(
            lambda t: data[: t[0]] + t[1] + data[t[0] + len(t[1]) :]
        ),
    )


fast = settings(max_examples=200, deadline=None)


def _entry_bytes(client_id: int, clock: int, state: str) -> bytes:
    return write_var_uint(client_id) + write_var_uint(clock) + write_var_string(state)


def _one_entry(state: str) -> bytes:
    return b"\x01" + _entry_bytes(1, 0, state)


# ---- sync messages -----------------------------------------------------------------------------


@fast
@given(sync_messages)
def test_every_sync_message_decodes_to_what_it_encodes(message):
    decoder = Decoder(message.encode())
    assert read_sync_message(decoder) == message
    assert decoder.at_end()


def test_a_sync_message_starts_with_its_type_then_a_length_prefixed_payload():
    assert SyncStep1(b"\x00").encode() == b"\x00\x01\x00"
    assert SyncStep2(EMPTY_UPDATE).encode() == b"\x01\x02\x00\x00"
    assert SyncUpdate(b"\xab").encode() == b"\x02\x01\xab"


def test_an_unknown_sync_type_is_unknown_message_type():
    with pytest.raises(UnknownMessageType):
        read_sync_message(Decoder(b"\x03\x00"))


@pytest.mark.parametrize("data", [b"", b"\x00", b"\x01\x05\x00\x00", b"\x02\x80"])
def test_a_truncated_sync_message_is_a_decode_error(data):
    with pytest.raises(DecodeError):
        read_sync_message(Decoder(data))


# ---- awareness ---------------------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(st.lists(awareness_entries, max_size=5))
def test_awareness_entries_decode_to_what_they_encode(entries):
    assert decode_awareness(encode_awareness(entries)) == entries


def test_an_awareness_state_with_emoji_keeps_its_utf8_length_prefix():
    state = '{"name":"Zoë 😀"}'
    payload = encode_awareness([AwarenessEntry(1, 3, state)])
    assert payload == b"\x01\x01\x03" + bytes([len(state.encode())]) + state.encode()
    assert decode_awareness(payload) == [AwarenessEntry(1, 3, state)]


def test_a_null_state_marks_a_client_that_left():
    assert AwarenessEntry(1, 2, "null").removed
    assert not AwarenessEntry(1, 2, "{}").removed


def test_the_empty_awareness_update_decodes_to_no_entries():
    assert decode_awareness(b"\x00") == []


@pytest.mark.parametrize(
    "state",
    ["{", "", "undefined", "{'a': 1}", "NaN", "Infinity", "-Infinity", '{"a":NaN}', "[1,]"],
)
def test_an_awareness_state_that_json_parse_would_refuse_is_a_decode_error(state):
    with pytest.raises(DecodeError):
        decode_awareness(_one_entry(state))


def test_deeply_nested_awareness_json_is_a_decode_error_not_a_recursion_error():
    with pytest.raises(DecodeError):
        decode_awareness(_one_entry("[" * 5000 + "]" * 5000))


def test_the_awareness_state_limit_counts_utf8_bytes():
    state = json.dumps("😀" * 20, ensure_ascii=False)  # 22 characters, 82 bytes
    assert decode_awareness(_one_entry(state), max_state_bytes=82)
    with pytest.raises(DecodeError):
        decode_awareness(_one_entry(state), max_state_bytes=81)


def test_an_awareness_state_that_is_not_utf8_is_a_decode_error():
    with pytest.raises(DecodeError):
        decode_awareness(b"\x01\x01\x00\x03\x22\xff\x22")


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"\x05\x01\x00\x02{}",  # claims 5 entries, holds 1
        b"\xff\xff\xff\xff\x0f",  # claims 4 billion entries
        b"\x01\x01\x00\x09{}",  # state length past the end
        b"\x01\xff\xff\xff\xff\xff\xff\xff\x7f\x00\x02{}",  # client id above 2**53 - 1
    ],
)
def test_a_malformed_awareness_payload_is_a_decode_error(payload):
    with pytest.raises(DecodeError):
        decode_awareness(payload)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=40) | simple_awareness_payloads.flatmap(mutations))
def test_decode_awareness_raises_nothing_but_protocol_error_on_random_bytes(data):
    try:
        entries = decode_awareness(data)
    except ProtocolError:
        return
    # whatever it accepts, it can send on: the entries re-encode and decode the same
    assert decode_awareness(encode_awareness(entries)) == entries


# ---- cross-checks with pycrdt ------------------------------------------------------------------


def _text_doc(text: str, client_id: int = 1) -> pycrdt.Doc:
    doc = pycrdt.Doc(client_id=client_id)
    doc["t"] = pycrdt.Text(text)
    return doc


def _text_of(doc: pycrdt.Doc) -> str:
    return str(doc.get("t", type=pycrdt.Text))


@pytest.mark.parametrize("message_type", [SyncStep2, SyncUpdate])
def test_a_pycrdt_update_carried_in_our_sync_frame_applies_on_another_doc(message_type):
    source = _text_doc("héllo 😀 wörld")
    frame = Sync("doc", message_type(source.get_update())).encode()
    received = decode_frame(frame)
    target = pycrdt.Doc()
    target.apply_update(received.message.update)
    assert _text_of(target) == "héllo 😀 wörld"


def test_incremental_pycrdt_updates_replay_through_our_frames_in_order():
    source = _text_doc("")
    updates: list[bytes] = []
    source.observe(lambda event: updates.append(event.update))
    text = source.get("t", type=pycrdt.Text)
    for chunk in ["a", "😀", "é", "!"]:
        text += chunk
    del text[0:1]
    target = pycrdt.Doc()
    for update in updates:
        target.apply_update(decode_yws_frame(YSync(SyncUpdate(update)).encode()).message.update)
    assert _text_of(target) == "😀é!"


def test_pycrdt_y_websocket_frames_decode_as_our_messages():
    doc = _text_doc("hi")
    assert decode_yws_frame(pycrdt.create_sync_message(doc)) == YSync(SyncStep1(doc.get_state()))
    update = doc.get_update()
    assert decode_yws_frame(pycrdt.create_update_message(update)) == YSync(SyncUpdate(update))


def test_pycrdt_answers_our_step1_with_a_step2_we_decode():
    server = _text_doc("from pycrdt 😀")
    client = pycrdt.Doc()
    ask = YSync(SyncStep1(client.get_state())).encode()
    reply = pycrdt.handle_sync_message(ask[1:], server)
    answer = decode_yws_frame(reply)
    assert isinstance(answer.message, SyncStep2)
    client.apply_update(answer.message.update)
    assert _text_of(client) == "from pycrdt 😀"


def test_the_empty_documents_state_vector_and_update_are_what_we_document():
    doc = pycrdt.Doc()
    assert doc.get_state() == b"\x00"
    assert doc.get_update() == EMPTY_UPDATE


def test_a_pycrdt_awareness_update_decodes_as_our_entries():
    awareness = pycrdt.Awareness(pycrdt.Doc(client_id=5))
    awareness.set_local_state({"name": "ada", "cursor": None})
    payload = awareness.encode_awareness_update([5])
    [entry] = decode_awareness(payload)
    assert (entry.client_id, json.loads(entry.state)) == (5, {"name": "ada", "cursor": None})


def test_our_awareness_update_with_emoji_applies_in_pycrdt():
    awareness = pycrdt.Awareness(pycrdt.Doc(client_id=5))
    state = json.dumps({"name": "Zoë 😀"}, ensure_ascii=False)
    awareness.apply_awareness_update(encode_awareness([AwarenessEntry(9, 1, state)]), "test")
    assert awareness.states[9] == {"name": "Zoë 😀"}


# ---- cross-check with the JS reference (yjs + y-protocols) -------------------------------------

_YJS_SCRIPT = """
import * as Y from 'yjs'
import * as enc from 'lib0/encoding'
import * as dec from 'lib0/decoding'
import * as sync from 'y-protocols/sync'
import * as aw from 'y-protocols/awareness'
const input = JSON.parse(process.argv[1])
const frame = (f) => {
  const e = enc.createEncoder()
  f(e)
  return Buffer.from(enc.toUint8Array(e)).toString('hex')
}
const doc = new Y.Doc()
doc.clientID = 42
doc.getText('t').insert(0, 'hé😀')
let last = null
doc.on('update', (u) => { last = u })
doc.getText('t').insert(4, '!')
const awareness = new aw.Awareness(doc)
awareness.setLocalState({ name: 'Zoë 😀', cursor: null })
const out = {
  step1: frame((e) => { enc.writeVarUint(e, 0); sync.writeSyncStep1(e, doc) }),
  step2: frame((e) => { enc.writeVarUint(e, 0); sync.writeSyncStep2(e, doc) }),
  update: frame((e) => { enc.writeVarUint(e, 0); sync.writeUpdate(e, last) }),
  awareness: frame((e) => {
    enc.writeVarUint(e, 1)
    enc.writeVarUint8Array(e, aw.encodeAwarenessUpdate(awareness, [42]))
  }),
}
const theirs = new Y.Doc()
const theirAwareness = new aw.Awareness(theirs)
for (const h of input.frames) {
  const d = dec.createDecoder(Buffer.from(h, 'hex'))
  const type = dec.readVarUint(d)
  if (type === 0) sync.readSyncMessage(d, enc.createEncoder(), theirs, 'py')
  else aw.applyAwarenessUpdate(theirAwareness, dec.readVarUint8Array(d), 'py')
}
out.text = theirs.getText('t').toString()
out.states = Object.fromEntries(
  [...theirAwareness.getStates()].filter(([id]) => id !== theirs.clientID)
)
awareness.destroy()
theirAwareness.destroy()
process.stdout.write(JSON.stringify(out))
process.exit(0)
"""


def _node_yjs_available() -> bool:
    modules = TESTS_DIR / "node_modules"
    return shutil.which("node") is not None and all(
        (modules / name).is_dir() for name in ("yjs", "y-protocols", "lib0")
    )


@pytest.mark.skipif(not _node_yjs_available(), reason="node or the yjs packages are missing")
def test_frames_written_by_y_protocols_and_by_us_are_read_by_the_other_side():
    ours = _text_doc("añ😀", client_id=7)
    our_state = json.dumps({"name": "Zoë 😀"}, ensure_ascii=False)
    frames = [
        YSync(SyncStep2(ours.get_update())).encode(),
        YAwareness(encode_awareness([AwarenessEntry(7, 1, our_state)])).encode(),
    ]
    result = subprocess.run(
        [
            "node",
            "--input-type=module",
            "-e",
            _YJS_SCRIPT,
            json.dumps({"frames": [f.hex() for f in frames]}),
        ],
        cwd=TESTS_DIR,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    js = json.loads(result.stdout)
    # JS read ours
    assert js["text"] == "añ😀"
    assert js["states"] == {"7": {"name": "Zoë 😀"}}
    # we read JS's
    step1 = decode_yws_frame(bytes.fromhex(js["step1"]))
    assert step1 == YSync(SyncStep1(b"\x01\x2a\x05"))  # client 42 at clock 5 ("hé😀!" in UTF-16)
    doc = pycrdt.Doc()
    doc.apply_update(decode_yws_frame(bytes.fromhex(js["step2"])).message.update)
    assert _text_of(doc) == "hé😀!"
    assert isinstance(decode_yws_frame(bytes.fromhex(js["update"])).message, SyncUpdate)
    [entry] = decode_awareness(decode_yws_frame(bytes.fromhex(js["awareness"])).update)
    assert entry.client_id == 42
    assert json.loads(entry.state) == {"name": "Zoë 😀", "cursor": None}

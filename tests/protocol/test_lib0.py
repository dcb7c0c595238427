from __future__ import annotations

import json
import random
import shutil
import subprocess
from pathlib import Path

import pycrdt
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tether.protocol.protocol_errors import DecodeError, ProtocolError
from tether.protocol.wire.lib0 import (
    Decoder,
    write_var_int,
    write_var_string,
    write_var_uint,
    write_var_uint8_array,
)

MAX_SAFE = (1 << 53) - 1
TESTS_DIR = Path(__file__).resolve().parents[1]

uints = st.integers(0, MAX_SAFE)
ints = st.integers(-MAX_SAFE, MAX_SAFE)
texts = st.text() | st.text(alphabet="aé€😀👩‍👩‍👧\0\n")

fast = settings(max_examples=300, deadline=None)


def _read_all(data: bytes, method):
    decoder = Decoder(data)
    value = method(decoder)
    assert decoder.at_end()
    return value


# ---- round trips -------------------------------------------------------------------------------


@fast
@given(uints)
@example(0)
@example(127)
@example(128)
@example(MAX_SAFE)
def test_a_var_uint_decodes_to_the_number_it_encodes(value):
    encoded = write_var_uint(value)
    assert _read_all(encoded, Decoder.read_var_uint) == value
    assert len(encoded) == max(1, -(-value.bit_length() // 7))


@fast
@given(ints)
@example(0)
@example(63)
@example(64)
@example(-64)
@example(MAX_SAFE)
@example(-MAX_SAFE)
def test_a_var_int_decodes_to_the_number_it_encodes(value):
    assert _read_all(write_var_int(value), Decoder.read_var_int) == value


@fast
@given(texts)
@example("é😀")
def test_a_var_string_decodes_to_the_text_it_encodes(text):
    encoded = write_var_string(text)
    assert _read_all(encoded, Decoder.read_var_string) == text


@fast
@given(texts)
def test_a_var_string_length_prefix_counts_utf8_bytes_not_characters(text):
    raw = text.encode("utf-8")
    assert write_var_string(text) == write_var_uint(len(raw)) + raw


def test_an_emoji_string_is_prefixed_with_its_utf8_byte_count():
    # 2 code points, 3 UTF-16 units, 6 UTF-8 bytes
    assert write_var_string("é😀") == bytes([6]) + "é😀".encode()


@fast
@given(st.binary(max_size=300))
def test_a_var_uint8_array_decodes_to_the_bytes_it_encodes(data):
    assert _read_all(write_var_uint8_array(data), Decoder.read_var_uint8_array) == data


@fast
@given(st.lists(st.one_of(uints, texts, st.binary(max_size=40)), max_size=10))
def test_values_written_back_to_back_are_read_back_in_order(values):
    writers = {int: write_var_uint, str: write_var_string, bytes: write_var_uint8_array}
    readers = {
        int: Decoder.read_var_uint,
        str: Decoder.read_var_string,
        bytes: Decoder.read_var_uint8_array,
    }
    decoder = Decoder(b"".join(writers[type(v)](v) for v in values))
    assert [readers[type(v)](decoder) for v in values] == values
    assert decoder.at_end()


def test_the_decoder_reads_bytearray_and_memoryview_and_reports_its_position():
    decoder = Decoder(memoryview(bytearray(b"\x03abc\x01\x02")))
    assert decoder.read_var_string() == "abc"
    assert (decoder.pos, decoder.remaining(), decoder.at_end()) == (4, 2, False)
    assert decoder.read_rest() == b"\x01\x02"
    assert decoder.at_end()
    assert Decoder(b"\x00\x05", pos=1).read_var_uint() == 5


# ---- the encoders refuse what JS could not represent --------------------------------------------


@pytest.mark.parametrize("value", [-1, MAX_SAFE + 1])
def test_the_var_uint_encoder_refuses_numbers_outside_the_js_safe_range(value):
    with pytest.raises(ValueError):
        write_var_uint(value)


@pytest.mark.parametrize("value", [MAX_SAFE + 1, -MAX_SAFE - 1])
def test_the_var_int_encoder_refuses_numbers_outside_the_js_safe_range(value):
    with pytest.raises(ValueError):
        write_var_int(value)


# ---- the decoder refuses malformed input with DecodeError ---------------------------------------


@pytest.mark.parametrize(
    ("data", "method"),
    [
        (b"", Decoder.read_var_uint),
        (b"\x80", Decoder.read_var_uint),
        (b"\xff" * 8 + b"\x01", Decoder.read_var_uint),  # 9 bytes
        (b"\xff" * 7 + b"\x7f", Decoder.read_var_uint),  # 2**56 - 1
        (b"\x80" * 7 + b"\x10", Decoder.read_var_uint),  # exactly 2**53
        (b"", Decoder.read_var_int),
        (b"\xc0", Decoder.read_var_int),
        (b"\xff" * 8 + b"\x01", Decoder.read_var_int),
        (b"\xff" * 7 + b"\x7f", Decoder.read_var_int),  # magnitude 2**55 - 1
        (b"\x05abc", Decoder.read_var_uint8_array),
        (b"\xff\xff\xff\xff\x0f", Decoder.read_var_uint8_array),  # a 4 GiB length
        (b"\x02\xc3\x28", Decoder.read_var_string),  # invalid UTF-8
        (b"\x03\xed\xa0\x80", Decoder.read_var_string),  # an encoded surrogate
        (b"\x01\xff", Decoder.read_var_string),
    ],
)
def test_malformed_input_raises_decode_error(data, method):
    with pytest.raises(DecodeError):
        method(Decoder(data))


def test_the_largest_safe_integer_still_decodes_from_eight_bytes():
    assert Decoder(b"\xff" * 7 + b"\x0f").read_var_uint() == MAX_SAFE


def test_an_overlong_but_bounded_var_uint_is_accepted_like_lib0_does():
    # lib0 reads non-canonical encodings (0 written in two bytes); so do we.
    assert Decoder(b"\x80\x00").read_var_uint() == 0


def test_negative_zero_decodes_as_zero():
    assert Decoder(b"\x40").read_var_int() == 0


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=24))
def test_the_decoder_raises_nothing_but_protocol_error_on_random_bytes(data):
    for method in (
        Decoder.read_var_uint,
        Decoder.read_var_int,
        Decoder.read_var_uint8_array,
        Decoder.read_var_string,
    ):
        try:
            method(Decoder(data))
        except ProtocolError:
            pass


@fast
@given(st.binary(max_size=16))
def test_whatever_decodes_as_a_number_re_encodes(data):
    for read, write in (
        (Decoder.read_var_uint, write_var_uint),
        (Decoder.read_var_int, write_var_int),
    ):
        try:
            value = read(Decoder(data))
        except ProtocolError:
            continue
        assert read(Decoder(write(value))) == value


# ---- cross-checks with pycrdt and with JS lib0 ------------------------------------------------


@fast
@given(uints)
def test_var_uint_matches_pycrdt(value):
    assert write_var_uint(value) == pycrdt.write_var_uint(value)


@fast
@given(st.text(alphabet=st.characters(max_codepoint=0x7F)))
def test_var_string_matches_pycrdt_for_ascii(text):
    # pycrdt's Encoder writes the character count, which only agrees for ASCII.
    encoder = pycrdt.Encoder()
    encoder.write_var_string(text)
    assert write_var_string(text) == encoder.to_bytes()


_LIB0_SCRIPT = """
import * as enc from 'lib0/encoding'
import * as dec from 'lib0/decoding'
const input = JSON.parse(process.argv[1])
const hex = (f) => {
  const e = enc.createEncoder()
  f(e)
  return Buffer.from(enc.toUint8Array(e)).toString('hex')
}
const out = {
  uints: input.uints.map((n) => hex((e) => enc.writeVarUint(e, n))),
  ints: input.ints.map((n) => hex((e) => enc.writeVarInt(e, n))),
  strings: input.strings.map((s) => hex((e) => enc.writeVarString(e, s))),
  readStrings: input.ours.map((h) => dec.readVarString(dec.createDecoder(Buffer.from(h, 'hex')))),
}
process.stdout.write(JSON.stringify(out))
"""


def _node_lib0_available() -> bool:
    return shutil.which("node") is not None and (TESTS_DIR / "node_modules" / "lib0").is_dir()


@pytest.mark.skipif(not _node_lib0_available(), reason="node or tests/node_modules/lib0 missing")
def test_our_encodings_are_byte_identical_to_js_lib0():
    rng = random.Random(1234)
    uint_values = [0, 1, 63, 64, 127, 128, 300, 16383, 16384, 2**31, 2**32, MAX_SAFE]
    uint_values += [rng.randrange(0, 1 << rng.randrange(1, 54)) for _ in range(200)]
    int_values = uint_values + [-v for v in uint_values if v]
    strings = [
        "",
        "doc",
        "é",
        "€",
        "😀",
        "é😀",
        "héllo 😀",
        "👩‍👩‍👧",
        "\0a\0",
        "x" * 300,
        "😀" * 3000,
    ]
    request = {
        "uints": uint_values,
        "ints": int_values,
        "strings": strings,
        "ours": [write_var_string(s).hex() for s in strings],
    }
    result = subprocess.run(
        ["node", "--input-type=module", "-e", _LIB0_SCRIPT, json.dumps(request)],
        cwd=TESTS_DIR,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    js = json.loads(result.stdout)
    assert js["uints"] == [write_var_uint(v).hex() for v in uint_values]
    assert js["ints"] == [write_var_int(v).hex() for v in int_values]
    assert js["strings"] == [write_var_string(s).hex() for s in strings]
    assert js["readStrings"] == strings

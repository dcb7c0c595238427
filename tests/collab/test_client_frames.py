"""The receive fast path's frame finder (collab.transport.client_frames) agrees with websockets' own
frames: the same boundaries, the same payloads, and only a masked, final, reserved-bit-free binary
frame taken as a message; everything else is left whole to websockets."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from websockets.frames import Frame, Opcode

from tether.collab.transport.client_frames import (
    BINARY,
    INCOMPLETE,
    OTHER,
    TOO_BIG,
    next_frame,
    unmask,
)

_SIZES = st.sampled_from([0, 1, 125, 126, 127, 300, 65_535, 65_536, 70_000])


@st.composite
def frames(draw: st.DrawFn) -> tuple[bytes, Frame, bool]:
    opcode = draw(st.sampled_from([Opcode.BINARY, Opcode.TEXT, Opcode.CONT, Opcode.PING]))
    size = draw(_SIZES) if opcode is not Opcode.PING else draw(st.integers(0, 125))
    frame = Frame(
        opcode,
        draw(st.binary(min_size=size, max_size=size)) if size < 200 else b"\x07" * size,
        fin=draw(st.booleans()) if opcode is not Opcode.PING else True,
    )
    masked = draw(st.booleans())
    wire = frame.serialize(mask=masked, extensions=[])
    if draw(st.booleans()):  # a reserved bit set (websockets will not serialize one)
        frame.rsv1 = True
        wire = bytes((wire[0] | 0x40,)) + wire[1:]
    return wire, frame, masked


@settings(max_examples=200, deadline=None)
@given(st.lists(frames(), min_size=1, max_size=4))
def test_frames_are_found_where_websockets_puts_them(found: list[tuple[bytes, Frame, bool]]):
    buffer = b"".join(wire for wire, _, _ in found)
    pos = 0
    for wire, frame, masked in found:
        kind, start, end = next_frame(buffer, pos, max_size=1 << 20)
        assert end == pos + len(wire)
        takes = frame.opcode is Opcode.BINARY and frame.fin and not frame.rsv1 and masked
        assert kind == (BINARY if takes else OTHER)
        if takes:
            assert unmask(buffer, start, end) == frame.data
        pos = end
    assert pos == len(buffer)


@settings(max_examples=100, deadline=None)
@given(frames(), st.data())
def test_a_frame_cut_short_is_incomplete_at_every_cut(found: tuple[bytes, Frame, bool], data):
    wire = found[0]
    cut = data.draw(st.integers(0, len(wire) - 1))
    assert next_frame(wire[:cut], 0, max_size=1 << 20)[0] == INCOMPLETE


def test_a_payload_over_the_limit_is_reported_from_its_header_alone():
    wire = Frame(Opcode.BINARY, b"x" * 300).serialize(mask=True, extensions=[])
    assert next_frame(wire[:4], 0, max_size=299)[0] == TOO_BIG
    assert next_frame(wire, 0, max_size=300)[0] == BINARY
    huge_header = bytes((0x82, 0x80 | 127)) + (1 << 40).to_bytes(8, "big")
    assert next_frame(huge_header, 0, max_size=1 << 20)[0] == TOO_BIG

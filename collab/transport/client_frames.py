"""Finds the WebSocket frames a client sent (RFC 6455 5.2) in received bytes; sans-I/O and pure.

For the receive fast path (``collab.transport.raw_frames``): the one frame an editor sends per edit,
a masked, final, binary frame with no reserved bits, is unmasked here in a few operations, where
the ``websockets`` parser (a generator per frame, a frame object, checks for every opcode) costs
tens of microseconds of Python. This module only finds frame boundaries and recognises that one
kind; every other frame is reported as ``OTHER`` for ``websockets`` to parse and judge (control
frames, text, fragments, unmasked or reserved-bit frames, which it refuses).
"""

from __future__ import annotations

from websockets.frames import apply_mask

# What ``next_frame`` found at the position it was given.
BINARY = 0  # a whole masked, final binary frame with no reserved bits: a message, unmasked below
OTHER = 1  # a whole frame of any other kind
INCOMPLETE = 2  # the buffer ends inside the frame (or its header)
TOO_BIG = 3  # the header announces a payload over the size limit

_BINARY_FIN = 0x82  # FIN, no reserved bits, opcode 2
_MASKED = 0x80


def next_frame(buffer: bytes, pos: int, max_size: int) -> tuple[int, int, int]:
    """``(kind, payload_start, end)`` of the frame starting at ``buffer[pos]``; ``end`` is where
    the next frame starts. A masked frame's key is the 4 bytes before ``payload_start``."""
    size = len(buffer)
    if size - pos < 2:
        return INCOMPLETE, 0, 0
    head1 = buffer[pos]
    head2 = buffer[pos + 1]
    length = head2 & 0x7F
    start = pos + 2
    if length == 126:
        if size - start < 2:
            return INCOMPLETE, 0, 0
        length = (buffer[start] << 8) | buffer[start + 1]
        start += 2
    elif length == 127:
        if size - start < 8:
            return INCOMPLETE, 0, 0
        length = int.from_bytes(buffer[start : start + 8], "big")
        start += 8
    if length > max_size:
        return TOO_BIG, 0, 0
    if head2 & _MASKED:
        start += 4
    end = start + length
    if end > size:
        return INCOMPLETE, 0, 0
    if head1 == _BINARY_FIN and head2 & _MASKED:
        return BINARY, start, end
    return OTHER, start, end


def unmask(buffer: bytes, start: int, end: int) -> bytes:
    """The payload of the masked frame found by ``next_frame`` at ``(start, end)``."""
    return apply_mask(buffer[start:end], buffer[start - 4 : start])

"""The HTTP fallback's wire shape: the same binary ``/ws`` frames, framed for plain HTTP.

Pure (no sockets): the server (``collab.transport.http_stream``) and the clients encode and parse
with these functions. Up, a POST body is a *batch*: frames one after another, each a lib0
``varUint8Array`` (length, then bytes). Down, a ``text/event-stream`` carries one frame per
event, base64 in ``data:``, its sequence number in ``id:`` (what a client resumes from with
``Last-Event-ID``); comments (``: ...``) are heartbeats; ``event: close`` ends the session
with the close code and reason a WebSocket would have carried. See PROTOCOL.md.

Why SSE and base64 rather than a length-prefixed binary stream: ``text/event-stream`` is the
one streaming type that buffering proxies, CDNs and virus scanners are built to pass through
unbuffered (a binary download is often held until it completes); its ``id:`` is resumption and
its comment line is a heartbeat, both without inventing anything; and a parser is 30 lines on
either side. The cost is a third more bytes down, which only the fallback pays.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterator
from dataclasses import dataclass

from ..protocol_errors import DecodeError
from .lib0 import Decoder, write_var_uint8_array

SESSION_HEADER = "Tether-Session"  # the session id: a header, never the URL (logs keep URLs)
ACK_HEADER = "Tether-Ack"  # on POST /http/send: every event up to this id has arrived
RESUME_HEADER = "Last-Event-ID"  # on GET /http/events: resume after this id (also an ack)
BATCH_TYPE = "application/octet-stream"
STREAM_TYPE = "text/event-stream"
HEARTBEAT = b": \n\n"  # an SSE comment: keeps proxies and the client's timers from giving up
OPENED = b": tether\n\n"  # written first on a stream, so the client sees its first byte


# Frames in one POST at most. A client POSTs what queued while its last POST was under way:
# a few, or hundreds after a slow round trip; past this it sends the rest in the next POST. A
# batch of millions of one-byte frames cost the server seconds of CPU per POST (issue 26).
MAX_BATCH_FRAMES = 4096


def encode_batch(frames: list[bytes]) -> bytes:
    """A POST body: each frame as a varUint8Array, in order."""
    return b"".join(write_var_uint8_array(frame) for frame in frames)


def decode_batch(body: bytes) -> list[bytes]:
    """The frames of a POST body; ``DecodeError`` if it is not a whole number of frames.

    Sizes are checked by the session frame by frame, as on ``/ws`` (the body is bounded)."""
    return [frame for piece in batch_slices(body, len(body) + 1) for frame in piece]


def batch_slices(body: bytes, frames_per_slice: int) -> Iterator[list[bytes]]:
    """The frames of a POST body, a few at a time: a receiver that handles each slice before
    decoding the next never holds more than one slice's frames (a 16 MB body of one-byte frames
    was 8 million objects at once). A malformed rest raises ``DecodeError`` when reached."""
    decoder = Decoder(body)
    count = 0
    while not decoder.at_end():
        piece = []
        while len(piece) < frames_per_slice and not decoder.at_end():
            piece.append(decoder.read_var_uint8_array())
        count += len(piece)
        if count > MAX_BATCH_FRAMES:
            raise DecodeError(f"more than {MAX_BATCH_FRAMES} frames in one batch")
        yield piece


def encode_event(seq: int, frame: bytes) -> bytes:
    return b"id: %d\ndata: %s\n\n" % (seq, base64.b64encode(frame))


def encode_close(code: int, reason: str) -> bytes:
    payload = json.dumps(
        {"code": code, "reason": reason}, ensure_ascii=False, separators=(",", ":")
    )
    return b"event: close\ndata: " + payload.encode("utf-8") + b"\n\n"


@dataclass(frozen=True, slots=True)
class FrameEvent:
    seq: int
    frame: bytes


@dataclass(frozen=True, slots=True)
class CloseEvent:
    code: int
    reason: str


StreamEvent = FrameEvent | CloseEvent


class EventParser:
    """Incremental parser of the down stream: feed it chunks as they arrive, get events.

    Understands the subset of SSE the server writes (``id``, ``event``, ``data``, comments);
    anything else in an event is a ``DecodeError``: it is our own server on the other end.
    Buffers at most one incomplete event, which the server bounds by ``max_frame_bytes``."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self.received_bytes = 0  # everything fed, for "has the first byte arrived"

    def feed(self, chunk: bytes) -> list[StreamEvent]:
        self.received_bytes += len(chunk)
        self._buffer += chunk
        events: list[StreamEvent] = []
        while True:
            end = self._buffer.find(b"\n\n")
            if end < 0:
                return events
            block = bytes(self._buffer[:end])
            del self._buffer[: end + 2]
            event = _parse_block(block)
            if event is not None:
                events.append(event)


def _parse_block(block: bytes) -> StreamEvent | None:
    fields: dict[bytes, bytes] = {}
    for line in block.split(b"\n"):
        if not line or line.startswith(b":"):
            continue  # a heartbeat or the opening comment
        name, _, value = line.partition(b":")
        fields[name] = value[1:] if value.startswith(b" ") else value
    if not fields:
        return None
    try:
        if fields.get(b"event") == b"close":
            payload = json.loads(fields[b"data"])
            return CloseEvent(int(payload["code"]), str(payload["reason"]))
        return FrameEvent(int(fields[b"id"]), base64.b64decode(fields[b"data"], validate=True))
    except (KeyError, ValueError, TypeError, binascii.Error) as exc:
        raise DecodeError(f"malformed event in the HTTP stream: {exc}") from None

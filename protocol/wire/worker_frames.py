"""The model worker channel: the frames the server and its model worker process exchange.

Sans-IO like the rest of ``protocol``: bytes in, frames out. A byte stream carries it (today a
Unix socket pair inherited by the worker; a TCP or TLS stream to a GPU box would carry it
unchanged), so the codec knows nothing of which.

    frame  := u32be(len(header)) • u32be(len(body)) • header • body
    header := a UTF-8 JSON object with an "op" member (one of the OPS below)
    body   := raw bytes, empty except for ``vectors`` (float32, little-endian, row-major)

A request the server makes carries an ``id`` (an integer it chooses); every reply to it
carries the same ``id``. The worker answers requests in any order; ``token`` and ``progress``
frames stream before a generation's ``done``.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import Any

from ..protocol_errors import ProtocolError

# worker → server, unasked
HELLO = "hello"  # {pid}: the process is up and holds the channel
LOADED = "loaded"  # {load_ms}: the model is in memory; the self-test decode runs next
READY = "ready"  # {model, path, quant, threads, load_ms, selftest_ms}: generation works
FAILED = "failed"  # {stage, reason}: loading or the self-test failed; the worker exits
EMBEDDER = "embedder"  # {state: "ready"|"failed", reason}: the embedding model's fate
# server → worker
GENERATE = "generate"  # {id, prompt, session, max_tokens, stop, cold, ..., must_start}
CANCEL = "cancel"  # {id}: stop generating within one token (no reply beyond the usual done)
EMBED = "embed"  # {id, texts}
PING = "ping"  # {id}
# worker → server, replies
TOKEN = "token"  # {id, text, p}: p, the model's confidence in the text (or null)
PROGRESS = "progress"  # {id}: still working (prompt evaluation), no text yet
DONE = "done"  # {id, pieces, warm_hits}
ERROR = "error"  # {id, message}
VECTORS = "vectors"  # {id, rows, dim} + body
PONG = "pong"  # {id}

OPS = frozenset({HELLO, LOADED, READY, FAILED, EMBEDDER, GENERATE, CANCEL, EMBED, PING})
OPS |= {TOKEN, PROGRESS, DONE, ERROR, VECTORS, PONG}
MAX_HEADER_BYTES = 4 * 2**20  # a prompt rides in a header: the context budget is far smaller
MAX_BODY_BYTES = 64 * 2**20
_LENGTHS = struct.Struct(">II")


class ChannelError(ProtocolError):
    """The peer broke the channel's framing: the connection cannot go on."""


@dataclass(frozen=True, slots=True)
class Frame:
    header: dict[str, Any]
    body: bytes = b""

    @property
    def op(self) -> str:
        return str(self.header["op"])


def encode_frame(op: str, body: bytes = b"", **members: Any) -> bytes:
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}")
    header = json.dumps({"op": op, **members}, separators=(",", ":")).encode("utf-8")
    if len(header) > MAX_HEADER_BYTES or len(body) > MAX_BODY_BYTES:
        raise ValueError("frame too large for the worker channel")
    return _LENGTHS.pack(len(header), len(body)) + header + body


@dataclass
class FrameReader:
    """Feed it whatever the stream delivered; it hands back the whole frames among it."""

    _buffer: bytearray = field(default_factory=bytearray)

    def feed(self, data: bytes) -> list[Frame]:
        self._buffer += data
        frames: list[Frame] = []
        while len(self._buffer) >= _LENGTHS.size:
            header_len, body_len = _LENGTHS.unpack_from(self._buffer)
            if header_len > MAX_HEADER_BYTES or body_len > MAX_BODY_BYTES:
                raise ChannelError(f"frame of {header_len}+{body_len} bytes is over the limit")
            end = _LENGTHS.size + header_len + body_len
            if len(self._buffer) < end:
                break
            raw = bytes(self._buffer[_LENGTHS.size : _LENGTHS.size + header_len])
            body = bytes(self._buffer[_LENGTHS.size + header_len : end])
            del self._buffer[:end]
            frames.append(Frame(_header(raw), body))
        return frames

    @property
    def pending_bytes(self) -> int:
        return len(self._buffer)


def _header(raw: bytes) -> dict[str, Any]:
    try:
        header = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ChannelError("frame header is not JSON") from exc
    if not isinstance(header, dict) or header.get("op") not in OPS:
        raise ChannelError("frame header has no known 'op'")
    return header

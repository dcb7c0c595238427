"""The plain y-websocket frame (one document per socket, no channel name inside frames).

Knows nothing of sockets. Grammar (see PROTOCOL.md):
    frame := varUint(0) • syncMessage | varUint(1) • varUint8Array(awareness)
           | varUint(2) • varUint(0) • varString(reason)      (permission denied, server → client)
           | varUint(3)                                       (query awareness)
"""

from __future__ import annotations

from dataclasses import dataclass

from ..protocol_errors import DecodeError, FrameTooLarge, UnknownMessageType
from .lib0 import Decoder, write_var_string, write_var_uint, write_var_uint8_array
from .sync_payloads import SyncMessage, read_sync_message

YWS_SYNC = 0
YWS_AWARENESS = 1
YWS_AUTH = 2
YWS_QUERY_AWARENESS = 3


@dataclass(frozen=True, slots=True)
class YSync:
    message: SyncMessage

    def encode(self) -> bytes:
        return write_var_uint(YWS_SYNC) + self.message.encode()


@dataclass(frozen=True, slots=True)
class YAwareness:
    update: bytes

    def encode(self) -> bytes:
        return write_var_uint(YWS_AWARENESS) + write_var_uint8_array(self.update)


@dataclass(frozen=True, slots=True)
class YPermissionDenied:
    reason: str

    def encode(self) -> bytes:
        return write_var_uint(YWS_AUTH) + write_var_uint(0) + write_var_string(self.reason)


@dataclass(frozen=True, slots=True)
class YQueryAwareness:
    def encode(self) -> bytes:
        return write_var_uint(YWS_QUERY_AWARENESS)


YMessage = YSync | YAwareness | YPermissionDenied | YQueryAwareness


def decode_yws_frame(data: bytes, *, max_frame_bytes: int | None = None) -> YMessage:
    if max_frame_bytes is not None and len(data) > max_frame_bytes:
        raise FrameTooLarge(f"frame of {len(data)} bytes exceeds {max_frame_bytes}")
    if not data:
        raise DecodeError("empty frame")
    decoder = Decoder(data)
    kind = decoder.read_var_uint()
    if kind == YWS_SYNC:
        return YSync(read_sync_message(decoder))
    if kind == YWS_AWARENESS:
        return YAwareness(decoder.read_var_uint8_array())
    if kind == YWS_AUTH:
        decoder.read_var_uint()
        return YPermissionDenied(decoder.read_var_string())
    if kind == YWS_QUERY_AWARENESS:
        return YQueryAwareness()
    raise UnknownMessageType(f"unknown y-websocket message type {kind}")

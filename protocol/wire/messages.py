"""The multiplexed (Hocuspocus v3/v4) frame: every message's encode and the one frame decoder.

Knows nothing of sockets, documents or auth decisions. Grammar (see PROTOCOL.md):
    frame := varString(channel) • varUint(type) • body     (types 0,1,2,3,5,7,8)
           | varUint(9) | varUint(10)                      (Ping, Pong: one byte, no channel)
A channel is a document name, or ``name \\0 sessionId`` when a provider runs with
``sessionAwareness``; replies go back on the channel they came from.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..protocol_errors import DecodeError, FrameTooLarge, UnknownMessageType
from .lib0 import Decoder, write_var_string, write_var_uint, write_var_uint8_array
from .sync_payloads import SyncMessage, read_sync_message

SYNC = 0
AWARENESS = 1
AUTH = 2
QUERY_AWARENESS = 3
STATELESS = 5
CLOSE = 7
SYNC_STATUS = 8
PING = 9
PONG = 10

AUTH_TOKEN = 0
AUTH_PERMISSION_DENIED = 1
AUTH_AUTHENTICATED = 2

SCOPE_READ_WRITE = "read-write"
SCOPE_READONLY = "readonly"

PING_FRAME = bytes([PING])
PONG_FRAME = bytes([PONG])

CHANNEL_SEPARATOR = "\0"


def document_of(channel: str) -> str:
    """The document a channel addresses (strips a Hocuspocus sessionAwareness suffix)."""
    return channel.split(CHANNEL_SEPARATOR, 1)[0]


def _head(channel: str, kind: int) -> bytes:
    return write_var_string(channel) + write_var_uint(kind)


@dataclass(frozen=True, slots=True)
class Sync:
    channel: str
    message: SyncMessage

    def encode(self) -> bytes:
        return _head(self.channel, SYNC) + self.message.encode()


@dataclass(frozen=True, slots=True)
class Awareness:
    channel: str
    update: bytes

    def encode(self) -> bytes:
        return _head(self.channel, AWARENESS) + write_var_uint8_array(self.update)


@dataclass(frozen=True, slots=True)
class AuthToken:
    """Client → server credentials; the server may also send it with no token as a request."""

    channel: str
    token: str | None
    provider_version: str | None = None

    def encode(self) -> bytes:
        body = write_var_uint(AUTH_TOKEN)
        if self.token is not None:
            body += write_var_string(self.token)
            if self.provider_version is not None:
                body += write_var_string(self.provider_version)
        return _head(self.channel, AUTH) + body


@dataclass(frozen=True, slots=True)
class PermissionDenied:
    channel: str
    reason: str

    def encode(self) -> bytes:
        body = write_var_uint(AUTH_PERMISSION_DENIED) + write_var_string(self.reason)
        return _head(self.channel, AUTH) + body


@dataclass(frozen=True, slots=True)
class Authenticated:
    channel: str
    scope: str

    def encode(self) -> bytes:
        body = write_var_uint(AUTH_AUTHENTICATED) + write_var_string(self.scope)
        return _head(self.channel, AUTH) + body


@dataclass(frozen=True, slots=True)
class QueryAwareness:
    channel: str

    def encode(self) -> bytes:
        return _head(self.channel, QUERY_AWARENESS)


@dataclass(frozen=True, slots=True)
class Stateless:
    channel: str
    payload: str

    def encode(self) -> bytes:
        return _head(self.channel, STATELESS) + write_var_string(self.payload)


@dataclass(frozen=True, slots=True)
class Close:
    """Client → server: detach this document (no body). Server → client: carries a reason."""

    channel: str
    reason: str | None = None

    def encode(self) -> bytes:
        body = b"" if self.reason is None else write_var_string(self.reason)
        return _head(self.channel, CLOSE) + body


@dataclass(frozen=True, slots=True)
class SyncStatus:
    """One per client update: applied (durably stored) or rejected."""

    channel: str
    applied: bool

    def encode(self) -> bytes:
        return _head(self.channel, SYNC_STATUS) + (b"\x01" if self.applied else b"\x00")


@dataclass(frozen=True, slots=True)
class Ping:
    def encode(self) -> bytes:
        return PING_FRAME


@dataclass(frozen=True, slots=True)
class Pong:
    def encode(self) -> bytes:
        return PONG_FRAME


ChannelMessage = (
    Sync
    | Awareness
    | AuthToken
    | PermissionDenied
    | Authenticated
    | QueryAwareness
    | Stateless
    | Close
    | SyncStatus
)
Message = ChannelMessage | Ping | Pong


def decode_frame(data: bytes, *, max_frame_bytes: int | None = None) -> Message:
    """Parse one WebSocket binary message; raises only ``ProtocolError`` subclasses."""
    if max_frame_bytes is not None and len(data) > max_frame_bytes:
        raise FrameTooLarge(f"frame of {len(data)} bytes exceeds {max_frame_bytes}")
    if len(data) == 1 and data[0] in (PING, PONG):
        return Ping() if data[0] == PING else Pong()
    if not data:
        raise DecodeError("empty frame")
    decoder = Decoder(data)
    channel = decoder.read_var_string()
    kind = decoder.read_var_uint()
    reader = _READERS.get(kind)
    if reader is None:
        raise UnknownMessageType(f"unknown message type {kind}")
    return reader(channel, decoder)


def _read_sync(channel: str, decoder: Decoder) -> Message:
    return Sync(channel, read_sync_message(decoder))


def _read_awareness(channel: str, decoder: Decoder) -> Message:
    return Awareness(channel, decoder.read_var_uint8_array())


def _read_auth(channel: str, decoder: Decoder) -> Message:
    kind = decoder.read_var_uint()
    if kind == AUTH_TOKEN:
        token = decoder.read_var_string() if not decoder.at_end() else None
        version = decoder.read_var_string() if not decoder.at_end() else None
        return AuthToken(channel, token, version)
    if kind == AUTH_PERMISSION_DENIED:
        return PermissionDenied(channel, decoder.read_var_string())
    if kind == AUTH_AUTHENTICATED:
        return Authenticated(channel, decoder.read_var_string())
    raise UnknownMessageType(f"unknown auth message type {kind}")


def _read_query_awareness(channel: str, decoder: Decoder) -> Message:
    return QueryAwareness(channel)


def _read_stateless(channel: str, decoder: Decoder) -> Message:
    return Stateless(channel, decoder.read_var_string())


def _read_close(channel: str, decoder: Decoder) -> Message:
    return Close(channel, decoder.read_var_string() if not decoder.at_end() else None)


def _read_sync_status(channel: str, decoder: Decoder) -> Message:
    return SyncStatus(channel, decoder.read_var_int() == 1)


_READERS = {
    SYNC: _read_sync,
    AWARENESS: _read_awareness,
    AUTH: _read_auth,
    QUERY_AWARENESS: _read_query_awareness,
    STATELESS: _read_stateless,
    CLOSE: _read_close,
    SYNC_STATUS: _read_sync_status,
}

"""Yjs sync (y-protocols/sync) and awareness payloads; knows nothing of envelopes or sockets.

Grammar (see PROTOCOL.md):
    syncStep1(sv)   := varUint(0) • varUint8Array(stateVector)
    syncStep2(u)    := varUint(1) • varUint8Array(update)
    update(u)       := varUint(2) • varUint8Array(update)
    awarenessUpdate := varUint(n) • (varUint(clientID) • varUint(clock) • varString(json))^n
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..protocol_errors import DecodeError, UnknownMessageType
from .lib0 import Decoder, write_var_string, write_var_uint, write_var_uint8_array

SYNC_STEP1 = 0
SYNC_STEP2 = 1
SYNC_UPDATE = 2

# What Yjs encodes for "no structs, no deletions": a client replying to our step1 with nothing new.
EMPTY_UPDATE = b"\x00\x00"


@dataclass(frozen=True, slots=True)
class SyncStep1:
    state_vector: bytes

    def encode(self) -> bytes:
        return write_var_uint(SYNC_STEP1) + write_var_uint8_array(self.state_vector)


@dataclass(frozen=True, slots=True)
class SyncStep2:
    update: bytes

    def encode(self) -> bytes:
        return write_var_uint(SYNC_STEP2) + write_var_uint8_array(self.update)


@dataclass(frozen=True, slots=True)
class SyncUpdate:
    update: bytes

    def encode(self) -> bytes:
        return write_var_uint(SYNC_UPDATE) + write_var_uint8_array(self.update)


SyncMessage = SyncStep1 | SyncStep2 | SyncUpdate


def read_sync_message(decoder: Decoder) -> SyncMessage:
    kind = decoder.read_var_uint()
    payload = decoder.read_var_uint8_array()
    if kind == SYNC_STEP1:
        return SyncStep1(payload)
    if kind == SYNC_STEP2:
        return SyncStep2(payload)
    if kind == SYNC_UPDATE:
        return SyncUpdate(payload)
    raise UnknownMessageType(f"unknown sync message type {kind}")


@dataclass(frozen=True, slots=True)
class AwarenessEntry:
    """One client's presence: ``state`` is the JSON text, ``"null"`` when the client left."""

    client_id: int
    clock: int
    state: str

    @property
    def removed(self) -> bool:
        return self.state == "null"


def encode_awareness(entries: list[AwarenessEntry] | tuple[AwarenessEntry, ...]) -> bytes:
    parts = [write_var_uint(len(entries))]
    for entry in entries:
        parts.append(write_var_uint(entry.client_id))
        parts.append(write_var_uint(entry.clock))
        parts.append(write_var_string(entry.state))
    return b"".join(parts)


# What ``decode_awareness(..., oversize_state=OVERSIZE_STATE)`` puts in place of a state over
# the limit: the empty text is not JSON, so no well-formed entry can carry it.
OVERSIZE_STATE = ""


def decode_awareness(
    payload: bytes, *, max_state_bytes: int = 64 * 1024, oversize_state: str | None = None
) -> list[AwarenessEntry]:
    """The entries; a state over ``max_state_bytes`` raises DecodeError, or, when
    ``oversize_state`` is given, is returned as that text (unparsed) for the caller to refuse."""
    decoder = Decoder(payload)
    count = decoder.read_var_uint()
    if count > decoder.remaining():
        raise DecodeError("awareness entry count exceeds payload")
    entries = []
    for _ in range(count):
        client_id = decoder.read_var_uint()
        clock = decoder.read_var_uint()
        raw = decoder.read_var_uint8_array()
        if len(raw) > max_state_bytes:
            if oversize_state is None:
                raise DecodeError("awareness state too large")
            entries.append(AwarenessEntry(client_id, clock, oversize_state))
            continue
        entries.append(AwarenessEntry(client_id, clock, _json_text(raw)))
    return entries


def _json_text(raw: bytes) -> str:
    """The state as text, if it is JSON that ``JSON.parse`` in every peer will also accept."""
    try:
        text = raw.decode("utf-8")
        json.loads(text, parse_constant=_reject_constant)
    except UnicodeDecodeError as exc:
        raise DecodeError("awareness state is not valid UTF-8") from exc
    # RecursionError: deeply nested arrays ("[[[[...") exhaust the C scanner's stack.
    except (ValueError, RecursionError) as exc:
        raise DecodeError("awareness state is not JSON") from exc
    return text


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")

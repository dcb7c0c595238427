"""Presence across nodes: this node's editors' changes out on the bus, the other nodes' held
per loaded document, bounded and expiring. Not stored anywhere; knows no PostgreSQL.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tether.protocol.wire.lib0 import Decoder, write_var_uint8_array
from tether.protocol.wire.sync_payloads import AwarenessEntry, decode_awareness, encode_awareness

from .bus import RedisBus

if TYPE_CHECKING:
    from ..rooms.room import Room


class RemotePresence:
    """Other nodes' editors' presence for one document: relayed, bounded, expiring."""

    def __init__(self, ttl: float, max_bytes: int) -> None:
        self._ttl = ttl
        self._max_bytes = max_bytes
        self._entries: dict[int, tuple[AwarenessEntry, float]] = {}
        self._bytes = 0

    def entries(self) -> list[AwarenessEntry]:
        return [entry for entry, _ in self._entries.values()]

    def receive(self, body: bytes, now: float) -> bool:
        """Remember the body's entries; False if it held nothing acceptable."""
        payload = Decoder(body).read_var_uint8_array()
        kept = False
        for entry in decode_awareness(payload, max_state_bytes=self._max_bytes):
            old = self._entries.pop(entry.client_id, None)
            if old is not None:
                self._bytes -= _cost(old[0])
            if entry.removed:
                kept = True
                continue
            if self._bytes + _cost(entry) > self._max_bytes:
                continue  # over the document's presence bound: dropped, as locally
            self._entries[entry.client_id] = (entry, now + self._ttl)
            self._bytes += _cost(entry)
            kept = True
        return kept

    def expire(self, now: float) -> bytes | None:
        """Drop entries without news for the TTL; the "null" body telling editors so."""
        gone = [entry for entry, until in self._entries.values() if until <= now]
        for entry in gone:
            del self._entries[entry.client_id]
            self._bytes -= _cost(entry)
        if not gone:
            return None
        nulls = [AwarenessEntry(e.client_id, e.clock + 1, "null") for e in gone]
        return write_var_uint8_array(encode_awareness(nulls))


def _cost(entry: AwarenessEntry) -> int:
    return len(entry.state) + 24  # an empty state still costs its id, clock and slot


class PresenceRelay:
    """The extension (``on_presence``, ``remote_presence``; see ``collab.hooks``) that relays
    presence between nodes, for the documents the cluster tracks; exists only with a bus."""

    def __init__(self, bus: RedisBus, ttl: float, max_bytes: int) -> None:
        self._bus = bus
        self._ttl = ttl
        self._max_bytes = max_bytes
        self._held: dict[str, RemotePresence] = {}

    # -- hooks -------------------------------------------------------------------------------

    def on_presence(self, room: Room, body: bytes) -> None:
        self._bus.publish_presence(room.name, body)

    def remote_presence(self, room: Room) -> list[AwarenessEntry]:
        held = self._held.get(room.name)
        return [] if held is None else held.entries()

    # -- what the cluster tells it -----------------------------------------------------------

    def track(self, name: str) -> None:
        """``name`` was loaded here: other nodes' presence for it is held from now on."""
        self._held[name] = RemotePresence(self._ttl, self._max_bytes)

    def forget(self, name: str) -> None:
        self._held.pop(name, None)

    def receive(self, name: str, body: bytes, now: float) -> bool:
        """Another node's presence body for ``name``: True if its editors here should see it."""
        held = self._held.get(name)
        return held is not None and held.receive(body, now)

    def expire(self, now: float) -> list[tuple[str, bytes]]:
        """Per tracked document whose entries expired, the body telling its editors so."""
        gone = []
        for name, held in list(self._held.items()):
            body = held.expire(now)
            if body is not None:
                gone.append((name, body))
        return gone

"""One document's presence (awareness): the entries everyone sees, bounded per connection and per
document, and who may speak for each client id. Knows nothing of sockets or frame envelopes; the
room broadcasts the bodies it returns.

Bounds (``PresenceLimits``, ``tether serve`` options): client ids and bytes per connection on this
document (the channels of one ``/ws`` socket count together, so ``doc\\0s1`` … ``doc\\0s64`` buy
nothing), bytes per entry, bytes of the whole document, which is what every joiner receives. An
entry over a bound is dropped (not broadcast, not stored) and counted; the rest of its frame goes
on.

Ownership: a client id belongs to the connection that shows it, and only that connection removes
it (or its leaving does). Another connection may take it over only under the same token subject
and with a higher awareness clock: that is the same person's reconnecting provider, whose old
socket may still look alive. A lower or equal clock is an echo (Hocuspocus providers re-send
other clients' states, y-websocket answers QueryAwareness with everyone's) and is dropped quietly;
y-protocols clients ignore such clocks too. A different subject is refused. When the owner
leaves, ``ClaimRegistry`` keeps the id bound to its subject, at the clock it left with, for
``presence_claim_ttl`` seconds: nobody else can claim an offline editor's id, and a late echo
cannot bring it back. With ``--auth none`` every connection is the subject "anonymous": any
connection may take any id over by raising its clock, as anyone may edit anything.

Bindings live in memory, so after a restart the first subject to show an id binds it. An id
that has written to the document (``authored``: it has clocks in the document's history) is
never bound by a readonly connection then: a reader could not have written under it, so only
its author, or another writer, can be the one showing it (a readonly attacker who showed a
victim's id first after a restart kept it for an hour: issue 26, finding 11).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from tether.protocol.wire.lib0 import MAX_SAFE_INTEGER, write_var_uint8_array
from tether.protocol.wire.sync_payloads import (
    OVERSIZE_STATE,
    AwarenessEntry,
    decode_awareness,
    encode_awareness,
)

from ..runtime.limits import refuse
from ..runtime.sync_metrics import Metrics
from ..transport.outbox import Outbox
from .presence_claims import ClaimRegistry, digest
from .room_peer import Peer

_ALLOWED, _ECHO, _REFUSED = object(), object(), object()


@dataclass(frozen=True, slots=True)
class PresenceLimits:
    ids_per_peer: int = 8
    entry_bytes: int = 16 * 1024
    peer_bytes: int = 64 * 1024
    document_bytes: int = 4 * 1024 * 1024


class Presence:
    def __init__(
        self,
        document: str,
        metrics: Metrics,
        limits: PresenceLimits | None = None,
        claims: ClaimRegistry | None = None,
        clock: Callable[[], float] = time.monotonic,
        authored: Callable[[int], bool] | None = None,
    ) -> None:
        self.entries: dict[int, AwarenessEntry] = {}
        self._document = document
        self._key = digest(document)
        self._metrics = metrics
        self.limits = limits or PresenceLimits()
        self._claims = claims or ClaimRegistry(3600.0, 4096, 256)
        self._clock = clock
        self._authored = authored
        self._owner: dict[int, Peer] = {}
        self._sizes: dict[int, int] = {}
        self._bytes = 0
        self._ids_of: dict[Outbox, set[int]] = {}  # per connection (its outbox)
        self._bytes_of: dict[Outbox, int] = {}

    @property
    def total_bytes(self) -> int:
        return self._bytes

    def snapshot(self) -> bytes:
        return _body(list(self.entries.values()))

    def receive(self, peer: Peer, payload: bytes) -> bytes | None:
        """Apply a peer's awareness update; the body to broadcast, or None if nothing passed."""
        entries = decode_awareness(
            payload, max_state_bytes=self.limits.entry_bytes, oversize_state=OVERSIZE_STATE
        )
        now = self._clock()
        accepted = [entry for entry in entries if self._accept(peer, entry, now)]
        if not accepted:
            return None
        if len(accepted) == len(entries):
            return write_var_uint8_array(payload)
        return _body(accepted)

    def remove_peer(self, peer: Peer) -> bytes | None:
        """Drop a leaving peer's entries; the "null" body to broadcast, if it showed any."""
        gone = []
        now = self._clock()
        subject = digest(peer.grant.subject)
        for client_id in list(peer.awareness_ids):
            entry = self.entries.get(client_id)
            self._drop(client_id)
            if entry is None:
                continue
            # Capped: a hostile clock of 2**53 - 1 must not break everyone's disconnect.
            clock = min(entry.clock + 1, MAX_SAFE_INTEGER)
            gone.append(AwarenessEntry(client_id, clock, "null"))
            # The id stays its subject's for the TTL, counted from now, at the clock it left with.
            self._claims.bind(self._key, client_id, subject, clock, now)
        peer.awareness_ids.clear()
        return _body(gone) if gone else None

    def _accept(self, peer: Peer, entry: AwarenessEntry, now: float) -> bool:
        client_id = entry.client_id
        owner = self._owner.get(client_id)
        subject = digest(peer.grant.subject)
        if owner is not peer:
            verdict = self._claim(peer, owner, subject, entry, now)
            if verdict is _ECHO:
                return False
            if verdict is _REFUSED:
                return self._refuse(peer, "presence_owner", f"client id {client_id} is not its own")
        if entry.removed:
            if owner is peer:
                self._drop(client_id)
                self._claims.bind(self._key, client_id, subject, entry.clock, now)
            return True
        if entry.state == OVERSIZE_STATE:
            return self._refuse(peer, "awareness_entry_bytes", "presence state too large")
        size = len(entry.state.encode("utf-8", "surrogatepass"))
        conn = peer.outbox
        mine = self._ids_of.get(conn, set())
        old = self._sizes.get(client_id, 0)
        old_mine = old if owner is not None and owner.outbox is conn else 0
        limits = self.limits
        if client_id not in mine and len(mine) >= limits.ids_per_peer:
            return self._refuse(peer, "awareness_ids_per_peer", "too many presence client ids")
        if self._bytes_of.get(conn, 0) - old_mine + size > limits.peer_bytes:
            return self._refuse(peer, "awareness_peer_bytes", "presence over its byte share")
        if self._bytes - old + size > limits.document_bytes:
            return self._refuse(peer, "awareness_document_bytes", "document presence is full")
        if owner is not None:
            self._drop(client_id)  # an update of our own, or a takeover by the same subject
        self._add(peer, entry, size)
        self._claims.bind(self._key, client_id, subject, entry.clock, now)
        return True

    def _claim(
        self, peer: Peer, owner: Peer | None, subject: bytes, entry: AwarenessEntry, now: float
    ) -> object:
        """May ``peer`` speak for an id it does not own: _ALLOWED, _ECHO (dropped quietly) or
        _REFUSED (dropped, counted, logged)."""
        if owner is not None:
            if owner.grant.subject != peer.grant.subject:
                return _REFUSED
            if entry.removed or entry.clock <= self.entries[entry.client_id].clock:
                return _ECHO  # only the owner removes; a clock not above its own is a copy
            return _ALLOWED
        held = self._claims.holder(self._key, entry.client_id, now)
        if held is None:
            if not peer.writable and self._authored is not None and self._authored(entry.client_id):
                return _REFUSED  # a reader showing a writer's id (see the module's docstring)
            return _ALLOWED
        holder, clock = held
        if holder != subject:
            return _REFUSED
        return _ALLOWED if entry.clock > clock else _ECHO

    def _add(self, peer: Peer, entry: AwarenessEntry, size: int) -> None:
        client_id = entry.client_id
        self.entries[client_id] = entry
        self._owner[client_id] = peer
        self._sizes[client_id] = size
        self._bytes += size
        peer.awareness_ids.add(client_id)
        self._ids_of.setdefault(peer.outbox, set()).add(client_id)
        self._bytes_of[peer.outbox] = self._bytes_of.get(peer.outbox, 0) + size

    def _drop(self, client_id: int) -> None:
        self.entries.pop(client_id, None)
        owner = self._owner.pop(client_id, None)
        size = self._sizes.pop(client_id, 0)
        self._bytes -= size
        if owner is None:
            return
        owner.awareness_ids.discard(client_id)
        conn = owner.outbox
        ids = self._ids_of.get(conn)
        if ids is not None:
            ids.discard(client_id)
            if not ids:
                del self._ids_of[conn]
        left = self._bytes_of.get(conn, 0) - size
        if left > 0:
            self._bytes_of[conn] = left
        else:
            self._bytes_of.pop(conn, None)

    def _refuse(self, peer: Peer, limit: str, detail: str) -> bool:
        refuse(self._metrics, limit, peer.refusals_logged, peer.label, f"{detail} on {self._name}")
        return False

    @property
    def _name(self) -> str:
        return repr(self._document[:64])


def _body(entries: list[AwarenessEntry]) -> bytes:
    return write_var_uint8_array(encode_awareness(entries))

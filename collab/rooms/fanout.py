"""A room's fan-out: one encoded body to every attached peer but one, each distinct header
(channel name) joined to it once, and an update over the outgoing message cap sent as several
valid updates. Knows nothing of documents, acks or storage.
"""

from __future__ import annotations

from tether.protocol.updates.update_split import split_update
from tether.protocol.wire.sync_payloads import SyncUpdate

from ..runtime.sync_metrics import Metrics
from .room_peer import Peer


class FanOut:
    """Sends to the peers of one room (``peers`` is the room's own set, as it changes)."""

    __slots__ = ("_cap", "_metrics", "_peers")

    def __init__(self, peers: set[Peer], metrics: Metrics, cap: int) -> None:
        self._peers = peers
        self._metrics = metrics
        self._cap = cap

    def update(self, update: bytes, *, exclude: Peer | None, pieces: list[bytes] | None) -> None:
        """An update larger than the outgoing message cap goes out as several valid updates
        (protocol.updates.update_split, or ``pieces`` already cut), so no proxy with a message cap
        drops it."""
        if pieces is None:
            pieces = list(split_update(update, self._cap))
        for piece in pieces:
            self.send(SyncUpdate(piece).encode(), exclude=exclude, sync=True)

    def send(self, body: bytes, *, exclude: Peer | None, sync: bool) -> None:
        """Encode the body once; each distinct header (channel name) is joined once."""
        frames: dict[bytes, bytes] = {}
        peers = self._peers
        for peer in peers:
            if peer is exclude:
                continue
            header = peer.sync_header if sync else peer.awareness_header
            frame = frames.get(header)
            if frame is None:
                frame = frames[header] = header + body
            peer.send(frame)
        self._metrics.fanout_frames.inc(len(peers) - (exclude is not None))

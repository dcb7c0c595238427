"""The bytes every connection together holds on their way out, against one server-wide bound.

Knows nothing of documents. Each connection's ``Outbox`` is bounded on its own, but a bound per
connection times the connections one client may open is not a bound on the server: 60 sockets
that never read, each syncing a document with an 8 MiB value, held +753 MB; 60 HTTP sessions
that never poll, +1.4 GB. Here every queued frame and every big answer in flight (a chunked
initial sync's diff, ``collab.rooms.initial_sync``) counts against ``capacity``:

- A big answer waits for room for its size first (``wait_for_room``), then holds it; a waiting
  answer holds nothing (its diff is computed when its turn comes).
- When the budget is full, connections whose queued bytes made no progress for
  ``stalled_after`` seconds (a peer that stopped reading) are closed as slow consumers, oldest
  stall first, until it fits: a peer that reads, however slowly, keeps its place.
- A queued frame past the bound, from a connection far behind (a quarter of its own queue
  bound already queued), closes that connection (``send_bytes_total``); any other still takes
  it, so a live edit is never refused to an editor that keeps up for others' sake.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Holder(Protocol):
    """What the budget needs of an outbox: how long it has been stuck, and a way to close it."""

    def stalled_for(self, now: float) -> float: ...

    def evict(self, limit: str) -> None: ...


class SendBudget:
    def __init__(self, capacity: int, stalled_after: float = 10.0) -> None:
        self.capacity = capacity
        self.stalled_after = stalled_after
        self.used = 0
        self._held: dict[Holder, int] = {}
        self._released: asyncio.Event | None = None  # made on first wait (needs a loop)
        self.evictions = 0

    def add(self, holder: Holder, size: int) -> None:
        if size:
            self.used += size
            self._held[holder] = self._held.get(holder, 0) + size

    def remove(self, holder: Holder, size: int) -> None:
        """Give back ``size`` of what ``holder`` holds (never more than it holds)."""
        held = self._held.get(holder, 0)
        size = min(size, held)
        if not size:
            return
        self.used -= size
        if held == size:
            del self._held[holder]
        else:
            self._held[holder] = held - size
        if self._released is not None:
            self._released.set()
            self._released = None

    def held_by(self, holder: Holder) -> int:
        return self._held.get(holder, 0)

    def full(self, extra: int = 0) -> bool:
        return self.used + extra > self.capacity

    def evict_stalled(self, keep: Holder | None = None, *, needed: int = 0) -> int:
        """Close holders stuck for ``stalled_after`` seconds, oldest stall first, until
        ``needed`` more bytes fit; the number closed. Never ``keep``."""
        now = time.monotonic()
        stalled = [
            (holder.stalled_for(now), id(holder), holder)
            for holder in self._held
            if holder is not keep
        ]
        stalled = [entry for entry in stalled if entry[0] >= self.stalled_after]
        stalled.sort(reverse=True)
        closed = 0
        for _, _, holder in stalled:
            if not self.full(needed):
                break
            holder.evict("send_bytes_total")  # gives back everything it held
            closed += 1
        self.evictions += closed
        return closed

    def would_wait(self, holder: Holder, size: int) -> bool:
        """Whether ``size`` more bytes for ``holder`` do not fit. A budget that nobody else
        holds takes any one amount: a document larger than the bound still syncs."""
        return self.used > self._held.get(holder, 0) and self.full(size)

    async def wait_for_room(self, holder: Holder, size: int) -> None:
        """Until ``size`` more bytes fit for ``holder`` (the caller then adds them), closing
        stalled holders to make room. Re-checks every second: a holder becomes evictable as its
        stall grows."""
        while self.would_wait(holder, size):
            if self.evict_stalled(holder, needed=size) and not self.would_wait(holder, size):
                break
            if self._released is None:
                self._released = asyncio.Event()
            released = self._released
            try:
                async with asyncio.timeout(1.0):
                    await released.wait()
            except TimeoutError:
                pass

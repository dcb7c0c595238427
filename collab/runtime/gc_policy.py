"""When the garbage collector walks everything: ``tether serve``'s policy. Process-wide (the
collector is); knows of connections and documents only as things that start and end.

CPython walks every tracked object in a full collection, once the objects that became long-lived
since the last one reach a quarter of the rest. With 5,000 idle sockets that is ~600,000
objects, a pause of 0.4-1.5 s that every editor feels, and it comes back each time the
server grows by a quarter (a morning's connections, a reconnect storm).

Here, when a full collection ends, whatever survived it is frozen (``gc.freeze``): later full
collections walk only what became long-lived since, so they stay small. Frozen objects that die
are still freed by reference counting, but a cycle among them is not, and a closed
connection leaves ~66 objects in cycles (its protocol, transport, tasks). So the next full
collection is a complete one again (``gc.unfreeze`` at its start) once the connections and
documents that ended since the last complete walk reach a quarter of those live then, or once
the memory blocks Python holds have grown fourfold since (what ends unseen: plain HTTP
requests, say; counting the frozen objects would itself walk them all). Frozen garbage stays
bounded, a server that holds steady pays no complete walk at all, and one that grows pays one
per fourfold instead of one per quarter.
"""

from __future__ import annotations

import gc
import sys

# Ended connections or documents that make the next full collection a complete walk, at least.
MIN_ENDED = 256
# Memory blocks that force a complete walk, as a multiple of those after the last one (below
# GROWTH * MIN_BLOCKS, never).
GROWTH = 4
MIN_BLOCKS = 500_000


class _Policy:
    def __init__(self) -> None:
        self.live = 0  # connections and documents now
        self.ended = 0  # ... ended since the last complete walk
        self.live_at_walk = 0
        self.blocks_at_walk = 0
        self.complete_walks = 0
        self.installed = False
        self._walking_all = False

    def started(self) -> None:
        self.live += 1

    def finished(self) -> None:
        self.live -= 1
        self.ended += 1

    def callback(self, phase: str, info: dict[str, int]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            grown = sys.getallocatedblocks() >= GROWTH * max(self.blocks_at_walk, MIN_BLOCKS)
            if grown or self.ended >= max(MIN_ENDED, self.live_at_walk // 4):
                gc.unfreeze()  # this collection walks everything, frozen garbage included
                self._walking_all = True
            return
        gc.freeze()
        if self._walking_all:
            self._walking_all = False
            self.complete_walks += 1
            self.ended = 0
            self.live_at_walk = self.live
            self.blocks_at_walk = sys.getallocatedblocks()


POLICY = _Policy()


def install() -> None:
    """Apply the policy from now on (once per process; what startup made is frozen already)."""
    if not POLICY.installed:
        POLICY.installed = True
        gc.callbacks.append(POLICY.callback)


def started() -> None:
    """A connection opened or a document loaded."""
    POLICY.started()


def finished() -> None:
    """A connection or a document ended: its objects may be garbage in cycles."""
    POLICY.finished()

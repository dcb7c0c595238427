"""Reads an update for the guard (its scan, runs merged: ``protocol.updates.update_merge``), in a
worker thread when it is big, so a peer's megabytes of structs never hold the event loop.

Reading is pure Python over the update's bytes, about 3 µs per struct (6 when a run is merged):
a 0.78 MB update of 100,000 items took 0.6 s. In a thread the loop still gets the GIL every
switch interval (5 ms), and the bytes are the sender's own, so nothing else touches them. What
follows the read (the guard's checks against the document, applying, storing) stays on the loop
where the document lives. Knows nothing of rooms or sockets.
"""

from __future__ import annotations

from tether.protocol.updates.update_merge import scan_merged
from tether.protocol.updates.update_scan import ScannedUpdate

from ..runtime.pools import Pool

# Smaller updates are read on the loop: a thread hop costs more than reading them there.
OFF_LOOP_BYTES = 64 * 1024

ReadUpdate = tuple[bytes, ScannedUpdate]  # the update as applied (runs merged) and its scan


def reads_off_loop(update: bytes) -> bool:
    return len(update) >= OFF_LOOP_BYTES


async def read_update(update: bytes, pool: Pool, *, first: bool = True) -> ReadUpdate:
    """``scan_merged(update)``, in a thread of ``pool`` if the update is big (``first``: a
    peer waits on it at the socket); raises ``MalformedUpdate`` as the scan does."""
    if not reads_off_loop(update):
        return scan_merged(update)
    return await pool.run(scan_merged, update, first=first)

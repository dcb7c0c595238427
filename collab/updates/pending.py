"""Updates yrs holds as *pending* (applied while something they build on was missing).

A snapshot (``Doc.get_update``) leaves pending structs out, so a compaction would drop them
from storage: the room keeps these updates and folds no log while one is still pending. Knows
Yjs bytes only: no rooms, stores or sockets.

They come only from trusted places, never from an editor (the update guard refuses those): a
stored update written before the guard existed, or another node's committed update whose
dependency was never committed (collab.cluster.node).
"""

from __future__ import annotations

from tether.protocol.updates.update_scan import ScannedUpdate, scan_update
from tether.protocol.wire.lib0 import Decoder


def still_pending(state_vector: bytes, updates: list[bytes]) -> list[bytes]:
    """The ``updates`` that a document with ``state_vector`` does not hold yet in full."""
    if not updates:
        return []
    state = _clocks(state_vector)
    return [update for update in updates if not _held(state, scan_update(update))]


def _held(state: dict[int, int], scan: ScannedUpdate) -> bool:
    # yrs integrates pending structs, and retries pending deletes, as soon as what they lack
    # arrives: once the state vector covers every clock the update writes or deletes, it is in.
    for client, end in scan.ends.items():
        if state.get(client, 0) < end:
            return False
    return all(state.get(client, 0) >= clock + length for client, clock, length in scan.deletes)


def _clocks(state_vector: bytes) -> dict[int, int]:
    decoder = Decoder(state_vector)
    return {
        decoder.read_var_uint(): decoder.read_var_uint() for _ in range(decoder.read_var_uint())
    }

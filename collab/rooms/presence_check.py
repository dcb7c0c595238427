"""The room's presence gate: every awareness update is made safe before it is stored or fanned
out (see ``protocol.wire.presence_safety``), and what was fixed is counted in /metrics.

Kept apart from ``room.py`` so that the room calls it in one line.
"""

from __future__ import annotations

from tether.protocol.wire.presence_safety import sanitize_awareness

from ..runtime.sync_metrics import Metrics


def safe_presence(payload: bytes, metrics: Metrics | None = None) -> bytes:
    """``payload`` with unsafe ``user`` fields (colour, name) removed or cut, and entries that
    are not JSON objects dropped; the same bytes object when nothing needed fixing."""
    checked = sanitize_awareness(payload)
    if metrics is not None and (checked.changed or checked.refused):
        metrics.limit_refusals.labels("presence_user_fields").inc(checked.changed + checked.refused)
    return checked.payload

"""Counting and logging a peer that ran into a limit: every refusal is counted, each kind is
logged once per peer (a flood of refused frames must not become a flood of log lines).

Knows nothing of sockets or documents. The ``limit`` label is the setting's name where there is
one (``send_queue_bytes``, ``awareness_ids_per_peer``, ...), so an operator knows what to raise.
"""

from __future__ import annotations

import logging

from .metrics import Metrics

log = logging.getLogger("tether.limits")


def refuse(metrics: Metrics, limit: str, logged: set[str], who: str, detail: str) -> None:
    """Count one refusal of ``limit``; log it if ``who`` has not been logged for it yet."""
    metrics.limit_refusals.labels(limit).inc()
    if limit in logged:
        return
    logged.add(limit)  # bounded: one entry per kind of limit
    log.warning("%s: %s (limit %s)", who, detail, limit)

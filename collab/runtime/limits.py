"""Counting and logging a peer that ran into a limit: every refusal is counted, each kind is
logged once per peer (a flood of refused frames must not become a flood of log lines).

Knows nothing of sockets or documents. The ``limit`` label is the setting's name where there is
one (``send_queue_bytes``, ``awareness_ids_per_peer``, ...), so an operator knows what to raise.
"""

from __future__ import annotations

import logging

from .sync_metrics import Metrics

log = logging.getLogger("tether.limits")
_server_log = logging.getLogger("tether")  # where the AI quota line has always been logged


def refuse(metrics: Metrics, limit: str, logged: set[str], who: str, detail: str) -> None:
    """Count one refusal of ``limit``; log it if ``who`` has not been logged for it yet."""
    metrics.limit_refusals.labels(limit).inc()
    if limit in logged:
        return
    logged.add(limit)  # bounded: one entry per kind of limit
    log.warning("%s: %s (limit %s)", who, detail, limit)


class AiQuotaLog:
    """Counts AI quota refusals in /metrics and logs them once per connection (a bounded set
    of keys: a flood of refusals costs no log lines and no memory); the AI scheduler calls
    ``refused``."""

    _MAX_KEYS = 1024

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics
        self._seen: set[int] = set()

    def refused(self, limit: str, owner: object) -> None:
        self._metrics.limit_refusals.labels(limit).inc()
        key = id(owner)
        if key in self._seen:
            return
        if len(self._seen) >= self._MAX_KEYS:
            self._seen.clear()
        self._seen.add(key)
        _server_log.warning(
            "a connection reached its AI quota (%s); further refusals not logged", limit
        )

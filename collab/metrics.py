"""Prometheus metrics of the sync server, one registry per app so tests can run several apps.

Knows nothing of rooms or sockets; they hold a ``Metrics`` and bump it.
"""

from __future__ import annotations

import platform
import re
from importlib import metadata

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

from . import gc_pauses
from .version import VERSION

# A "_created" series per counter doubles what every scrape carries and no dashboard reads it.
disable_created_metrics()

_NOT_IN_LABEL = re.compile(r"[^a-z0-9]+")


def label_value(text: str) -> str:
    """A label value from a human reason: "token expired" -> "token_expired" (no spaces or
    punctuation, bounded), so queries need no quoting and values stay few."""
    return _NOT_IN_LABEL.sub("_", text.lower()).strip("_")[:64] or "other"


_ACK_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.connections = Gauge(
            "tether_connections", "Open WebSocket connections", ["endpoint"], registry=r
        )
        self.rooms = Gauge("tether_documents_loaded", "Documents held in memory", registry=r)
        self.updates = Counter("tether_updates_applied_total", "Client updates applied", registry=r)
        self.rejected_updates = Counter(
            "tether_updates_rejected_total", "Updates refused (readonly scope)", registry=r
        )
        self.update_refusals = Counter(
            "tether_update_refusals_total",
            "Updates refused before they were applied (malformed, nesting depth, missing"
            " dependencies, inconsistent origins)",
            ["limit"],
            registry=r,
        )
        self.fanout_frames = Counter(
            "tether_fanout_frames_total", "Frames queued to other editors", registry=r
        )
        self.ack_seconds = Histogram(
            "tether_ack_seconds",
            "Receipt of an update to its durable SyncStatus ack",
            buckets=_ACK_BUCKETS,
            registry=r,
        )
        self.initial_sync_pieces = Counter(
            "tether_initial_sync_pieces_total",
            "Messages of chunked initial syncs (documents too big for one message)",
            registry=r,
        )
        self.compactions = Counter("tether_compactions_total", "Update logs folded", registry=r)
        self.reloads = Counter(
            "tether_document_reloads_total",
            "Documents rebuilt from storage after an update failed part-way through yrs",
            registry=r,
        )
        self.closes = Counter(
            "tether_connection_closes_total",
            "Connections closed by the server",
            ["reason"],
            registry=r,
        )
        self.origin_refusals = Counter(
            "tether_origin_refusals_total",
            "Requests refused for their Origin or Host (cross-site pages, DNS rebinding)",
            ["kind"],
            registry=r,
        )
        # One counter for every bound a peer ran into (item names in collab.limits).
        self.limit_refusals = Counter(
            "tether_limit_refusals_total",
            "Requests refused or connections closed because a peer hit a limit",
            ["limit"],
            registry=r,
        )
        self.webhooks = Counter(
            "tether_webhook_deliveries_total",
            "Webhook POSTs by outcome (delivered, retried, refused: 4xx, failed: out of attempts)",
            ["outcome"],
            registry=r,
        )
        self.auth_failures = Counter(
            "tether_auth_failures_total", "Refused document opens", ["reason"], registry=r
        )
        self.build_info = Gauge(
            "tether_build_info",
            "Always 1; the labels say which tether, Python and pycrdt are running",
            ["version", "python", "pycrdt"],
            registry=r,
        )
        self.build_info.labels(*build_labels()).set(1)
        gc_pauses.install()
        r.register(gc_pauses.GcPauseCollector())

    def render(self) -> bytes:
        return generate_latest(self.registry)


def build_labels() -> tuple[str, str, str]:
    try:
        pycrdt = metadata.version("pycrdt")
    except metadata.PackageNotFoundError:
        pycrdt = "unknown"
    return VERSION, platform.python_version(), pycrdt

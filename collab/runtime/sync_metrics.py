"""Prometheus metrics of the sync server, one registry per app so tests can run several apps.

Knows nothing of rooms or sockets; they hold a ``Metrics`` and bump it. The three bumped on every
edit (updates applied, fan-out frames, ack latency) are plain numbers on the event loop, read at
scrape time (``LoopCounter``, ``LoopHistogram``): prometheus_client takes a lock and, for a
histogram, walks its buckets in Python on every observation, a measurable share of an edit.
"""

from __future__ import annotations

import bisect
import platform
import re
from collections.abc import Iterable, Iterator
from importlib import metadata
from typing import Protocol

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from ..version import VERSION
from . import gc_pauses

# A "_created" series per counter doubles what every scrape carries and no dashboard reads it.
disable_created_metrics()

_NOT_IN_LABEL = re.compile(r"[^a-z0-9]+")


def label_value(text: str) -> str:
    """A label value from a human reason: "token expired" -> "token_expired" (no spaces or
    punctuation, bounded), so queries need no quoting and values stay few."""
    return _NOT_IN_LABEL.sub("_", text.lower()).strip("_")[:64] or "other"


_LAG_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_ACK_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class _Used(Protocol):
    @property
    def used(self) -> int: ...


class _Pool(Protocol):
    name: str
    running: int
    refused: int
    completed: int

    @property
    def waiting(self) -> int: ...

    @property
    def reserved(self) -> int: ...


class LoopCounter:
    """A counter only the event loop bumps: a plain number (no lock), exposed by a collector."""

    __slots__ = ("doc", "name", "value")

    def __init__(self, name: str, doc: str) -> None:
        self.name, self.doc = name, doc
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def metric(self) -> Metric:
        return CounterMetricFamily(self.name, self.doc, value=self.value)


class LoopHistogram:
    """A histogram only the event loop observes: a count per bucket found by bisection."""

    __slots__ = ("bounds", "counts", "doc", "name", "sum")

    def __init__(self, name: str, doc: str, bounds: tuple[float, ...]) -> None:
        self.name, self.doc, self.bounds = name, doc, bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one: above every bound (+Inf)
        self.sum = 0.0

    def observe(self, amount: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, amount)] += 1  # buckets are "<= bound"
        self.sum += amount

    def metric(self) -> Metric:
        buckets, total = [], 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            total += count
            buckets.append((floatToGoString(bound), total))
        return HistogramMetricFamily(self.name, self.doc, buckets=buckets, sum_value=self.sum)


class _LoopMetrics(Collector):
    def __init__(self, metrics: list[LoopCounter | LoopHistogram]) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        for metric in self._metrics:
            yield metric.metric()


class _StoreMetrics(Collector):
    """The watched store's commits, read at scrape time (its writer thread counts them)."""

    def __init__(self) -> None:
        self.store: object | None = None

    def collect(self) -> Iterator[Metric]:
        store = self.store
        commits = getattr(store, "commits", None)
        if commits is None:
            return
        yield CounterMetricFamily(
            "tether_store_commits", "Write transactions committed (one sync each)", value=commits
        )
        window = getattr(store, "window", None)  # SQLite's commit window (--commit-window-ms)
        if window is not None:
            yield CounterMetricFamily(
                "tether_store_commit_waits",
                "Commits that waited the commit window for more writes to share their sync",
                value=window.waits,
            )
            yield GaugeMetricFamily(
                "tether_store_commit_company",
                "Writes a commit window's wait should gather, at the recent rate of writes that"
                " come while another is in flight; commits wait from 1",
                value=window.company,
            )


class _PoolMetrics(Collector):
    """Each worker pool's jobs (collab.runtime.pools), read at scrape time."""

    def __init__(self) -> None:
        self.pools: Iterable[_Pool] = ()

    def collect(self) -> Iterator[Metric]:
        jobs = GaugeMetricFamily(
            "tether_pool_jobs",
            "Jobs of each worker pool by state: running in its threads, or waiting for one",
            labels=["pool", "state"],
        )
        refused = CounterMetricFamily(
            "tether_pool_refusals",
            "REST requests refused (503) because their pool's queue bound was reached",
            labels=["pool"],
        )
        done = CounterMetricFamily(
            "tether_pool_jobs_done", "Jobs each worker pool has finished", labels=["pool"]
        )
        requests = GaugeMetricFamily(
            "tether_pool_requests",
            "REST requests holding a place in each pool (past its threads and queue: 503)",
            labels=["pool"],
        )
        for pool in self.pools:
            jobs.add_metric([pool.name, "running"], pool.running)
            jobs.add_metric([pool.name, "waiting"], pool.waiting)
            refused.add_metric([pool.name], pool.refused)
            done.add_metric([pool.name], pool.completed)
            requests.add_metric([pool.name], pool.reserved)
        yield from (jobs, refused, done, requests)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.connections = Gauge(
            "tether_connections", "Open WebSocket connections", ["endpoint"], registry=r
        )
        self.rooms = Gauge("tether_documents_loaded", "Documents held in memory", registry=r)
        self.send_bytes = Gauge(
            "tether_send_bytes",
            "Bytes queued to send and initial syncs in flight, all connections together",
            registry=r,
        )
        self.updates = LoopCounter("tether_updates_applied", "Client updates applied")
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
        self.fanout_frames = LoopCounter("tether_fanout_frames", "Frames queued to other editors")
        self.ack_seconds = LoopHistogram(
            "tether_ack_seconds", "Receipt of an update to its durable SyncStatus ack", _ACK_BUCKETS
        )
        self.loop_lag = LoopHistogram(
            "tether_event_loop_lag_seconds",
            "How late the event loop ran a turn due every 50 ms (one input held it that long)",
            _LAG_BUCKETS,
        )
        r.register(
            _LoopMetrics([self.updates, self.fanout_frames, self.ack_seconds, self.loop_lag])
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
        # One counter for every bound a peer ran into (item names in collab.runtime.limits).
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
        self._store_metrics = _StoreMetrics()
        r.register(self._store_metrics)
        self._pool_metrics = _PoolMetrics()
        r.register(self._pool_metrics)
        self.renders = Counter(
            "tether_renders_total",
            "Documents rendered for REST, versions and webhooks: computed (miss), answered from"
            " the cache of rendered states (hit), or joined to the same render under way (shared)",
            ["outcome"],
            registry=r,
        )

    def watch_send_budget(self, budget: _Used) -> None:
        """``tether_send_bytes`` reads ``budget.used`` at scrape time."""
        self.send_bytes.set_function(lambda: budget.used)

    def watch_store(self, store: object | None) -> None:
        """``tether_store_commits_total`` (and SQLite's commit window) read ``store``'s counts
        at scrape time; None stops."""
        self._store_metrics.store = store

    def watch_pools(self, pools: Iterable[_Pool]) -> None:
        """``tether_pool_*`` read ``pools``' counts at scrape time."""
        self._pool_metrics.pools = pools

    def render(self) -> bytes:
        return generate_latest(self.registry)


def build_labels() -> tuple[str, str, str]:
    try:
        pycrdt = metadata.version("pycrdt")
    except metadata.PackageNotFoundError:
        pycrdt = "unknown"
    return VERSION, platform.python_version(), pycrdt

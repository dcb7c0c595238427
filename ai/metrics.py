"""Prometheus metrics of the AI pipeline, registered in the server's registry."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .cache.suggestions import LAYERS

_TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1.0, 1.5, 2.5, 5.0, 10.0)
_ITL_BUCKETS = (0.002, 0.005, 0.01, 0.015, 0.025, 0.04, 0.06, 0.1, 0.2, 0.5)


class AiMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.ttft = Histogram(
            "tether_ai_ttft_seconds",
            "Request received to first suggestion text sent",
            ["provider", "path"],
            buckets=_TTFT_BUCKETS,
            registry=r,
        )
        self.itl = Histogram(
            "tether_ai_inter_token_seconds",
            "Time between consecutive generated pieces",
            ["provider", "path"],
            buckets=_ITL_BUCKETS,
            registry=r,
        )
        self.requests = Counter(
            "tether_ai_requests_total", "Suggestion requests", ["path", "source"], registry=r
        )
        self.outcomes = Counter(
            "tether_ai_outcomes_total", "How suggestions ended", ["reason"], registry=r
        )
        self.errors = Counter("tether_ai_errors_total", "Suggestion errors", ["code"], registry=r)
        self.junk = Counter(
            "tether_ai_junk_total",
            "Suggestions the junk filter ended (reason junk:<kind>), by kind",
            ["kind"],
            registry=r,
        )
        self.queue_depth = Gauge(
            "tether_ai_queue_depth", "Jobs queued or running on the model", registry=r
        )
        self.accepts = Counter("tether_ai_accepts_total", "Suggestions accepted", registry=r)


class CacheCollector(Collector):
    """The suggestion cache's and prefetch's counters, read at scrape time from the engine
    (the cache is a pure data structure and keeps plain counters)."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine

    def collect(self) -> Iterator[Metric]:
        engine = self._engine
        cache = engine.cache
        prefetch = CounterMetricFamily(
            "tether_ai_prefetch",
            "Suggestions computed ahead: started, completed, used by a request, wasted"
            " (cancelled by typing or preempted, or dropped unused), skipped (model busy or"
            " over budget)",
            labels=["outcome"],
        )
        for outcome in ("started", "completed", "used", "wasted", "skipped"):
            prefetch.add_metric([outcome], engine.stats().get(outcome, 0))
        yield prefetch
        yield CounterMetricFamily(
            "tether_ai_rewarmed",
            "Editors' contexts evaluated again after the model worker restarted, before they"
            " asked (ai.suggest.rewarm)",
            value=engine.stats().get("rewarmed", 0),
        )
        # A count read off the provider at scrape time (a worker restart starts it again at 0,
        # which Prometheus reads as a counter reset).
        yield CounterMetricFamily(
            "tether_ai_warm_state_hits",
            "Requests that found their prompt state warm",
            value=engine.provider.warm_hits(),
        )
        embedder = engine.embedder
        yield GaugeMetricFamily(
            "tether_ai_embedder_ready",
            "1 once the semantic layer's embedding model has loaded",
            value=1.0 if embedder is not None and embedder.ready else 0.0,
        )
        if embedder is not None:
            yield CounterMetricFamily(
                "tether_ai_embeddings",
                "Texts embedded by the model (memo hits excluded)",
                value=embedder.computed,
            )
        if cache is None:
            return
        cache.expire()  # what is past its TTL is not reported as cached
        hits = CounterMetricFamily("tether_ai_cache_hits", "Cache hits by layer", labels=["layer"])
        for layer in LAYERS:
            hits.add_metric([layer], cache.hits[layer])
        yield hits
        yield CounterMetricFamily(
            "tether_ai_cache_misses", "Requests no cache layer could serve", value=cache.misses
        )
        evictions = CounterMetricFamily(
            "tether_ai_cache_evictions",
            "Entries removed, by reason (entries, bytes, ttl, replaced, forgotten)",
            labels=["reason"],
        )
        for reason, count in sorted(cache.evictions.items()):
            evictions.add_metric([reason], count)
        yield evictions
        yield GaugeMetricFamily("tether_ai_cache_entries", "Entries cached", value=len(cache))
        yield GaugeMetricFamily(
            "tether_ai_cache_bytes", "Bytes cached (estimate)", value=cache.bytes
        )
        yield GaugeMetricFamily(
            "tether_ai_cache_vectors", "Vectors in the FAISS indexes", value=cache.vectors()
        )

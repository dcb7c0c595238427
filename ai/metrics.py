"""Prometheus metrics of the AI pipeline, registered in the server's registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

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
        self.queue_depth = Gauge(
            "tether_ai_queue_depth", "Jobs queued or running on the model", registry=r
        )
        self.warm_hits = Gauge(
            "tether_ai_warm_state_hits", "Requests that found their prompt state warm", registry=r
        )
        self.accepts = Counter("tether_ai_accepts_total", "Suggestions accepted", registry=r)

"""A tether server's own latency histograms (``/metrics``), read around a bench window: what
the server saw, whatever the load generator's CPU did. On 2 vCPUs a driver sharing a core with
the model measures late; these do not. Prometheus buckets are cumulative, so a quantile is
known only as the bucket bound it falls under."""

from __future__ import annotations

import re

import httpx

LOOP_LAG = "tether_event_loop_lag_seconds"
ACK = "tether_ack_seconds"

Buckets = dict[str, float]  # bound ("0.005", "+Inf") -> cumulative count


def parse_buckets(metrics_text: str, name: str) -> Buckets | None:
    pattern = re.compile(re.escape(name) + r'_bucket\{le="([^"]+)"\} (\S+)')
    found = {le: float(count) for le, count in pattern.findall(metrics_text)}
    return found or None


async def read_buckets(http: httpx.AsyncClient, *names: str) -> dict[str, Buckets | None]:
    """Each named histogram's buckets, None where the server has no such metric."""
    reply = await http.get("/metrics", timeout=10)
    text = reply.text if reply.status_code == 200 else ""
    return {name: parse_buckets(text, name) for name in names}


def window_bound(after: Buckets, before: Buckets | None, quantile: float = 1.0) -> str:
    """The smallest bound under which ``quantile`` of the window's observations fell."""
    before = before or {}
    total = after["+Inf"] - before.get("+Inf", 0.0)
    for le in sorted(after, key=float):
        if after[le] - before.get(le, 0.0) >= quantile * total:
            return le
    return "+Inf"


def bound_ms(after: Buckets | None, before: Buckets | None, quantile: float) -> float | None:
    """``window_bound`` in milliseconds; None without the metric, or with nothing observed."""
    if after is None or after.get("+Inf", 0.0) - (before or {}).get("+Inf", 0.0) <= 0:
        return None
    bound = window_bound(after, before, quantile)
    return float("inf") if bound == "+Inf" else round(float(bound) * 1000, 3)

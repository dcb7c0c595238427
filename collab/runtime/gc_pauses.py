"""How long the garbage collector stops the process, per generation: a histogram the metrics
expose as ``tether_gc_pause_seconds``. Process-wide (the collector is), knows nothing else.

A full collection walks every tracked object, and with thousands of idle sockets that is
hundreds of thousands: a pause every editor feels, so it is measured, not guessed. The
callback runs at the start and end of each collection: two calls and a clock read, next to a
collection that walks at least hundreds of objects.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator

from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector

BUCKETS = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class _Pauses:
    def __init__(self) -> None:
        self.counts = [[0] * (len(BUCKETS) + 1) for _ in range(3)]  # per generation, +Inf last
        self.sums = [0.0, 0.0, 0.0]
        self._started = 0.0
        self.installed = False

    def callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        elapsed = time.perf_counter() - self._started
        generation = info["generation"]
        self.sums[generation] += elapsed
        counts = self.counts[generation]
        for index, bound in enumerate(BUCKETS):
            if elapsed <= bound:
                counts[index] += 1
                return
        counts[-1] += 1


PAUSES = _Pauses()


def install() -> None:
    """Start measuring (once per process)."""
    if not PAUSES.installed:
        PAUSES.installed = True
        gc.callbacks.append(PAUSES.callback)


class GcPauseCollector(Collector):
    """``tether_gc_pause_seconds{generation}`` for one registry, read from the process's."""

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(
            "tether_gc_pause_seconds",
            "Garbage-collector pauses by generation (2 = full collection)",
            labels=["generation"],
        )
        for generation in range(3):
            running = 0
            buckets: list[tuple[str, float]] = []
            for bound, count in zip(
                (*map(str, BUCKETS), "+Inf"), PAUSES.counts[generation], strict=True
            ):
                running += count
                buckets.append((bound, running))
            family.add_metric([str(generation)], buckets, PAUSES.sums[generation])
        yield family

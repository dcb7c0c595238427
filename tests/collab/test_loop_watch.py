"""The loop watchdog: a turn held past the threshold is one WARNING naming the input the loop
was inside of, and every beat's lateness lands in the histogram /metrics shows."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from tether.collab.runtime.loop_watch import LoopWatch, note
from tether.collab.runtime.sync_metrics import Metrics

pytestmark = pytest.mark.anyio


class _Peer:
    label = "peer 7 ('mallory')"


async def test_a_held_loop_is_logged_once_naming_the_input_that_held_it(caplog):
    metrics = Metrics()
    caplog.set_level(logging.WARNING, logger="tether")
    async with LoopWatch(metrics.loop_lag, interval=0.02, threshold=0.15) as watch:
        await asyncio.sleep(0.05)  # a few honest beats
        note("Sync", "victim-doc", _Peer())
        time.sleep(0.4)  # one input holding the loop (what the watchdog is for)
        note("Awareness", "other-doc", "someone else")  # what came after must not be blamed
        deadline = time.monotonic() + 5
        while watch.stalls == 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
    held = [r.getMessage() for r in caplog.records if "event loop was held" in r.getMessage()]
    assert len(held) == 1, held
    assert "by Sync on document 'victim-doc' from peer 7 ('mallory')" in held[0]
    assert metrics.loop_lag.sum >= 0.25
    assert b"tether_event_loop_lag_seconds_bucket" in metrics.render()


async def test_start_up_turns_are_logged_but_kept_out_of_the_histogram_until_serving(caplog):
    """The server's start-up (imports, the store, the AI's modules) runs before its port
    listens: no client waits on it, so the lag histogram begins when it serves."""
    metrics = Metrics()
    caplog.set_level(logging.INFO, logger="tether")
    async with LoopWatch(
        metrics.loop_lag, interval=0.02, threshold=0.15, until_serving=True
    ) as watch:
        time.sleep(0.3)  # start-up holding the loop
        deadline = time.monotonic() + 5
        while watch.stalls == 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert watch.stalls == 1 and sum(metrics.loop_lag.counts) == 0
        watch.serving()
        time.sleep(0.3)  # and now an input holding it
        while watch.stalls == 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
    assert watch.stalls == 2
    assert 0.25 <= metrics.loop_lag.sum < 0.6  # the second hold only
    held = [r.getMessage() for r in caplog.records if "event loop was held" in r.getMessage()]
    assert len(held) == 2  # both logged

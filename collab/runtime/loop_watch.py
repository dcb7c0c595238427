"""The event loop's health: how late its turns run (``tether_event_loop_lag_seconds``), and one
WARNING naming the input that held it whenever a single turn ran past ``threshold`` seconds.

Inputs say what they are as they are taken (``note``: one tuple stored, nothing formatted, on
the sync path); a thread of its own watches the loop's heartbeat, because a loop held by one
input cannot report on itself: when the beat is late, the thread reads what was noted last,
which is the input still running. The loop logs it once the turn ends. Knows no rooms.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time

from .sync_metrics import LoopHistogram
from .thread_names import name_os_thread

log = logging.getLogger("tether")

# What the loop took last: (operation, document, who). References only: formatted when logged.
_last: list[tuple[str, str, object] | None] = [None]


def note(operation: str, document: str, who: object) -> None:
    """The input the loop is about to handle (a frame's kind, a REST call...)."""
    _last[0] = (operation, document, who)


def done() -> None:
    """That input is handled: a stall from now on is not its doing."""
    _last[0] = None


class LoopWatch:
    """``async with LoopWatch(histogram):`` beats every ``interval`` seconds while open."""

    def __init__(
        self,
        lag: LoopHistogram,
        *,
        interval: float = 0.05,
        threshold: float = 0.25,
        until_serving: bool = False,
    ) -> None:
        self._lag = lag
        # With ``until_serving``, the histogram waits for ``serving()``: start-up's turns
        # (imports, opening the store, the AI's modules: 0.04-1 s) ran before the port
        # listened, so no client waited on them, and on a short run they set its p99.
        self._observing = not until_serving
        self._interval = interval
        self._threshold = threshold
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._expected = 0.0
        self._beat_at = 0.0  # written by the loop, read by the thread
        self._culprit: tuple[str, str, object] | None = None  # set by the thread
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="tether-loop-watch", daemon=True)
        self.stalls = 0

    async def __aenter__(self) -> LoopWatch:
        self._loop = asyncio.get_running_loop()
        self._beat_at = self._expected = time.monotonic()
        self._schedule()
        self._thread.start()
        return self

    def serving(self) -> None:
        """From now on every beat's lateness is observed (held turns are logged throughout)."""
        self._observing = True

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        if self._timer is not None:
            self._timer.cancel()
        await asyncio.to_thread(self._thread.join, 1.0)

    def _schedule(self) -> None:
        assert self._loop is not None
        self._expected = time.monotonic() + self._interval
        self._timer = self._loop.call_at(self._expected, self._beat)

    def _beat(self) -> None:
        now = time.monotonic()
        late = max(0.0, now - self._expected)
        if self._observing:
            self._lag.observe(late)
        self._beat_at = now
        if late > self._threshold:
            self.stalls += 1
            culprit, self._culprit = self._culprit, None
            # An input that held the loop is news; the server's own work (start-up's full
            # collection, a big document's fold) is there for whoever asks.
            level = logging.WARNING if culprit is not None else logging.INFO
            log.log(level, "the event loop was held %.2f s %s", late, describe(culprit))
        self._schedule()

    def _watch(self) -> None:
        name_os_thread("tether-watch")
        while not self._stop.wait(self._interval):
            held = time.monotonic() - self._beat_at - self._interval
            if held > self._threshold and self._culprit is None:
                self._culprit = _last[0]  # what the loop is inside of right now


def describe(culprit: tuple[str, str, object] | None) -> str:
    if culprit is None:
        return "(no input noted: the server's own work)"
    operation, document, who = culprit
    label = str(getattr(who, "label", None) or who)[:80]
    where = f" on document {document[:64]!r}" if document else ""
    return f"by {operation}{where} from {label}"

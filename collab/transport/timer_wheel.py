"""One shared timer wheel for every connection's deadlines (pings, idle and auth timeouts,
token expiry), instead of a task, or even a loop timer, per connection.

An idle connection used to keep a monitor task, and a second task waiting for its outbox to
overflow, alive for its whole life (tasks, their frames and the futures they wait on: several
KB each), waking every ``min(ping, auth, idle) / 4`` seconds to find nothing to do. A loop
timer per connection is lighter but still ~0.5 KB under uvloop (its handle, a copied context,
libuv's timer). Here a connection holds one ``ConnectionTimer`` (a few dozen bytes) filed in
the running loop's ``TimerWheel``: deadlines rounded up to ``RESOLUTION`` share a bucket, one
loop timer fires the earliest bucket, each callback does what is due and arms its next
deadline. Never early, at most ``RESOLUTION`` late. Times are ``time.monotonic()`` seconds,
the clock the connections and their sessions use.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import math
import time
import weakref
from collections.abc import Callable

log = logging.getLogger(__name__)

RESOLUTION = 0.1  # seconds: how late a deadline may fire, and how often the wheel wakes at most


class TimerWheel:
    """The buckets of one event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._buckets: dict[int, list[ConnectionTimer]] = {}
        self._order: list[int] = []  # a heap of the buckets' numbers
        self._handle: asyncio.TimerHandle | None = None
        self._armed_for: int | None = None
        self._firing = False  # callbacks re-file themselves: the loop timer is armed after

    @classmethod
    def of_running_loop(cls) -> TimerWheel:
        loop = asyncio.get_running_loop()
        wheel = _WHEELS.get(loop)
        if wheel is None:
            wheel = _WHEELS[loop] = cls(loop)
        return wheel

    def file(self, timer: ConnectionTimer, due: float) -> int:
        bucket = math.ceil(due / RESOLUTION)
        entries = self._buckets.get(bucket)
        if entries is None:
            entries = self._buckets[bucket] = []
            heapq.heappush(self._order, bucket)
        entries.append(timer)
        if not self._firing and (self._armed_for is None or bucket < self._armed_for):
            self._arm(bucket)
        return bucket

    def _arm(self, bucket: int) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._armed_for = bucket
        delay = max(0.0, bucket * RESOLUTION - time.monotonic())
        self._handle = self._loop.call_later(delay, self._fire)

    def _fire(self) -> None:
        self._handle = None
        self._armed_for = None
        now_bucket = math.floor(time.monotonic() / RESOLUTION)
        order = self._order
        due: list[int] = []
        while order and order[0] <= now_bucket:
            due.append(heapq.heappop(order))
        self._firing = True
        try:
            for bucket in due:  # each once: one filed again for the past waits for the next turn
                for timer in self._buckets.pop(bucket):
                    if timer.bucket == bucket:  # not cancelled, nor re-filed for earlier
                        timer.bucket = None
                        try:
                            timer.callback()
                        except Exception:
                            log.exception("a connection's timer failed")
        finally:
            self._firing = False
            if order:
                self._arm(order[0])


_WHEELS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, TimerWheel] = (
    weakref.WeakKeyDictionary()
)


class ConnectionTimer:
    """One connection's next deadline in the running loop's wheel."""

    __slots__ = ("_due", "bucket", "callback")

    def __init__(self, callback: Callable[[], None]) -> None:
        self.callback = callback
        self.bucket: int | None = None
        self._due = 0.0

    def arm(self, due: float) -> None:
        """Fire at ``due`` (monotonic seconds) unless already armed for earlier."""
        if self.bucket is not None and due >= self._due:
            return
        self._due = due
        self.bucket = TimerWheel.of_running_loop().file(self, due)

    def arm_in(self, delay: float) -> None:
        self.arm(time.monotonic() + delay)

    def cancel(self) -> None:
        """For good: the callback (a bound method of its connection) is let go at once. The
        wheel keeps the entry until its bucket comes, and any entry filed for a later deadline
        too: holding the callback, they kept each ended connection's whole object graph
        (protocol, transport, buffers) alive for up to the idle timeout after it closed."""
        self.bucket = None  # its entries are skipped when their buckets come
        self.callback = _cancelled


def _cancelled() -> None:
    pass

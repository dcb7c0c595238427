"""One timer per connection for its deadlines (pings, idle and auth timeouts, token expiry),
instead of a task per connection that wakes every tick.

An idle connection used to keep a monitor task, and a second task waiting for its outbox to
overflow, alive for its whole life (tasks, their frames and the futures they wait on: several
KB each), and woke every ``min(ping, auth, idle) / 4`` seconds to find nothing to do. Here a
connection holds one ``loop.call_later`` handle (asyncio's own heap of timers, shared by the
whole server) armed for its next deadline only: the callback does what is due and arms the next
one. Times are ``time.monotonic()`` seconds, the clock the connection and its session use.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class ConnectionTimer:
    __slots__ = ("_callback", "_due", "_handle")

    def __init__(self, callback: Callable[[], None]) -> None:
        self._callback = callback
        self._handle: asyncio.TimerHandle | None = None
        self._due = 0.0

    def arm(self, due: float) -> None:
        """Fire at ``due`` (monotonic seconds) unless already armed for earlier."""
        if self._handle is not None:
            if due >= self._due:
                return
            self._handle.cancel()
        self._due = due
        delay = max(0.0, due - time.monotonic())
        self._handle = asyncio.get_running_loop().call_later(delay, self._fire)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _fire(self) -> None:
        self._handle = None
        self._callback()

"""A connection's bounded send queue and the one task that drains it to the socket.

Knows nothing of documents. Putting a frame never blocks; a full queue is the named condition
``SlowConsumer``: that connection is closed, the room never waits for it.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable, Callable

SendBytes = Callable[[bytes], Awaitable[None]]


class SlowConsumer(Exception):
    """The peer reads slower than its documents change; its queue overflowed."""


class Outbox:
    def __init__(self, send: SendBytes, max_frames: int) -> None:
        self._send = send
        self._max_frames = max_frames
        self._frames: collections.deque[bytes] = collections.deque()
        self._ready = asyncio.Event()
        self._closed = False
        self._empty = asyncio.Event()
        self._empty.set()
        self.overflowed = asyncio.Event()

    def put(self, frame: bytes) -> None:
        if self._closed:
            return
        if len(self._frames) >= self._max_frames:
            self._closed = True
            self._frames.clear()
            self.overflowed.set()
            return
        self._frames.append(frame)
        self._empty.clear()
        self._ready.set()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        self._closed = True
        self._ready.set()

    def __len__(self) -> int:
        return len(self._frames)

    async def drain_forever(self) -> None:
        """Send queued frames in order until closed; socket errors end it."""
        frames = self._frames
        while True:
            await self._ready.wait()
            self._ready.clear()
            while frames:
                await self._send(frames.popleft())
            self._empty.set()
            if self._closed:
                return

    async def flush(self, timeout: float) -> None:
        """Best effort: wait until the queue is empty (used before a polite close)."""
        async with asyncio.timeout(timeout):
            await self._empty.wait()

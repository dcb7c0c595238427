"""An ``asyncio.Event`` that costs a few dozen bytes until someone waits on it.

Each ``asyncio.Event`` allocates a ``collections.deque`` for its waiters up front (about 740
bytes with its first block): an idle connection held six of them (its outbox's four, uvicorn's
writable flag and its receive queue's), 4.5 KB of the server's memory per idle socket, for
waiters that almost never exist. Same semantics as ``asyncio.Event`` (``set`` wakes every
current waiter; ``wait`` returns at once when set), waiters kept in a list made on first wait.
"""

from __future__ import annotations

import asyncio
from typing import Literal


class SlimEvent:
    __slots__ = ("_is_set", "_waiters")

    def __init__(self) -> None:
        self._is_set = False
        self._waiters: list[asyncio.Future[None]] | None = None

    def is_set(self) -> bool:
        return self._is_set

    def set(self) -> None:
        if self._is_set:
            return
        self._is_set = True
        waiters = self._waiters
        if waiters:
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    def clear(self) -> None:
        self._is_set = False

    async def wait(self) -> Literal[True]:
        if self._is_set:
            return True
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._waiters is None:
            self._waiters = []
        self._waiters.append(waiter)
        try:
            await waiter
            return True
        finally:
            self._waiters.remove(waiter)
            if not self._waiters:
                self._waiters = None

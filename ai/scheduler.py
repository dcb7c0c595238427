"""One model worker in front of the provider: interactive requests before prefetch, a bounded
queue that answers ``Busy`` at once instead of timing out, cancelled jobs dropped unrun.

Knows nothing of documents or sockets; a job is a coroutine factory.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from .errors import Busy

INTERACTIVE = 0
PREFETCH = 1


@dataclass(order=True)
class _Job:
    priority: int
    seq: int
    run: Callable[[], Awaitable[Any]] = field(compare=False)
    done: asyncio.Future[Any] = field(compare=False)


class Scheduler:
    """``async with Scheduler(max_queue=8) as s: result = await s.submit(job)``."""

    def __init__(self, max_queue: int = 8) -> None:
        self.max_queue = max_queue
        self._heap: list[_Job] = []
        self._seq = itertools.count()
        self._wake = asyncio.Event()
        self._worker: asyncio.Task[None] | None = None
        self.running: _Job | None = None

    async def __aenter__(self) -> Scheduler:
        self._worker = asyncio.ensure_future(self._work())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(BaseException):
                await self._worker
        for job in self._heap:
            job.done.cancel()
        self._heap.clear()

    @property
    def depth(self) -> int:
        return len(self._heap) + (self.running is not None)

    def submit(
        self, run: Callable[[], Awaitable[Any]], priority: int = INTERACTIVE
    ) -> asyncio.Future[Any]:
        """Queue a job; its future resolves with the job's result. Raises Busy when full.

        Cancelling the returned future cancels the job, queued or running."""
        waiting = [j for j in self._heap if not j.done.cancelled()]
        if len(waiting) >= self.max_queue:
            if priority == PREFETCH or not self._evict_prefetch():
                raise Busy("the model is busy; try again shortly")
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._heap, _Job(priority, next(self._seq), run, done))
        running = self.running
        if priority == INTERACTIVE and running is not None and running.priority == PREFETCH:
            running.done.cancel()  # speculative work gives the model up at once
        self._wake.set()
        return done

    def promote(self, done: asyncio.Future[Any]) -> None:
        """Someone now waits for this job: it becomes interactive (and is never preempted)."""
        if self.running is not None and self.running.done is done:
            self.running.priority = INTERACTIVE
            return
        for job in self._heap:
            if job.done is done:
                job.priority = INTERACTIVE
                heapq.heapify(self._heap)
                return

    @property
    def idle(self) -> bool:
        return self.running is None and not any(not j.done.done() for j in self._heap)

    def _evict_prefetch(self) -> bool:
        """Interactive work displaces queued prefetch rather than being refused."""
        for job in self._heap:
            if job.priority == PREFETCH and not job.done.done():
                job.done.cancel()
                self._heap.remove(job)
                heapq.heapify(self._heap)
                return True
        return False

    async def _work(self) -> None:
        while True:
            while not self._heap:
                self._wake.clear()
                await self._wake.wait()
            job = heapq.heappop(self._heap)
            if job.done.done():
                continue  # cancelled while queued: never runs
            self.running = job
            task = asyncio.ensure_future(job.run())
            job.done.add_done_callback(lambda f, t=task: t.cancel() if f.cancelled() else None)
            try:
                result = await asyncio.shield(task)
            except asyncio.CancelledError:
                if not task.done():
                    raise  # the worker itself is being cancelled
                with contextlib.suppress(BaseException):
                    await task
                if not job.done.done():
                    job.done.cancel()
            except Exception as exc:
                if not job.done.done():
                    job.done.set_exception(exc)
            else:
                if not job.done.done():
                    job.done.set_result(result)
            finally:
                self.running = None

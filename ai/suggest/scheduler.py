"""The model workers in front of the provider (one, or one per model upstream), shared
fairly: interactive requests before prefetch, subjects (and within one, its connections) in
turn, a quota of jobs per connection and per grant subject, a bounded queue that answers
``Busy`` at once instead of timing out, cancelled jobs dropped unrun.

Fairness, because the model is the server's scarcest resource and one client must not be able
to take it from everyone else (issue 10, item 8; issue 37, item 3):

- each job has an *owner* (the connection that asked) and optionally a *subject* (the grant's
  ``sub``; ``None`` where there is no identity, e.g. ``--auth none``: the connection stands
  for it);
- an owner may have at most ``per_owner`` interactive jobs queued or running, a subject at most
  ``per_subject`` (across its connections); one more is ``QuotaExceeded`` at once;
- the worker takes the next job by fair queueing (``ai.model.fair``) within a priority:
  subjects in turn, a subject that just had a turn after one that has not, then that
  subject's connections in turn; never first-come;
- each job runs with its share (``ai.model.fair.SHARE``) in its context, so where its
  generation waits again (the model worker, an upstream's connections) it is served in turn
  the same way;
- when the shared queue is full, a newcomer displaces the newest queued job of the owner with
  the most queued jobs, if that owner has at least two more than the newcomer: nobody is told
  ``busy`` because of one client's backlog while that client has more than its share.

Knows nothing of documents or sockets; a job is a coroutine factory and owners are opaque
hashable keys.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from ..errors import Busy, QuotaExceeded
from ..model.fair import SHARE, FairQueue

INTERACTIVE = 0
PREFETCH = 1
_PRIORITIES = (INTERACTIVE, PREFETCH)

# Called with the limit's name when a request is refused for a quota (metrics, logging).
RefusalListener = Callable[[str, Hashable], None]


@dataclass(eq=False)
class _Job:
    priority: int
    owner: Hashable
    subject: Hashable | None
    run: Callable[[], Awaitable[Any]] = field(repr=False)
    done: asyncio.Future[Any] = field(repr=False)

    @property
    def live(self) -> bool:
        return not self.done.done()

    @property
    def share(self) -> Hashable:
        """Whose turn this job takes: its subject, or its connection without one."""
        return self.subject if self.subject is not None else ("connection", self.owner)

    def share_name(self) -> str:
        """The share as the model worker and upstream queues see it (``ai.model.fair``)."""
        if self.subject is not None:
            return str(self.subject)
        return f"connection:{id(self.owner):x}"


class Scheduler:
    """``async with Scheduler(max_queue=8) as s: result = await s.submit(job, owner=conn)``.

    ``workers`` jobs run at once (1 for the embedded model; one per upstream for several)."""

    def __init__(
        self,
        max_queue: int = 8,
        *,
        per_owner: int = 0,
        per_subject: int = 0,
        on_refusal: RefusalListener | None = None,
        workers: int = 1,
    ) -> None:
        if workers < 1:
            raise ValueError("a scheduler needs at least one worker")
        self.max_queue = max_queue
        self.workers = workers
        self.per_owner = per_owner  # 0: no quota
        self.per_subject = per_subject
        self._on_refusal = on_refusal
        # Per priority, the queued jobs by subject, then connection (``FairQueue``).
        self._queues: dict[int, FairQueue[_Job]] = {p: FairQueue() for p in _PRIORITIES}
        self._wake = asyncio.Event()
        self._workers: list[asyncio.Task[None]] = []
        self.active: list[_Job] = []  # running now, at most ``workers``

    @property
    def running(self) -> _Job | None:
        """The job running (the first, with several workers), or None."""
        return self.active[0] if self.active else None

    async def __aenter__(self) -> Scheduler:
        self._workers = [asyncio.ensure_future(self._work()) for _ in range(self.workers)]
        return self

    async def __aexit__(self, *exc: object) -> None:
        for worker in self._workers:
            worker.cancel()
        for worker in self._workers:
            with contextlib.suppress(BaseException):
                await worker
        for job in self._queued():
            job.done.cancel()
        self._queues = {p: FairQueue() for p in _PRIORITIES}

    def _queued(self) -> list[_Job]:
        return [job for queue in self._queues.values() for job in queue]

    @property
    def depth(self) -> int:
        return len(self._queued()) + len(self.active)

    def submit(
        self,
        run: Callable[[], Awaitable[Any]],
        priority: int = INTERACTIVE,
        *,
        owner: Hashable = None,
        subject: Hashable | None = None,
    ) -> asyncio.Future[Any]:
        """Queue a job; its future resolves with the job's result. Raises ``QuotaExceeded``
        when ``owner`` or ``subject`` has its share in already, ``Busy`` when the queue is full.

        Cancelling the returned future cancels the job, queued or running."""
        if priority == INTERACTIVE:
            self._check_quota(owner, subject)
        waiting = [job for job in self._queued() if job.live]
        if len(waiting) >= self.max_queue:
            if priority == PREFETCH or not (
                self._evict_prefetch() or self._displace_for(owner, waiting)
            ):
                raise Busy("the model is busy; try again shortly")
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        job = _Job(priority, owner, subject, run, done)
        self._enqueue(job)
        # Cancelled while queued: out of the queue now, so it takes no turn from its subject.
        done.add_done_callback(lambda _: self._remove(job))
        if priority == INTERACTIVE and len(self.active) >= self.workers:
            for running in self.active:
                if running.priority == PREFETCH:
                    running.done.cancel()  # speculative work gives the model up at once
                    break
        self._wake.set()
        return done

    def _check_quota(self, owner: Hashable, subject: Hashable | None) -> None:
        active = [job for job in self._queued() if job.live and job.priority == INTERACTIVE]
        active += [job for job in self.active if job.live and job.priority == INTERACTIVE]
        if self.per_owner and sum(j.owner == owner for j in active) >= self.per_owner:
            self._refused("ai_queue_per_connection", owner)
            raise QuotaExceeded(
                f"this connection already has {self.per_owner} suggestions queued or running"
                " (--ai-queue-per-connection); wait for one to finish"
            )
        if (
            self.per_subject
            and subject is not None
            and sum(j.subject == subject for j in active) >= self.per_subject
        ):
            self._refused("ai_queue_per_subject", owner)
            raise QuotaExceeded(
                f"this token's subject already has {self.per_subject} suggestions queued or"
                " running (--ai-queue-per-subject); wait for one to finish"
            )

    def _refused(self, limit: str, owner: Hashable) -> None:
        if self._on_refusal is not None:
            self._on_refusal(limit, owner)

    def _enqueue(self, job: _Job) -> None:
        self._queues[job.priority].push(job.share, job.owner, job)

    def promote(self, done: asyncio.Future[Any]) -> None:
        """Someone now waits for this job: it becomes interactive (and is never preempted)."""
        for running in self.active:
            if running.done is done:
                running.priority = INTERACTIVE
                return
        for job in self._queued():
            if job.done is done and job.priority == PREFETCH:
                self._remove(job)
                job.priority = INTERACTIVE
                self._enqueue(job)
                return

    @property
    def idle(self) -> bool:
        return not self.active and not any(job.live for job in self._queued())

    def idle_but(self, done: asyncio.Future[Any]) -> bool:
        """Idle, or only running the job of ``done`` (which the caller is cancelling)."""
        return all(running.done is done for running in self.active) and not any(
            job.live for job in self._queued()
        )

    def _remove(self, job: _Job) -> None:
        self._queues[job.priority].discard(job.share, job.owner, job)

    def _evict_prefetch(self) -> bool:
        """Interactive work displaces queued prefetch rather than being refused."""
        for job in self._queued():
            if job.priority == PREFETCH and job.live:
                job.done.cancel()
                self._remove(job)
                return True
        return False

    def _displace_for(self, owner: Hashable, waiting: list[_Job]) -> bool:
        """The queue is full: refuse (``busy``) the newest queued job of the owner holding the
        most, if it holds at least two more than ``owner`` does, so that ``owner`` gets in."""
        counts = collections.Counter(job.owner for job in waiting)
        heaviest, most = counts.most_common(1)[0]
        if heaviest == owner or most < counts.get(owner, 0) + 2:
            return False
        victim = next(job for job in reversed(waiting) if job.owner == heaviest)
        self._remove(victim)
        victim.done.set_exception(Busy("the model is busy; try again shortly"))
        return True

    def _next(self) -> _Job | None:
        """The next job in turn within the highest priority that has live work."""
        for priority in _PRIORITIES:
            queue = self._queues[priority]
            while queue:
                job = queue.pop()
                if job.live:
                    return job
        return None

    def _next_live(self) -> bool:
        return any(job.live for job in self._queued())

    async def _work(self) -> None:
        while True:
            job = self._next()
            while job is None:
                self._wake.clear()
                await self._wake.wait()
                job = self._next()
            self.active.append(job)
            if self._next_live():
                self._wake.set()  # more queued work: another free worker may take it
            # The job's share rides in its context to wherever its generation waits next.
            context = contextvars.copy_context()
            context.run(SHARE.set, job.share_name())
            task = asyncio.get_running_loop().create_task(job.run(), context=context)
            job.done.add_done_callback(lambda f, t=task: t.cancel() if f.cancelled() else None)
            try:
                result = await asyncio.shield(task)
            except asyncio.CancelledError:
                worker = asyncio.current_task()
                if worker is not None and worker.cancelling():
                    # The worker itself is being cancelled (even when the job had just
                    # finished: checking only the job's task swallowed that cancellation and
                    # left the worker waiting forever).
                    task.cancel()
                    raise
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
                self.active.remove(job)

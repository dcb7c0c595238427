"""The worker threads, one bounded pool per concern (imports, renders, document loads, updates
read off the socket), in place of the loop's one default executor. Knows no rooms or requests.

Why: ``asyncio.to_thread`` shares the loop's default executor (6 threads on 2 cores) between
every kind of work, so six slow Markdown imports there made a store read and a document load
wait for them: another user's readonly GET of an unloaded document timed out after 30 s and a
new editor's open got no sync in 20 s (issue 37). Here each concern has threads of its own.

A pool runs ``workers`` jobs at once; the others wait in two lanes: jobs someone is already
waiting on at the socket (an editor's open, a peer's update, a webhook), and the later jobs of
a REST request under way, go first; REST requests' first jobs after. REST work is admitted
through a ``Reservation`` held for the whole request: past ``workers + queue`` of them,
``reserve`` raises ``PoolFull`` at once (REST answers 503 with ``Retry-After``), so what a
flood of one kind can queue is bounded, and it never delays another pool. Socket-path work is
never refused: it is bounded by the connections themselves (each awaits its own job before
its next frame).

A job's slot is given back when its thread finishes, not when its awaiter is cancelled, so
``workers`` bounds the threads really busy. Loop side: the lanes and counts are changed only
on the loop the pool first ran on (``current()`` keeps one set of pools per loop).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import math
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from .thread_names import name_os_thread

if TYPE_CHECKING:
    from ..config import Settings

T = TypeVar("T")

# Retry-After never says less than this or more than this many seconds.
_MIN_RETRY_S = 1
_MAX_RETRY_S = 60


class PoolFull(Exception):
    """REST work refused: ``pool`` already has as much as its queue bound allows."""

    def __init__(self, pool: str, retry_after: int) -> None:
        super().__init__(f"the server is busy with other {pool}; try again in {retry_after} s")
        self.pool = pool
        self.retry_after = retry_after


class Reservation:
    """One REST request's place in a pool, held until ``release`` (or the ``with`` ends)."""

    __slots__ = ("_pool", "since")

    def __init__(self, pool: Pool) -> None:
        self._pool: Pool | None = pool
        self.since = time.monotonic()

    def release(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool._released(self)

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class Pool:
    """``workers`` threads for one concern, and the jobs waiting for them."""

    def __init__(self, name: str, workers: int, queue: int) -> None:
        self.name = name
        self.workers = workers
        self.queue = queue
        self.running = 0
        self.refused = 0
        self.completed = 0
        self._first: deque[asyncio.Future[None]] = deque()  # socket-path jobs
        self._after: deque[asyncio.Future[None]] = deque()  # REST jobs
        self._places: set[Reservation] = set()  # REST requests in the pool, at most a bound
        self._request_s = 1.0  # recent REST requests' time in the pool, for Retry-After
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None

    @property
    def waiting(self) -> int:
        return len(self._first) + len(self._after)

    @property
    def reserved(self) -> int:
        """REST requests holding a place."""
        return len(self._places)

    def reserve(self) -> Reservation:
        """A place for one REST request's work, or ``PoolFull`` when ``workers + queue`` are
        taken (counted in ``refused``)."""
        if len(self._places) >= self.workers + self.queue:
            self.refused += 1
            raise PoolFull(self.name, self.retry_after())
        place = Reservation(self)
        self._places.add(place)
        return place

    def retry_after(self) -> int:
        """Seconds until a place is likely free: the requests ahead, at the time recent ones
        took (or the oldest has taken so far, if longer), over the threads."""
        now = time.monotonic()
        each = max([self._request_s, *(now - place.since for place in self._places)])
        estimate = math.ceil(each * (len(self._places) + 1) / self.workers)
        return min(_MAX_RETRY_S, max(_MIN_RETRY_S, estimate))

    def _released(self, place: Reservation) -> None:
        self._places.discard(place)
        self._request_s = 0.8 * self._request_s + 0.2 * (time.monotonic() - place.since)

    async def run(self, fn: Callable[..., T], *args: Any, first: bool = True) -> T:
        """``fn(*args)`` in one of this pool's threads; ``first``: ahead of REST requests
        not started yet (an editor or a peer waits on it at the socket, or it finishes a
        request under way)."""
        await self._slot(first)
        loop = asyncio.get_running_loop()
        try:
            job = self._threads().submit(fn, *args)
        except BaseException:
            self._finished()
            raise
        job.add_done_callback(lambda _: _call_soon(loop, self._finished))
        return await asyncio.wrap_future(job)

    def close(self) -> None:
        """Stop taking jobs; threads end once their job does (a job never blocks a stop)."""
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)

    async def _slot(self, first: bool) -> None:
        if self.running < self.workers and not self._first and not self._after:
            self.running += 1
            return
        waiter = asyncio.get_running_loop().create_future()
        lane = self._first if first else self._after
        lane.append(waiter)
        try:
            await waiter  # resolved by _next, which counted it as running
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():  # given a slot as it was cancelled
                self.running -= 1
                self._next()
            else:
                with contextlib.suppress(ValueError):
                    lane.remove(waiter)
            raise

    def _finished(self) -> None:
        self.running -= 1
        self.completed += 1
        self._next()

    def _next(self) -> None:
        while self.running < self.workers and (self._first or self._after):
            waiter = (self._first or self._after).popleft()
            if not waiter.done():
                self.running += 1
                waiter.set_result(None)

    def _threads(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._executor is None:
            label = f"tether-{self.name}"[:15]
            self._executor = concurrent.futures.ThreadPoolExecutor(
                self.workers,
                thread_name_prefix=label,
                initializer=name_os_thread,
                initargs=(label,),
            )
        return self._executor


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[..., None], *args: Any) -> None:
    with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits any more
        loop.call_soon_threadsafe(callback, *args)


@dataclass(frozen=True, slots=True)
class PoolSizes:
    """Threads and queue bound per pool (``--imports-threads`` and the others)."""

    imports_threads: int = 1
    imports_queue: int = 4
    renders_threads: int = 1
    renders_queue: int = 16
    loads_threads: int = 2
    loads_queue: int = 32
    updates_threads: int = 2

    @classmethod
    def from_settings(cls, settings: Settings) -> PoolSizes:
        return cls(
            imports_threads=settings.imports_threads,
            imports_queue=settings.imports_queue,
            renders_threads=settings.renders_threads,
            renders_queue=settings.renders_queue,
            loads_threads=settings.loads_threads,
            loads_queue=settings.loads_queue,
            updates_threads=settings.updates_threads,
        )


class Pools:
    """The server's pools: ``imports`` (Markdown and tree builds, imported updates read and
    sliced, restores), ``renders`` (a document's text, Markdown, HTML for REST, versions and
    webhooks), ``loads`` (a stored document built for its room), ``updates`` (a peer's big
    update read and cut, initial syncs cut into pieces)."""

    def __init__(self, sizes: PoolSizes | None = None) -> None:
        s = sizes or PoolSizes()
        self.imports = Pool("imports", s.imports_threads, s.imports_queue)
        self.renders = Pool("renders", s.renders_threads, s.renders_queue)
        self.loads = Pool("loads", s.loads_threads, s.loads_queue)
        # Socket-path work only, never refused: its queue bound is the connections'.
        self.updates = Pool("updates", s.updates_threads, 0)

    def __iter__(self) -> Iterator[Pool]:
        return iter((self.imports, self.renders, self.loads, self.updates))

    def close(self) -> None:
        for pool in self:
            pool.close()


_current: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Pools] = weakref.WeakKeyDictionary()


def current() -> Pools:
    """The running loop's pools: the server's (``installed``), else default-sized ones made
    on first use (a room manager or store used as a library)."""
    loop = asyncio.get_running_loop()
    pools = _current.get(loop)
    if pools is None:
        pools = _current[loop] = Pools()
    return pools


@contextlib.contextmanager
def installed(pools: Pools) -> Iterator[Pools]:
    """``pools`` are the running loop's until the block ends; then they are closed."""
    loop = asyncio.get_running_loop()
    before = _current.get(loop)
    _current[loop] = pools
    try:
        yield pools
    finally:
        if _current.get(loop) is pools:
            if before is None:
                del _current[loop]
            else:
                _current[loop] = before
        pools.close()

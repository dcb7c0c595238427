"""The writer queue both stores share; knows no database, no Yjs and no servers.

Writes are queued on the event loop, in call order, each numbered and holding a future. ONE
writer takes them in batches: it blocks for the first, then takes whatever else is queued, up
to ``max_batch``; its store runs the batch in one transaction and settles the futures only
after the commit, so an awaited write is durable and writes arriving during a commit share the
next one. SQLite's writer is a thread taking from a ``queue.SimpleQueue`` (it may first sleep
through its commit window); PostgreSQL's is a task taking from an ``asyncio.Queue`` (it retries
a batch while the database is away). ``None`` on the queue stops the writer.

What waits is counted in bytes, and with a ``bound`` a write that would pass it is refused at
once (the first of a backlog logged, each one counted under the limit's name). A failed append
fences its document (``Fences``): every append or compaction of it called after the failure
fails too, until the store's ``resume``. Each store keeps its transaction, its retries and
the words of its errors.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, NoReturn, Protocol, TypeVar

from .store import StorageError

T = TypeVar("T")

# What a fence holds back: a later append would build on the lost update, and a compaction
# would fold the log without it. A delete (and what the store does not queue) goes through.
FENCED_KINDS = frozenset({"append", "compact"})


@dataclass(eq=False, slots=True)
class Op:
    """One queued write; each store adds what its kinds of write carry."""

    kind: str
    name: str
    data: bytes
    future: asyncio.Future[Any]
    order: int = 0  # its call number, counted per store (see Fences)


OpT = TypeVar("OpT", bound=Op)


class Items(Protocol[T]):
    """The queue the writer takes from: ``queue.SimpleQueue`` or ``asyncio.Queue``."""

    def put_nowait(self, item: T, /) -> None: ...

    def get_nowait(self) -> T: ...


class WriterQueue(Generic[OpT]):
    """What the event loop hands the one writer, and what waits for it. ``items`` is the
    engine's queue, ``empty`` what its ``get_nowait`` raises when there is nothing."""

    def __init__(
        self,
        items: Items[OpT | None],
        empty: type[Exception],
        *,
        max_batch: int,
        bound: int | None = None,
        limit: str = "",
        engine: str = "the store",
        on_refusal: Callable[[str], None] | None = None,
        log: logging.Logger | None = None,
    ) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self.items = items
        self._empty = empty
        self.max_batch = max_batch
        self.calls = 0  # writes called so far, queued or not
        self.queued_bytes = 0  # of the writes queued and not yet settled
        self._bound = bound  # None: no bound
        self._limit = limit  # the bound's name, for on_refusal
        self._engine = engine  # "PostgreSQL": what the log says writes wait for
        self._on_refusal = on_refusal
        self._log = log or logging.getLogger(__name__)
        self._refusal_logged = False

    # -- the event loop's side -----------------------------------------------------------------

    def number(self) -> int:
        """The next call number (Fences compare them)."""
        self.calls += 1
        return self.calls

    def refusal(self, kind: str, name: str, size: int) -> StorageError | None:
        """The error for a write of ``size`` bytes that would pass the bound while others wait;
        None if it may queue."""
        if self._bound is None or not self.queued_bytes:
            return None
        if self.queued_bytes + size <= self._bound:
            return None
        if self._on_refusal is not None:
            self._on_refusal(self._limit)
        if not self._refusal_logged:  # once per backlog, not per write
            self._refusal_logged = True
            self._log.error(
                "%d bytes wait for %s: refusing new writes", self.queued_bytes, self._engine
            )
        return StorageError(
            f"cannot {kind} {name!r}: {self.queued_bytes} bytes wait for the database"
        )

    def put(self, op: OpT) -> None:
        """Queue ``op`` for the writer."""
        self.queued_bytes += len(op.data)
        self.items.put_nowait(op)

    def stop(self) -> None:
        """The writer stops once it has taken what is queued before this."""
        self.items.put_nowait(None)

    def settled(self, op: OpT) -> None:
        """``op`` no longer waits (its batch ran, or failed)."""
        self.queued_bytes -= len(op.data)
        if not self.queued_bytes:
            self._refusal_logged = False

    def settle(self, ops: list[OpT], outcomes: list[object]) -> None:
        """A batch's outcomes to its futures (an exception fails it)."""
        self.queued_bytes -= sum(len(op.data) for op in ops)
        if not self.queued_bytes:
            self._refusal_logged = False
        resolve(ops, outcomes)

    # -- the writer's side ---------------------------------------------------------------------

    def rest(self, ops: list[OpT]) -> tuple[list[OpT], bool]:
        """``ops`` (the first, taken blocking) and whatever else is queued now, up to
        ``max_batch``; and whether the stop marker was taken."""
        while len(ops) < self.max_batch:
            try:
                item = self.items.get_nowait()  # the writer is the only consumer
            except self._empty:
                return ops, False
            if item is None:
                return ops, True
            ops.append(item)
        return ops, False


class Fences:
    """Documents whose append failed, each with that append's call number: an append or
    compaction of such a document called after it fails, until ``lift``. Editors had the lost
    update fanned out and may build on it; stored without it, what they build could never be
    integrated by anyone loading the document."""

    __slots__ = ("_failed",)

    def __init__(self) -> None:
        self._failed: dict[str, int] = {}

    def __bool__(self) -> bool:
        return bool(self._failed)

    def __contains__(self, name: str) -> bool:
        return name in self._failed

    def fence(self, name: str, order: int) -> None:
        """The write numbered ``order`` failed (the first failure counts)."""
        self._failed.setdefault(name, order)

    def failed(self, op: Op) -> None:
        """``op`` failed to store: an append fences its document."""
        if op.kind == "append":
            self._failed.setdefault(op.name, op.order)

    def holds(self, op: Op) -> bool:
        failed = self._failed.get(op.name)
        return failed is not None and op.order > failed and op.kind in FENCED_KINDS

    def lift(self, name: str) -> None:
        self._failed.pop(name, None)


def resolve(ops: list[OpT], outcomes: list[object]) -> None:
    for op, outcome in zip(ops, outcomes, strict=True):
        if op.future.done():
            continue  # its awaiter was cancelled; the write itself still happened
        if isinstance(outcome, BaseException):
            op.future.set_exception(outcome)
        else:
            op.future.set_result(outcome)


def not_open(kind: str, name: str, state: str) -> StorageError:
    return StorageError(f"cannot {kind} {name!r}: the store is {state}")


async def wait(future: asyncio.Future[T]) -> T:
    """``future`` as a coroutine (what ``Store``'s write methods return)."""
    return await future


async def failed(exc: BaseException) -> NoReturn:
    raise exc

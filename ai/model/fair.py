"""Model time served in turn: where requests wait for a model (the worker's one model thread,
each upstream's connections), the next to run is chosen by whose it is, not by when it came.

A request is charged to a *share*: the token subject that asked (or its connection, where there
is no identity), set by the scheduler around every job it runs (``SHARE``), and to its
document. Waiting requests are served subjects in turn, and within a subject its documents in
turn, oldest first: one subject with a backlog on a huge paragraph costs any other subject at
most the request running now (a bounded prompt: ``ai.text.context``), never its whole backlog.
Interactive requests go before background ones (prefetch, context renewals).

Pure bookkeeping on the event loop: no I/O, no clock; knows nothing of documents beyond the
name a request's session starts with.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import itertools
from collections.abc import AsyncIterator, Hashable, Iterator
from typing import Generic, TypeVar

from .providers.base import GenerationRequest

T = TypeVar("T")

# Whose share of the model the running job is (a token subject, or a connection without one);
# the scheduler sets it in each job's context, so every provider call the job makes carries it.
SHARE: contextvars.ContextVar[str] = contextvars.ContextVar("tether_model_share", default="")

INTERACTIVE, BACKGROUND = 0, 1


def document_of(request: GenerationRequest) -> str:
    """The document a request is for: a session is ``document \\0 editor \\0 epoch``
    (``ai.suggest.flights.session_of``); another key is used whole."""
    return request.session.split("\0", 1)[0]


def share_of(request: GenerationRequest) -> tuple[str, str]:
    """(subject, document) a request is charged to; without a share set, the document stands
    for both (documents are then served in turn)."""
    document = document_of(request)
    return SHARE.get() or f"doc:{document}", document


class _Turns:
    """Start-time fair queueing with unit costs over keys (Goyal, Vin and Cheng, 1996): each
    queued entry gets a start tag, its key's previous one plus one, but never below the tag
    served last; the smallest tag is served next (ties: first pushed). So a key that just had a
    turn waits behind one that has not, and a backlog earns a key no extra turns. Keys idle
    at the current tag are forgotten: bounded by the keys with entries queued."""

    def __init__(self) -> None:
        self._tags: dict[Hashable, collections.deque[tuple[int, int]]] = {}
        self._next: dict[Hashable, int] = {}  # a key's next start tag while it stays busy
        self._now = 0
        self._order = itertools.count()

    def __bool__(self) -> bool:
        return bool(self._tags)

    def push(self, key: Hashable) -> None:
        tag = max(self._now, self._next.get(key, 0))
        self._next[key] = tag + 1
        self._tags.setdefault(key, collections.deque()).append((tag, next(self._order)))

    def pop(self) -> Hashable:
        key = min(self._tags, key=lambda k: self._tags[k][0])
        tags = self._tags[key]
        self._now = tags.popleft()[0]
        if not tags:
            del self._tags[key]
        for idle in [
            k for k, tag in self._next.items() if tag <= self._now and k not in self._tags
        ]:
            del self._next[idle]
        return key

    def unpush(self, key: Hashable) -> None:
        """One of ``key``'s entries left the queue unserved: its last tag goes."""
        tags = self._tags[key]
        tags.pop()
        self._next[key] -= 1
        if not tags:
            del self._tags[key]


class FairQueue(Generic[T]):
    """Items queued per subject and document; ``pop`` serves subjects in turn and, within the
    subject whose turn it is, its documents in turn (``_Turns`` at both levels), oldest item
    of a document first."""

    def __init__(self) -> None:
        self._subjects = _Turns()
        self._documents: dict[Hashable, _Turns] = {}
        self._items: dict[tuple[Hashable, Hashable], collections.deque[T]] = {}
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def push(self, subject: Hashable, document: Hashable, item: T) -> None:
        self._subjects.push(subject)
        self._documents.setdefault(subject, _Turns()).push(document)
        self._items.setdefault((subject, document), collections.deque()).append(item)
        self._count += 1

    def __iter__(self) -> Iterator[T]:
        """Every queued item, in no particular order."""
        for items in self._items.values():
            yield from items

    def pop(self) -> T:
        """The next item in turn; IndexError when empty."""
        if not self._count:
            raise IndexError("pop from an empty FairQueue")
        subject = self._subjects.pop()
        documents = self._documents[subject]
        document = documents.pop()
        items = self._items[subject, document]
        item = items.popleft()
        self._count -= 1
        self._tidy(subject, document)
        return item

    def discard(self, subject: Hashable, document: Hashable, item: T) -> bool:
        """Take ``item`` out (a waiter that gave up); False if it was not queued."""
        items = self._items.get((subject, document))
        if items is None:
            return False
        try:
            items.remove(item)
        except ValueError:
            return False
        self._count -= 1
        self._subjects.unpush(subject)
        self._documents[subject].unpush(document)
        self._tidy(subject, document)
        return True

    def _tidy(self, subject: Hashable, document: Hashable) -> None:
        if not self._items[subject, document]:
            del self._items[subject, document]
        if not self._documents[subject]:
            del self._documents[subject]  # an idle subject's documents start afresh


class FairGate:
    """At most ``capacity`` requests hold the model at once; the others wait, admitted in turn
    (interactive first, then by ``FairQueue``). ``async with gate.turn(subject, document):``."""

    def __init__(self, capacity: int = 1) -> None:
        if capacity < 1:
            raise ValueError("a gate needs a capacity of at least 1")
        self.capacity = capacity
        self.holding = 0
        self._waiting: tuple[FairQueue[asyncio.Future[None]], ...] = (FairQueue(), FairQueue())

    @property
    def waiting(self) -> int:
        return sum(len(queue) for queue in self._waiting)

    @contextlib.asynccontextmanager
    async def turn(
        self, subject: Hashable, document: Hashable, *, background: bool = False
    ) -> AsyncIterator[None]:
        # Through the queue even when the gate is free: the turn taken counts for the subject.
        queue = self._waiting[BACKGROUND if background else INTERACTIVE]
        admitted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue.push(subject, document, admitted)
        self._admit()
        try:
            await admitted
        except BaseException:
            if not queue.discard(subject, document, admitted) and admitted.done():
                # Admitted just as it gave up: hand the turn on.
                if not admitted.cancelled():
                    self._release()
            raise
        try:
            yield
        finally:
            self._release()

    def _release(self) -> None:
        self.holding -= 1
        self._admit()

    def _admit(self) -> None:
        while self.holding < self.capacity:
            queue = next((q for q in self._waiting if len(q)), None)
            if queue is None:
                return
            admitted = queue.pop()
            if not admitted.done():
                admitted.set_result(None)
                self.holding += 1

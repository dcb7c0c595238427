"""Storage owns each document's durable bytes (a snapshot plus an update log); it must not know Yjs.

It knows nothing of sockets, rooms or servers either: a document is a name and opaque byte
strings. ``Store`` is the interface, ``MemoryStore`` the fake for unit tests, and
``collab.storage.sqlite.SQLiteStore`` the durable backend.

Ordering contract: the writes (``append``, ``compact``, ``delete``) take their place in the
store's single FIFO when they are *called*, not when they are awaited. They are plain methods
that enqueue at once and return a coroutine yielding the result, so ``await store.append(...)``,
``asyncio.create_task(store.append(...))`` and ``gather`` all work, and a caller that applies an
update and calls ``append`` in the same event-loop step knows exactly which appends a later
``compact`` folds away. Cancelling the await does not withdraw a write that was already called.

Several nodes sharing one database: a store that numbers its updates for them says so by
returning its ``SequencedStore`` face from ``sequenced()`` (``collab.storage.sequenced``); the
others return None. ``backend`` is the name ``/health`` gives the store.

Versions (named snapshots, ``add_version``/``list_versions``/``load_version``): a document's
state saved under a label and a time, kept until the document is deleted (``delete`` forgets
them too; ``delete_version`` forgets one). They are optional for a backend: the base class
refuses them with StorageError, so a store written before them still works (the REST version
endpoints answer 501 on it). A backend that keeps them implements the methods; ``add_version``
and ``delete_version`` are writes, ordered by call like the others.
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, NoReturn, Self, TypeVar

if TYPE_CHECKING:
    from .sequenced import SequencedStore

T = TypeVar("T")

Lifecycle = Literal["new", "open", "closed"]


class StorageError(Exception):
    """A storage operation failed, or the store is not open; the backend error is the cause."""


@dataclass(frozen=True)
class DocumentInfo:
    """What the store knows about one document, without its contents."""

    name: str
    created_at: float  # unix seconds
    updated_at: float
    log_entries: int  # updates stored since the last snapshot
    stored_bytes: int  # snapshot + log bytes


@dataclass(frozen=True)
class VersionInfo:
    """One saved version of a document, without its bytes."""

    id: int  # unique within the store, increasing
    name: str  # the document
    label: str
    created_at: float  # unix seconds
    size: int  # bytes of the saved state


class Store(ABC):
    """A document store with one lifecycle: ``async with store:``.

    Writes are ordered by call (see the module docstring); reads see every write whose
    await has returned.
    """

    backend: ClassVar[str] = "memory"  # what /health calls it: a host's own store too, as before

    @abstractmethod
    async def __aenter__(self) -> Self:
        """Open the store; a store can be opened only once."""

    @abstractmethod
    async def __aexit__(self, *exc: object) -> None:
        """Flush every write already called, then close; later calls raise StorageError."""

    @abstractmethod
    async def load(self, name: str) -> list[bytes]:
        """Snapshot first (if any), then log updates in append order. [] for an unknown doc."""

    @abstractmethod
    def append(self, name: str, update: bytes) -> Coroutine[Any, Any, int]:
        """Enqueue `update` now; the awaited result arrives once it is durable.

        The result is the doc's log_entries count after this append (so the caller can
        decide to compact).
        """

    def append_future(self, name: str, update: bytes) -> asyncio.Future[int]:
        """Like ``append`` (ordered at call time) but as a future, for callers on the hot path
        that want a done-callback instead of a task per update."""
        return asyncio.ensure_future(self.append(name, update))

    def resume(self, name: str) -> None:  # noqa: B027 - optional: the memory store fences nothing
        """The caller rebuilt ``name`` from storage after one of its appends failed: writes to
        it may be accepted again (a store that fences a document after a failed append, so no
        later update that may build on the lost one commits, lifts that here)."""

    @abstractmethod
    def compact(self, name: str, snapshot: bytes) -> Coroutine[Any, Any, None]:
        """Atomically store `snapshot` and drop every log entry appended before this call.

        Entries whose append() is called after this call are kept.
        """

    @abstractmethod
    def delete(self, name: str) -> Coroutine[Any, Any, None]:
        """Forget the document: its snapshot, its log and its info."""

    @abstractmethod
    async def list_documents(
        self, *, prefix: str = "", after: str = "", limit: int | None = None
    ) -> list[DocumentInfo]:
        """Stored documents by name: those starting with ``prefix`` and sorting after
        ``after``, at most ``limit`` of them (None: all). A page's cost is bounded by
        ``limit``, whatever the store holds."""

    @abstractmethod
    async def info(self, name: str) -> DocumentInfo | None:
        """The document's info, or None if it is not stored."""

    def sequenced(self) -> SequencedStore | None:
        """What the store offers several nodes sharing it, or None (a store of one node)."""
        return None

    # -- versions: optional (see the module docstring) ------------------------------------------

    def add_version(
        self, name: str, label: str, state: bytes, subject: str = ""
    ) -> Coroutine[Any, Any, VersionInfo]:
        """Enqueue saving ``state`` (a full Yjs update) as a version of ``name`` now, made by
        token subject ``subject`` (what its version quota counts)."""
        return _failed(StorageError(f"{type(self).__name__} keeps no versions"))

    async def version_bytes(self, subject: str | None = None) -> int:
        """The bytes of the versions ``subject`` made (None: of every version)."""
        raise StorageError(f"{type(self).__name__} keeps no versions")

    async def list_versions(self, name: str) -> list[VersionInfo]:
        """The document's versions, oldest first ([] for none)."""
        raise StorageError(f"{type(self).__name__} keeps no versions")

    async def load_version(self, name: str, version: int) -> bytes | None:
        """The saved state of one version of ``name``, or None if it has no such version."""
        raise StorageError(f"{type(self).__name__} keeps no versions")

    def delete_version(self, name: str, version: int) -> Coroutine[Any, Any, bool]:
        """Enqueue forgetting one version of ``name`` (its bytes leave its maker's quota);
        yields whether there was such a version."""
        return _failed(StorageError(f"{type(self).__name__} keeps no versions"))


async def _resolved(value: T) -> T:
    return value


async def _failed(exc: BaseException) -> NoReturn:
    raise exc


def _run_now(action: Callable[[], T]) -> Coroutine[Any, Any, T]:
    # The work happens at call time (that is the ordering contract); only its outcome waits
    # for the await, so errors surface where the caller awaits, as with the real backend.
    try:
        return _resolved(action())
    except StorageError as exc:
        return _failed(exc)


@dataclass
class _MemoryDoc:
    created_at: float
    updated_at: float
    snapshot: bytes | None = None
    log: list[bytes] = field(default_factory=list)

    def info(self, name: str) -> DocumentInfo:
        stored = len(self.snapshot or b"") + sum(len(update) for update in self.log)
        return DocumentInfo(name, self.created_at, self.updated_at, len(self.log), stored)


class MemoryStore(Store):
    """The in-memory fake: the same semantics as SQLiteStore, no durability."""

    def __init__(self) -> None:
        self._docs: dict[str, _MemoryDoc] = {}
        self._versions: dict[int, tuple[VersionInfo, bytes]] = {}
        self._version_subjects: dict[int, str] = {}
        self._last_version = 0
        self._state: Lifecycle = "new"

    async def __aenter__(self) -> Self:
        if self._state != "new":
            raise StorageError("a store can be opened only once")
        self._state = "open"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._state = "closed"

    async def load(self, name: str) -> list[bytes]:
        self._check_open()
        doc = self._docs.get(name)
        if doc is None:
            return []
        head = [] if doc.snapshot is None else [doc.snapshot]
        return head + doc.log

    def append(self, name: str, update: bytes) -> Coroutine[Any, Any, int]:
        data = bytes(update)
        return _run_now(lambda: self._append(name, data))

    def compact(self, name: str, snapshot: bytes) -> Coroutine[Any, Any, None]:
        data = bytes(snapshot)
        return _run_now(lambda: self._compact(name, data))

    def delete(self, name: str) -> Coroutine[Any, Any, None]:
        return _run_now(lambda: self._delete(name))

    async def list_documents(
        self, *, prefix: str = "", after: str = "", limit: int | None = None
    ) -> list[DocumentInfo]:
        self._check_open()
        names = [n for n in sorted(self._docs) if n.startswith(prefix) and n > after]
        return [self._docs[name].info(name) for name in names[:limit]]

    async def info(self, name: str) -> DocumentInfo | None:
        self._check_open()
        doc = self._docs.get(name)
        return None if doc is None else doc.info(name)

    def add_version(
        self, name: str, label: str, state: bytes, subject: str = ""
    ) -> Coroutine[Any, Any, VersionInfo]:
        data = bytes(state)
        return _run_now(lambda: self._add_version(name, label, data, subject))

    async def version_bytes(self, subject: str | None = None) -> int:
        self._check_open()
        return sum(
            info.size
            for version, (info, _) in self._versions.items()
            if subject is None or self._version_subjects.get(version) == subject
        )

    async def list_versions(self, name: str) -> list[VersionInfo]:
        self._check_open()
        return [info for info, _ in self._versions.values() if info.name == name]

    async def load_version(self, name: str, version: int) -> bytes | None:
        self._check_open()
        found = self._versions.get(version)
        return found[1] if found is not None and found[0].name == name else None

    def delete_version(self, name: str, version: int) -> Coroutine[Any, Any, bool]:
        return _run_now(lambda: self._delete_version(name, version))

    def _delete_version(self, name: str, version: int) -> bool:
        self._check_open()
        found = self._versions.get(version)
        if found is None or found[0].name != name:
            return False
        del self._versions[version]
        self._version_subjects.pop(version, None)
        return True

    def _add_version(self, name: str, label: str, data: bytes, subject: str) -> VersionInfo:
        self._check_open()
        self._last_version += 1
        info = VersionInfo(self._last_version, name, label, time.time(), len(data))
        self._versions[info.id] = (info, data)
        self._version_subjects[info.id] = subject
        return info

    def _append(self, name: str, data: bytes) -> int:
        doc = self._touch(name)
        doc.log.append(data)
        return len(doc.log)

    def _compact(self, name: str, snapshot: bytes) -> None:
        doc = self._touch(name)
        doc.snapshot = snapshot
        doc.log.clear()

    def _delete(self, name: str) -> None:
        self._check_open()
        self._docs.pop(name, None)
        for version in [v for v, (info, _) in self._versions.items() if info.name == name]:
            del self._versions[version]
            self._version_subjects.pop(version, None)

    def _touch(self, name: str) -> _MemoryDoc:
        self._check_open()
        now = time.time()
        doc = self._docs.setdefault(name, _MemoryDoc(created_at=now, updated_at=now))
        doc.updated_at = now
        return doc

    def _check_open(self) -> None:
        if self._state != "open":
            raise StorageError(f"the store is {self._state}, not open")


def names_from(prefix: str) -> tuple[str, str | None]:
    """The name range ``[low, high)`` that holds exactly the names starting with ``prefix``
    (``high`` None: no upper bound), for an index range scan in SQL."""
    if not prefix:
        return "", None
    last = prefix[-1]
    if ord(last) >= 0x10FFFF:
        return prefix, None  # no character above it: bounded by the prefix test instead
    return prefix, prefix[:-1] + chr(ord(last) + 1)

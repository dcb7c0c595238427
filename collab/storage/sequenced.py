"""A store several nodes share: what it offers beyond ``Store``, and what it needs of the node.

Declared here, in storage, so that the cluster depends on storage and never the other way:

- ``SequencedStore``: the face such a store shows the cluster (``Store.sequenced()`` returns it,
  or None for a store of one node): backfill and heads from the database, its health, and ONE
  listener, ``StoreEvents``, told of commits, deletes and stale writes.
- ``Holdings``: what the store's write path needs to know of the node's documents (their
  watermarks, the incarnation held) and records there. The node's ledger
  (``collab.cluster.ledger``) implements it and is handed to the store at construction.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

Committed = tuple[str, int, bytes]  # (document, seq, update)


@dataclass(frozen=True, slots=True)
class Backfill:
    """What a document holding everything up to ``after`` lacks: a snapshot if the log it
    needs was folded away (covering ``snapshot_seq``), then the log entries after that."""

    snapshot: bytes | None
    snapshot_seq: int
    updates: list[tuple[int, bytes]] = field(default_factory=list)
    epoch: int = 0  # the incarnation read (0: the document does not exist)


class Watermark(Protocol):
    """Every update numbered up to ``mark`` is held (and perhaps some above it)."""

    mark: int

    def add(self, seq: int) -> None: ...

    def copy(self) -> Watermark: ...


class Holdings(Protocol):
    """What this node holds of each document, as the store's write path reads and records it:
    compaction folds only ``seq <= watermark``; appends land only in the incarnation held
    (> 0), or, when none is (<= 0), in any above minus that value."""

    def watermark(self, name: str) -> Watermark: ...

    def epoch(self, name: str) -> int: ...

    def loaded(self, name: str, epoch: int, snapshot_seq: int, seqs: Iterable[int]) -> None:
        """Read from the database: incarnation ``epoch`` (or minus its tombstone's), a snapshot
        covering ``snapshot_seq``, then the log entries ``seqs``."""

    def committed(self, name: str, seq: int) -> None: ...

    def landed(self, name: str, epoch: int) -> None:
        """An append committed in incarnation ``epoch``."""

    def deleted(self, name: str, epoch: int) -> None:
        """A delete committed, ending incarnation ``epoch`` (0: there was none)."""


class StoreEvents(Protocol):
    """What a sequenced store tells its listener, on the event loop."""

    def committed(self, items: list[Committed]) -> None:
        """The appends of one committed transaction, in seq order per document, before their
        futures resolve (the ledger already holds them)."""

    def deleted(self, name: str, epoch: int) -> None:
        """A delete of ours committed, ending incarnation ``epoch``."""

    def stale(self, name: str) -> None:
        """A write of ours found its incarnation gone: another node deleted the document."""


class SequencedStore(Protocol):
    """A store whose updates carry per-document sequence numbers, shared by several nodes."""

    last_error: str  # the last database error, redacted ("" if none yet)

    @property
    def queued_bytes(self) -> int: ...

    def listen(self, events: StoreEvents | None) -> None:
        """Tell ``events`` from now on (None: nobody)."""

    async def backfill(self, name: str, after: int) -> Backfill: ...

    async def generations(self, names: list[str]) -> dict[str, tuple[int, int]]:
        """Each named document's (epoch, last seq); documents that do not exist are absent."""

    async def ping(self) -> bool: ...

"""What this node holds of each document it has loaded: a sequence watermark and an incarnation.

Pure bookkeeping, no I/O and no collab imports. One ``Ledger`` per node, made by
``collab.cluster.node.build_store`` and shared: the PostgreSQL store's write path records in
it what it loaded, committed, deleted and adopted (through the ``Holdings`` protocol that
``collab.storage.sequenced`` declares, so storage never imports the cluster), and the cluster
reads it to detect gaps, tag what it publishes and decide which incarnation an update belongs
to (``collab.cluster.node``).

Epochs: each incarnation of a document has one (``collab.storage.postgres``). The ledger holds,
per document, the incarnation held here (> 0) or, when none is held yet, minus the last one
known deleted (<= 0): anything above it is a new incarnation this node may adopt.
"""

from __future__ import annotations

from collections.abc import Iterable


class SeqWatermark:
    """The highest seq W such that a document holds every update numbered <= W, plus the
    numbers above W it holds already (they arrive out of order: own commits and the bus)."""

    __slots__ = ("ahead", "mark")

    def __init__(self, mark: int = 0) -> None:
        self.mark = mark
        self.ahead: set[int] = set()

    def add(self, seq: int) -> None:
        if seq <= self.mark:
            return
        self.ahead.add(seq)
        while self.mark + 1 in self.ahead:
            self.mark += 1
            self.ahead.discard(self.mark)

    def raise_to(self, seq: int) -> None:
        """Everything up to ``seq`` is held (a snapshot covering it was applied)."""
        if seq > self.mark:
            self.mark = seq
            self.ahead = {s for s in self.ahead if s > seq}
            while self.mark + 1 in self.ahead:  # a contiguous run above it
                self.mark += 1
                self.ahead.discard(self.mark)

    def holds(self, seq: int) -> bool:
        return seq <= self.mark or seq in self.ahead

    def copy(self) -> SeqWatermark:
        copied = SeqWatermark(self.mark)
        copied.ahead = set(self.ahead)
        return copied


class Ledger:
    """Per loaded document: its watermark and the incarnation held (see the module docstring)."""

    __slots__ = ("_epochs", "_marks")

    def __init__(self) -> None:
        self._marks: dict[str, SeqWatermark] = {}
        self._epochs: dict[str, int] = {}

    def watermark(self, name: str) -> SeqWatermark:
        mark = self._marks.get(name)
        if mark is None:
            mark = self._marks[name] = SeqWatermark()
        return mark

    def epoch(self, name: str) -> int:
        """The incarnation held here (> 0), or minus the last deleted one (none adopted yet)."""
        return self._epochs.get(name, 0)

    # -- what the store's write path records -------------------------------------------------

    def loaded(self, name: str, epoch: int, snapshot_seq: int, seqs: Iterable[int]) -> None:
        """The store read the document (of incarnation ``epoch``, or minus its tombstone's):
        exactly what was read is held. A reload replaces the document: what the old one had
        beyond this is backfilled, not assumed."""
        self._epochs[name] = epoch
        mark = self._marks[name] = SeqWatermark()
        mark.raise_to(snapshot_seq)
        for seq in seqs:
            mark.add(seq)

    def committed(self, name: str, seq: int) -> None:
        self.watermark(name).add(seq)

    def landed(self, name: str, epoch: int) -> None:
        """An append of ours committed in incarnation ``epoch``: adopted if none was held."""
        if self._epochs.get(name, 0) <= 0:
            self._epochs[name] = epoch

    def deleted(self, name: str, epoch: int) -> None:
        """Our delete ended incarnation ``epoch`` (0: there was none): its numbers start again
        at 1, and what comes next is a new incarnation."""
        self._marks.pop(name, None)
        self._epochs[name] = -epoch

    # -- what the cluster decides ------------------------------------------------------------

    def accepts(self, name: str, epoch: int) -> bool:
        """An update of incarnation ``epoch`` belongs in the document held here; a new
        incarnation above a tombstone is adopted."""
        held = self._epochs.get(name, 0)
        if held > 0:
            return epoch == held
        if epoch > -held:
            self._epochs[name] = epoch
            return True
        return False

    def lift_floor(self, name: str, ended: int) -> None:
        """Incarnation ``ended`` was deleted before this node adopted it: only newer ones."""
        held = self._epochs.get(name, 0)
        if held <= 0 and ended > -held:
            self._epochs[name] = -ended

    def forget(self, name: str) -> None:
        """The document is no longer loaded here (after its unload compaction)."""
        self._marks.pop(name, None)
        self._epochs.pop(name, None)

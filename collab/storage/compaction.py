"""When a document's update log is folded into a snapshot; knows sizes only, no Yjs or storage.

Folding costs the whole document (encode it on the event loop, write it, fsync); replaying
the log costs every entry at each load. The old rule, fold every ``min_entries`` appends, made a
20 MB document rewrite 20 MB per 500 edits, so cost per edit grew with the document (issue 14).

Here the log is folded once it has ``min_entries`` entries AND weighs at least ``log_ratio``
times the snapshot. Between two folds the log grows by a fixed share of the snapshot, so each
fold is paid for by that much writing: amortised O(1) per byte written and per edit, whatever
the document's size. A small document folds every ``min_entries`` appends, as before.

An entry weighs its bytes plus ``entry_bytes``: replaying one costs a load about the same
(~80 us: a row, a scan, the guard, a transaction) however small it is. So a load replays at
most ~``log_ratio`` snapshots' worth of log, e.g. ~20,000 keystrokes on a 20 MB document,
and typing into that document folds it every ~20,000 edits, not every 500.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ENTRY_BYTES = 1024


@dataclass(slots=True)
class LogSize:
    """A document's log as its room counts it: entries (as the store counts them), bytes since
    the last fold (counted when each append is called), and the snapshot's bytes; and the
    updates in it that yrs holds as pending, which no fold may drop (collab.updates.pending)."""

    entries: int = 0
    bytes: int = 0
    snapshot_bytes: int = 0
    pending: list[bytes] = field(default_factory=list)
    retry_at: int = 0  # entries: a fold held back by a pending update is tried again then


@dataclass(frozen=True, slots=True)
class CompactionPolicy:
    min_entries: int = 500
    log_ratio: float = 1.0
    entry_bytes: int = ENTRY_BYTES

    def __post_init__(self) -> None:
        if self.min_entries < 1 or self.log_ratio < 0 or self.entry_bytes < 0:
            raise ValueError("min_entries must be >= 1, log_ratio and entry_bytes >= 0")

    def due(self, log: LogSize) -> bool:
        """Fold now (checked after each stored append: O(1))."""
        return log.entries >= self.min_entries and self._heavy(log)

    def due_at_unload(self, log: LogSize) -> bool:
        """Fold before unloading: any log that weighs enough, however few its entries. A small
        document is folded as before; a big one with a few edits is not rewritten whole."""
        return log.entries > 0 and self._heavy(log)

    def _heavy(self, log: LogSize) -> bool:
        weight = log.bytes + log.entries * self.entry_bytes
        return weight >= self.log_ratio * log.snapshot_bytes

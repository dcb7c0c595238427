"""Which store a node uses: SQLite in its data dir, or the PostgreSQL that ``--store`` names,
with the node's ledger. Knows no rooms.

The factory lives here, with the cluster, because the shared store and the cluster must hold
the same ``Ledger`` (the store's write path records in it, the cluster reads it): it is made
once here and handed to both, while storage only declares what it needs of it
(``collab.storage.sequenced.Holdings``) and never imports the cluster.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import Settings
from ..runtime.sync_metrics import Metrics
from ..storage.postgres import PostgresStore, pgbouncer_dsn
from ..storage.sqlite import SQLiteStore
from ..storage.store import Store
from .ledger import Ledger


@dataclass(frozen=True, slots=True)
class NodeStore:
    """The store a node uses and, for a store shared with other nodes, the ledger it keeps."""

    store: Store
    ledger: Ledger | None = None


def build_store(settings: Settings, metrics: Metrics, given: Store | None = None) -> NodeStore:
    """The store a host gave (used as it is: one node's), else SQLite in the data dir, or the
    PostgreSQL that ``--store`` names."""
    if given is not None:
        return NodeStore(given)
    if not settings.store:
        return NodeStore(
            SQLiteStore(
                settings.data_dir / "tether.db", commit_window=settings.commit_window_ms / 1000
            )
        )
    dsn, behind_pgbouncer = pgbouncer_dsn(settings.store)
    ledger = Ledger()
    store = PostgresStore(
        dsn,
        ledger=ledger,
        statement_cache_size=0 if behind_pgbouncer else settings.store_statement_cache_size,
        outage_timeout=settings.store_outage_timeout,
        queue_bytes=settings.store_queue_bytes,
        on_refusal=lambda limit: metrics.limit_refusals.labels(limit).inc(),
    )
    return NodeStore(store, ledger)

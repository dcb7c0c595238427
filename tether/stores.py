"""Document stores a host can pass to ``TetherServer(store=...)``, and the interface to write
its own (``Store``: load, append/append_future, compact, delete, list_documents, info)."""

from __future__ import annotations

from tether.collab.storage.sqlite import SQLiteStore
from tether.collab.storage.store import DocumentInfo, MemoryStore, StorageError, Store

__all__ = ["DocumentInfo", "MemoryStore", "SQLiteStore", "StorageError", "Store"]

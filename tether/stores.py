"""Document stores a host can pass to ``TetherServer(store=...)``, and the interface to write
its own (``Store``: load, append/append_future, compact, delete, list_documents, info)."""

from __future__ import annotations

from tether.collab.sqlite_store import SQLiteStore
from tether.collab.storage import DocumentInfo, MemoryStore, StorageError, Store

__all__ = ["DocumentInfo", "MemoryStore", "SQLiteStore", "StorageError", "Store"]

"""Which store a URL names, by its scheme: a small registry. Knows no cluster, rooms or
settings.

- ``""``: SQLite in the data dir (``tether.db``), the single-node default; ``sqlite:///path``:
  SQLite at that path.
- ``postgresql://`` or ``postgres://``: a PostgreSQL several nodes share (a ``?pgbouncer=true``
  DSN turns prepared statements off). It records what this node holds of each document in the
  ``Holdings`` it is handed (``collab.storage.sequenced``): the cluster's ledger, made by
  ``collab.cluster.node.build_store`` and shared with the cluster, since storage never imports
  the cluster.
- ``memory://``: ``MemoryStore``, nothing durable (tests, and benchmarks of what the store
  costs).

Another kind of store plugs in with ``register(scheme, opener)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from .postgres import PostgresStore, pgbouncer_dsn
from .sequenced import Holdings
from .sqlite import SQLiteStore
from .store import MemoryStore, StorageError, Store


@dataclass(frozen=True, slots=True)
class StoreOptions:
    """What opening a store may use besides its URL; each kind takes what it needs."""

    data_dir: Path
    commit_window: float = 0.0  # SQLite: seconds a commit may wait for company
    holdings: Holdings | None = None  # a shared store: what this node holds (its ledger)
    statement_cache_size: int = 100  # PostgreSQL (0 behind a PgBouncer)
    outage_timeout: float = 30.0  # PostgreSQL unreachable: writes wait this long, then fail
    queue_bytes: int = 64 * 1024 * 1024  # ... and at most this many bytes of them wait
    on_refusal: Callable[[str], None] | None = None  # a write refused by a limit (its name)


Opener = Callable[[str, StoreOptions], Store]

_OPENERS: dict[str, Opener] = {}


def register(scheme: str, opener: Opener) -> None:
    """``opener(url, options)`` makes the (unopened) store of URLs with this scheme."""
    _OPENERS[scheme.lower()] = opener


def schemes() -> tuple[str, ...]:
    return tuple(_OPENERS)


def open_store(url: str, options: StoreOptions) -> Store:
    """The store ``url`` names (not yet entered: ``async with`` opens it)."""
    scheme = urlsplit(url).scheme.lower() if url else "sqlite"
    opener = _OPENERS.get(scheme)
    if opener is None:
        known = ", ".join(f"{s}://" for s in _OPENERS)
        raise StorageError(f"no store for {scheme or url!r} URLs (known: {known})")
    return opener(url, options)


def _sqlite(url: str, options: StoreOptions) -> Store:
    path = unquote(urlsplit(url).path) if url else ""
    return SQLiteStore(
        Path(path) if path else options.data_dir / "tether.db",
        commit_window=options.commit_window,
    )


def _postgres(url: str, options: StoreOptions) -> Store:
    if options.holdings is None:
        raise StorageError("a PostgreSQL store needs the node's holdings (its ledger)")
    dsn, behind_pgbouncer = pgbouncer_dsn(url)
    return PostgresStore(
        dsn,
        ledger=options.holdings,
        statement_cache_size=0 if behind_pgbouncer else options.statement_cache_size,
        outage_timeout=options.outage_timeout,
        queue_bytes=options.queue_bytes,
        on_refusal=options.on_refusal,
    )


def _memory(url: str, options: StoreOptions) -> Store:
    return MemoryStore()


register("sqlite", _sqlite)
register("postgresql", _postgres)
register("postgres", _postgres)
register("memory", _memory)

"""Which store a URL names (collab.storage.registry): the scheme picks the kind; an unknown one
is refused naming those known; another kind plugs in by registering its scheme."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.collab.cluster.ledger import Ledger
from tether.collab.storage import registry
from tether.collab.storage.postgres import PostgresStore
from tether.collab.storage.registry import StoreOptions, open_store, register, schemes
from tether.collab.storage.sqlite import SQLiteStore
from tether.collab.storage.store import MemoryStore, StorageError


def test_no_url_is_sqlite_in_the_data_dir_with_the_commit_window(tmp_path: Path) -> None:
    store = open_store("", StoreOptions(tmp_path, commit_window=0.004))
    assert isinstance(store, SQLiteStore)
    assert store.path == tmp_path / "tether.db"
    assert store.window.longest == pytest.approx(0.004)


def test_a_sqlite_url_names_its_file(tmp_path: Path) -> None:
    store = open_store(f"sqlite://{tmp_path}/other.db", StoreOptions(tmp_path))
    assert isinstance(store, SQLiteStore) and store.path == tmp_path / "other.db"


def test_a_postgresql_dsn_is_a_shared_store_recording_in_the_holdings(tmp_path: Path) -> None:
    for url in ("postgresql://u@db/t", "postgres://u@db/t?pgbouncer=true"):
        store = open_store(url, StoreOptions(tmp_path, holdings=Ledger()))
        assert isinstance(store, PostgresStore) and store.sequenced() is store
        assert "pgbouncer" not in store.dsn
    with pytest.raises(StorageError, match="holdings"):
        open_store("postgresql://u@db/t", StoreOptions(tmp_path))


def test_memory_and_an_unknown_scheme(tmp_path: Path) -> None:
    assert isinstance(open_store("memory://", StoreOptions(tmp_path)), MemoryStore)
    with pytest.raises(StorageError, match=r"no store for 'mysql' URLs \(known: sqlite://"):
        open_store("mysql://db/t", StoreOptions(tmp_path))


def test_another_kind_of_store_plugs_in_by_its_scheme(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(registry, "_OPENERS", dict(registry._OPENERS))  # this test's alone
    made: list[str] = []

    def opener(url: str, options: StoreOptions) -> MemoryStore:
        made.append(url)
        return MemoryStore()

    register("test-kind", opener)
    assert "test-kind" in schemes()
    assert isinstance(open_store("test-kind://x", StoreOptions(tmp_path)), MemoryStore)
    assert made == ["test-kind://x"]

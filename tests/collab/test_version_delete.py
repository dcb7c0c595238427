"""Deleting one named version (REST ``DELETE /api/versions/{name}?id=``), in every store: the
in-memory fake, SQLite and a real PostgreSQL. Only that version goes, only of that document,
and its bytes leave its maker's quota and the total."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from tether.collab.cluster.ledger import Ledger
from tether.collab.storage.postgres import PostgresStore
from tether.collab.storage.sqlite import SQLiteStore
from tether.collab.storage.store import MemoryStore, StorageError, Store

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Store]:
    if request.param == "memory":
        return MemoryStore
    if request.param == "sqlite":
        return lambda: SQLiteStore(tmp_path / "versions.db")
    dsn = request.getfixturevalue("pg_dsn")
    return lambda: PostgresStore(dsn, ledger=Ledger())


async def test_one_version_is_deleted_and_its_bytes_leave_the_quotas(
    make_store: Callable[[], Store],
) -> None:
    with anyio.fail_after(30):
        async with make_store() as store:
            await store.append("doc", b"u")
            first = await store.add_version("doc", "first", b"x" * 10, "alice")
            second = await store.add_version("doc", "second", b"y" * 7, "alice")
            other = await store.add_version("other", "theirs", b"z" * 5, "bob")
            assert await store.version_bytes("alice") == 17
            assert await store.version_bytes() == 22

            assert await store.delete_version("doc", first.id) is True
            assert await store.list_versions("doc") == [second]
            assert await store.load_version("doc", first.id) is None
            assert await store.version_bytes("alice") == 7
            assert await store.version_bytes() == 12

            # Gone already, another document's, or never made: nothing is deleted.
            assert await store.delete_version("doc", first.id) is False
            assert await store.delete_version("doc", other.id) is False
            assert await store.delete_version("doc", 999_999) is False
            assert await store.list_versions("other") == [other]
            assert await store.version_bytes("bob") == 5
            assert await store.version_bytes() == 12


async def test_a_version_deleted_is_gone_after_the_store_is_opened_again(tmp_path: Path) -> None:
    path = tmp_path / "versions.db"
    with anyio.fail_after(30):
        async with SQLiteStore(path) as store:
            kept = await store.add_version("doc", "kept", b"keep", "alice")
            gone = await store.add_version("doc", "gone", b"drop", "alice")
            assert await store.delete_version("doc", gone.id)
        async with SQLiteStore(path) as store:
            assert await store.list_versions("doc") == [kept]
            assert await store.version_bytes("alice") == 4


async def test_a_store_without_versions_refuses_a_delete_with_a_storage_error() -> None:
    class NoVersions(MemoryStore):
        """A store written before versions: the base class's refusal."""

    NoVersions.delete_version = Store.delete_version  # type: ignore[method-assign]
    async with NoVersions() as store:
        with pytest.raises(StorageError, match="keeps no versions"):
            await store.delete_version("doc", 1)

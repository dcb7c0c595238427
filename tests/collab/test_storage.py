"""Storage: SQLiteStore and the MemoryStore fake keep the same promises; SQLite also survives."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from tether.collab.cluster.ledger import Ledger
from tether.collab.storage import sqlite as sqlite_store
from tether.collab.storage.postgres import PostgresStore
from tether.collab.storage.sqlite import SCHEMA_VERSION, SQLiteStore
from tether.collab.storage.store import MemoryStore, StorageError, Store

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 20


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "data" / "tether.db"  # a missing parent: the store creates it


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def make_store(request: pytest.FixtureRequest, db_path: Path) -> Callable[[], Store]:
    if request.param == "memory":
        return MemoryStore
    if request.param == "postgres":
        dsn = request.getfixturevalue("pg_dsn")  # only these tests need a PostgreSQL
        return lambda: PostgresStore(dsn, ledger=Ledger())
    return lambda: SQLiteStore(db_path)


# -- behaviour shared by both stores ---------------------------------------------------------


@pytest.mark.anyio
async def test_appended_updates_load_back_in_order_and_appends_count_the_log(make_store):
    with anyio.fail_after(TIMEOUT):
        async with make_store() as store:
            counts = [await store.append("doc", u) for u in (b"a", b"bb", b"ccc")]
            assert counts == [1, 2, 3]
            assert await store.load("doc") == [b"a", b"bb", b"ccc"]


@pytest.mark.anyio
async def test_versions_are_kept_per_document_in_order_and_go_with_the_document(make_store):
    with anyio.fail_after(TIMEOUT):
        async with make_store() as store:
            await store.append("doc", b"a")
            first = await store.add_version("doc", "first", b"state-1")
            second = await store.add_version("doc", "second", b"state-22")
            other = await store.add_version("other", "theirs", b"x")
            assert second.id > first.id
            assert (second.name, second.label, second.size) == ("doc", "second", 8)
            assert await store.list_versions("doc") == [first, second]
            assert await store.load_version("doc", first.id) == b"state-1"
            assert await store.load_version("doc", other.id) is None  # another document's
            await store.delete("doc")
            assert await store.list_versions("doc") == []
            assert await store.load_version("doc", second.id) is None
            assert await store.list_versions("other") == [other]


@pytest.mark.anyio
async def test_version_bytes_are_counted_per_subject_and_in_all(make_store):
    with anyio.fail_after(TIMEOUT):
        async with make_store() as store:
            await store.append("a", b"u")  # a stored document: deleting it takes its versions
            assert await store.version_bytes() == 0  # read before: then kept up by each call
            await store.add_version("a", "1", b"x" * 10, "alice")
            assert await store.version_bytes("alice") == 10
            await store.add_version("b", "1", b"y" * 7, "alice")
            await store.add_version("c", "1", b"z" * 5, "bob")
            await store.add_version("d", "1", b"w" * 3)
            assert await store.version_bytes("alice") == 17
            assert await store.version_bytes("bob") == 5
            assert await store.version_bytes("nobody") == 0
            assert await store.version_bytes() == 25
            await store.delete("a")
            assert await store.version_bytes("alice") == 7
            await store.add_version("e", "1", b"v" * 2, "alice")
            assert await store.version_bytes("alice") == 9
            assert await store.version_bytes() == 17


@pytest.mark.anyio
async def test_versions_survive_a_reopen(db_path: Path) -> None:
    with anyio.fail_after(TIMEOUT):
        async with SQLiteStore(db_path) as store:
            saved = await store.add_version("doc", "kept", b"state")
        async with SQLiteStore(db_path) as store:
            assert await store.list_versions("doc") == [saved]
            assert await store.load_version("doc", saved.id) == b"state"


class _NoVersions(MemoryStore):
    """A backend written before versions: it inherits the base class's refusals."""

    add_version = Store.add_version
    list_versions = Store.list_versions
    load_version = Store.load_version


@pytest.mark.anyio
async def test_a_store_without_versions_refuses_them_with_storage_error() -> None:
    async with _NoVersions() as store:
        with pytest.raises(StorageError, match="keeps no versions"):
            await store.add_version("doc", "l", b"s")
        with pytest.raises(StorageError):
            await store.list_versions("doc")


@pytest.mark.anyio
async def test_an_unknown_document_loads_empty_and_has_no_info(make_store):
    with anyio.fail_after(TIMEOUT):
        async with make_store() as store:
            assert await store.load("nobody") == []
            assert await store.info("nobody") is None
            assert await store.list_documents() == []


@pytest.mark.anyio
async def test_concurrent_appends_to_one_document_keep_their_call_order(make_store):
    updates = [f"update-{i}".encode() for i in range(200)]
    with anyio.fail_after(TIMEOUT):
        async with make_store() as store:
            counts = await asyncio.gather(*(store.append("doc", u) for u in updates))
            assert counts == list(range(1, 201))
            assert await store.load("doc") == updates


@pytest.mark.anyio
async def test_compaction_replaces_the_log_with_the_snapshot(make_store):
    with anyio.fail_after(TIMEOUT):
        async with make_store() as store:
            await store.append("doc", b"a")
            await store.append("doc", b"b")
            await store.compact("doc", b"snap-ab")
            assert await store.load("doc") == [b"snap-ab"]
            assert await store.append("doc", b"c") == 1
            assert await store.load("doc") == [b"snap-ab", b"c"]


@pytest.mark.anyio
async def test_an_append_called_after_compact_is_kept_even_if_awaited_first(make_store):
    with anyio.fail_after(TIMEOUT):
        async with make_store() as store:
            await store.append("doc", b"a")
            compacting = store.compact("doc", b"snap-a")
            later = store.append("doc", b"b")  # not in the snapshot
            assert await later == 1
            await compacting
            assert await store.load("doc") == [b"snap-a", b"b"]


@pytest.mark.anyio
async def test_an_append_called_before_compact_is_folded_even_if_awaited_last(make_store):
    with anyio.fail_after(TIMEOUT):
        async with make_store() as store:
            earlier = asyncio.create_task(store.append("doc", b"a"))
            await store.compact("doc", b"snap-a")  # the caller built it with "a" applied
            assert await earlier == 1
            assert await store.load("doc") == [b"snap-a"]


@pytest.mark.anyio
async def test_compaction_of_one_document_leaves_the_others_alone(make_store):
    with anyio.fail_after(TIMEOUT):
        async with make_store() as store:
            await store.append("one", b"1")
            await store.append("two", b"2")
            await store.compact("one", b"snap-1")
            assert await store.load("two") == [b"2"]


@pytest.mark.anyio
async def test_info_counts_the_log_and_the_bytes_until_compaction(make_store):
    with anyio.fail_after(TIMEOUT):
        async with make_store() as store:
            await store.append("doc", b"12345")
            await store.append("doc", b"678")
            info = await store.info("doc")
            assert info is not None
            assert (info.name, info.log_entries, info.stored_bytes) == ("doc", 2, 8)
            assert info.created_at <= info.updated_at
            await store.compact("doc", b"ss")
            compacted = await store.info("doc")
            assert compacted is not None
            assert (compacted.log_entries, compacted.stored_bytes) == (0, 2)
            assert compacted.created_at == info.created_at


@pytest.mark.anyio
async def test_list_documents_names_every_stored_document_in_name_order(make_store):
    with anyio.fail_after(TIMEOUT):
        async with make_store() as store:
            for name in ("beta", "alpha", "gamma"):
                await store.append(name, name.encode())
            await store.compact("gamma", b"g")
            listed = await store.list_documents()
            assert [d.name for d in listed] == ["alpha", "beta", "gamma"]
            assert [d.log_entries for d in listed] == [1, 1, 0]


@pytest.mark.anyio
async def test_a_deleted_document_is_gone_and_a_new_append_starts_it_afresh(make_store):
    with anyio.fail_after(TIMEOUT):
        async with make_store() as store:
            await store.append("doc", b"a")
            await store.compact("doc", b"snap")
            await store.append("keep", b"k")
            await store.delete("doc")
            assert await store.load("doc") == []
            assert await store.info("doc") is None
            assert [d.name for d in await store.list_documents()] == ["keep"]
            assert await store.append("doc", b"new") == 1
            assert await store.load("doc") == [b"new"]


@pytest.mark.anyio
async def test_a_store_refuses_work_before_it_opens_and_after_it_closes(make_store):
    with anyio.fail_after(TIMEOUT):
        store = make_store()
        with pytest.raises(StorageError):
            await store.append("doc", b"early")
        async with store:
            await store.append("doc", b"a")
        with pytest.raises(StorageError):
            await store.append("doc", b"late")
        with pytest.raises(StorageError):
            await store.load("doc")
        with pytest.raises(StorageError):
            await store.__aenter__()  # one lifecycle: no reopening


# -- SQLite only -----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_closing_flushes_writes_that_were_called_but_never_awaited(db_path):
    with anyio.fail_after(TIMEOUT):
        async with SQLiteStore(db_path) as store:
            pending = [asyncio.ensure_future(store.append("doc", bytes([i]))) for i in range(50)]
        assert await asyncio.gather(*pending) == list(range(1, 51))
        async with SQLiteStore(db_path) as reopened:
            assert await reopened.load("doc") == [bytes([i]) for i in range(50)]


@pytest.mark.anyio
async def test_500_concurrent_appends_over_10_documents_are_durable_in_few_commits(db_path):
    with anyio.fail_after(TIMEOUT):
        async with SQLiteStore(db_path) as store:
            counts = await asyncio.gather(
                *(store.append(f"doc-{i % 10}", f"u{i}".encode()) for i in range(500))
            )
            commits = store.commits
        assert counts == [i // 10 + 1 for i in range(500)]
        assert commits <= 50, f"{commits} transactions for 500 appends: no group commit"
        async with SQLiteStore(db_path) as reopened:
            for d in range(10):
                expected = [f"u{i}".encode() for i in range(d, 500, 10)]
                assert await reopened.load(f"doc-{d}") == expected


@pytest.mark.anyio
async def test_a_commit_window_lets_writes_that_come_within_it_share_one_commit(db_path):
    """--commit-window-ms: once writes have been coming while others were in flight (many
    editors), a commit waits for more. Appends made one after another, each awaited by nobody,
    arrive at the writer a little apart; they share the first one's commit. Without a window,
    an append that arrives alone is committed alone, as the ack latency wants."""
    with anyio.fail_after(TIMEOUT):
        async with SQLiteStore(db_path, commit_window=0.5) as store:
            # Company: 20 writes at once, 19 of them queued while another was in flight.
            await asyncio.gather(*(store.append(f"warm-{i}", b"w") for i in range(20)))
            assert store.window.company >= 1
            before, waits = store.commits, store.window.waits
            written = []
            for i in range(5):
                written.append(store.append_future("doc", bytes([i])))
                await asyncio.sleep(0)  # one turn of the loop between them, not a wait on time
            assert await asyncio.gather(*written) == [1, 2, 3, 4, 5]
            assert store.commits == before + 1
            assert store.window.waits == waits + 1
        async with SQLiteStore(db_path) as store:
            assert await store.load("doc") == [bytes([i]) for i in range(5)]
            before = store.commits
            for _ in range(3):
                await store.append("doc", b"x")
            assert store.commits == before + 3


@pytest.mark.anyio
async def test_a_writer_that_awaits_each_ack_is_not_kept_waiting_by_the_window(db_path):
    """One writer alone never writes while another write is in flight: no company, so no
    commit waits for any, and the window costs it nothing per edit."""
    with anyio.fail_after(TIMEOUT):
        async with SQLiteStore(db_path, commit_window=0.5) as store:
            before = store.commits
            for i in range(20):
                await store.append("doc", bytes([i]))
            assert store.commits == before + 20
            assert store.window.waits == 0
            assert store.window.company == 0.0
            assert store.window.in_flight == 0


@pytest.mark.anyio
async def test_updated_at_is_exact_although_rows_are_touched_at_most_once_a_second(
    db_path, monkeypatch
):
    monkeypatch.setattr(sqlite_store, "_TOUCH_EVERY_S", 3600.0)  # however slow this machine is

    def row_updated_at() -> float:
        with sqlite3.connect(db_path) as conn:
            return float(
                conn.execute("SELECT updated_at FROM documents WHERE name = 'doc'").fetchone()[0]
            )

    with anyio.fail_after(TIMEOUT):
        async with SQLiteStore(db_path) as store:
            await store.append("doc", b"a")  # a new document: its row is written at once
            first = row_updated_at()
            commits = store.commits
            for _ in range(5):
                await store.append("doc", b"b")
            assert store.commits == commits + 5  # each its own durable commit, as before
            assert row_updated_at() == first  # ... but the row was not rewritten each time
            info = await store.info("doc")
            assert info is not None and info.updated_at > first  # reads see the last append
            assert [d.updated_at for d in await store.list_documents()] == [info.updated_at]
        assert row_updated_at() == info.updated_at  # written at close
        async with SQLiteStore(db_path) as reopened:
            assert await reopened.load("doc") == [b"a"] + [b"b"] * 5


@pytest.mark.anyio
async def test_max_batch_bounds_the_appends_per_transaction(db_path):
    with anyio.fail_after(TIMEOUT):
        async with SQLiteStore(db_path, max_batch=1) as store:
            await asyncio.gather(*(store.append("doc", b"x") for _ in range(20)))
            assert store.commits == 20


@pytest.mark.anyio
async def test_a_reopened_store_sees_snapshots_logs_and_infos(db_path):
    with anyio.fail_after(TIMEOUT):
        async with SQLiteStore(db_path) as store:
            await store.append("doc", b"a")
            await store.compact("doc", b"snap")
            await store.append("doc", b"b")
            await store.append("other", b"o")
            before = await store.list_documents()
        async with SQLiteStore(str(db_path)) as reopened:
            assert await reopened.load("doc") == [b"snap", b"b"]
            assert await reopened.list_documents() == before
            assert await reopened.append("doc", b"c") == 2


@pytest.mark.anyio
async def test_the_file_is_in_wal_mode_with_a_schema_version(db_path):
    with anyio.fail_after(TIMEOUT):
        async with SQLiteStore(db_path) as store:
            await store.append("doc", b"a")
            with sqlite3.connect(db_path) as conn:
                assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
                assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from tether.collab.storage.sqlite import SQLiteStore

    WORKERS = 8

    async def appender(store, first):
        i = first
        while True:
            await store.append("doc", str(i).encode())
            print(i, flush=True)  # only after append() returned: i is acknowledged
            i += WORKERS

    async def main(path):
        async with SQLiteStore(path) as store:
            await asyncio.gather(*(appender(store, w) for w in range(WORKERS)))

    asyncio.run(main(sys.argv[1]))
    """
)


def _acknowledge_then_kill(db_path: Path, wanted: int) -> list[int]:
    """Run CHILD until it has acknowledged `wanted` appends, SIGKILL it, return every ack."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(db_path)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    watchdog = threading.Timer(TIMEOUT, child.kill)  # a stuck child ends the reads below
    watchdog.start()
    try:
        assert child.stdout is not None
        acked: list[int] = []
        while len(acked) < wanted and (line := child.stdout.readline()):
            acked.append(int(line))
        child.send_signal(signal.SIGKILL)  # mid-stream: appenders are still running
        rest, errors = child.communicate()
    finally:
        watchdog.cancel()
        child.kill()
    assert len(acked) >= wanted, f"child stopped early: {errors}"
    assert child.returncode == -signal.SIGKILL
    complete = rest[: rest.rfind("\n") + 1]  # a line cut by the kill is not an ack we can read
    return acked + [int(line) for line in complete.split()]


@pytest.mark.anyio
async def test_every_acknowledged_append_survives_a_hard_kill(db_path):
    with anyio.fail_after(TIMEOUT * 2):
        acked = await asyncio.to_thread(_acknowledge_then_kill, db_path, 300)
        async with SQLiteStore(db_path) as store:
            stored = [int(update) for update in await store.load("doc")]
    assert len(stored) == len(set(stored))
    missing = set(acked) - set(stored)
    assert not missing, f"{len(missing)} acknowledged appends lost: {sorted(missing)[:10]}"


async def _refuse_inserts_for(db_path: Path, name: str) -> None:
    async with SQLiteStore(db_path):
        pass  # creates the schema
    with sqlite3.connect(db_path) as conn:
        conn.execute(
            f"""CREATE TRIGGER refuse BEFORE INSERT ON updates WHEN NEW.name = '{name}'
                BEGIN SELECT RAISE(ABORT, 'refused by test trigger'); END"""
        )


@pytest.mark.anyio
async def test_a_failed_transaction_raises_storage_error_and_the_writer_carries_on(db_path):
    with anyio.fail_after(TIMEOUT):
        await _refuse_inserts_for(db_path, "refused")
        async with SQLiteStore(db_path) as store:
            with pytest.raises(StorageError) as failure:
                await store.append("refused", b"x")
            assert isinstance(failure.value.__cause__, sqlite3.Error)
            assert await store.append("fine", b"y") == 1
            assert await store.load("refused") == []
            assert await store.info("refused") is None  # the whole transaction rolled back


@pytest.mark.anyio
async def test_a_failed_transaction_does_not_corrupt_the_log_count(db_path):
    with anyio.fail_after(TIMEOUT):
        await _refuse_inserts_for(db_path, "refused")
        async with SQLiteStore(db_path) as store:
            await store.append("doc", b"a")
            results = await asyncio.gather(
                store.append("doc", b"b"), store.append("refused", b"x"), return_exceptions=True
            )
            assert isinstance(results[1], StorageError)
            stored = await store.load("doc")
            store.resume("doc")  # fenced if its "b" shared the failed transaction
            assert await store.append("doc", b"c") == len(stored) + 1


@pytest.mark.anyio
async def test_a_failed_append_fences_its_document_until_resumed(db_path):
    """What runs after a lost update of a document may build on it: nothing more of that
    document is stored until the room, having rebuilt it, resumes it."""
    with anyio.fail_after(TIMEOUT):
        async with SQLiteStore(db_path):
            pass  # creates the schema
        with sqlite3.connect(db_path) as conn:
            conn.execute(
                """CREATE TRIGGER refuse BEFORE INSERT ON updates WHEN NEW.data = X'4c4f5354'
                    BEGIN SELECT RAISE(ABORT, 'refused by test trigger'); END"""
            )
        async with SQLiteStore(db_path) as store:
            assert await store.append("doc", b"A") == 1
            lost, built_on = await asyncio.gather(
                store.append("doc", b"LOST"), store.append("doc", b"C"), return_exceptions=True
            )
            assert isinstance(lost, StorageError)
            assert isinstance(built_on, StorageError)  # same transaction or fenced after it
            with pytest.raises(StorageError, match="earlier update of it failed"):
                await store.append("doc", b"D")
            with pytest.raises(StorageError, match="earlier update of it failed"):
                await store.compact("doc", b"snapshot")
            assert await store.append("other", b"x") == 1  # other documents carry on
            store.resume("doc")
            assert await store.append("doc", b"E") == 2
            assert await store.load("doc") == [b"A", b"E"]


@pytest.mark.anyio
async def test_opening_something_that_is_not_a_database_raises_storage_error(tmp_path):
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not an sqlite file" * 100)
    with anyio.fail_after(TIMEOUT):
        for path in (tmp_path, garbage):  # a directory, then a non-database file
            with pytest.raises(StorageError):
                async with SQLiteStore(path):
                    pass


@pytest.mark.anyio
async def test_a_file_from_a_newer_schema_is_refused(db_path):
    db_path.parent.mkdir()
    with sqlite3.connect(db_path) as conn:
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    with anyio.fail_after(TIMEOUT), pytest.raises(StorageError, match="newer"):
        async with SQLiteStore(db_path):
            pass


def test_bad_settings_are_refused_up_front(db_path):
    with pytest.raises(ValueError):
        SQLiteStore(db_path, synchronous="SOMETIMES")
    with pytest.raises(ValueError):
        SQLiteStore(db_path, max_batch=0)


# The log table as schemas 1 and 2 created it.
_UPDATES_BEFORE_3 = (
    "CREATE TABLE updates (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL,"
    " data BLOB NOT NULL)"
)


@pytest.mark.anyio
async def test_a_schema_2_file_loses_autoincrement_and_keeps_every_log_in_order(db_path):
    """Schema 2's AUTOINCREMENT rewrote sqlite_sequence in every commit; opening the file
    rebuilds the log table without it, ids and order kept, and later appends sort after."""
    db_path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(db_path) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(
            "CREATE TABLE documents (name TEXT PRIMARY KEY, created_at REAL NOT NULL,"
            " updated_at REAL NOT NULL)"
        )
        conn.execute("CREATE TABLE snapshots (name TEXT PRIMARY KEY, data BLOB NOT NULL)")
        conn.execute(_UPDATES_BEFORE_3)
        conn.execute("CREATE INDEX updates_by_name ON updates (name)")
        conn.execute("INSERT INTO documents VALUES ('a', 1.0, 2.0), ('b', 1.0, 2.0)")
        conn.execute("INSERT INTO snapshots VALUES ('a', x'736e6170')")
        conn.execute(
            "INSERT INTO updates (id, name, data) VALUES"
            " (7, 'a', x'31'), (8, 'b', x'32'), (9, 'a', x'33'), (10, 'b', x'34')"
        )
        conn.execute("PRAGMA user_version=2")
    with anyio.fail_after(TIMEOUT):
        async with SQLiteStore(db_path) as store:
            assert await store.load("a") == [b"snap", b"1", b"3"]
            assert await store.load("b") == [b"2", b"4"]
            await store.compact("b", b"B")  # frees the highest ids, which a plain rowid reuses
            assert await store.append("a", b"5") == 3
            assert await store.append("a", b"6") == 4
            assert await store.load("a") == [b"snap", b"1", b"3", b"5", b"6"]
        with sqlite3.connect(db_path) as conn:
            assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 4
            (sql,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'updates'").fetchone()
            assert "AUTOINCREMENT" not in sql.upper()
            names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
            assert "updates_by_name" in names and "updates_before_3" not in names
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        async with SQLiteStore(db_path) as reopened:
            assert await reopened.load("a") == [b"snap", b"1", b"3", b"5", b"6"]
            assert await reopened.load("b") == [b"B"]


@pytest.mark.anyio
async def test_a_schema_1_file_is_migrated_with_its_snapshots_and_logs(db_path):
    """Schema 1 kept snapshots inside the documents row (every append's updated_at touch then
    rewrote the whole snapshot); opening it moves them to their own table, losing nothing."""
    db_path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(db_path) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(
            "CREATE TABLE documents (name TEXT PRIMARY KEY, snapshot BLOB,"
            " created_at REAL NOT NULL, updated_at REAL NOT NULL)"
        )
        conn.execute(_UPDATES_BEFORE_3)
        conn.execute("INSERT INTO documents VALUES ('a', x'736e6170', 1.0, 2.0)")
        conn.execute("INSERT INTO documents VALUES ('b', NULL, 1.0, 2.0)")
        conn.execute("INSERT INTO updates (name, data) VALUES ('a', x'31'), ('b', x'32')")
        conn.execute("PRAGMA user_version=1")
    with anyio.fail_after(TIMEOUT):
        async with SQLiteStore(db_path) as store:
            assert await store.load("a") == [b"snap", b"1"]
            assert await store.load("b") == [b"2"]
            info = await store.info("a")
            assert info is not None and info.stored_bytes == len(b"snap1")
            assert await store.append("a", b"3") == 2
            await store.compact("a", b"new")
        async with SQLiteStore(db_path) as store:
            assert await store.load("a") == [b"new"]
            with sqlite3.connect(db_path) as conn:
                assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


@pytest.mark.anyio
async def test_one_failing_write_in_a_batch_fails_alone(db_path):
    """A batch's transaction that fails is run again op by op: the others' appends are stored
    and acked (issue 26, item 4: one user's bad input failed other users' edits)."""
    with anyio.fail_after(TIMEOUT):
        await _refuse_inserts_for(db_path, "refused")
        async with SQLiteStore(db_path) as store:
            results = await asyncio.gather(
                *(store.append(f"doc-{i % 3}", b"u%d" % i) for i in range(30)),
                store.append("refused", b"x"),
                *(store.append(f"doc-{i % 3}", b"v%d" % i) for i in range(30)),
                return_exceptions=True,
            )
            failed = [r for r in results if isinstance(r, BaseException)]
            assert len(failed) == 1 and isinstance(results[30], StorageError)
            for i in range(3):
                assert len(await store.load(f"doc-{i}")) == 20
            assert await store.load("refused") == []


@pytest.mark.anyio
async def test_a_version_label_sqlite_cannot_store_is_refused_before_the_batch(db_path):
    with anyio.fail_after(TIMEOUT):
        async with SQLiteStore(db_path) as store:
            appends = [store.append("other", b"%d" % i) for i in range(20)]
            results = await asyncio.gather(
                *appends, store.add_version("doc", "\ud800", b"state"), return_exceptions=True
            )
            assert all(isinstance(r, int) for r in results[:-1])
            assert isinstance(results[-1], StorageError)
            assert "valid Unicode" in str(results[-1])
            assert await store.list_versions("doc") == []


@pytest.mark.anyio
async def test_a_listing_is_a_page_by_name_under_a_prefix(make_store):
    """Issue 26, item 9: listing scanned (and summed) every document of the store."""
    async with make_store() as store:
        for name in ("a/1", "a/2", "a/3", "a0", "b/1", "team/x", "team/y", "team0", "é/1"):
            await store.append(name, b"u")
        first = await store.list_documents(limit=2)
        assert [d.name for d in first] == ["a/1", "a/2"]
        rest = await store.list_documents(after="a/2", limit=100)
        assert [d.name for d in rest] == ["a/3", "a0", "b/1", "team/x", "team/y", "team0", "é/1"]
        team = await store.list_documents(prefix="team/")
        assert [d.name for d in team] == ["team/x", "team/y"]
        assert [d.name for d in await store.list_documents(prefix="team/", after="team/x")] == [
            "team/y"
        ]
        assert [d.name for d in await store.list_documents(prefix="é")] == ["é/1"]
        assert all(d.log_entries == 1 and d.stored_bytes == 1 for d in team)

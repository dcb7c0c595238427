"""PostgresStore beyond the shared Store promises: numbering, several nodes, outages.

A real PostgreSQL (the session's ``postgres`` fixture), a database per test; two stores on one
database stand for two nodes.
"""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import asyncpg
import pytest

from tether.bench.engines import PostgresServer
from tether.collab.cluster.ledger import Ledger
from tether.collab.storage.postgres import PostgresStore
from tether.collab.storage.sequenced import Committed
from tether.collab.storage.store import StorageError

TIMEOUT = 30


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _rows(dsn: str, name: str) -> list[tuple[int, bytes]]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT seq, data FROM tether_updates WHERE name = $1 ORDER BY seq", name
        )
        return [(int(r["seq"]), bytes(r["data"])) for r in rows]
    finally:
        await conn.close()


async def _stored(dsn: str, name: str) -> list[bytes]:
    conn = await asyncpg.connect(dsn)
    try:
        snap = await conn.fetchval("SELECT snapshot FROM tether_documents WHERE name = $1", name)
    finally:
        await conn.close()
    head = [] if snap is None else [bytes(snap)]
    return head + [data for _, data in await _rows(dsn, name)]


def node(dsn: str, **options: Any) -> PostgresStore:
    """A store standing for one node: its own ledger of what it holds."""
    return PostgresStore(dsn, ledger=Ledger(), **options)


class Listener:
    """A store's listener (StoreEvents) that records what it is told, commits as (node, seq)."""

    def __init__(self, node: str, seen: list[tuple[str, int]]) -> None:
        self.node = node
        self.seen = seen
        self.deletes: list[tuple[str, int]] = []

    def committed(self, items: list[Committed]) -> None:
        self.seen.extend((self.node, seq) for _, seq, _ in items)

    def deleted(self, name: str, epoch: int) -> None:
        self.deletes.append((name, epoch))

    def stale(self, name: str) -> None:
        pass


@pytest.mark.anyio
async def test_two_nodes_appending_one_document_get_one_gap_free_sequence(pg_dsn):
    with anyio.fail_after(TIMEOUT):
        async with node(pg_dsn) as one, node(pg_dsn) as two:
            seen: list[tuple[str, int]] = []
            one.listen(Listener("one", seen))
            two.listen(Listener("two", seen))
            writes = []
            for i in range(200):
                writes.append(one.append("doc", f"a{i}".encode()))
                writes.append(two.append("doc", f"b{i}".encode()))
            await asyncio.gather(*writes)
            rows = await _rows(pg_dsn, "doc")
            assert [seq for seq, _ in rows] == list(range(1, 401))
            assert sorted(s for _, s in seen) == list(range(1, 401))
            assert {data for _, data in rows} == {
                f"{p}{i}".encode() for p in "ab" for i in range(200)
            }
            assert one.commits + two.commits < 400  # batched: group commit on both nodes


@pytest.mark.anyio
async def test_the_write_path_records_in_the_nodes_ledger_and_tells_its_listener(pg_dsn):
    ledger = Ledger()
    seen: list[tuple[str, int]] = []
    listener = Listener("one", seen)
    with anyio.fail_after(TIMEOUT):
        async with PostgresStore(pg_dsn, ledger=ledger) as store:
            store.listen(listener)
            assert await store.load("doc") == [] and ledger.epoch("doc") == 0
            await store.append("doc", b"1")
            await store.append("doc", b"2")
            epoch = ledger.epoch("doc")
            assert epoch > 0 and ledger.watermark("doc").mark == 2  # adopted, and held
            assert seen == [("one", 1), ("one", 2)]
            await store.delete("doc")
            assert ledger.epoch("doc") == -epoch and ledger.watermark("doc").mark == 0
            assert listener.deletes == [("doc", epoch)]
            await store.append("doc", b"new")
            assert ledger.epoch("doc") > epoch and ledger.watermark("doc").mark == 1
            store.listen(None)
            await store.append("doc", b"unheard")
            assert seen[-1] == ("one", 1)


@pytest.mark.anyio
async def test_compaction_never_folds_what_another_node_committed_unseen(pg_dsn):
    with anyio.fail_after(TIMEOUT):
        async with node(pg_dsn) as one, node(pg_dsn) as two:
            assert await one.load("doc") == [] and await two.load("doc") == []
            await one.append("doc", b"from-one")  # seq 1: one holds it
            await two.append("doc", b"from-two")  # seq 2: one has not seen it
            await one.compact("doc", b"snap-of-one")
            assert await one.load("doc") == [b"snap-of-one", b"from-two"]
            info = await one.info("doc")
            assert info is not None and info.log_entries == 1


@pytest.mark.anyio
async def test_two_nodes_compacting_concurrently_lose_nothing(pg_dsn):
    with anyio.fail_after(TIMEOUT):
        async with node(pg_dsn) as one, node(pg_dsn) as two:
            await one.load("doc")
            await two.load("doc")
            for round_ in range(20):
                a = one.append("doc", f"a{round_}".encode())
                b = two.append("doc", f"b{round_}".encode())
                await asyncio.gather(a, b)
                # Each node's "document" holds its own updates only, so each snapshot names
                # them; both compact at once. What neither snapshot holds must stay in the log.
                held_one = [f"a{r}" for r in range(round_ + 1)]
                held_two = [f"b{r}" for r in range(round_ + 1)]
                await asyncio.gather(
                    one.compact("doc", ",".join(held_one).encode()),
                    two.compact("doc", ",".join(held_two).encode()),
                )
                stored = await _stored(pg_dsn, "doc")  # not load(): that moves a watermark
                everything = set()
                for blob in stored:
                    everything.update(blob.decode().split(","))
                expected = {f"{p}{r}" for p in "ab" for r in range(round_ + 1)}
                assert expected <= everything, (round_, stored)


@pytest.mark.anyio
async def test_a_backfill_after_compaction_brings_the_snapshot_and_the_rest(pg_dsn):
    with anyio.fail_after(TIMEOUT):
        async with node(pg_dsn) as store:
            await store.load("doc")
            for data in (b"1", b"2", b"3"):
                await store.append("doc", data)
            await store.compact("doc", b"snap-3")
            await store.append("doc", b"4")
            behind = await store.backfill("doc", 1)
            assert (behind.snapshot, behind.snapshot_seq, behind.updates) == (
                b"snap-3",
                3,
                [(4, b"4")],
            )
            current = await store.backfill("doc", 3)
            assert (current.snapshot, current.updates) == (None, [(4, b"4")])
            assert await store.heads(["doc", "nobody"]) == {"doc": 4}


async def _version_sums(dsn: str) -> dict[str | None, int]:
    """The version bytes summed from the versions themselves, per subject and (None) in all."""
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT subject, SUM(LENGTH(data)) AS n FROM tether_versions GROUP BY subject"
        )
    finally:
        await conn.close()
    sums: dict[str | None, int] = {r["subject"]: int(r["n"]) for r in rows}
    sums[None] = sum(sums.values())
    return sums


async def _counted(store: PostgresStore, subjects: list[str | None]) -> dict[str | None, int]:
    return {subject: await store.version_bytes(subject) for subject in subjects}


@pytest.mark.anyio
async def test_version_bytes_counted_on_one_node_are_read_exactly_on_another(pg_dsn):
    subjects: list[str | None] = [None, "alice", "bob", ""]
    with anyio.fail_after(TIMEOUT):
        async with node(pg_dsn) as one, node(pg_dsn) as two:
            for name in ("a", "b"):
                await one.append(name, b"u")  # stored documents: deleting one takes its versions
            await one.add_version("a", "1", b"x" * 10, "alice")
            await one.add_version("b", "1", b"y" * 7, "bob")
            assert await _counted(two, subjects) == {None: 17, "alice": 10, "bob": 7, "": 0}
            # Both nodes at once, then two deletes in one batch while versions keep coming.
            await asyncio.gather(
                *(one.add_version("a", str(i), b"a" * i, "alice") for i in range(1, 31)),
                *(two.add_version("b", str(i), b"b" * i, "bob") for i in range(1, 31)),
                *(two.add_version("c", str(i), b"c" * i) for i in range(1, 31)),
            )
            assert await _counted(one, subjects) == await _version_sums(pg_dsn)
            await asyncio.gather(
                two.delete("a"),
                two.delete("b"),
                *(one.add_version("d", str(i), b"d" * i, "alice") for i in range(1, 31)),
            )
            expected = {None: 2 * 465, "alice": 465, "bob": 0, "": 465}
            assert await _counted(one, subjects) == expected
            assert expected == {**await _version_sums(pg_dsn), "bob": 0}
            assert await _counted(two, subjects) == expected


@pytest.mark.anyio
async def test_version_bytes_of_a_database_from_before_their_totals_are_counted_once(
    pg_dsn,
):
    with anyio.fail_after(TIMEOUT):
        async with node(pg_dsn) as store:
            await store.add_version("a", "1", b"x" * 10, "alice")
            await store.add_version("b", "1", b"y" * 7, "alice")
            await store.add_version("c", "1", b"z" * 5)
        conn = await asyncpg.connect(pg_dsn)
        try:  # as a schema 2 database left it: its versions, no totals
            await conn.execute("DROP TABLE tether_version_totals")
            await conn.execute("UPDATE tether_meta SET value = '2' WHERE key = 'schema'")
        finally:
            await conn.close()
        await asyncio.gather(_opened(pg_dsn), _opened(pg_dsn))  # two nodes starting at once
        expected = {None: 22, "alice": 17, "": 5, "bob": 0}
        async with node(pg_dsn) as store:  # and again: nothing is counted twice
            assert await _counted(store, list(expected)) == expected
            await store.add_version("d", "1", b"w" * 3, "bob")
            assert await _counted(store, list(expected)) == {**expected, None: 25, "bob": 3}


async def _opened(dsn: str) -> None:
    async with node(dsn):
        pass


@pytest.mark.anyio
async def test_no_append_is_acked_while_the_database_is_down_and_they_commit_when_it_returns(
    own_postgres: PostgresServer,
):
    postgres = own_postgres
    dsn = postgres.create_database("outage")
    with anyio.fail_after(90):
        async with node(dsn, outage_timeout=60) as store:
            await store.append("doc", b"before")
            postgres.stop()
            try:
                writes = [
                    asyncio.ensure_future(store.append("doc", f"w{i}".encode())) for i in range(5)
                ]
                # The writer retries (backing off to 1 s); a second of retries acks nothing.
                done, _ = await asyncio.wait(writes, timeout=1.5)
                assert not done
                assert not store.available
            finally:
                postgres.start()
            assert await asyncio.gather(*writes) == [2, 3, 4, 5, 6]
            assert [data for _, data in await _rows(dsn, "doc")] == [b"before"] + [
                f"w{i}".encode() for i in range(5)
            ]
            assert store.available


@pytest.mark.anyio
async def test_an_outage_longer_than_the_timeout_fails_the_writes_clearly(
    own_postgres: PostgresServer,
):
    postgres = own_postgres
    dsn = postgres.create_database("outage_timeout")
    with anyio.fail_after(60):
        async with node(dsn, outage_timeout=0.5) as store:
            await store.append("doc", b"before")
            postgres.stop()
            try:
                with pytest.raises(StorageError):
                    await store.append("doc", b"lost")
            finally:
                postgres.start()
            # The document is fenced: what follows may build on the lost update.
            with pytest.raises(StorageError, match="an earlier update of it failed"):
                await store.append("doc", b"built on the lost one")
            assert await store.append("other", b"unaffected") == 1
            store.resume("doc")  # the room rebuilt it from the database
            assert await store.append("doc", b"after") == 2


@pytest.mark.anyio
async def test_writes_beyond_store_queue_bytes_fail_at_once_while_the_database_is_down(
    own_postgres: PostgresServer,
):
    postgres = own_postgres
    dsn = postgres.create_database("backlog")
    refused: list[str] = []
    with anyio.fail_after(60):
        async with node(
            dsn, outage_timeout=60, queue_bytes=1000, on_refusal=refused.append
        ) as store:
            await store.append("doc", b"before")
            postgres.stop()
            try:
                # Counted when called (the ordering contract), so the bound holds at once.
                waiting = asyncio.ensure_future(store.append("doc", b"x" * 900))
                with pytest.raises(StorageError):
                    await store.append("doc", b"y" * 200)  # over the bound: refused now
                assert refused == ["store_queue_bytes"]
                assert not waiting.done()
            finally:
                postgres.start()
            assert await waiting == 2  # the one within the bound commits when it returns
            with pytest.raises(StorageError, match="an earlier update of it failed"):
                await store.append("doc", b"z")  # may build on the refused one: fenced
            store.resume("doc")
            assert await store.append("doc", b"y" * 200) == 3

"""Scale-out, the operational edges: a stalled Redis, deleting a document other nodes serve,
passwords in the URLs, PgBouncer, versions and failed appends. Real nodes on a real PostgreSQL
and redis-server (see tests/test_cluster.py), attacked over sockets.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import httpx
import pytest

from tests.metrics_scrape import metric_value, metrics_text
from tests.serverproc import ServerProcess
from tests.test_cluster import Nodes, converged, editors, stored_text, tok
from tether.bench.engines import PgBouncer, PostgresServer, RedisServer, pgbouncer_binary
from tether.collab.cluster.ledger import Ledger
from tether.collab.storage.postgres import PostgresStore
from tether.collab.storage.store import StorageError

pytestmark = pytest.mark.anyio


async def health_until(
    node: ServerProcess, predicate: Callable[[dict[str, Any]], bool], timeout: float, what: str
) -> dict[str, Any]:
    """Poll a node's public /health until ``predicate`` holds (there is no event for it)."""
    deadline = time.monotonic() + timeout
    while True:
        health = await asyncio.to_thread(node.health)
        if predicate(health):
            return health
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s; last /health {health}")
        await anyio.sleep(0.05)


BUS_BOUND = 32 * 1024


async def test_a_stalled_redis_bounds_the_bus_queue_in_bytes_and_loses_no_acked_edit(
    tmp_path, pg_dsn
):
    redis = RedisServer().start()
    cluster = Nodes(tmp_path, pg_dsn, redis.url, 2, bus_queue_bytes=BUS_BOUND).start()
    name = "bus-stall"
    try:
        with anyio.fail_after(90):
            async with editors(cluster, name, [0, 1]) as (ann, bob):
                await ann.append("before ")
                await bob.wait(lambda: "before " in str(bob), 10, "the bus before the stall")
                redis.pause()
                # ~100 KB of edits from node 0, three times what it may hold for Redis.
                written = [tok(0, k) + "x" * 1000 for k in range(100)]
                for piece in written:
                    await ann.append(piece)
                await ann.wait_acked(timeout=30)
                assert all(ann.statuses), "Redis stalled must not stop acks (they are COMMITs)"
                tokens = [tok(0, k) for k in range(100)]
                # Redis still stalled: bob's node has it all from PostgreSQL (reconciliation).
                await converged([ann, bob], tokens)
                bus = (await asyncio.to_thread(cluster[0].health))["bus"]
                assert bus["dropped"] > 0
                assert 0 < bus["queued_bytes_peak"] <= BUS_BOUND
                refused = metric_value(
                    await metrics_text(cluster[0]),
                    "tether_limit_refusals_total",
                    limit="bus_queue_bytes",
                )
                assert refused > 0
                stored = await stored_text(pg_dsn, name)
                assert [t for t in tokens if t not in stored] == []
                redis.resume()
                # Recovery: both readers back, node 0's queue drained, and a new edit reaches
                # node 1 through Redis again (its received count moves).
                for node in cluster:
                    await health_until(node, lambda h: h["bus"]["state"] == "up", 30, "bus up")
                await health_until(
                    cluster[0], lambda h: h["bus"]["queued_bytes"] == 0, 30, "queue drained"
                )
                received = (await asyncio.to_thread(cluster[1].health))["bus"]["received"]
                await ann.append(" after")
                await bob.wait(lambda: " after" in str(bob), 10, "the edit after the stall")
                await health_until(
                    cluster[1],
                    lambda h: h["bus"]["received"] > received,
                    10,
                    "node 1 receiving from Redis again",
                )
    finally:
        cluster.stop()
        redis.close()


# -- deleting a document that other nodes have loaded -----------------------------------------


async def _delete_on(node: ServerProcess, name: str) -> None:
    headers = {"Authorization": f"Bearer {node.token([name])}"}
    async with httpx.AsyncClient(base_url=node.http_url, headers=headers) as http:
        reply = await http.delete(f"/api/documents/{name}")
    assert reply.status_code == 200, reply.text


async def test_a_delete_on_one_node_closes_the_document_on_the_others_and_it_returns_empty(
    tmp_path, pg_dsn, redis_server
):
    cluster = Nodes(tmp_path, pg_dsn, redis_server.url, 3).start()
    name = "doomed-cluster"
    try:
        with anyio.fail_after(60):
            async with editors(cluster, name, [1, 2]) as (bob, cat):
                await bob.append("secret plans ")
                await cat.append("more ")
                await converged([bob, cat], ["secret plans ", "more "])
                await _delete_on(cluster[0], name)  # node 0 has no editor on it
                for doc in (bob, cat):
                    await doc.wait(lambda d=doc: d.denied is not None, 10, "PermissionDenied")
                    assert doc.denied == "document deleted"
                for node in cluster.nodes[1:]:
                    assert (await asyncio.to_thread(node.health))["bus"]["remote_deletes"] == 1
            async with editors(cluster, name, [1, 2, 0]) as docs:
                assert [str(d) for d in docs] == ["", "", ""]
                await docs[2].append("new life")
                await converged(docs, ["new life"])
                assert str(docs[0]) == "new life"
            assert await stored_text(pg_dsn, name) == "new life"
    finally:
        cluster.stop()


async def test_a_node_that_missed_the_delete_cannot_bring_the_old_document_back(tmp_path, pg_dsn):
    """Redis is down, so node 1 hears of the delete only from PostgreSQL; its editor goes on
    writing meanwhile. Those writes must not land in the document created again on node 0,
    and node 1's old content must not be backfilled into it either."""
    redis = RedisServer().start()
    cluster = Nodes(tmp_path, pg_dsn, redis.url, 2, bus_reconcile_interval=2).start()
    name = "zombie"
    try:
        with anyio.fail_after(60):
            async with editors(cluster, name, [1]) as (bob,):
                await bob.append("old secret ")
                await bob.wait_acked()
                redis.kill()
                await _delete_on(cluster[0], name)
                async with editors(cluster, name, [0]) as (ann,):
                    assert str(ann) == ""
                    await ann.append("new life")
                    await ann.wait_acked()
                    assert all(ann.statuses)
                    acked = len(bob.statuses)
                    await bob.append("zombie edit")  # node 1 still holds the old incarnation
                    await bob.wait(lambda: bob.denied is not None, 10, "PermissionDenied")
                    assert bob.denied == "document deleted"
                    assert bob.statuses[acked:] in ([], [False])  # never acked as stored
                    stored = await stored_text(pg_dsn, name)
                    assert stored == "new life", stored
                    # A fresh editor on node 1 gets the new incarnation only.
                    async with editors(cluster, name, [1]) as (again,):
                        await converged([ann, again], ["new life"])
                        assert str(again) == "new life"
    finally:
        cluster.stop()
        redis.close()


# -- behind a PgBouncer in transaction pooling --------------------------------------------------


@pytest.fixture
def pgbouncer(postgres: PostgresServer) -> Iterator[PgBouncer]:
    if pgbouncer_binary() is None:
        pytest.skip("pgbouncer is not installed (.ci/setup --dev installs it)")
    bouncer = PgBouncer(postgres, pool_mode="transaction")
    try:
        yield bouncer.start()
    finally:
        bouncer.close()


async def test_nodes_behind_pgbouncer_in_transaction_pooling_commit_and_converge(
    tmp_path, pg_dsn, pgbouncer, redis_server
):
    """Two server connections shared by two nodes' writers and readers: any named prepared
    statement would meet a server connection that lacks it (or has another of that name)."""
    database = pg_dsn.rsplit("/", 1)[1]
    through = pgbouncer.dsn(database)
    cluster = Nodes(tmp_path, through, redis_server.url, 2, compact_threshold=5)
    cluster.nodes[0].settings["store"] = through + "?pgbouncer=true"  # the DSN says so
    cluster.nodes[1].settings["store_statement_cache_size"] = 0  # the option says so
    cluster.start()
    name = "bounced"
    try:
        with anyio.fail_after(60):
            async with editors(cluster, name, [0, 1]) as docs:
                for k in range(30):
                    for e, doc in enumerate(docs):
                        await doc.append(tok(e, k))
                for doc in docs:
                    await doc.wait_acked(timeout=30)
                    assert all(doc.statuses)
                everything = [tok(e, k) for e in range(2) for k in range(30)]
                await converged(docs, everything)
            stored = await stored_text(pg_dsn, name)  # straight from PostgreSQL
            assert [t for t in everything if t not in stored] == []
            async with httpx.AsyncClient(base_url=cluster[1].http_url) as http:
                headers = {"Authorization": f"Bearer {cluster[1].token([name])}"}
                reply = await http.get(f"/api/documents/{name}", headers=headers)
                metrics = (await http.get("/metrics")).text
            assert reply.status_code == 200 and all(t in reply.json()["text"] for t in everything)
            assert metric_value(metrics, "tether_compactions_total") > 0
            for node in cluster:
                assert (await asyncio.to_thread(node.health))["database"]["state"] == "ok"
                assert "prepared statement" not in node.log()
    finally:
        cluster.stop()


@pytest.mark.parametrize("cache", [100, 0])
async def test_the_statement_cache_is_what_breaks_behind_pgbouncer(pg_dsn, pgbouncer, cache):
    """The control for the test above: two stores through the same two server connections,
    with asyncpg's default cache, meet 'prepared statement ... does not exist'; with 0 not."""
    through = pgbouncer.dsn(pg_dsn.rsplit("/", 1)[1])

    async def rounds() -> None:
        async with (
            PostgresStore(through, ledger=Ledger(), statement_cache_size=cache) as one,
            PostgresStore(through, ledger=Ledger(), statement_cache_size=cache) as two,
        ):
            for i in range(50):
                stores = (one, two)
                await asyncio.gather(
                    *[s.append("d", b"x%d" % i) for s in stores],
                    *[s.load("d") for s in stores],
                    *[s.heads(["d"]) for s in stores],
                )

    with anyio.fail_after(60):
        if cache:
            with pytest.raises(StorageError, match="prepared statement"):
                await rounds()
        else:
            await rounds()


# -- versions and reads on another node --------------------------------------------------------


async def test_a_version_taken_on_any_node_holds_every_edit_acked_before_it(tmp_path, pg_dsn):
    """Versions are saved outside the group-commit queue, from the node's document: that
    document must hold every edit acked (anywhere) before the version was asked for, and the
    REST read too. Node 1 has the document loaded by an editor, so it is not read afresh, and
    Redis is stalled with reconciliation slow, so only a catch-up from PostgreSQL can do it."""
    redis = RedisServer().start()
    cluster = Nodes(tmp_path, pg_dsn, redis.url, 2, bus_reconcile_interval=30).start()
    name = "versioned"
    headers = {"Authorization": f"Bearer {cluster[1].token([name])}"}
    try:
        with anyio.fail_after(60):
            async with (
                editors(cluster, name, [0, 1]) as (ann, _bob),
                httpx.AsyncClient(base_url=cluster[1].http_url, headers=headers) as http,
            ):
                redis.pause()
                for k in range(5):
                    await ann.append(tok(0, k))
                    await ann.wait_acked()  # committed in PostgreSQL: now ask node 1
                    created = await http.post(f"/api/versions/{name}", json={"label": f"v{k}"})
                    assert created.status_code == 201, created.text
                    version = created.json()["id"]
                    saved = await http.get(f"/api/versions/{name}", params={"id": version})
                    read = await http.get(f"/api/documents/{name}")
                    acked = [tok(0, j) for j in range(k + 1)]
                    assert [t for t in acked if t not in saved.json()["text"]] == [], k
                    assert [t for t in acked if t not in read.json()["text"]] == [], k
    finally:
        cluster.stop()
        redis.close()


# -- an append that failed must not leave later ones depending on it -------------------------


async def test_after_an_append_fails_past_the_outage_timeout_nothing_builds_on_it(
    tmp_path, own_postgres: PostgresServer
):
    """PostgreSQL is stopped past --store-outage-timeout: ann's edit X fails (nacked) after bob,
    on the same node, saw it; both then build on X. Committing those later edits without X
    would leave updates in PostgreSQL that nobody can integrate. Instead they are refused
    too, the document is rebuilt from PostgreSQL once it is back, and the editors are asked
    to resend: everything, X included, ends up committed."""
    dsn = own_postgres.create_database("lost_write")
    node = ServerProcess(tmp_path / "node", store=dsn, store_outage_timeout=1).start()
    name = "lost-write"
    try:
        with anyio.fail_after(60):
            async with editors([node], name, [0, 0]) as (ann, bob):  # type: ignore[arg-type]
                await ann.append("base ")
                await ann.wait_acked()
                own_postgres.stop()
                await ann.append("<X>")
                await bob.wait(lambda: "<X>" in str(bob), 10, "X fanned out locally")
                await ann.wait(lambda: False in ann.statuses, 20, "X nacked after the timeout")
                await ann.append("<Y>")  # built on X
                await bob.append("<Z>")  # so is this
                assert await ann.peer.alive() and await bob.peer.alive()
                own_postgres.start()
                everything = ["base ", "<X>", "<Y>", "<Z>"]

                # No event tells the test that the resent edits committed: poll PostgreSQL.
                deadline = time.monotonic() + 30
                while True:
                    stored = await stored_text(dsn, name)
                    if all(t in stored for t in everything):
                        break
                    assert time.monotonic() < deadline, f"PostgreSQL holds only {stored!r}"
                    await anyio.sleep(0.05)
                await converged([ann, bob], everything)
                assert sorted(str(ann)) == sorted(stored)
            metrics = await metrics_text(node)
            assert metric_value(metrics, "tether_document_reloads_total") >= 1
    finally:
        node.stop()

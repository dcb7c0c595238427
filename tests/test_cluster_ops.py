"""Scale-out, the operational edges: a stalled Redis, deleting a document other nodes serve,
passwords in the URLs, PgBouncer, versions and failed appends. Real nodes on a real PostgreSQL
and redis-server (see tests/test_cluster.py), attacked over sockets.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from tests.metrics_scrape import metric_value, metrics_text
from tests.serverproc import ServerProcess
from tests.test_cluster import Nodes, converged, editors, stored_text, tok
from tether.collab.bench.engines import RedisServer

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

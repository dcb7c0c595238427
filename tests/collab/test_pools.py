"""The worker pools (collab.runtime.pools) with real threads: each bounds the jobs it runs,
serves socket-path work before REST work, refuses REST work past its queue bound, and keeps a
thread's slot until the thread is done, whoever stopped waiting for it."""

from __future__ import annotations

import asyncio
import threading

import pytest

from tether.collab.runtime.pools import Pool, PoolFull, Pools

pytestmark = pytest.mark.anyio


class Gate:
    """A job that holds its thread until ``open``; says on the loop when it has started."""

    def __init__(self) -> None:
        self._go = threading.Event()
        self._loop = asyncio.get_running_loop()
        self.started = asyncio.Event()

    def job(self) -> str:
        self._loop.call_soon_threadsafe(self.started.set)
        if not self._go.wait(30):
            raise TimeoutError("the gate was never opened")
        return "done"

    def open(self) -> None:
        self._go.set()


async def test_socket_path_jobs_run_before_rest_jobs_that_waited_longer() -> None:
    pool = Pool("test", workers=1, queue=4)
    gate = Gate()
    order: list[str] = []
    try:
        held = asyncio.ensure_future(pool.run(gate.job))
        await asyncio.wait_for(gate.started.wait(), 10)
        rest = asyncio.ensure_future(pool.run(order.append, "rest", first=False))
        socket = asyncio.ensure_future(pool.run(order.append, "socket"))
        await asyncio.sleep(0)  # both are in their lanes
        assert (pool.running, pool.waiting) == (1, 2)
        gate.open()
        await asyncio.wait_for(asyncio.gather(held, rest, socket), 10)
        assert order == ["socket", "rest"]
        assert (pool.running, pool.waiting, pool.completed) == (0, 0, 3)
    finally:
        gate.open()
        pool.close()


async def test_rest_requests_past_threads_and_queue_are_refused_with_a_retry_time() -> None:
    pool = Pool("imports", workers=1, queue=1)
    first, second = pool.reserve(), pool.reserve()
    with pytest.raises(PoolFull) as refused:
        pool.reserve()
    assert refused.value.pool == "imports" and refused.value.retry_after >= 1
    assert "busy with other imports" in str(refused.value)
    assert (pool.reserved, pool.refused) == (2, 1)
    first.release()
    first.release()  # twice is once
    with pool.reserve():
        assert pool.reserved == 2
    second.release()
    assert pool.reserved == 0


async def test_a_cancelled_awaiter_keeps_its_slot_until_its_thread_is_done() -> None:
    pool = Pool("test", workers=1, queue=0)
    gate = Gate()
    try:
        abandoned = asyncio.ensure_future(pool.run(gate.job))
        await asyncio.wait_for(gate.started.wait(), 10)
        abandoned.cancel()
        with pytest.raises(asyncio.CancelledError):
            await abandoned
        next_job = asyncio.ensure_future(pool.run(lambda: "next"))
        await asyncio.sleep(0)  # it takes a free slot at once, or waits in its lane
        assert not next_job.done() and pool.running == 1 and pool.waiting == 1
        gate.open()
        assert await asyncio.wait_for(next_job, 10) == "next"
    finally:
        gate.open()
        pool.close()


async def test_a_waiter_cancelled_in_its_lane_leaves_it() -> None:
    pool = Pool("test", workers=1, queue=0)
    gate = Gate()
    try:
        held = asyncio.ensure_future(pool.run(gate.job))
        await asyncio.wait_for(gate.started.wait(), 10)
        waiting = asyncio.ensure_future(pool.run(lambda: "never"))
        await asyncio.sleep(0)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert pool.waiting == 0
        gate.open()
        assert await asyncio.wait_for(held, 10) == "done"
        assert await asyncio.wait_for(pool.run(lambda: "after"), 10) == "after"
    finally:
        gate.open()
        pool.close()


async def test_a_full_imports_pool_does_not_delay_loads_or_renders() -> None:
    pools = Pools()
    gate = Gate()
    try:
        busy = asyncio.ensure_future(pools.imports.run(gate.job, first=False))
        await asyncio.wait_for(gate.started.wait(), 10)
        assert await asyncio.wait_for(pools.loads.run(lambda: "loaded"), 10) == "loaded"
        assert await asyncio.wait_for(pools.renders.run(lambda: "drawn"), 10) == "drawn"
        assert not busy.done()
        gate.open()
        await asyncio.wait_for(busy, 10)
    finally:
        gate.open()
        pools.close()


async def test_a_job_that_raises_frees_its_slot_and_raises_to_its_awaiter() -> None:
    pool = Pool("test", workers=1, queue=0)
    try:

        def fails() -> None:
            raise ValueError("bad input")

        with pytest.raises(ValueError, match="bad input"):
            await pool.run(fails)
        assert await pool.run(lambda: 7) == 7
        assert pool.running == 0
    finally:
        pool.close()

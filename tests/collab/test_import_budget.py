"""The import memory budget (collab.rooms.import_budget): imports are charged their worst case
before they start, wait in arrival order while the budget is taken, and are refused with a
retry time once they have waited their while; one import alone always runs."""

from __future__ import annotations

import asyncio

import pytest

from tether.collab.rooms.import_budget import ImportBudget, ImportBusy, estimate

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_imports_that_fit_run_together_and_one_over_the_whole_budget_runs_alone() -> None:
    budget = ImportBudget(100, wait=0)
    first = await budget.charge(60)
    second = await budget.charge(40)
    with pytest.raises(ImportBusy):
        await budget.charge(1)
    first.release()
    second.release()
    alone = await budget.charge(10_000)  # more than the budget: charged as all of it
    assert budget.charged == 100
    with pytest.raises(ImportBusy) as refused:
        await budget.charge(1)
    assert refused.value.retry_after >= 1 and "import_memory_budget" in str(refused.value)
    alone.release()
    assert (budget.charged, budget.in_flight) == (0, 0)


async def test_a_waiting_import_starts_when_the_one_ahead_ends_and_in_arrival_order() -> None:
    budget = ImportBudget(100, wait=30)
    running = await budget.charge(100)
    started: list[str] = []

    async def importer(name: str, amount: int) -> None:
        with await budget.charge(amount):
            started.append(name)

    big = asyncio.ensure_future(importer("big", 90))
    await asyncio.sleep(0)  # big queues first
    small = asyncio.ensure_future(importer("small", 5))
    await asyncio.sleep(0)
    assert started == [] and not big.done() and not small.done()
    running.release()
    await asyncio.wait_for(asyncio.gather(big, small), 5)
    assert started == ["big", "small"]  # the small one did not overtake the big one
    assert (budget.charged, budget.in_flight) == (0, 0)


async def test_an_import_that_waits_too_long_is_refused_and_leaves_the_queue() -> None:
    budget = ImportBudget(100, wait=0.05)
    running = await budget.charge(100)
    with pytest.raises(ImportBusy):
        await budget.charge(50)
    running.release()
    assert (budget.charged, budget.in_flight) == (0, 0)
    again = await budget.charge(50)  # nobody left waiting ahead of it
    again.release()


async def test_a_cancelled_waiter_takes_nothing_and_does_not_block_those_behind_it() -> None:
    budget = ImportBudget(100, wait=30)
    running = await budget.charge(80)
    cancelled = asyncio.ensure_future(budget.charge(50))
    await asyncio.sleep(0)
    behind = asyncio.ensure_future(budget.charge(20))
    await asyncio.sleep(0)
    assert not behind.done()  # in arrival order, behind the one over the budget
    cancelled.cancel()
    charge = await asyncio.wait_for(behind, 5)
    assert budget.charged == 100
    charge.release()
    running.release()
    assert (budget.charged, budget.in_flight) == (0, 0)


def test_the_worst_case_grows_with_the_size_and_stops_growing_at_the_node_cap() -> None:
    assert estimate(2048, 300_000) < estimate(4096, 300_000)
    capped = estimate(4 * 1024 * 1024, 1000)
    assert capped < estimate(4 * 1024 * 1024, 300_000)
    assert capped < estimate(4 * 1024 * 1024 + 1024, 1000) < capped + 1024 * 1024

"""Issue 26, finding 6: peers that stop reading cannot make the server hold copies of a document
without bound. Each connection's queue was bounded, but not all of them together: 60 sockets
that never read, each syncing a document with an 8 MiB value, held +753 MB; 60 HTTP sessions,
+1.4 GB. Now every queued frame and every big answer in flight counts against one budget
(``--send-bytes-total``), a full budget closes the peers that stopped reading, and a peer that
sends but never reads is closed after ``--send-timeout``."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator

import anyio
import httpx
import pytest
from pycrdt import Doc, Map

from tests.metrics_scrape import metric_value, metrics_text
from tests.rawpeer import MuxPeer
from tests.serverproc import ServerProcess
from tests.test_exhaustion import non_reading_socket, presence_of, state_vector_of
from tether.collab.transport.send_budget import SendBudget
from tether.protocol.wire.http_wire import BATCH_TYPE, SESSION_HEADER, encode_batch
from tether.protocol.wire.messages import AuthToken, Awareness, Sync
from tether.protocol.wire.sync_payloads import SyncStep1

pytestmark = pytest.mark.anyio

BUDGET = 24 * 1024 * 1024
VALUE = 4 * 1024 * 1024  # one Map value: a struct that cannot be cut, so one 4 MiB frame
READERS = 12  # 12 x 4 MiB asked for: twice the budget


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    # Long ping/idle: only the send budget and the send timeout may end a connection here.
    with ServerProcess(
        tmp_path_factory.mktemp("budget"),
        send_bytes_total=BUDGET,
        send_timeout=4,
        ping_interval=20,
        idle_timeout=90,
    ) as running:
        yield running


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def seed(server: ServerProcess, name: str) -> MuxPeer:
    writer = await MuxPeer.connect(server.ws_url)
    doc = await writer.open(name, server.token([name]))
    value = Doc()
    value.get("meta", type=Map)["blob"] = "v" * VALUE
    await doc.send_update(value.get_update())
    await doc.wait_acked(timeout=20)
    assert doc.statuses[-1] is True
    return writer


async def scrape(server: ServerProcess, name: str, **labels: str) -> float:
    return metric_value(await metrics_text(server), name, **labels)


async def sample_max(server: ServerProcess, seen: list[float], stop: asyncio.Event) -> None:
    """The budget's gauge, sampled until ``stop`` (a measurement, not a synchronisation)."""
    while not stop.is_set():
        seen.append(await scrape(server, "tether_send_bytes"))
        with anyio.move_on_after(0.1):
            await stop.wait()


async def test_readers_that_never_read_hold_at_most_the_budget_and_readers_still_sync(
    server: ServerProcess,
) -> None:
    name = unique("nr")
    readonly = server.token([name], scope="readonly")
    evicted_before = await scrape(server, "tether_limit_refusals_total", limit="send_bytes_total")
    timed_out_before = await scrape(server, "tether_limit_refusals_total", limit="send_timeout")
    seen: list[float] = []
    stop = asyncio.Event()
    with anyio.fail_after(90):
        writer = await seed(server, name)
        sampler = asyncio.ensure_future(sample_max(server, seen, stop))
        readers = []
        try:
            for k in range(READERS):
                reader = await non_reading_socket(server.ws_url)
                await reader.send(AuthToken(name, readonly).encode())
                # A state vector of its own each: no two answers are the same request.
                await reader.send(Sync(name, SyncStep1(state_vector_of(7000 + k))).encode())
                readers.append(reader)
            # An editor that reads still gets the whole document, while they hold what they hold.
            async with await MuxPeer.connect(server.ws_url) as honest:
                doc = await honest.open(name, server.token([name]), timeout=60)
                assert len(str(doc.doc.get("meta", type=Map).get("blob", ""))) == VALUE
            # The stalled ones are closed (budget full, then their send timeout): nothing stays.
            while await scrape(server, "tether_send_bytes") > 0:
                await asyncio.sleep(0.1)  # polling a gauge, bounded by fail_after
        finally:
            stop.set()
            await sampler
            for reader in readers:
                reader.transport.abort()
            await writer.aclose()
    # Reservations are the diff's size; one more may overshoot by the difference it is resized to.
    assert max(seen) <= BUDGET + VALUE + 64 * 1024
    closed = await scrape(server, "tether_limit_refusals_total", limit="send_bytes_total")
    closed += await scrape(server, "tether_limit_refusals_total", limit="send_timeout")
    assert closed - evicted_before - timed_out_before >= READERS - BUDGET // VALUE


async def test_a_peer_that_sends_but_never_reads_is_closed_after_the_send_timeout(
    server: ServerProcess,
) -> None:
    """Never idle (it keeps sending presence), never reading: without a send deadline it held
    its queue until the queue's own bound, forever if the document changed slowly."""
    name = unique("talker")
    timed_out_before = await scrape(server, "tether_limit_refusals_total", limit="send_timeout")
    with anyio.fail_after(60):
        writer = await seed(server, name)
        reader = await non_reading_socket(server.ws_url)
        await reader.send(AuthToken(name, server.token([name], scope="readonly")).encode())
        await reader.send(Sync(name, SyncStep1(b"\x00")).encode())
        started = time.monotonic()
        try:
            while (
                await scrape(server, "tether_limit_refusals_total", limit="send_timeout")
                == timed_out_before
            ):
                with anyio.move_on_after(0.5):
                    await reader.send(Awareness(name, presence_of(42424242, "{}")).encode())
                    await asyncio.sleep(0.25)  # its pace of sending, not a synchronisation
            # Closed after the timeout (4 s), within one connection timer tick (ping 20 s).
            assert 4 <= time.monotonic() - started <= 40
            doc = writer.doc(name)
            await doc.append("still stored")
            await doc.wait_acked()
            assert doc.statuses[-1] is True
        finally:
            reader.transport.abort()
            await writer.aclose()


async def test_http_sessions_that_never_poll_hold_at_most_the_budget(
    server: ServerProcess,
) -> None:
    name = unique("hp")
    readonly = server.token([name], scope="readonly")
    seen: list[float] = []
    stop = asyncio.Event()
    with anyio.fail_after(90):
        writer = await seed(server, name)
        sampler = asyncio.ensure_future(sample_max(server, seen, stop))
        try:
            async with httpx.AsyncClient(base_url=server.http_url, timeout=30) as http:
                for k in range(READERS):
                    created = await http.post(
                        "/http/session", headers={"Authorization": f"Bearer {readonly}"}
                    )
                    assert created.status_code == 201
                    frames = [
                        AuthToken(name, readonly).encode(),
                        Sync(name, SyncStep1(state_vector_of(8000 + k))).encode(),
                    ]
                    sent = await http.post(
                        "/http/send",
                        content=encode_batch(frames),
                        headers={
                            SESSION_HEADER: created.json()["session"],
                            "Content-Type": BATCH_TYPE,
                        },
                    )
                    assert sent.status_code == 204
                async with await MuxPeer.connect(server.ws_url) as honest:
                    doc = await honest.open(name, server.token([name]), timeout=60)
                    assert len(str(doc.doc.get("meta", type=Map).get("blob", ""))) == VALUE
        finally:
            stop.set()
            await sampler
            await writer.aclose()
    assert max(seen) <= BUDGET + VALUE + 64 * 1024


# ---- the budget itself ---------------------------------------------------------------------


class _Holder:
    def __init__(self, budget: SendBudget, stalled: float) -> None:
        self.budget, self.stalled, self.evicted = budget, stalled, ""

    def stalled_for(self, now: float) -> float:
        return self.stalled

    def evict(self, limit: str) -> None:
        self.evicted = limit
        self.budget.remove(self, self.budget.held_by(self))


async def test_a_full_budget_closes_the_longest_stalled_holders_first_and_never_a_reader() -> None:
    budget = SendBudget(100, stalled_after=10)
    reading, stuck, stuck_longer = _Holder(budget, 0), _Holder(budget, 11), _Holder(budget, 30)
    for holder in (reading, stuck, stuck_longer):
        budget.add(holder, 30)
    waiter = _Holder(budget, 0)
    await budget.wait_for_room(waiter, 40)  # 90 + 40 > 100: the longest stall goes, then fits
    budget.add(waiter, 40)
    assert (stuck_longer.evicted, stuck.evicted, reading.evicted) == ("send_bytes_total", "", "")
    assert budget.used == 100 and budget.held_by(waiter) == 40


async def test_a_reservation_waits_for_room_and_an_empty_budget_takes_any_one() -> None:
    budget = SendBudget(100, stalled_after=10)
    first = _Holder(budget, 0)
    await budget.wait_for_room(first, 500)  # alone: a document larger than it still syncs
    budget.add(first, 500)
    second = _Holder(budget, 0)
    waiting = asyncio.ensure_future(budget.wait_for_room(second, 10))
    await asyncio.sleep(0)
    assert not waiting.done()
    budget.remove(first, 500)
    with anyio.fail_after(5):
        await waiting
    assert budget.used == 0 and not budget.would_wait(second, 10)

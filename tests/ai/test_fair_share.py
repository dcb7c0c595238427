"""The model is shared fairly (issue 10, item 8): a quota of queued+running suggestions per
connection and per token subject, round-robin dispatch, and no suggestions for readonly grants.

The real server runs the scripted provider, whose ``delay`` keeps each suggestion on the model
long enough for the flood to pile up; every wait is on a message, bounded by ``fail_after``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import Awaitable, Callable, Iterator

import anyio
import httpx
import pytest

from tests.ai.asking import UNSHAPED, Answer, collect, send_suggest
from tests.metrics_scrape import metric_value, metrics_text
from tests.serverproc import ServerProcess
from tether.ai.errors import Busy, QuotaExceeded
from tether.ai.suggest.scheduler import INTERACTIVE, Scheduler
from tether.protocol.clients.tether_client import DocumentHandle, TetherClient

pytestmark = pytest.mark.anyio

SLOW = {"pieces": [" one", " two", " three", " four", " five", " six"], "delay": 0.1}
CHANNELS = 9  # what the flooder opened: more than --ai-queue-limit (8)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(
        tmp_path_factory.mktemp("fair"),
        ai_provider="scripted",
        **UNSHAPED,
        ai_script=json.dumps(SLOW),
    ) as proc:
        yield proc


def _name(label: str) -> str:
    return f"fair-{label}-{uuid.uuid4().hex[:8]}"


async def _seeded(doc: DocumentHandle, text: str) -> None:
    doc.append(text)
    await doc.wait_acked()


async def _flood(client: TetherClient, label: str) -> list[DocumentHandle]:
    """One connection, nine documents, one suggestion asked on each."""
    docs = [await client.open(_name(f"{label}{i}")) for i in range(CHANNELS)]
    for i, doc in enumerate(docs):
        await _seeded(doc, f"Flood number {i} says")
        send_suggest(doc, f"f{i}")
    return docs


async def _first(doc: DocumentHandle, request_id: str) -> dict[str, object]:
    """The request's first message: its suggestion.start, or its refusal."""
    while True:
        message = json.loads(await doc.stateless.get())
        if message.get("id") == request_id:
            return dict(message)


async def _end(doc: DocumentHandle, request_id: str) -> dict[str, object]:
    while True:
        message = json.loads(await doc.stateless.get())
        if message.get("id") == request_id and message["type"] in (
            "suggestion.end",
            "suggestion.error",
        ):
            return dict(message)


async def test_one_connection_flooding_cannot_make_another_document_busy(
    server: ServerProcess,
) -> None:
    limit = {"limit": "ai_queue_per_connection"}
    before = metric_value(await metrics_text(server), "tether_limit_refusals_total", **limit)
    with anyio.fail_after(30):
        async with (
            TetherClient(server.ws_url, token=server.token(subject="flooder")) as flooder,
            TetherClient(server.ws_url, token=server.token(subject="victim")) as victim,
        ):
            docs = await _flood(flooder, "flood")
            firsts = [await _first(d, f"f{i}") for i, d in enumerate(docs)]
            # The flood is in (2 on the model, 7 refused): another user on another document
            # asks now, and is served.
            mine = await victim.open(_name("victim"))
            await _seeded(mine, "An innocent paragraph")
            send_suggest(mine, "v")
            answer: Answer = await collect(mine, "v", timeout=20)
            served = [i for i, m in enumerate(firsts) if m["type"] == "suggestion.start"]
            ends = [await _end(docs[i], f"f{i}") for i in served]
    codes = [m.get("code") for m in firsts]
    assert len(served) == 2, firsts  # --ai-queue-per-connection 2
    assert codes.count("quota") == CHANNELS - 2, firsts
    assert all(e["type"] == "suggestion.end" and e["reason"] == "done" for e in ends), ends
    assert answer.end.get("type") == "suggestion.end", answer.end
    assert answer.end["reason"] == "done" and answer.text == "".join(SLOW["pieces"])
    after = metric_value(await metrics_text(server), "tether_limit_refusals_total", **limit)
    assert after - before == CHANNELS - 2
    assert server.log().count("reached its AI quota (ai_queue_per_connection)") == 1


async def test_one_subject_on_many_connections_gets_its_share_and_no_more(
    server: ServerProcess,
) -> None:
    token = server.token(subject="many-sockets")
    with anyio.fail_after(30):
        async with contextlib.AsyncExitStack() as stack:
            clients = [
                await stack.enter_async_context(TetherClient(server.ws_url, token=token))
                for _ in range(3)
            ]
            docs = []
            for c, client in enumerate(clients):
                for i in range(2):
                    doc = await client.open(_name(f"subj{c}-{i}"))
                    await _seeded(doc, f"Socket {c} document {i}")
                    docs.append(doc)
            for i, doc in enumerate(docs):
                send_suggest(doc, f"s{i}")
            outcomes = await asyncio.gather(*(collect(d, f"s{i}") for i, d in enumerate(docs)))
    codes = [o.end.get("code") for o in outcomes]
    # Six asked over three sockets: four (--ai-queue-per-subject) are served, two refused.
    assert codes.count(None) == 4 and codes.count("quota") == 2, codes


async def test_readonly_grants_get_no_suggestions(server: ServerProcess) -> None:
    name = _name("readonly")
    async with TetherClient(server.ws_url, token=server.token([name])) as writer:
        doc = await writer.open(name)
        await _seeded(doc, "Only writers may ask")
        async with TetherClient(
            server.ws_url, token=server.token([name], scope="readonly")
        ) as reader:
            handle = await reader.open(name)
            send_suggest(handle, "ro")
            refused = await collect(handle, "ro")
    assert refused.end["type"] == "suggestion.error" and refused.end["code"] == "forbidden"
    assert "read-write" in refused.end["message"]
    async with httpx.AsyncClient(base_url=server.http_url) as http:
        reply = await http.post(
            "/api/suggest",
            json={"doc": name, "id": "h", "kind": "complete", "pos": 1},
            headers={"Authorization": f"Bearer {server.token([name], scope='readonly')}"},
        )
    assert reply.status_code == 403 and "read-write" in reply.json()["error"]


# ---- the scheduler alone: dispatch order and displacement --------------------------------------


async def test_dispatch_is_round_robin_by_connection_not_first_come() -> None:
    order: list[str] = []
    gate, started = asyncio.Event(), asyncio.Event()

    def job(label: str) -> Callable[[], Awaitable[str]]:
        async def run() -> str:
            if label == "blocker":
                started.set()
                await gate.wait()
            order.append(label)
            return label

        return run

    async with Scheduler(max_queue=16) as scheduler:
        blocker = scheduler.submit(job("blocker"), owner="x")
        await started.wait()  # the worker holds the blocker: the queue is what follows
        futures = [scheduler.submit(job(f"a{i}"), owner="a") for i in range(3)]
        futures += [scheduler.submit(job("b0"), owner="b"), scheduler.submit(job("c0"), owner="c")]
        gate.set()
        await asyncio.wait_for(asyncio.gather(blocker, *futures), 5)
    assert order == ["blocker", "a0", "b0", "c0", "a1", "a2"]


async def test_a_full_queue_displaces_the_heaviest_owner_not_the_newcomer() -> None:
    gate, started = asyncio.Event(), asyncio.Event()

    async def held() -> None:
        started.set()
        await gate.wait()

    async with Scheduler(max_queue=4, per_owner=0) as scheduler:
        running = scheduler.submit(held, owner="hog")
        await started.wait()
        hogged = [scheduler.submit(held, owner="hog") for _ in range(4)]
        newcomer = scheduler.submit(held, owner="new")  # full, but the hog has 4 queued
        with pytest.raises(Busy):
            await asyncio.wait_for(hogged[-1], 1)  # the hog's newest was refused instead
        scheduler.submit(held, owner="new")  # 3 hog vs 1: still displaces
        with pytest.raises(Busy):
            scheduler.submit(held, owner="new")  # 2 vs 2: the queue is simply full
        gate.set()
        await asyncio.wait_for(asyncio.gather(running, newcomer, *hogged[:2]), 5)


async def test_quota_counts_queued_and_running_and_frees_on_finish() -> None:
    gate = asyncio.Event()

    async def held() -> None:
        await gate.wait()

    refusals: list[str] = []
    async with Scheduler(
        8, per_owner=2, per_subject=3, on_refusal=lambda limit, _o: refusals.append(limit)
    ) as scheduler:
        first = scheduler.submit(held, INTERACTIVE, owner="a", subject="s")
        second = scheduler.submit(held, INTERACTIVE, owner="a", subject="s")
        with pytest.raises(QuotaExceeded):
            scheduler.submit(held, owner="a", subject="s")
        third = scheduler.submit(held, owner="b", subject="s")
        with pytest.raises(QuotaExceeded):
            scheduler.submit(held, owner="c", subject="s")
        scheduler.submit(held, owner="c", subject=None)  # no identity: only the connection quota
        second.cancel()  # a cancelled (superseded) job gives its slot back at once
        fourth = scheduler.submit(held, owner="a", subject="s")
        gate.set()
        await asyncio.wait_for(asyncio.gather(first, third, fourth), 5)
    assert refusals == ["ai_queue_per_connection", "ai_queue_per_subject"]


async def test_with_two_workers_two_jobs_run_at_once_and_a_third_waits() -> None:
    """One worker per model upstream: as many generations in flight as upstreams, no more."""
    gate = asyncio.Event()
    running: list[str] = []
    two_running = asyncio.Event()

    def job(label: str) -> Callable[[], Awaitable[str]]:
        async def run() -> str:
            running.append(label)
            if len(running) == 2:
                two_running.set()
            await gate.wait()
            return label

        return run

    async with Scheduler(max_queue=8, workers=2) as scheduler:
        futures = [scheduler.submit(job(name), owner=name) for name in ("a", "b", "c")]
        await asyncio.wait_for(two_running.wait(), 5)
        assert running == ["a", "b"] and scheduler.depth == 3  # c queued, not running
        assert len(scheduler.active) == 2
        gate.set()
        assert await asyncio.wait_for(asyncio.gather(*futures), 5) == ["a", "b", "c"]
    assert running == ["a", "b", "c"]

"""Prefetch and type-ahead on a generation in flight, over the real socket (scripted provider:
these are tests of the mechanics, so the model's pace is set by the script)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from tests.ai.asking import UNSHAPED, ask, collect, metric, send_suggest, wait_metric
from tests.serverproc import ServerProcess
from tether.protocol.clients.tether_client import DocumentHandle, TetherClient

pytestmark = pytest.mark.anyio

PIECES = [" and", " the", " gulls", " cried."]
# 0.15 s between pieces: a generation lasts ~0.6 s, long enough to type into while it runs.
SCRIPT = json.dumps({"pieces": PIECES, "delay": 0.15})


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(
        Path(tmp_path_factory.mktemp("prefetch")),
        ai_provider="scripted",
        **UNSHAPED,
        ai_script=SCRIPT,
        ai_prefetch_ms=200,
    ) as proc:
        yield proc


async def prefetch_count(server: ServerProcess, outcome: str) -> float:
    return await metric(server, "tether_ai_prefetch_total", outcome=outcome)


async def wait_prefetch(server: ServerProcess, outcome: str, above: float) -> None:
    await wait_metric(
        server, "tether_ai_prefetch_total", lambda v: v > above, outcome=outcome, timeout=60
    )


async def ask_then_type(
    client: TetherClient, name: str, first: str, then: str, request_id: str = "warm-up"
) -> DocumentHandle:
    """An editor types ``first``, asks once (prefetch serves editors who ask for completions),
    then types ``then`` and pauses."""
    doc = await client.open(name)
    doc.append(first)
    await doc.wait_acked()
    await ask(doc, request_id, max_tokens=None)
    doc.append(then)
    await doc.wait_acked()
    return doc


async def test_a_pause_computes_the_suggestion_the_next_request_gets(server) -> None:
    started = await prefetch_count(server, "started")
    used = await prefetch_count(server, "used")
    async with TetherClient(server.ws_url, token=server.token()) as client:
        doc = await ask_then_type(client, "prefetch-used", "The tide", " came in", "p0")
        # The editor stops typing: 200 ms later the server starts on its cursor.
        await wait_prefetch(server, "started", started)
        answer = await ask(doc, "p1", max_tokens=None)
    assert (answer.source, answer.text) == ("prefetch", "".join(PIECES))
    assert await prefetch_count(server, "used") == used + 1


async def test_typing_again_cancels_the_prefetch(server) -> None:
    started = await prefetch_count(server, "started")
    wasted = await prefetch_count(server, "wasted")
    async with TetherClient(server.ws_url, token=server.token()) as client:
        doc = await ask_then_type(client, "prefetch-typing", "The wind", " rose", "p0")
        await wait_prefetch(server, "started", started)
        doc.append(" sharply over")  # not how the prefetched text begins: it is stale now
        await doc.wait_acked()
        await wait_prefetch(server, "wasted", wasted)
        answer = await ask(doc, "p2", max_tokens=None)
    # Served for the new cursor (by the model, or by a prefetch made after this pause).
    assert answer.source in ("model", "prefetch") and answer.text == "".join(PIECES)


async def test_prefetch_follows_the_editor_while_someone_types_at_the_top(server) -> None:
    started = await prefetch_count(server, "started")
    token = server.token()
    async with (
        TetherClient(server.ws_url, token=token) as mine,
        TetherClient(server.ws_url, token=token) as theirs,
    ):
        doc = await mine.open("prefetch-two-editors")
        doc.append("Title\n\nThe gulls flew over the pier while")
        await doc.wait_acked()
        await ask(doc, "m0", max_tokens=None)
        other = await theirs.open("prefetch-two-editors")
        await other.wait_text(lambda text: text.startswith("Title"))
        other.insert(0, "New ")  # someone else edits the top meanwhile
        await other.wait_acked()
        doc.append(" the boats came in while")  # ends like before: a plain diff is fooled
        await doc.wait_acked()
        await wait_prefetch(server, "started", started)
        answer = await ask(doc, "m1", max_tokens=None)
    assert answer.source == "prefetch"


async def test_no_prefetch_for_an_editor_that_never_asks(server) -> None:
    started = await prefetch_count(server, "started")
    async with TetherClient(server.ws_url, token=server.token()) as client:
        doc = await client.open("prefetch-never-asks")
        doc.append("Typed by a script that never wants suggestions")
        await doc.wait_acked()
        # Its pause comes and goes (the debounce is 200 ms); then someone who asks pauses too.
        await ask_then_type(client, "prefetch-asks", "Typed by", " someone who does", "q0")
        await wait_prefetch(server, "started", started)
    assert await prefetch_count(server, "started") == started + 1


async def test_typing_the_start_of_a_streaming_suggestion_serves_the_rest_from_it(
    server,
) -> None:
    models = await metric(server, "tether_ai_requests_total", source="model")
    async with TetherClient(server.ws_url, token=server.token()) as client:
        doc = await client.open("inflight-typeahead")
        doc.append("The nets were heavy")
        await doc.wait_acked()
        send_suggest(doc, "t1")
        first_delta = ""
        with anyio.fail_after(10):
            while not first_delta:
                message = json.loads(await doc.stateless.get())
                if message.get("type") == "suggestion.delta":
                    first_delta = message["text"]
        doc.append(first_delta)  # the editor types what it sees, as it streams
        await doc.wait_acked()
        send_suggest(doc, "t2")
        second = await collect(doc, "t2")
    assert first_delta == PIECES[0]
    assert second.source == "typeahead"
    assert second.text == "".join(PIECES)[len(first_delta) :]
    assert second.end["reason"] == "done" and second.end["tokens"] == len(PIECES)
    # One generation served both requests.
    assert await metric(server, "tether_ai_requests_total", source="model") == models + 1


async def test_an_interactive_request_preempts_a_running_prefetch(server) -> None:
    completed = await prefetch_count(server, "completed")
    async with TetherClient(server.ws_url, token=server.token()) as client:
        asker = await ask_then_type(client, "preempt-asker", "Someone else", " entirely", "a0")
        await wait_prefetch(server, "completed", completed)
        started = await prefetch_count(server, "started")
        wasted = await prefetch_count(server, "wasted")
        await ask_then_type(client, "preempt-writer", "A prefetch", " nobody waits for", "w0")
        await wait_prefetch(server, "started", started)
        # Not what the asker's own prefetch computed (another length): the model is needed,
        # and the writer's speculative run gives it up at once.
        answer = await ask(asker, "x1", max_tokens=8)
    assert answer.source == "model" and answer.text == "".join(PIECES)
    assert await prefetch_count(server, "wasted") == wasted + 1


@pytest.fixture(scope="module")
def local_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(
        Path(tmp_path_factory.mktemp("prefetch-local")),
        ai_provider="local",
        **UNSHAPED,
        ai_max_tokens=6,
        ai_prefetch_ms=200,
    ) as proc:
        yield proc


async def test_the_embedded_model_prefetches_and_the_cache_replays_it(local_server) -> None:
    server = local_server
    completed = await prefetch_count(server, "completed")
    async with TetherClient(server.ws_url, token=server.token()) as client:
        doc = await ask_then_type(
            client,
            "prefetch-real-model",
            "The harbour was quiet that morning,",
            " and the fishermen",
            "r0",
        )
        await wait_prefetch(server, "completed", completed)
        prefetched = await ask(doc, "r1", max_tokens=None)
        repeated = await ask(doc, "r2", max_tokens=None)
    assert prefetched.source == "prefetch" and prefetched.text.strip()
    assert prefetched.end["reason"] == "done"
    assert (repeated.source, repeated.text) == ("exact", prefetched.text)

"""Model servers that misbehave, behind the real server (issue 37, item 4): two OpenAI-compatible
upstreams on 127.0.0.1 (``tests/ai/sse_upstream.py``, each on its own thread), one of them
made to hang, trickle, answer HTML or 429, never end an event or flood. Its documents' requests
move on to the other before anything was generated, with no error for the editor; what it sends
costs the server a bounded read; /health and ``ai.status`` say which model servers are down,
and ``degraded`` when none is up.

The deadlines are configured short (0.5 s) and the whole-suggestion timeout long (30 s), so an
error's message says which deadline ended it; nothing asserts how long anything took. Waits
are on messages, bounded by ``fail_after``, or on /health for what the server does on its own
timers (health checks).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import pytest

from tests.ai.asking import UNSHAPED, Answer, ask, send_suggest
from tests.ai.model_servers import homed_documents
from tests.ai.sse_upstream import ThreadedUpstream
from tests.serverproc import ServerProcess
from tether.ai.model.providers.openai import MAX_TOKEN_CHARS
from tether.protocol.clients.tether_client import DocumentHandle, TetherClient
from tether.protocol.wire.ai_messages import WatchStatus

pytestmark = pytest.mark.anyio

TEXT = "The harbour master checked the tide tables and"


@pytest.fixture(scope="module")
def upstreams() -> Iterator[tuple[ThreadedUpstream, ThreadedUpstream]]:
    with ThreadedUpstream() as bad, ThreadedUpstream() as good:
        yield bad, good


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory,
    upstreams: tuple[ThreadedUpstream, ThreadedUpstream],
) -> Iterator[ServerProcess]:
    bad, good = upstreams
    with ServerProcess(
        tmp_path_factory.mktemp("upstream-faults"),
        ai_provider="openai",
        openai_base_url=f"{bad.url},{good.url}",
        openai_model="tiny",
        **UNSHAPED,
        ai_cache_entries=0,  # every ask reaches a model server
        ai_timeout=30,
        openai_first_token_timeout=0.5,
        openai_idle_timeout=0.5,
        openai_health_seconds=0.2,
    ) as proc:
        yield proc


def upstreams_health(server: ServerProcess) -> list[dict[str, Any]]:
    return list(server.health()["ai"]["upstreams"])


def until_health(server: ServerProcess, check: Any, timeout: float = 30.0) -> dict[str, Any]:
    """/health once ``check`` holds for it: health checks run on the server's own timer, so
    there is no event to wait on over the wire."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        health = server.health()
        if check(health):
            return health
        time.sleep(0.05)
    raise AssertionError(f"/health never satisfied the check: {server.health()}")


def all_up(health: dict[str, Any]) -> bool:
    return all(u["up"] for u in health["ai"]["upstreams"])


@pytest.fixture
async def bad_documents(
    server: ServerProcess, upstreams: tuple[ThreadedUpstream, ThreadedUpstream]
) -> AsyncIterator[list[str]]:
    """Two new documents homed on the upstream that will misbehave; every upstream is up
    before the test and again after it (a 429's Retry-After: seconds later), and the next
    test starts with a clean record (one answer from it forgives its failures)."""
    bad, good = upstreams
    members = [f"0:127.0.0.1:{bad.state.port}", f"1:127.0.0.1:{good.state.port}"]
    until_health(server, all_up)
    names = homed_documents(members, 3, "faulty-")[:3]
    yield names[:2]
    until_health(server, all_up)
    async with TetherClient(server.ws_url, token=server.token(), reconnect=False) as client:
        answer = await ask(await opened(client, names[2]), "forgiven")
    assert answer.end["reason"] == "done", answer.end


async def opened(client: TetherClient, name: str) -> DocumentHandle:
    doc = await client.open(name)
    doc.append(TEXT)
    await doc.wait_acked()
    return doc


def from_the_good_one(answer: Answer, good: ThreadedUpstream) -> None:
    assert answer.end["type"] == "suggestion.end" and answer.end["reason"] == "done", answer.end
    assert answer.text == "".join(good.state.piece_texts())


@pytest.mark.parametrize(
    "misbehaviour",
    [
        {"mode": "hang", "models": "hang"},  # accepts and never answers, model list too
        # Event-stream headers, then nothing; a byte at a time, never a whole event. Their
        # model lists fail too, so they stay down while the test looks (a model list that
        # answers brings one back after a backoff: test_upstream_faults).
        {"mode": "silent", "models": "status"},
        {"mode": "trickle", "delay": 0.2, "models": "status"},
        {"mode": "html", "models": "html"},  # 200 with an HTML page, model list too
        # 429 with a model list that answers: down for its Retry-After all the same.
        {"mode": "status", "status": 429, "extra_headers": "Retry-After: 5\r\n", "models": "ok"},
    ],
    ids=["hang", "silent", "trickle", "html", "429"],
)
async def test_a_misbehaving_model_server_hands_its_documents_on_before_any_token(
    server: ServerProcess,
    upstreams: tuple[ThreadedUpstream, ThreadedUpstream],
    bad_documents: list[str],
    misbehaviour: dict[str, Any],
) -> None:
    bad, good = upstreams
    failovers = upstreams_health(server)[0]["failovers"]
    async with TetherClient(server.ws_url, token=server.token(), reconnect=False) as client:
        first, second = [await opened(client, name) for name in bad_documents]
        with bad.behaving(**misbehaviour):
            from_the_good_one(await ask(first, "a"), good)
            health = server.health()["ai"]
            faulty = health["upstreams"][0]
            assert faulty["up"] is False and faulty["failovers"] == failovers + 1, health
            assert health["state"] == "ready" and "1 of 2 model upstreams down" in health["reason"]
            asked = len(bad.state.requests)
            from_the_good_one(await ask(second, "b"), good)  # straight on: it is down
            assert len(bad.state.requests) == asked
            # Health checks go on, and it stays down while it misbehaves.
            checks = bad.state.health_checks
            until_health(server, lambda _: bad.state.health_checks >= checks + 2)
            assert upstreams_health(server)[0]["up"] is False


async def test_with_every_model_server_down_ai_is_degraded_and_editors_hear_it(
    server: ServerProcess, upstreams: tuple[ThreadedUpstream, ThreadedUpstream]
) -> None:
    bad, good = upstreams
    until_health(server, all_up)
    heard: list[dict[str, Any]] = []  # ai.status messages, in order
    async with TetherClient(server.ws_url, token=server.token(), reconnect=False) as client:
        doc = await opened(client, "all-down")
        doc.send_stateless(WatchStatus("st").encode())
        await watching(doc, heard, until="ready")
        with bad.behaving(mode="html", models="html"), good.behaving(mode="html", models="html"):
            send_suggest(doc, "down")
            end = await watching(doc, heard, request_id="down")
            assert end["type"] == "suggestion.error" and end["code"] == "provider_unavailable"
            status = await watching(doc, heard, until="degraded")
            assert "no model upstream is up" in status["reason"]
            health = server.health()
            assert health["status"] == "degraded" and health["ai"]["state"] == "degraded"
            send_suggest(doc, "refused")  # at once, asking nobody
            asked = len(bad.state.requests) + len(good.state.requests)
            assert (await watching(doc, heard, request_id="refused"))["code"] == (
                "provider_unavailable"
            )
            assert len(bad.state.requests) + len(good.state.requests) == asked
        await watching(doc, heard, until="ready")
        send_suggest(doc, "back")
        assert (await watching(doc, heard, request_id="back"))["reason"] == "done"
    states = [m["state"] for m in heard]  # the reason changes too, as each one goes down
    assert [s for i, s in enumerate(states) if not i or s != states[i - 1]] == [
        "ready",
        "degraded",
        "ready",
    ]


async def watching(
    doc: DocumentHandle,
    heard: list[dict[str, Any]],
    *,
    until: str | None = None,
    request_id: str | None = None,
) -> dict[str, Any]:
    """Read ``doc``'s AI messages, keeping every ``ai.status`` in ``heard``, until a status of
    state ``until`` (already heard last counts) or the end of request ``request_id``; that
    message."""
    if until is not None and heard and heard[-1]["state"] == until:
        return heard[-1]
    with anyio.fail_after(15):
        while True:
            message = dict(json.loads(await doc.stateless.get()))
            if message.get("type") == "ai.status":
                heard.append(message)
                if message["state"] == until:
                    return message
            elif message.get("id") == request_id and message["type"] in (
                "suggestion.end",
                "suggestion.error",
            ):
                return message


def server_rss_bytes(server: ServerProcess) -> int:
    assert server.proc is not None
    with open(f"/proc/{server.proc.pid}/status") as status:
        fields = dict(line.split(":", 1) for line in status)
    return int(fields["VmRSS"].split()[0]) * 1024


async def test_an_event_that_never_ends_costs_the_server_a_bounded_read(
    server: ServerProcess,
    upstreams: tuple[ThreadedUpstream, ThreadedUpstream],
    bad_documents: list[str],
) -> None:
    bad, good = upstreams
    async with TetherClient(server.ws_url, token=server.token(), reconnect=False) as client:
        doc = await opened(client, bad_documents[0])
        before = server_rss_bytes(server)
        bad.state.sent_bytes = 0
        with bad.behaving(mode="endless-event"):
            from_the_good_one(await ask(doc, "endless"), good)
            sent = bad.state.sent_bytes
    # Read up to an event's bound, then the connection was dropped: what got out is that plus
    # socket buffers (without the bound: 500 MB in 10 s, and the server's memory with it).
    assert sent < 16 * 2**20
    assert server_rss_bytes(server) - before < 64 * 2**20


async def test_a_flood_is_cut_at_max_tokens_characters(
    server: ServerProcess,
    upstreams: tuple[ThreadedUpstream, ThreadedUpstream],
    bad_documents: list[str],
) -> None:
    bad, _ = upstreams
    async with TetherClient(server.ws_url, token=server.token(), reconnect=False) as client:
        doc = await opened(client, bad_documents[0])
        with bad.behaving(mode="flood", pieces=200, flood_chars=1024):  # 204,800 characters
            answer = await ask(doc, "flood", max_tokens=24)
    assert answer.end["reason"] == "done", answer.end
    assert len(answer.text) == 24 * MAX_TOKEN_CHARS
    assert upstreams_health(server)[0]["up"] is True  # it answered: flooding is not down


async def test_a_trickle_after_the_first_token_ends_at_the_idle_deadline(
    server: ServerProcess,
    upstreams: tuple[ThreadedUpstream, ThreadedUpstream],
    bad_documents: list[str],
) -> None:
    bad, _ = upstreams
    async with TetherClient(server.ws_url, token=server.token(), reconnect=False) as client:
        doc = await opened(client, bad_documents[0])
        with bad.behaving(mode="trickle", good=1, delay=0.2):
            answer = await ask(doc, "trickle")
    assert answer.text == "w0 "
    assert answer.end["type"] == "suggestion.error", answer.end
    assert answer.end["code"] == "provider_timeout"
    assert "no token for 0.5s mid-stream" in answer.end["message"]  # not the 30 s timeout

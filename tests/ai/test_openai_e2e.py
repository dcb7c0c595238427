"""The real server (a subprocess) with ``--ai-provider openai`` pointed at a real SSE upstream on
127.0.0.1 that the test runs on its own thread and event loop (``tests/ai/sse_upstream.py``).

Over a real ``/ws`` socket and ``POST /api/suggest``: deltas stream from the upstream, the
upstream is sent the document text the server holds (a ``suggest`` carries none), upstream
failures become clear ``suggestion.error`` messages while sync carries on, and one pooled
keep-alive connection serves request after request. Every wait is on a message, an ack or the
upstream's own record, bounded by ``anyio.fail_after``; nothing sleeps for synchronisation.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import pytest

from tests.ai.asking import UNSHAPED
from tests.ai.sse_upstream import ThreadedUpstream
from tests.metrics_scrape import metric_value, metrics_text
from tests.serverproc import ServerProcess
from tether.protocol.clients.tether_client import DocumentHandle, TetherClient
from tether.protocol.wire.ai_messages import decode_server_message

pytestmark = pytest.mark.anyio

MODEL = "tiny-e2e"
AI_TIMEOUT = 1.0
TERMINAL = ("suggestion.end", "suggestion.error")


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ---- the upstream and the servers -------------------------------------------------------------


@pytest.fixture(scope="module")
def upstream() -> Iterator[ThreadedUpstream]:
    with ThreadedUpstream() as up:
        yield up


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, upstream: ThreadedUpstream
) -> Iterator[ServerProcess]:
    with ServerProcess(
        tmp_path_factory.mktemp("openai-e2e"),
        ai_provider="openai",
        **UNSHAPED,
        openai_base_url=upstream.url,
        openai_model=MODEL,
        openai_api_key="sk-e2e",
        ai_timeout=AI_TIMEOUT,
    ) as proc:
        yield proc


# ---- editors ----------------------------------------------------------------------------------


@dataclass
class Editor:
    client: TetherClient
    doc: DocumentHandle

    async def suggest(self, request_id: str, pos: int | None = None) -> list[dict[str, Any]]:
        """Ask for a completion at ``pos`` (default: the end) and return this request's
        messages up to and including its ``suggestion.end`` or ``suggestion.error``."""
        text = str(self.doc)
        payload = {
            "type": "suggest",
            "id": request_id,
            "kind": "complete",
            "pos": utf16_len(text) if pos is None else pos,
        }
        assert "text" not in payload  # the server supplies the document itself
        self.doc.send_stateless(json.dumps(payload))
        mine: list[dict[str, Any]] = []
        while not mine or mine[-1]["type"] not in TERMINAL:
            raw = await self.doc.stateless.get()
            message = json.loads(raw)
            if message.get("id") == request_id:
                decode_server_message(raw)  # the published codec reads every message
                mine.append(message)
        return mine

    async def edit_acked(self, text: str) -> None:
        self.doc.append(text)
        await self.doc.wait_acked()


@contextlib.asynccontextmanager
async def editor(server: ServerProcess, name: str) -> AsyncIterator[Editor]:
    async with TetherClient(server.ws_url, token=server.token([name]), reconnect=False) as client:
        yield Editor(client, await client.open(name))


def doc_name(label: str) -> str:
    return f"openai-{label}-{uuid.uuid4().hex[:8]}"


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def deltas(messages: list[dict[str, Any]]) -> str:
    return "".join(m["text"] for m in messages if m["type"] == "suggestion.delta")


def assert_streamed(messages: list[dict[str, Any]], upstream: ThreadedUpstream) -> dict[str, Any]:
    """start, deltas carrying exactly the upstream's text, then one ``done`` end."""
    kinds = [m["type"] for m in messages]
    assert kinds[0] == "suggestion.start" and messages[0]["source"] == "model", messages
    assert kinds[-1] == "suggestion.end", messages
    assert set(kinds[1:-1]) == {"suggestion.delta"}, messages
    pieces = upstream.state.piece_texts()
    assert messages[1]["text"] == pieces[0]  # the first piece goes out alone
    assert deltas(messages) == "".join(pieces)
    end = messages[-1]
    assert end["reason"] == "done" and end["tokens"] == len(pieces), end
    assert end["ttft_ms"] > 0
    return end


def assistant_prefill(body: dict[str, Any]) -> str:
    """The open assistant turn the server sent: the document text before the cursor."""
    last = body["messages"][-1]
    assert last["role"] == "assistant", body["messages"]
    return str(last["content"])


# ---- the socket path --------------------------------------------------------------------------

OPENING = "Harbour log, week one.\n\n"
LINE_A = "The ferry left at seven and the gulls followed it out past the breakwater."
LINE_B = " Nobody on the quay had seen the lighthouse keeper since Sunday."


async def test_suggest_streams_the_upstream_deltas_from_the_server_held_text(
    server: ServerProcess, upstream: ThreadedUpstream
) -> None:
    name = doc_name("stream")
    with anyio.fail_after(10):
        async with editor(server, name) as a, editor(server, name) as b:
            await a.edit_acked(OPENING + LINE_A)
            await b.doc.wait_text(OPENING + LINE_A)
            await b.edit_acked(LINE_B)  # another editor's words: only the server has them all
            await a.doc.wait_text(OPENING + LINE_A + LINE_B)
            seen = len(upstream.state.requests)
            messages = await a.suggest("s1")
    assert_streamed(messages, upstream)
    assert len(upstream.state.requests) == seen + 1
    body = upstream.state.requests[-1]
    assert upstream.state.paths[-1] == "/v1/chat/completions"
    assert upstream.state.headers[-1]["authorization"] == "Bearer sk-e2e"
    assert body["model"] == MODEL and body["stream"] is True
    assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant"]
    # Both editors' text, as the server merged it, is what the model continues.
    assert assistant_prefill(body) == OPENING + LINE_A + LINE_B
    metrics = await metrics_text(server)
    assert metric_value(metrics, "tether_ai_ttft_seconds_count", provider="openai", path="ws") >= 1


async def test_a_suggest_mid_document_sends_the_text_before_the_cursor(
    server: ServerProcess, upstream: ThreadedUpstream
) -> None:
    name = doc_name("cursor")
    before, after = OPENING + "Tide at noon, 😀 calm seas,", " and rain by evening."
    with anyio.fail_after(10):
        async with editor(server, name) as a:
            await a.edit_acked(before + after)
            messages = await a.suggest("mid", utf16_len(before))
    assert_streamed(messages, upstream)
    prefill = assistant_prefill(upstream.state.requests[-1])
    assert prefill == before
    assert after.strip() not in json.dumps(upstream.state.requests[-1]["messages"])


async def test_upstream_500_is_provider_unavailable_and_the_socket_keeps_syncing(
    server: ServerProcess, upstream: ThreadedUpstream
) -> None:
    name = doc_name("500")
    with anyio.fail_after(10):
        async with editor(server, name) as a, editor(server, name) as b:
            await a.edit_acked(LINE_A)
            await b.doc.wait_text(LINE_A)
            with upstream.behaving(mode="status", status=500):
                failed = await a.suggest("bad")
            # The editor's socket is untouched: its next edit is stored and fanned out.
            await a.edit_acked(LINE_B)
            await b.doc.wait_text(LINE_A + LINE_B)
            await b.edit_acked("!")
            await a.doc.wait_text(LINE_A + LINE_B + "!")
            # ... and the next suggestion streams.
            again = await a.suggest("good")
            connects = (a.client.connects, b.client.connects)
    assert [m["type"] for m in failed] == ["suggestion.start", "suggestion.error"], failed
    error = failed[-1]
    assert error["code"] == "provider_unavailable", error
    assert "500" in error["message"] and "model crashed" in error["message"], error
    assert len(error["message"]) < 300
    assert_streamed(again, upstream)
    assert connects == (1, 1)
    metrics = await metrics_text(server)
    assert metric_value(metrics, "tether_ai_errors_total", code="provider_unavailable") >= 1


async def test_a_hanging_upstream_is_provider_timeout_within_the_configured_time(
    server: ServerProcess, upstream: ThreadedUpstream
) -> None:
    name = doc_name("hang")
    with anyio.fail_after(10):
        async with editor(server, name) as a:
            await a.edit_acked(LINE_A)
            released = upstream.state.hangs_released
            with upstream.behaving(mode="hang"):
                started = time.monotonic()
                failed = await a.suggest("slow")
                elapsed = time.monotonic() - started
                # The server gave up on the request: it closed the hung upstream connection.
                await upstream.run(upstream.state.wait_until(lambda s: s.hangs_released > released))
            await a.edit_acked(LINE_B)
            again = await a.suggest("after")
    assert [m["type"] for m in failed] == ["suggestion.start", "suggestion.error"], failed
    assert failed[-1]["code"] == "provider_timeout", failed
    assert failed[-1]["message"]
    assert AI_TIMEOUT * 0.9 < elapsed < AI_TIMEOUT + 1.5, elapsed
    assert_streamed(again, upstream)


async def test_an_unreachable_upstream_is_provider_unavailable(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    port = closed_port()
    with ServerProcess(
        tmp_path_factory.mktemp("openai-down"),
        ai_provider="openai",
        **UNSHAPED,
        openai_base_url=f"http://127.0.0.1:{port}",
        openai_model=MODEL,
        ai_timeout=AI_TIMEOUT,
    ) as down:
        name = doc_name("down")
        with anyio.fail_after(10):
            async with editor(down, name) as a, editor(down, name) as b:
                await a.edit_acked(LINE_A)
                failed = await a.suggest("nobody")
                await a.edit_acked(LINE_B)
                await b.doc.wait_text(LINE_A + LINE_B)
    assert [m["type"] for m in failed] == ["suggestion.start", "suggestion.error"], failed
    error = failed[-1]
    assert error["code"] == "provider_unavailable", error
    assert f"127.0.0.1:{port}" in error["message"], error


async def test_sequential_suggests_reuse_one_upstream_connection(
    server: ServerProcess, upstream: ThreadedUpstream
) -> None:
    name = doc_name("pool")
    count = 8
    with anyio.fail_after(15):
        async with editor(server, name) as a:
            await a.edit_acked(LINE_A)
            first = len(upstream.state.requests)
            opened = upstream.state.connections
            for i in range(count):
                await a.edit_acked(f" {i}")
                assert_streamed(await a.suggest(f"p{i}"), upstream)
    state = upstream.state
    assert len(state.requests) == first + count
    used = set(state.connection_of[first:])
    assert len(used) == 1, state.connection_of[first:]
    assert state.connections - opened <= 1  # at most the one, if no idle one was pooled yet
    # Each request saw the text as it stood after that round's edit.
    assert assistant_prefill(state.requests[-1]).endswith(f" {count - 1}")


# ---- the HTTP path ----------------------------------------------------------------------------


async def sse_messages(server: ServerProcess, body: dict[str, Any]) -> list[dict[str, Any]]:
    headers = {"Authorization": "Bearer " + server.token([body["doc"]])}
    messages: list[dict[str, Any]] = []
    async with (
        httpx.AsyncClient(base_url=server.http_url, timeout=10) as http,
        http.stream("POST", "/api/suggest", json=body, headers=headers) as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        async for line in response.aiter_lines():
            if line:
                assert line.startswith("data: "), line
                messages.append(json.loads(line.removeprefix("data: ")))
    return messages


async def test_http_suggest_streams_sse_from_the_upstream_with_the_server_held_text(
    server: ServerProcess, upstream: ThreadedUpstream
) -> None:
    name = doc_name("http")
    with anyio.fail_after(10):
        async with editor(server, name) as a:
            await a.edit_acked(OPENING + LINE_A)
        text = OPENING + LINE_A
        body = {"doc": name, "id": "h1", "kind": "complete", "pos": utf16_len(text)}
        messages = await sse_messages(server, body)
    assert all(m["id"] == "h1" for m in messages), messages
    assert_streamed(messages, upstream)
    assert assistant_prefill(upstream.state.requests[-1]) == text
    metrics = await metrics_text(server)
    ttft_count = "tether_ai_ttft_seconds_count"
    assert metric_value(metrics, ttft_count, provider="openai", path="http") >= 1


async def test_http_suggest_with_uploaded_text_sends_that_text_upstream(
    server: ServerProcess, upstream: ThreadedUpstream
) -> None:
    uploaded = "Uploaded notes only the request carries."
    body = {
        "doc": doc_name("upload"),
        "id": "h2",
        "kind": "complete",
        "pos": utf16_len(uploaded),
        "text": uploaded,
    }
    with anyio.fail_after(10):
        messages = await sse_messages(server, body)
    assert_streamed(messages, upstream)
    assert assistant_prefill(upstream.state.requests[-1]) == uploaded


async def test_http_suggest_reports_an_upstream_failure_as_an_sse_error(
    server: ServerProcess, upstream: ThreadedUpstream
) -> None:
    uploaded = "Anything at all."
    body = {"doc": doc_name("http500"), "kind": "complete", "pos": 4, "text": uploaded}
    with anyio.fail_after(10), upstream.behaving(mode="status", status=503):
        messages = await sse_messages(server, body)
    assert [m["type"] for m in messages] == ["suggestion.start", "suggestion.error"], messages
    assert messages[-1]["code"] == "provider_unavailable"
    assert "503" in messages[-1]["message"]

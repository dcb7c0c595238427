"""The OpenAI-compatible provider against a real SSE server on 127.0.0.1 that can misbehave."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import socket
import time
from collections.abc import AsyncIterator

import anyio
import pytest

from tests.ai.sse_upstream import Upstream, serve_upstream
from tether.ai.errors import ProviderError, ProviderUnavailable
from tether.ai.model.providers.base import Cancellation, GenerationRequest, confidence_of
from tether.ai.model.providers.openai import (
    OpenAIProvider,
    SseDecoder,
    UpstreamDown,
    chatml_to_messages,
    event_text,
)
from tether.ai.text.context import COMPLETE_PREFIX, STOP_COMPLETE

pytestmark = pytest.mark.anyio

PROMPT = COMPLETE_PREFIX + "The harbour was quiet"


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    async with serve_upstream() as state:
        yield state


def request(max_tokens: int = 32, stop: tuple[str, ...] = STOP_COMPLETE) -> GenerationRequest:
    return GenerationRequest(prompt=PROMPT, session="doc\0peer", max_tokens=max_tokens, stop=stop)


async def collect(provider: OpenAIProvider, cancel: Cancellation | None = None) -> list[str]:
    return [piece async for piece in provider.stream(request(), cancel or Cancellation())]


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_chat_deltas_stream_in_order_and_the_body_is_as_documented(upstream: Upstream):
    async with OpenAIProvider(upstream.url, "tiny", api_key="sk-test") as provider:
        with anyio.fail_after(5):
            pieces = await collect(provider)
    assert pieces == ["w0 ", "w1 ", "w2 ", "w3 ", "w4 "]
    assert upstream.paths == ["/v1/chat/completions"]
    assert upstream.headers[0]["authorization"] == "Bearer sk-test"
    body = upstream.requests[0]
    assert body["model"] == "tiny"
    assert body["stream"] is True
    assert body["max_tokens"] == 32
    assert body["temperature"] == 0
    assert body["stop"] == ["\n\n"]  # the ChatML end marker means nothing to a chat template
    roles = [message["role"] for message in body["messages"]]
    assert roles == ["system", "user", "assistant"]
    assert body["messages"][1]["content"] == "Continue my document."
    assert body["messages"][2]["content"] == "The harbour was quiet"


async def test_completions_send_the_prompt_as_is_and_stream_choice_text(upstream: Upstream):
    base = upstream.url + "/v1"  # a base URL that already names /v1 is not doubled
    async with OpenAIProvider(base, "tiny", api="completions") as provider:
        with anyio.fail_after(5):
            pieces = await collect(provider)
    assert pieces == ["t0 ", "t1 ", "t2 ", "t3 ", "t4 "]
    assert upstream.paths == ["/v1/completions"]
    assert "authorization" not in upstream.headers[0]
    body = upstream.requests[0]
    assert body["prompt"] == PROMPT
    assert body["stop"] == list(STOP_COMPLETE)
    assert "messages" not in body


@pytest.mark.parametrize("api", ["chat", "completions"])
async def test_logprobs_asked_for_become_each_piece_s_confidence(upstream: Upstream, api: str):
    async with OpenAIProvider(upstream.url, "tiny", api=api, logprobs=True) as provider:
        with anyio.fail_after(5):
            pieces = await collect(provider)
    assert upstream.requests[0]["logprobs"] == (True if api == "chat" else 1)
    confidences = [confidence_of(piece) for piece in pieces]
    assert confidences == pytest.approx([math.exp(-0.1 * (i + 1)) for i in range(5)])


async def test_without_logprobs_nothing_is_asked_and_pieces_carry_none(upstream: Upstream):
    async with OpenAIProvider(upstream.url, "tiny") as provider:
        with anyio.fail_after(5):
            pieces = await collect(provider)
    assert "logprobs" not in upstream.requests[0]
    assert [confidence_of(piece) for piece in pieces] == [None] * 5


async def test_an_upstream_refusing_logprobs_is_asked_again_without_and_never_again(
    upstream: Upstream,
):
    upstream.mode = "no-logprobs"
    async with OpenAIProvider(upstream.url, "tiny", logprobs=True) as provider:
        with anyio.fail_after(5):
            first = await collect(provider)
            second = await collect(provider)
    assert first == second == ["w0 ", "w1 ", "w2 ", "w3 ", "w4 "]
    assert [bool(body.get("logprobs")) for body in upstream.requests] == [True, False, False]
    assert confidence_of(first[0]) is None  # one word under the sure rule, not an error


def test_logprobs_that_are_not_numbers_give_no_confidence():
    chat = {"choices": [{"delta": {"content": "x"}, "logprobs": {"content": [{"logprob": "a"}]}}]}
    assert confidence_of(event_text(json.dumps(chat), "chat")) is None
    odd = {"choices": [{"text": "x", "logprobs": {"token_logprobs": [None, -0.5]}}]}
    assert confidence_of(event_text(json.dumps(odd), "completions")) is None
    positive = {"choices": [{"text": "x", "logprobs": {"token_logprobs": [3.0]}}]}
    assert confidence_of(event_text(json.dumps(positive), "completions")) == 1.0


async def test_five_sequential_requests_share_one_keep_alive_connection(upstream: Upstream):
    async with OpenAIProvider(upstream.url, "tiny") as provider:
        with anyio.fail_after(5):
            for _ in range(5):
                assert len(await collect(provider)) == 5
    assert upstream.connections == 1
    assert len(upstream.requests) == 5
    assert provider.connections_opened == 1
    assert provider.requests_sent == 5
    assert provider.warm_hits() == 0


@pytest.mark.parametrize("status", [500, 429])
async def test_an_upstream_error_status_is_unavailable_with_a_short_message(
    upstream: Upstream, status: int
):
    upstream.mode = "status"
    upstream.status = status
    upstream.extra_headers = "Retry-After: 3\r\n"
    upstream.error_body = json.dumps({"error": {"message": "model crashed " + "x" * 5000}}).encode()
    async with OpenAIProvider(upstream.url, "tiny") as provider:
        with anyio.fail_after(5), pytest.raises(ProviderUnavailable) as caught:
            await collect(provider)
        message = str(caught.value)
        assert f"{status} Upstream Says No" in message
        assert "model crashed" in message
        assert len(message) < 300
        assert ("retry after 3s" in message) == (status == 429)
        # The error answer was read whole, so the connection stays usable.
        upstream.mode = "stream"
        with anyio.fail_after(5):
            assert len(await collect(provider)) == 5
    assert upstream.connections == 1


async def test_a_refused_key_is_unavailable_without_echoing_the_upstream_text(
    upstream: Upstream,
):
    upstream.mode = "status"
    upstream.status = 401
    upstream.error_body = b'{"error": {"message": "Incorrect API key provided: sk-wro***ong"}}'
    async with OpenAIProvider(upstream.url, "tiny", api_key="sk-wrong") as provider:
        with anyio.fail_after(5), pytest.raises(ProviderUnavailable) as caught:
            await collect(provider)
    assert "401" in str(caught.value)
    assert "credentials" in str(caught.value)
    assert "sk-" not in str(caught.value)


async def test_an_upstream_that_never_answers_is_down_at_the_first_token_deadline(
    upstream: Upstream,
):
    upstream.mode = "hang"
    async with OpenAIProvider(upstream.url, "tiny", first_token_timeout=0.3) as provider:
        started = time.perf_counter()
        with anyio.fail_after(5), pytest.raises(UpstreamDown) as caught:
            await collect(provider)
        assert 0.25 < time.perf_counter() - started < 1.5
    assert provider.attempts == 1  # a request that reached the upstream is never sent again
    assert "sent no token within 0.3s" in str(caught.value)


async def test_a_read_timeout_before_any_token_is_down_too(upstream: Upstream):
    upstream.mode = "hang"
    async with OpenAIProvider(upstream.url, "tiny", timeout=0.3) as provider:
        with anyio.fail_after(5), pytest.raises(UpstreamDown):
            await collect(provider)


async def test_a_refused_connection_is_retried_then_unavailable():
    port = closed_port()
    async with OpenAIProvider(f"http://127.0.0.1:{port}", "tiny", retries=2) as provider:
        with anyio.fail_after(5), pytest.raises(ProviderUnavailable) as caught:
            await collect(provider)
    assert provider.attempts == 3
    assert provider.requests_sent == 0
    assert f"127.0.0.1:{port}" in str(caught.value)
    assert "3 attempts" in str(caught.value)


async def test_a_malformed_event_is_a_provider_error_after_the_good_pieces(upstream: Upstream):
    upstream.mode = "malformed"
    pieces: list[str] = []
    async with OpenAIProvider(upstream.url, "tiny") as provider:
        with anyio.fail_after(5), pytest.raises(ProviderError) as caught:
            async for piece in provider.stream(request(), Cancellation()):
                pieces.append(piece)
    assert type(caught.value) is ProviderError
    assert "malformed" in str(caught.value)
    assert pieces == ["w0 "]


async def test_a_connection_dropped_mid_stream_is_a_provider_error(upstream: Upstream):
    upstream.mode = "drop"
    pieces: list[str] = []
    async with OpenAIProvider(upstream.url, "tiny") as provider:
        with anyio.fail_after(5), pytest.raises(ProviderError) as caught:
            async for piece in provider.stream(request(), Cancellation()):
                pieces.append(piece)
        assert "mid-stream" in str(caught.value)
        assert pieces == ["w0 ", "w1 "]
        assert provider.attempts == 1  # never retried once the response started
        upstream.mode = "stream"
        with anyio.fail_after(5):
            assert len(await collect(provider)) == 5


async def test_cancelling_stops_within_one_event_and_the_next_request_works(
    upstream: Upstream,
):
    upstream.pieces = 100
    upstream.delay = 0.2
    cancel = Cancellation()
    pieces: list[str] = []
    async with OpenAIProvider(upstream.url, "tiny") as provider:
        with anyio.fail_after(5):
            async for piece in provider.stream(request(), cancel):
                pieces.append(piece)
                if len(pieces) == 2:
                    cancel.cancel()
                    cancelled_at = time.perf_counter()
            assert time.perf_counter() - cancelled_at < 0.1  # before the next event is due
            assert pieces == ["w0 ", "w1 "]
            await upstream.client_gone.wait()  # the response was closed, not left hanging
            upstream.pieces, upstream.delay = 3, 0.0
            assert await collect(provider) == ["w0 ", "w1 ", "w2 "]
    assert upstream.connections == 2  # the cancelled connection was dropped, not reused dirty


async def test_a_consumer_that_stops_iterating_closes_the_response(upstream: Upstream):
    upstream.pieces = 100
    upstream.delay = 0.05
    async with OpenAIProvider(upstream.url, "tiny") as provider:
        with anyio.fail_after(5):
            async with contextlib.aclosing(provider.stream(request(), Cancellation())) as it:
                async for _ in it:
                    break
            await upstream.client_gone.wait()


async def test_a_cancelled_task_closes_the_response(upstream: Upstream):
    upstream.pieces = 100
    upstream.delay = 0.05
    first = asyncio.Event()

    async def consume(provider: OpenAIProvider) -> None:
        async for _ in provider.stream(request(), Cancellation()):
            first.set()

    async with OpenAIProvider(upstream.url, "tiny") as provider:
        with anyio.fail_after(5):
            task = asyncio.ensure_future(consume(provider))
            await first.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await upstream.client_gone.wait()


async def test_streaming_before_the_provider_is_entered_is_unavailable():
    provider = OpenAIProvider("http://127.0.0.1:9", "tiny")
    with pytest.raises(ProviderUnavailable, match="not started"):
        await collect(provider)


def test_chatml_becomes_messages_and_an_empty_open_turn_is_dropped():
    assert chatml_to_messages(COMPLETE_PREFIX) == [
        {"role": "system", "content": chatml_to_messages(COMPLETE_PREFIX)[0]["content"]},
        {"role": "user", "content": "Continue my document."},
    ]
    assert chatml_to_messages(COMPLETE_PREFIX + "Once")[-1] == {
        "role": "assistant",
        "content": "Once",
    }
    assert chatml_to_messages("plain text") == [{"role": "user", "content": "plain text"}]


def test_sse_lines_split_on_cr_and_lf_only_across_chunk_boundaries():
    decoder = SseDecoder()
    line_separator = "\u2028"  # valid unescaped inside JSON; str.splitlines would cut here
    assert decoder.feed(f'data: {{"a": "x{line_separator}y"}}\r'.encode()) == []
    assert decoder.feed(b"\n\r\n: keep-alive\n\ndata: 1\ndata: 2\n") == [
        f'{{"a": "x{line_separator}y"}}'
    ]
    assert decoder.feed(b"\n") == ["1\n2"]
    assert decoder.feed(b"data: [DONE]") == []
    assert decoder.close() == ["[DONE]"]


def test_an_unknown_api_or_url_is_refused_at_construction():
    with pytest.raises(ValueError):
        OpenAIProvider("http://127.0.0.1:1", "tiny", api="embeddings")
    with pytest.raises(ValueError):
        OpenAIProvider("127.0.0.1:1", "tiny")

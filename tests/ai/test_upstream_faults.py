"""Model upstreams that misbehave fail fast and cost bounded memory (issue 37, item 4): the
OpenAI-compatible provider against a real SSE server on 127.0.0.1 that hangs, trickles, answers
HTML or 429, never ends an event or floods; and the pool that moves requests on, with members
scripted in place of upstreams.

Deadlines are configured short (tenths of a second) so the tests stay fast; what is asserted
is which error came and what was read or delivered, never how long it took. Every wait is
bounded by ``fail_after``.
"""

from __future__ import annotations

import asyncio
import email.utils
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from tests.ai.sse_upstream import Upstream, serve_upstream
from tether.ai.errors import ProviderError, ProviderTimeout, ProviderUnavailable
from tether.ai.model.fair import SHARE
from tether.ai.model.providers.base import Cancellation, GenerationRequest, Piece
from tether.ai.model.providers.openai import (
    MAX_TOKEN_CHARS,
    RETRY_AFTER_MAX_SECONDS,
    OpenAIProvider,
    SseDecoder,
    UpstreamDown,
    retry_after,
)
from tether.ai.model.providers.pool import UpstreamPool

pytestmark = pytest.mark.anyio

QUICK = {"first_token_timeout": 0.3, "idle_timeout": 0.3, "health_timeout": 0.3}


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    async with serve_upstream() as state:
        yield state


def request(max_tokens: int = 8, document: str = "doc") -> GenerationRequest:
    return GenerationRequest("The harbour was quiet", f"{document}\x001\x000", max_tokens)


async def read(provider: Any, max_tokens: int = 8, pieces: list[str] | None = None) -> list[str]:
    got = pieces if pieces is not None else []
    with anyio.fail_after(10):
        async for piece in provider.stream(request(max_tokens), Cancellation()):
            got.append(piece)
    return got


# ---- the provider: answers that are not a stream of tokens -----------------------------------


async def test_an_html_page_with_200_is_down_not_an_empty_suggestion(upstream: Upstream) -> None:
    upstream.mode = "html"
    async with OpenAIProvider(upstream.url, "tiny", **QUICK) as provider:
        with pytest.raises(UpstreamDown) as caught:
            await read(provider)
    assert "text/html, not an event stream" in str(caught.value)


async def test_429_is_down_for_its_retry_after(upstream: Upstream) -> None:
    upstream.mode, upstream.status = "status", 429
    upstream.extra_headers = "Retry-After: 7\r\n"
    async with OpenAIProvider(upstream.url, "tiny", **QUICK) as provider:
        with pytest.raises(UpstreamDown) as caught:
            await read(provider)
    assert caught.value.retry_after == 7.0
    assert "429" in str(caught.value)


def test_retry_after_reads_seconds_and_dates_and_is_bounded() -> None:
    assert retry_after("12") == 12.0
    assert retry_after("86400") == RETRY_AFTER_MAX_SECONDS
    soon = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 20.0 < (retry_after(soon) or 0.0) <= 30.0
    past = email.utils.formatdate(time.time() - 30, usegmt=True)
    assert retry_after(past) == 0.0
    assert retry_after(None) is None and retry_after("soon") is None


async def test_headers_then_silence_is_down_at_the_first_token_deadline(
    upstream: Upstream,
) -> None:
    upstream.mode = "silent"
    async with OpenAIProvider(upstream.url, "tiny", **QUICK) as provider:
        with pytest.raises(UpstreamDown) as caught:
            await read(provider)
        with anyio.fail_after(5):
            await upstream.client_gone.wait()  # the connection was closed, not left hanging
    assert "sent no token within 0.3s" in str(caught.value)


async def test_a_trickle_before_the_first_token_is_down(upstream: Upstream) -> None:
    upstream.mode, upstream.delay = "trickle", 0.05  # bytes keep coming; no event completes
    async with OpenAIProvider(upstream.url, "tiny", **QUICK) as provider:
        with pytest.raises(UpstreamDown) as caught:
            await read(provider)
    assert "sent no token within 0.3s" in str(caught.value)


async def test_a_trickle_after_the_first_token_ends_at_the_idle_deadline(
    upstream: Upstream,
) -> None:
    upstream.mode, upstream.good, upstream.delay = "trickle", 1, 0.05
    pieces: list[str] = []
    async with OpenAIProvider(upstream.url, "tiny", timeout=60, **QUICK) as provider:
        with pytest.raises(ProviderTimeout) as caught:
            await read(provider, pieces=pieces)
    assert pieces == ["w0 "]
    assert "no token for 0.3s mid-stream" in str(caught.value)


# ---- the provider: bytes and pieces are bounded ----------------------------------------------


async def test_an_event_that_never_ends_is_cut_at_its_bound_and_the_connection_dropped(
    upstream: Upstream,
) -> None:
    upstream.mode = "endless-event"
    async with OpenAIProvider(upstream.url, "tiny", **QUICK) as provider:
        with pytest.raises(UpstreamDown) as caught:
            await read(provider)
        with anyio.fail_after(5):
            await upstream.client_gone.wait()
    assert "is broken" in str(caught.value)  # an event, or the answer, over its bytes
    # What the upstream got out before the client hung up: the bound plus socket buffers,
    # not the hundreds of megabytes a reader without a bound takes in a few seconds.
    assert upstream.sent_bytes < 16 * 2**20


async def test_an_endless_event_after_a_token_is_the_editors_error(upstream: Upstream) -> None:
    upstream.mode, upstream.good = "endless-event", 1
    pieces: list[str] = []
    async with OpenAIProvider(upstream.url, "tiny", **QUICK) as provider:
        with pytest.raises(ProviderError) as caught:
            await read(provider, pieces=pieces)
    assert type(caught.value) is ProviderError and pieces == ["w0 "]


async def test_a_flood_is_cut_at_max_tokens_pieces_and_characters(upstream: Upstream) -> None:
    upstream.mode, upstream.pieces, upstream.flood_chars = "flood", 200, 1024  # 204,800 chars
    async with OpenAIProvider(upstream.url, "tiny", **QUICK) as provider:
        pieces = await read(provider, max_tokens=24)
        assert len("".join(pieces)) == 24 * MAX_TOKEN_CHARS
        upstream.mode, upstream.pieces = "stream", 40  # more events than tokens asked for
        assert len(await read(provider, max_tokens=24)) == 24


async def test_answers_within_their_bounds_keep_their_connection(upstream: Upstream) -> None:
    upstream.pieces = 24  # exactly max_tokens: read to its [DONE], so the connection is reused
    async with OpenAIProvider(upstream.url, "tiny", **QUICK) as provider:
        for _ in range(3):
            assert len(await read(provider, max_tokens=24)) == 24
    assert upstream.connections == 1


def test_the_sse_decoder_holds_one_event_at_most_however_the_bytes_arrive() -> None:
    decoder = SseDecoder(max_event_bytes=1024)
    with pytest.raises(ProviderError):
        for _ in range(2000):
            decoder.feed(b"x")  # one line that never ends, a byte at a time
    decoder = SseDecoder(max_event_bytes=1024)
    with pytest.raises(ProviderError):
        for _ in range(100):
            decoder.feed(b"data: 0123456789\n")  # lines of one event that never ends
    decoder = SseDecoder(max_event_bytes=1024)
    events = []
    for _ in range(1000):  # many events, each small: fine however many
        events += decoder.feed(b'data: {"a": 1}\r\n\r')
    assert events == ['{"a": 1}'] * 999  # the last CR may still be half of a CRLF
    assert decoder.feed(b"\n") == ['{"a": 1}']


# ---- health checks ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("models", "status", "healthy"),
    [("json", 200, True), ("html", 200, False), ("status", 503, False), ("hang", 200, False)],
)
async def test_a_health_check_wants_a_json_model_list(
    upstream: Upstream, models: str, status: int, healthy: bool
) -> None:
    upstream.models, upstream.status = models, status
    async with OpenAIProvider(upstream.url, "tiny", **QUICK) as provider:
        with anyio.fail_after(5):
            assert await provider.healthy() is healthy


# ---- the pool, with scripted members ---------------------------------------------------------


class Member:
    """A pool member scripted by the test: its health, and how its next streams go."""

    name = "openai"

    def __init__(self, where: str) -> None:
        self.where = where
        self.health = True
        self.fail: Exception | None = None
        self.hold: asyncio.Event | None = None
        self.served: list[str] = []
        self.holding = asyncio.Event()

    async def healthy(self) -> bool:
        return self.health

    async def stream(self, request: GenerationRequest, cancel: Cancellation) -> AsyncIterator[str]:
        if self.fail is not None:
            raise self.fail
        self.served.append(f"{SHARE.get()}@{request.session.split(chr(0))[0]}")
        if self.hold is not None:
            self.holding.set()
            await self.hold.wait()
        yield Piece(f"from {self.where}")

    def warm_hits(self) -> int:
        return 0

    async def __aenter__(self) -> Member:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


async def ask(pool: UpstreamPool, document: str = "doc", share: str = "") -> str:
    token = SHARE.set(share)
    try:
        with anyio.fail_after(5):
            return "".join(
                [p async for p in pool.stream(request(document=document), Cancellation())]
            )
    finally:
        SHARE.reset(token)


def home(pool: UpstreamPool, index: int) -> str:
    """A document whose home is the pool's ``index``th member."""
    name = list(pool.upstreams)[index]
    return next(d for d in (f"doc-{i}" for i in range(512)) if pool.ring.order(d)[0] == name)


async def test_a_busy_upstream_failing_its_health_check_is_marked_down() -> None:
    first, second = Member("a:1"), Member("b:2")
    first.hold = asyncio.Event()
    async with UpstreamPool([first, second], health_seconds=3600) as pool:  # type: ignore[list-item]
        busy = asyncio.ensure_future(ask(pool, home(pool, 0)))
        with anyio.fail_after(5):
            await first.holding.wait()
        upstream = next(iter(pool.upstreams.values()))
        assert upstream.in_flight == 1
        first.health = False
        await pool.check_health()
        assert not upstream.up  # with its request still in flight
        assert await ask(pool, home(pool, 0)) == "from b:2"  # the next moves on
        first.hold.set()
        assert await busy == "from a:1"  # the one in flight finishes where it was


async def test_a_429_keeps_its_upstream_down_past_passing_health_checks() -> None:
    first, second = Member("a:1"), Member("b:2")
    async with UpstreamPool([first, second], health_seconds=3600) as pool:  # type: ignore[list-item]
        document = home(pool, 0)
        first.fail = UpstreamDown("429 Too Many Requests", retry_after=RETRY_AFTER_MAX_SECONDS)
        assert await ask(pool, document) == "from b:2"
        first.fail = None
        await pool.check_health()  # the model list answers, but the 429 said wait
        upstream = next(iter(pool.upstreams.values()))
        assert not upstream.up and upstream.failovers == 1
        upstream.down_until = 0.0  # as if its Retry-After had passed
        await pool.check_health()
        assert upstream.up
        assert await ask(pool, document) == "from a:1"


async def test_ai_is_degraded_with_every_upstream_down_and_listeners_hear_each_change() -> None:
    first, second = Member("a:1"), Member("b:2")
    heard: list[tuple[str, str]] = []
    async with UpstreamPool([first, second], health_seconds=3600) as pool:  # type: ignore[list-item]
        pool.add_listener(lambda: heard.append(pool.state()))
        assert pool.state() == ("ready", "")
        first.health = False
        await pool.check_health()
        assert pool.state()[0] == "ready" and "1 of 2" in pool.state()[1]
        second.health = False
        await pool.check_health()
        state, reason = pool.state()
        assert state == "degraded" and "no model upstream is up" in reason
        with pytest.raises(ProviderUnavailable):
            await ask(pool)  # at once: nobody to ask
        first.health = second.health = True
        await pool.check_health()
        assert pool.state() == ("ready", "")
    assert [state for state, _ in heard] == ["ready", "degraded", "ready", "ready"]


async def test_each_upstream_serves_its_waiting_requests_by_share_not_arrival() -> None:
    only = Member("a:1")
    only.hold = asyncio.Event()
    async with UpstreamPool([only], health_seconds=3600) as pool:  # type: ignore[list-item]
        asks = [asyncio.ensure_future(ask(pool, "big", "sub:hog"))]
        with anyio.fail_after(5):
            await only.holding.wait()
        asks += [asyncio.ensure_future(ask(pool, f"big{i}", "sub:hog")) for i in range(3)]
        asks.append(asyncio.ensure_future(ask(pool, "small", "sub:victim")))
        upstream = next(iter(pool.upstreams.values()))
        with anyio.fail_after(5):
            while upstream.gate.waiting < 4:
                await asyncio.sleep(0)
        only.hold.set()
        with anyio.fail_after(5):
            await asyncio.gather(*asks)
    assert only.served[:2] == ["sub:hog@big", "sub:victim@small"]


async def test_failures_in_a_row_keep_an_upstream_down_longer_and_an_answer_forgives() -> None:
    first, second = Member("a:1"), Member("b:2")
    async with UpstreamPool([first, second], health_seconds=10) as pool:  # type: ignore[list-item]
        document = home(pool, 0)
        upstream = next(iter(pool.upstreams.values()))
        first.fail = UpstreamDown("sent no token within 5s")  # its model list still answers
        pauses = []
        for _ in range(3):
            began = time.monotonic()
            assert await ask(pool, document) == "from b:2"
            pauses.append(round(upstream.down_until - began))
            await pool.check_health()
            assert not upstream.up  # healthy, but within its backoff
            upstream.down_until = 0.0  # as if the backoff had passed
            await pool.check_health()
            assert upstream.up
        assert pauses == [10, 20, 40]
        first.fail = None
        assert await ask(pool, document) == "from a:1"
        assert upstream.strikes == 0

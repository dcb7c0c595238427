"""Several OpenAI-compatible upstreams as one provider: the bounded-load ring (pure), and the pool
against real SSE servers on 127.0.0.1 (stickiness per document, failover before the first
piece, health checks bringing an upstream back, round-robin)."""

from __future__ import annotations

import contextlib
import math
import socket
from collections.abc import AsyncIterator

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.ai.sse_upstream import Upstream, serve_upstream
from tether.ai.errors import ProviderError, ProviderUnavailable
from tether.ai.model.providers.base import Cancellation, GenerationRequest
from tether.ai.model.providers.openai import OpenAIProvider
from tether.ai.model.providers.pool import UpstreamPool, affinity_key
from tether.ai.model.providers.ring import BoundedRing

NAMES = ["a", "b", "c"]


# ---- the ring (pure) ---------------------------------------------------------------------------


@given(st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=60, unique=True))
def test_a_key_keeps_its_upstream_and_losing_one_moves_only_its_keys(keys: list[str]) -> None:
    ring = BoundedRing(NAMES)
    idle: dict[str, int] = {}
    before = {key: ring.pick(key, idle, NAMES) for key in keys}
    assert before == {key: ring.pick(key, idle, NAMES) for key in keys}  # stable
    after = {key: ring.pick(key, idle, ["a", "c"]) for key in keys}
    for key in keys:
        if before[key] != "b":
            assert after[key] == before[key]  # only b's keys moved
        else:
            assert after[key] in ("a", "c")


@given(st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=200))
def test_no_upstream_goes_over_its_bound_as_requests_arrive(keys: list[str]) -> None:
    """Each request picked and held: whatever the keys (one hot document included), no upstream
    holds more than ceil(1.25 x the average) in flight."""
    ring = BoundedRing(NAMES, slack=0.25)
    loads = dict.fromkeys(NAMES, 0)
    for held, key in enumerate(keys, start=1):
        name = ring.pick(key, loads, NAMES)
        assert name is not None
        loads[name] += 1
        assert max(loads.values()) <= math.ceil(1.25 * held / len(NAMES))


def test_one_hot_document_spills_to_its_next_upstream_always_the_same() -> None:
    ring = BoundedRing(NAMES, slack=0.25)
    first, second, _third = ring.order("hot-doc")
    loads = dict.fromkeys(NAMES, 0)
    picks = []
    for _ in range(6):
        name = ring.pick("hot-doc", loads, NAMES)
        assert name is not None
        loads[name] += 1
        picks.append(name)
    assert picks[0] == first and second in picks
    assert ring.pick("hot-doc", dict.fromkeys(NAMES, 0), NAMES) == first  # idle again: home
    assert ring.pick("x", {}, []) is None


def test_the_affinity_key_is_the_document() -> None:
    def request(session: str) -> GenerationRequest:
        return GenerationRequest("p", session, 4)

    assert affinity_key(request("team/doc\x0012\x003")) == "team/doc"
    assert affinity_key(request("plain-key")) == "plain-key"


# ---- the pool, against real SSE servers ------------------------------------------------------


def _request(document: str, editor: int = 1) -> GenerationRequest:
    return GenerationRequest(f"prompt of {document}", f"{document}\0{editor}\x000", 8)


async def _ask(pool: UpstreamPool, document: str, editor: int = 1) -> str:
    with anyio.fail_after(10):
        return "".join([p async for p in pool.stream(_request(document, editor), Cancellation())])


def _served(upstream: Upstream) -> set[str]:
    """The documents whose prompts an upstream answered."""
    return {
        message["content"].removeprefix("prompt of ")
        for body in upstream.requests
        for message in body.get("messages", [])
    }


@contextlib.asynccontextmanager
async def _pool(*urls: str, **options: object) -> AsyncIterator[UpstreamPool]:
    providers = [OpenAIProvider(url, "tiny", retries=0) for url in urls]
    async with UpstreamPool(providers, **options) as pool:  # type: ignore[arg-type]
        yield pool


def _documents_of(pool: UpstreamPool, index: int, count: int = 1) -> list[str]:
    """Documents the ring gives the ``index``th upstream first. Upstreams are named by their
    random ports, so fixed document names would sometimes all land on another one (with 6
    names, in 3% of runs)."""
    name = list(pool.upstreams)[index]
    found = [d for d in (f"doc-{i}" for i in range(256)) if pool.ring.order(d)[0] == name]
    assert len(found) >= count, f"{len(found)} of 256 documents on {name}"
    return found[:count]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.anyio
async def test_every_editor_of_a_document_gets_the_same_upstream() -> None:
    async with serve_upstream() as one, serve_upstream() as two:
        async with _pool(one.url, two.url) as pool:
            documents = [f"doc-{i}" for i in range(16)]
            for editor in (1, 2, 3):
                for document in documents:
                    assert await _ask(pool, document, editor) == "w0 w1 w2 w3 w4 "
        first, second = _served(one), _served(two)
        assert first and second  # both take documents
        assert not first & second  # none went to both
        assert first | second == set(documents)
        assert [u["requests"] for u in pool.health()] == [len(first) * 3, len(second) * 3]


@pytest.mark.anyio
async def test_a_down_upstream_hands_its_documents_to_the_next_with_no_error() -> None:
    dead = f"http://127.0.0.1:{_closed_port()}"
    async with serve_upstream() as alive:
        async with _pool(dead, alive.url, health_seconds=3600) as pool:
            first = _documents_of(pool, 0)[0]  # the dead upstream's: it is found down
            others = [f"doc-{i}" for i in range(8) if f"doc-{i}" != first][:7]
            for document in [first, *others]:
                assert await _ask(pool, document) == "w0 w1 w2 w3 w4 "
            down, up = pool.health()
            assert down["up"] is False and down["failovers"] == 1  # marked once, then skipped
            assert up["up"] is True and up["requests"] == 8
        assert len(alive.requests) == 8


@pytest.mark.anyio
async def test_an_upstream_saying_503_is_skipped_until_its_health_check_passes() -> None:
    async with serve_upstream() as flaky, serve_upstream() as steady:
        flaky.mode, flaky.status = "status", 503
        async with _pool(flaky.url, steady.url, health_seconds=0.05) as pool:
            documents = _documents_of(pool, 0, 2) + _documents_of(pool, 1, 4)
            for document in documents:
                await _ask(pool, document)
            assert pool.health()[0]["up"] is False
            flaky.mode = "stream"
            checks = flaky.health_checks
            with anyio.fail_after(10):
                await flaky.wait_until(lambda u: u.health_checks > checks)
                while not pool.health()[0]["up"]:  # the check's answer lands after it is sent
                    await flaky.wait_until(
                        lambda u, seen=flaky.health_checks: u.health_checks > seen
                    )
            for document in documents:
                await _ask(pool, document)
        assert flaky.requests  # it took its documents back


@pytest.mark.anyio
async def test_a_failure_after_the_first_piece_is_the_editors_not_run_twice() -> None:
    async with serve_upstream() as dropping, serve_upstream() as other:
        dropping.mode = "drop"  # closes the connection after two chunks
        async with _pool(dropping.url, other.url) as pool:
            with pytest.raises(ProviderError):
                await _ask(pool, _documents_of(pool, 0)[0])
        assert not other.requests  # nothing was generated twice


@pytest.mark.anyio
async def test_with_every_upstream_down_the_request_is_unavailable_at_once() -> None:
    urls = [f"http://127.0.0.1:{_closed_port()}" for _ in range(2)]
    async with _pool(*urls, health_seconds=3600) as pool:
        with pytest.raises(ProviderUnavailable, match=r"no model upstream is up .*cannot connect"):
            await _ask(pool, "doc")


@pytest.mark.anyio
async def test_round_robin_spreads_one_document_over_every_upstream() -> None:
    async with serve_upstream() as one, serve_upstream() as two:
        async with _pool(one.url, two.url, routing="round-robin") as pool:
            for _ in range(4):
                await _ask(pool, "doc")
        assert len(one.requests) == len(two.requests) == 2

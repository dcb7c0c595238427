"""The embedded model (SmolLM2-135M via llama.cpp) through ``LocalProvider`` directly: streaming,
cancellation, warm state per session, and the byte-bounded LRU of saved states.

One provider for the module (the model loads in well under a second); each test uses its own
session names and reads counters as differences, so the tests do not depend on their order.
The warm-state policy is also checked without the model, on fake states with
``llama_state_size``.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import pytest

from tether.ai.model.providers.base import Cancellation, GenerationRequest
from tether.ai.model.providers.local import LocalProvider, _WarmStates
from tether.ai.text.context import COMPLETE_PREFIX, STOP_COMPLETE

LIGHTHOUSE = "The lighthouse keeper climbed the stairs every evening at dusk and"
MARKET = "On market day the square filled with stalls selling bread, cheese and"


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def provider(anyio_backend: str) -> AsyncIterator[LocalProvider]:
    with anyio.fail_after(30):
        async with LocalProvider() as loaded:
            yield loaded


def session(label: str) -> str:
    return f"doc-{label}-{uuid.uuid4().hex[:8]}\0editor"


def request(
    who: str,
    text: str = LIGHTHOUSE,
    *,
    max_tokens: int = 4,
    stop: tuple[str, ...] = STOP_COMPLETE,
    cold: bool = False,
) -> GenerationRequest:
    return GenerationRequest(
        prompt=COMPLETE_PREFIX + text, session=who, max_tokens=max_tokens, stop=stop, cold=cold
    )


async def generate(provider: LocalProvider, generation: GenerationRequest) -> list[str]:
    with anyio.fail_after(10):
        return [piece async for piece in provider.stream(generation, Cancellation())]


# ---- the real model ----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_streams_non_empty_text_within_max_tokens(provider: LocalProvider) -> None:
    pieces = await generate(provider, request(session("stream"), max_tokens=6))
    assert pieces, "the model produced nothing"
    assert all(isinstance(piece, str) and piece for piece in pieces)
    assert "".join(pieces).strip()
    assert len(pieces) <= 6  # one piece per token at most


@pytest.mark.anyio
async def test_cancel_mid_stream_stops_within_one_piece(provider: LocalProvider) -> None:
    cancel = Cancellation()
    before: list[str] = []
    after: list[str] = []
    # No stop sequences and a long budget: only the cancel ends this stream early.
    generation = request(session("cancel"), max_tokens=64, stop=())
    with anyio.fail_after(10):
        async for piece in provider.stream(generation, cancel):
            (after if cancel.cancelled else before).append(piece)
            if len(before) == 2 and not cancel.cancelled:
                cancel.cancel()
    assert len(before) == 2
    assert len(after) <= 1, after
    # The provider is free again at once: the next request streams normally.
    assert await generate(provider, request(session("after-cancel")))


class _Watched:
    """Wraps the model so the test learns when the worker thread has produced ``count`` more
    pieces (it comes back for the next chunk only after handing the previous one over)."""

    def __init__(self, llm: Any, count: int) -> None:
        self._llm = llm
        self._count = count
        self.produced_ahead = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._llm, name)

    def create_completion(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        for index, chunk in enumerate(self._llm.create_completion(*args, **kwargs)):
            if index == self._count + 1:
                self.produced_ahead.set()
            yield chunk


@pytest.mark.anyio
async def test_cancel_stops_within_one_piece_even_when_the_consumer_lags(
    provider: LocalProvider,
) -> None:
    """A consumer busy for a moment (the event loop serving other editors) while the model runs
    ahead: pieces generated before the cancel must not still be yielded after it."""
    watched = _Watched(provider._llm, count=4)
    provider._llm = watched
    cancel = Cancellation()
    generation = request(session("lag"), max_tokens=64, stop=())
    before: list[str] = []
    after: list[str] = []
    try:
        with anyio.fail_after(10):
            async for piece in provider.stream(generation, cancel):
                if cancel.cancelled:
                    after.append(piece)
                    continue
                before.append(piece)
                # Busy: hold the event loop until the worker has produced four more pieces.
                assert watched.produced_ahead.wait(10)
                cancel.cancel()
    finally:
        provider._llm = watched._llm
    assert len(before) == 1
    assert len(after) <= 1, after


@pytest.mark.anyio
async def test_alternating_sessions_are_warm_on_their_second_request(
    provider: LocalProvider,
) -> None:
    first, second = session("warm-a"), session("warm-b")
    hits: list[int] = []
    saved: list[int] = []
    for who, text in [(first, LIGHTHOUSE), (second, MARKET), (first, LIGHTHOUSE + " then")]:
        assert await generate(provider, request(who, text))
        hits.append(provider.warm_hits())
        saved.append(provider.warm_sessions)
    assert await generate(provider, request(second, MARKET + " then"))
    hits.append(provider.warm_hits())
    saved.append(provider.warm_sessions)
    # The same session twice in a row: its state is still the loaded one.
    assert await generate(provider, request(second, MARKET + " then again"))
    hits.append(provider.warm_hits())

    base = hits[0]
    assert hits[1] == base  # the second session's first request: nothing warm for it yet
    assert hits[2:] == [base + 1, base + 2, base + 3]
    # One saved state per session once each has been switched away from.
    assert saved[1] == saved[0] + 1
    assert saved[2] == saved[3] == saved[0] + 2


@pytest.mark.anyio
async def test_a_cold_request_does_not_count_as_warm(provider: LocalProvider) -> None:
    who = session("cold")
    assert await generate(provider, request(who))
    assert await generate(provider, request(who, LIGHTHOUSE + " then"))
    warm = provider.warm_hits()
    # The same session (its state loaded and warm), but asked cold: the baseline path.
    assert await generate(provider, request(who, LIGHTHOUSE + " then", cold=True))
    assert await generate(provider, request("http-baseline", MARKET, cold=True))
    assert provider.warm_hits() == warm
    # The session's warm state was kept aside, not thrown away.
    assert await generate(provider, request(who, LIGHTHOUSE + " then more"))
    assert provider.warm_hits() == warm + 1


@pytest.mark.anyio
async def test_a_saved_state_is_counted_at_its_size_in_memory_and_answers_the_same(
    provider: LocalProvider,
) -> None:
    """Issue 26, finding 16: a saved state also carried a row of logits per token (~48 MiB),
    which the budget did not count, so it did not bound the worker's memory."""
    first, second = session("counted-a"), session("counted-b")
    fresh = await generate(provider, request(first, MARKET))
    await generate(provider, request(second))  # switching saves the first one's state
    saved = provider._states.get(first)
    assert saved is not None and saved.scores.shape[0] == 1  # the last row only
    held = saved.llama_state_size + saved.scores.nbytes + saved.input_ids.nbytes
    assert provider._states.bytes >= held
    assert await generate(provider, request(first, MARKET)) == fresh  # restored, same answer


# ---- the warm-state LRU, without the model ------------------------------------------------------


@dataclass(frozen=True, eq=False)
class FakeState:
    llama_state_size: int
    label: str = ""


def test_warm_states_evict_the_least_recently_used_past_the_byte_budget() -> None:
    states = _WarmStates(budget_bytes=100)
    a, b, c = FakeState(40, "a"), FakeState(40, "b"), FakeState(40, "c")
    states.put("a", a)
    states.put("b", b)
    assert (len(states), states.bytes) == (2, 80)
    assert states.get("a") is a  # a is now the most recently used
    states.put("c", c)  # 120 bytes: b, the least recently used, goes
    assert (len(states), states.bytes) == (2, 80)
    assert states.get("b") is None
    assert states.get("a") is a and states.get("c") is c
    # Replacing a session's state accounts for the old one's bytes.
    smaller = FakeState(10, "a2")
    states.put("a", smaller)
    assert (len(states), states.bytes) == (2, 50)
    assert states.get("a") is smaller
    # Evicts in LRU order until within budget: a (used last) outlives c.
    states.put("d", FakeState(60, "d"))
    assert states.get("c") is None
    assert states.get("a") is smaller
    assert (len(states), states.bytes) == (2, 70)
    # A single state larger than the whole budget is still kept (alone).
    huge = FakeState(500, "huge")
    states.put("huge", huge)
    assert len(states) == 1 and states.bytes == 500 and states.get("huge") is huge


class FakeLlm:
    """Just what the warm-state switching uses: save, load, reset."""

    def __init__(self) -> None:
        self.saved: list[FakeState] = []
        self.loaded: list[FakeState] = []

    def save_state(self) -> FakeState:
        state = FakeState(10, f"state{len(self.saved)}")
        self.saved.append(state)
        return state

    def load_state(self, state: FakeState) -> None:
        self.loaded.append(state)

    def reset(self) -> None:
        pass


@contextlib.contextmanager
def fake_model(budget_bytes: int) -> Iterator[tuple[LocalProvider, FakeLlm]]:
    provider = LocalProvider(state_budget_bytes=budget_bytes)
    llm = FakeLlm()
    provider._llm = llm
    try:
        yield provider, llm
    finally:
        provider._executor.shutdown(wait=False)


def test_switching_sessions_saves_the_outgoing_state_and_restores_the_incoming_one() -> None:
    with fake_model(budget_bytes=1000) as (provider, llm):
        provider._switch_to("a")
        provider._switch_to("b")  # a's state saved
        provider._switch_to("a")  # b's saved, a's restored
        assert llm.loaded == [llm.saved[0]]
        assert provider.warm_hits() == 1 and provider.warm_sessions == 2
        provider._go_cold()  # a's state saved aside, the model reset
        provider._switch_to("a")
        assert llm.loaded[-1] is llm.saved[-1]
        assert provider.warm_hits() == 2


def test_a_state_in_the_cache_when_requested_is_restored_at_the_budget() -> None:
    # Room for two saved states; three sessions take turns.
    with fake_model(budget_bytes=25) as (provider, llm):
        provider._switch_to("a")
        provider._switch_to("b")  # saves a
        provider._switch_to("c")  # saves b: the cache holds a and b
        provider._switch_to("a")  # a is cached: it must be restored, not evicted
        assert llm.loaded == [llm.saved[0]]
        assert provider.warm_hits() == 1

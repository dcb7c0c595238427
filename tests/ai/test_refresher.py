"""Renewing an editor's stale context in the background (ai/suggest/refresher.py), with the real
scheduler, context builder and flights, and a provider a test holds open (mechanics only: the
warm-prefix savings themselves are measured by ``tether bench ai``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry
from pycrdt import Doc, Text

from tether.ai.metrics import AiMetrics
from tether.ai.model.providers.base import Cancellation, GenerationRequest
from tether.ai.model.providers.scripted import ScriptedProvider
from tether.ai.settings import AiSettings
from tether.ai.suggest.flights import Flights, session_of
from tether.ai.suggest.records import TEXT_NAME
from tether.ai.suggest.refresher import Refresher
from tether.ai.suggest.scheduler import INTERACTIVE, Scheduler
from tether.ai.text.anchors import TextAnchor
from tether.ai.text.context import ContextBuilder, ContextMemo
from tether.collab.auth.tokens import OPEN_GRANT

pytestmark = pytest.mark.anyio

TEXT = "Title\n\nFirst paragraph.\n\nThe writer types here"


class HeldProvider(ScriptedProvider):
    """Records each request, then answers once the test opens the gate."""

    def __init__(self) -> None:
        super().__init__([" x"])
        self.opened = asyncio.Event()
        self.asked: asyncio.Queue[GenerationRequest] = asyncio.Queue()

    async def stream(self, request: GenerationRequest, cancel: Cancellation) -> AsyncIterator[str]:
        self.asked.put_nowait(request)
        await self.opened.wait()
        yield " x"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_a_stale_context_is_evaluated_in_its_own_state_then_handed_to_requests() -> None:
    async with Scheduler(8) as scheduler:
        setup = _setup(scheduler)
        refresher, provider, state, room, peer, builder = setup
        live = state.memos[1]
        refresher.typed(room, state, peer)
        request = await asyncio.wait_for(provider.asked.get(), 10)
        assert request.session == session_of(room, peer, 1)  # not the live context's state
        assert "Title, edited" in request.prompt
        # Meanwhile a request still builds on the old context, which its state has warm.
        assert state.memos[1] is live
        during = builder.complete(state.regions, _text(room), len(_text(room)), live, refresh=False)
        assert "Title, edited" not in during.text
        provider.opened.set()
        await asyncio.wait_for(state.warming[1], 10)
        renewed = state.memos[1]
        assert renewed is not live and renewed.epoch == 1 and "Title, edited" in renewed.context
        assert not state.warming


async def test_a_request_preempts_the_renewal_and_the_old_context_stays() -> None:
    async with Scheduler(8) as scheduler:
        refresher, provider, state, room, peer, _ = _setup(scheduler)
        live = state.memos[1]
        refresher.typed(room, state, peer)
        await asyncio.wait_for(provider.asked.get(), 10)
        renewal = state.warming[1]

        async def answer() -> str:
            return "served"

        assert await scheduler.submit(answer, INTERACTIVE) == "served"
        assert renewal.cancelled()
        assert state.memos[1] is live and not state.warming


def _text(room: SimpleNamespace) -> str:
    return str(room.doc.get(TEXT_NAME, type=Text))


def _setup(scheduler: Scheduler):
    provider = HeldProvider()
    builder = ContextBuilder(lambda text: max(1, len(text) // 4), memo_ttl=0.0, memo_max_age=60.0)
    registry = CollectorRegistry()
    flights = Flights(
        provider, scheduler, AiMetrics(registry), AiSettings(), builder.count_tokens, None, None
    )
    doc = Doc()
    doc[TEXT_NAME] = text = Text(TEXT)
    room = SimpleNamespace(name="doc", doc=doc, settings=SimpleNamespace(rich_fragment="default"))
    peer = SimpleNamespace(peer_id=1, outbox=object(), grant=OPEN_GRANT)
    state = flights.room_state(room)
    memo = state.memos[1] = ContextMemo()
    builder.complete(state.regions, TEXT, len(TEXT), memo, refresh=False)  # its last request
    state.cursors[1] = (TextAnchor.at(TEXT, len(TEXT)), 0.0)
    text.insert(len("Title"), ", edited")  # someone else edits the title
    state.regions.mark_dirty()
    return Refresher(flights, builder), provider, state, room, peer, builder

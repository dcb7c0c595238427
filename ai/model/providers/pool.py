"""Several model servers as one provider: OpenAI-compatible upstreams (vLLM, llama.cpp's
server, Ollama), or several embedded model workers on a many-core host.

A request goes to the upstream its document hashes to (``ring.BoundedRing``, consistent
hashing with bounded loads): every editor of a document gets the same upstream while it is up
and not overloaded, so the document's prompt prefix (the system text and its context
paragraphs, the same for all its editors) stays in that upstream's prefix cache
(``cache_prompt`` on llama.cpp's server, automatic prefix caching on vLLM). Each upstream keeps
its own pool of keep-alive connections (``OpenAIProvider``).

An upstream that cannot be reached, or answers 502/503/504 (a worker that is restarting), is
marked down and the request goes on to the next upstream on the ring before anything was
generated, so its editors move with no error; a failure after the first piece is the
editor's (``provider_error``), as with one upstream. A down upstream is asked whether it is
healthy (an upstream's model list, a worker's state) every ``health_seconds`` and takes
requests again once it is. ``routing="round-robin"`` spreads requests in turn instead (the
baseline ``tether bench ai --upstreams`` compares against).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ...errors import ModelUnavailable, ProviderUnavailable
from .base import Cancellation, GenerationRequest, Provider
from .openai import UpstreamDown
from .ring import BoundedRing

log = logging.getLogger(__name__)

ROUTINGS = ("affinity", "round-robin")
# What says a member cannot take the request now, with nothing generated yet.
DOWN = (UpstreamDown, ModelUnavailable)


class Member(Protocol):
    """A provider the pool can route to: it names where it is and says whether it is up."""

    name: str

    @property
    def where(self) -> str: ...

    async def healthy(self) -> bool: ...

    def stream(self, request: GenerationRequest, cancel: Cancellation) -> AsyncIterator[str]: ...

    def warm_hits(self) -> int: ...

    async def __aenter__(self) -> Any: ...

    async def __aexit__(self, *exc: object) -> Any: ...


DEFAULT_HEALTH_SECONDS = 5.0


def affinity_key(request: GenerationRequest) -> str:
    """The document a request is for: a session is ``document \\0 editor \\0 epoch``
    (``ai.suggest.flights.session_of``); another key is used whole."""
    return request.session.split("\0", 1)[0]


@dataclass
class Upstream:
    provider: Member
    name: str
    up: bool = True
    in_flight: int = 0
    requests: int = 0
    failovers: int = 0  # requests it could not take that went on to another upstream
    down_since: float | None = None
    sessions: set[str] = field(default_factory=set)  # documents it served (bounded below)

    def describe(self) -> dict[str, Any]:
        return {
            "upstream": self.name,
            "up": self.up,
            "in_flight": self.in_flight,
            "requests": self.requests,
            "failovers": self.failovers,
        }


MAX_REMEMBERED_DOCUMENTS = 4096  # per upstream, for /health's count only


class UpstreamPool(Provider):
    def __init__(
        self,
        providers: Sequence[Member],
        *,
        routing: str = "affinity",
        health_seconds: float = DEFAULT_HEALTH_SECONDS,
        slack: float = 0.25,
        concurrency: int = 1,
    ) -> None:
        if not providers:
            raise ValueError("an upstream pool needs at least one upstream")
        if routing not in ROUTINGS:
            raise ValueError(f"routing must be one of {', '.join(ROUTINGS)}, not {routing!r}")
        # The members' own name (the cache's scope and the metrics' label: "openai", "local").
        self.name = providers[0].name
        names = [f"{index}:{provider.where}" for index, provider in enumerate(providers)]
        self.upstreams = {name: Upstream(p, name) for name, p in zip(names, providers, strict=True)}
        self.ring = BoundedRing(names, slack=slack)
        self.routing = routing
        self.health_seconds = health_seconds
        # Generations in flight at once over the pool: ``concurrency`` per member (the
        # scheduler's workers).
        self.slots = concurrency * len(providers)
        self._turn = itertools.count()
        self._health_task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> UpstreamPool:
        async with contextlib.AsyncExitStack() as stack:
            for upstream in self.upstreams.values():
                await stack.enter_async_context(upstream.provider)
            self._stack = stack.pop_all()
        self._health_task = asyncio.create_task(self._check_health())
        return self

    async def __aexit__(self, *exc: object) -> None:
        task, self._health_task = self._health_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._stack.aclose()

    def choose(self, request: GenerationRequest, tried: set[str]) -> Upstream | None:
        usable = [name for name, u in self.upstreams.items() if u.up and name not in tried]
        if not usable:
            return None
        if self.routing == "round-robin":
            return self.upstreams[usable[next(self._turn) % len(usable)]]
        loads = {name: u.in_flight for name, u in self.upstreams.items()}
        name = self.ring.pick(affinity_key(request), loads, usable)
        return self.upstreams[name] if name is not None else None

    async def stream(self, request: GenerationRequest, cancel: Cancellation) -> AsyncIterator[str]:
        tried: set[str] = set()
        last: Exception | None = None
        while True:
            upstream = self.choose(request, tried)
            if upstream is None:
                if isinstance(last, ModelUnavailable):
                    raise last  # workers: what the last one said (the model is loading, say)
                raise ProviderUnavailable(
                    f"no model upstream is up ({len(self.upstreams)} configured, {len(tried)}"
                    f" tried just now){f': {last}' if last is not None else ''}"
                )
            upstream.in_flight += 1
            upstream.requests += 1
            if len(upstream.sessions) < MAX_REMEMBERED_DOCUMENTS:
                upstream.sessions.add(affinity_key(request))
            started = False
            try:
                async for piece in upstream.provider.stream(request, cancel):
                    started = True
                    yield piece
                return
            except DOWN as exc:
                if started:
                    raise
                self._mark_down(upstream, exc)
                upstream.failovers += 1
                tried.add(upstream.name)
                last = exc
            finally:
                upstream.in_flight -= 1

    def _mark_down(self, upstream: Upstream, exc: Exception) -> None:
        if upstream.up:
            log.warning(
                "model upstream %s is down (%s); its documents go on to the next",
                upstream.name,
                exc,
            )
        upstream.up = False
        upstream.down_since = time.monotonic()

    async def _check_health(self) -> None:
        """Bring a down upstream back once it answers again (and notice a silent death on a
        quiet server before an editor does)."""
        while True:
            await asyncio.sleep(self.health_seconds)
            for upstream in list(self.upstreams.values()):
                try:
                    healthy = await upstream.provider.healthy()
                except Exception:  # a health check never takes the pool down
                    log.exception("health check of %s failed", upstream.name)
                    healthy = False
                if healthy and not upstream.up:
                    log.info("model upstream %s is back", upstream.name)
                    upstream.up, upstream.down_since = True, None
                elif not healthy and upstream.up and upstream.in_flight == 0:
                    self._mark_down(upstream, RuntimeError("health check failed"))

    def health(self) -> list[dict[str, Any]]:
        """Per upstream, for /health: up or down, requests in flight and served, failovers,
        and how many documents it has served."""
        return [{**u.describe(), "documents": len(u.sessions)} for u in self.upstreams.values()]

    def warm_hits(self) -> int:
        return sum(u.provider.warm_hits() for u in self.upstreams.values())

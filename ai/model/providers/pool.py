"""Several model servers as one provider: OpenAI-compatible upstreams (vLLM, llama.cpp's
server, Ollama), or several embedded model workers on a many-core host.

A request goes to the upstream its document hashes to (``ring.BoundedRing``, consistent
hashing with bounded loads): every editor of a document gets the same upstream while it is up
and not overloaded, so the document's prompt prefix (the system text and its context
paragraphs, the same for all its editors) stays in that upstream's prefix cache
(``cache_prompt`` on llama.cpp's server, automatic prefix caching on vLLM). Each upstream keeps
its own pool of keep-alive connections (``OpenAIProvider``).

An upstream that cannot be reached, answers 429 or 502/503/504 (a worker that is restarting),
answers something that is not an event stream, or sends no token within its first-token
deadline (``ai.model.providers.openai``) is marked down and the request goes on to the next
upstream on the ring before anything was generated, so its editors move with no error; a
failure after the first piece is the editor's (``provider_error``), as with one upstream. Every
upstream is asked whether it is healthy (an upstream's model list as JSON, a worker's state)
every ``health_seconds``, busy or not: one that fails is marked down, one down that passes
takes requests again, but not before its 429's ``Retry-After`` has passed, nor before a
backoff that doubles with each request in a row it failed (from ``health_seconds`` to a
minute): a model list that answers while generations hang costs one request per backoff.
With none up, AI is ``degraded`` (``state``) and requests fail at once.
``routing="round-robin"`` spreads requests in turn instead (the baseline
``tether bench ai --upstreams`` compares against).

Each upstream takes ``concurrency`` generations at once; more wait for it in turn by share
(``ai.model.fair``: subjects, then documents), not in arrival order.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ...errors import ModelUnavailable, ProviderUnavailable, UpstreamDown
from ..fair import FairGate, document_of, share_of
from .base import Cancellation, GenerationRequest, Provider
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
MAX_BACKOFF_SECONDS = 60.0  # the longest failed requests in a row keep an upstream down


def affinity_key(request: GenerationRequest) -> str:
    """The document a request is for (``ai.model.fair.document_of``)."""
    return document_of(request)


@dataclass
class Upstream:
    provider: Member
    name: str
    gate: FairGate
    up: bool = True
    in_flight: int = 0
    requests: int = 0
    failovers: int = 0  # requests it could not take that went on to another upstream
    down_since: float | None = None
    down_until: float = 0.0  # not back before this (monotonic): Retry-After, or backoff
    strikes: int = 0  # requests in a row it failed before any token
    reason: str = ""  # why it is down
    sessions: set[str] = field(default_factory=set)  # documents it served (bounded below)

    def describe(self) -> dict[str, Any]:
        return {
            "upstream": self.name,
            "up": self.up,
            "in_flight": self.in_flight,
            "requests": self.requests,
            "failovers": self.failovers,
            "reason": self.reason,
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
        self.upstreams = {
            name: Upstream(p, name, FairGate(concurrency))
            for name, p in zip(names, providers, strict=True)
        }
        self.ring = BoundedRing(names, slack=slack)
        self.routing = routing
        self.health_seconds = health_seconds
        # Generations in flight at once over the pool: ``concurrency`` per member (the
        # scheduler's workers).
        self.slots = concurrency * len(providers)
        self._turn = itertools.count()
        self._health_task: asyncio.Task[None] | None = None
        self._listeners: list[Callable[[], None]] = []
        self._poked: asyncio.Future[None] | None = None

    async def __aenter__(self) -> UpstreamPool:
        async with contextlib.AsyncExitStack() as stack:
            for upstream in self.upstreams.values():
                await stack.enter_async_context(upstream.provider)
            self._stack = stack.pop_all()
        self._health_task = asyncio.create_task(self._check_health())
        return self

    async def __aexit__(self, *exc: object) -> None:
        task, self._health_task = self._health_task, None
        for running in (task, self._poked):
            if running is not None:
                running.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await running
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
        subject, document = share_of(request)
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
            started = False
            try:
                async with upstream.gate.turn(subject, document, background=request.background):
                    if not upstream.up:  # went down while this request waited for it
                        tried.add(upstream.name)
                        continue
                    upstream.requests += 1
                    if len(upstream.sessions) < MAX_REMEMBERED_DOCUMENTS:
                        upstream.sessions.add(document)
                    async for piece in upstream.provider.stream(request, cancel):
                        if not started:
                            started, upstream.strikes = True, 0
                        yield piece
                    return
            except DOWN as exc:
                if started:
                    raise
                if isinstance(exc, UpstreamDown):
                    upstream.strikes += 1
                self._mark_down(upstream, exc)
                upstream.failovers += 1
                tried.add(upstream.name)
                last = exc
            finally:
                upstream.in_flight -= 1

    def _mark_down(self, upstream: Upstream, exc: Exception) -> None:
        now = time.monotonic()
        # Failed requests in a row keep it down longer, doubling (its model list may answer
        # while its generations hang: each return would cost one request a deadline); a 429
        # says how long itself.
        pause = getattr(exc, "retry_after", None) or 0.0
        if upstream.strikes:
            backoff = self.health_seconds * 2 ** min(upstream.strikes - 1, 16)
            pause = max(pause, min(backoff, MAX_BACKOFF_SECONDS))
        if pause:
            upstream.down_until = max(upstream.down_until, now + pause)
        upstream.reason = str(exc)
        if not upstream.up:
            return
        log.warning(
            "model upstream %s is down (%s); its documents go on to the next", upstream.name, exc
        )
        upstream.up = False
        upstream.down_since = now
        self._changed()

    def _mark_up(self, upstream: Upstream) -> None:
        log.info("model upstream %s is back", upstream.name)
        upstream.up, upstream.down_since, upstream.reason = True, None, ""
        self._changed()

    async def _check_health(self) -> None:
        """Every upstream, every ``health_seconds``, busy or not: bring a down one back once it
        answers again (and its Retry-After has passed), and mark one down that stopped
        answering before an editor's request finds out."""
        while True:
            await asyncio.sleep(self.health_seconds)
            await self.check_health()

    def poke(self) -> None:
        """Check every upstream now, not at the next round: a member said its state changed
        (a model worker became ready, or died), so the pool follows at once."""
        if self._poked is None or self._poked.done():
            self._poked = asyncio.ensure_future(self.check_health())

    async def check_health(self) -> None:
        """One round of health checks, every upstream at once (each bounded in time)."""
        upstreams = list(self.upstreams.values())
        results = await asyncio.gather(
            *(u.provider.healthy() for u in upstreams), return_exceptions=True
        )
        now = time.monotonic()
        for upstream, healthy in zip(upstreams, results, strict=True):
            if isinstance(healthy, BaseException):
                # A health check never takes the pool down.
                log.error("health check of %s failed: %r", upstream.name, healthy)
                healthy = False
            if healthy and not upstream.up and now >= upstream.down_until:
                self._mark_up(upstream)
            elif not healthy and upstream.up:
                self._mark_down(upstream, RuntimeError("its health check failed"))

    def add_listener(self, listener: Callable[[], None]) -> None:
        """``listener()`` runs after an upstream goes down or comes back (``state`` changed)."""
        self._listeners.append(listener)

    def _changed(self) -> None:
        for listener in self._listeners:
            try:
                listener()
            except Exception:
                log.exception("an upstream state listener failed")

    def state(self) -> tuple[str, str]:
        """("ready", "") while every upstream is up, ("ready", how many are down) while any
        is; ("degraded", why) when none is: requests fail at once until a health check brings
        one back. The reason names no address (editors and anonymous /health read it): which
        one and why is in ``health()``, for the operator."""
        down = sum(not u.up for u in self.upstreams.values())
        if not down:
            return "ready", ""
        if down == len(self.upstreams):
            return "degraded", f"no model upstream is up ({down} configured, all down)"
        return "ready", f"{down} of {len(self.upstreams)} model upstreams down"

    def health(self) -> list[dict[str, Any]]:
        """Per upstream, for /health: up or down (and why), requests in flight, waiting and
        served, failovers, and how many documents it has served."""
        return [
            {**u.describe(), "waiting": u.gate.waiting, "documents": len(u.sessions)}
            for u in self.upstreams.values()
        ]

    def warm_hits(self) -> int:
        return sum(u.provider.warm_hits() for u in self.upstreams.values())

"""Flights: running model generations and streaming each one to the requests it serves, from
launch to the last ``suggestion.end``, including stopping, superseding and staleness.

Holds the engine's shared state (per-document bookkeeping, each editor's requests) and its
background tasks; the serving, prefetch and accept modules act through it. Knows nothing of
frames: replies go through ``peer.send_stateless``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from tether.collab.auth.tokens import OPEN_GRANT
from tether.protocol.wire.ai_messages import (
    JUNK_PREFIX,
    Dropped,
    SuggestionDelta,
    SuggestionEnd,
    SuggestionError,
    SuggestionStart,
)

from ..cache.suggestions import CacheQuery, SuggestionCache, embedding_text
from ..errors import AiError, BadRequest, ModelUnavailable
from ..metrics import AiMetrics
from ..model.providers.base import Cancellation, GenerationRequest, Provider
from ..text.anchors import SHORT_SPAN, SPAN
from ..text.context import context_chars
from ..text.faithful import dropped
from ..text.regions import RegionIndex
from .document_text import DocumentText
from .generation import run_generation, screening, shaping
from .prefetch import DutyCycle
from .records import MODEL, Flight, RoomState, Suggestion
from .scheduler import Scheduler

if TYPE_CHECKING:
    from tether.collab.rooms.room import Room
    from tether.collab.rooms.room_peer import Peer

    from ..cache.embedder import Embedder
    from ..settings import AiSettings
    from ..text.context import BuiltPrompt

log = logging.getLogger(__name__)

MAX_REMEMBERED = 16  # finished suggestions an editor can still accept


def owner_of(peer: Peer) -> object:
    """The scheduler's owner key of a peer's work: its connection. Every channel of one /ws
    socket shares that socket's outbox, so the outbox stands for the connection."""
    return peer.outbox


def session_of(room: Room, peer: Peer, epoch: int = 0) -> str:
    """The provider's warm-state key for an editor's completions in a document: one per
    (document, editor, context epoch; see ``ContextMemo.epoch``)."""
    return session_key(room.name, peer.peer_id, epoch)


def session_key(document: str, peer_id: int, epoch: int = 0) -> str:
    return f"{document}\0{peer_id}\0{epoch}"


def subject_of(peer: Peer) -> str | None:
    """The scheduler's subject key: the token's ``sub``; None without tokens (--auth none
    gives everyone the same anonymous grant, which must not be one shared quota)."""
    return None if peer.grant is OPEN_GRANT else "sub:" + peer.grant.subject


def losses_of(suggestion: Suggestion) -> tuple[Dropped, ...] | None:
    """What a rewrite's text, as its editor has it, drops of the selected passage
    (``ai.text.faithful``): what its ``suggestion.end`` says, and what ``accept`` asks to be
    confirmed. None for a completion, or when nothing is lost. Bounded by the passage's length
    (the builder refuses long selections) and the text's (``max_tokens``)."""
    if suggestion.passage is None or not suggestion.text:
        return None
    return dropped_by(suggestion.passage, suggestion.text)


def dropped_by(passage: str, text: str) -> tuple[Dropped, ...] | None:
    """``ai.text.faithful.dropped`` as the wire says it (None: nothing)."""
    return tuple(Dropped(loss.kind, loss.text) for loss in dropped(passage, text)) or None


def end_of(suggestion: Suggestion, reason: str, ttft: float | None, pieces: int) -> str:
    """``suggestion``'s ``suggestion.end``, with what it drops if it is a rewrite."""
    return SuggestionEnd(
        suggestion.request.id, reason, ttft, pieces, losses_of(suggestion)
    ).encode()


class Flights:
    def __init__(
        self,
        provider: Provider,
        scheduler: Scheduler,
        metrics: AiMetrics,
        settings: AiSettings,
        count_tokens: Callable[[str], int],
        cache: SuggestionCache | None,
        embedder: Embedder | None,
    ) -> None:
        self.provider = provider
        self.scheduler = scheduler
        self.metrics = metrics
        self.settings = settings
        self.cache = cache
        self.embedder = embedder
        self.budget = DutyCycle(settings.prefetch_budget)
        self.prefetch_counts: Counter[str] = Counter()  # see metrics.CacheCollector
        self.junk_counts: Counter[str] = Counter()  # suggestions ended as junk, by kind
        self.rooms: dict[str, RoomState] = {}
        # (peer id, request id) → suggestion; in flight or finished and still acceptable
        self.by_peer: dict[int, dict[str, Suggestion]] = {}
        self._count_tokens = count_tokens
        self._current: dict[tuple[str, int], Suggestion] = {}  # one in flight per editor+doc
        self._tasks: set[asyncio.Future[Any]] = set()
        self._embedding = 0  # background embeddings queued (bounded)

    def room_state(self, room: Room) -> RoomState:
        state = self.rooms.get(room.name)
        if state is None:
            document = DocumentText(
                room.settings.rich_fragment,
                before=context_chars(self.settings.context_budget_tokens),
            )
            state = self.rooms[room.name] = RoomState(
                RegionIndex(self._count_tokens), document, room
            )
        return state

    # ---- keys -------------------------------------------------------------------------------

    def query(self, room: Room, kind: str, max_tokens: int, prompt: BuiltPrompt) -> CacheQuery:
        return CacheQuery(
            room.name, f"{kind}:{max_tokens}", self.provider.name, prompt.text, prompt.window
        )

    def embed_text(self, prompt: BuiltPrompt) -> str | None:
        """What the semantic layer embeds for a completion; None when that layer is off or
        its model still loading."""
        if self.cache is None or self.embedder is None or not self.embedder.ready:
            return None
        if prompt.kind != "complete" or not prompt.window.strip():
            return None
        return embedding_text(prompt.window)

    def semantic_possible(self, query: CacheQuery, embed_text: str | None) -> bool:
        """Whether embedding ``embed_text`` (``query``'s context) could find a semantic hit."""
        return (
            embed_text is not None
            and self.cache is not None
            and self.cache.semantic_possible(query)
        )

    # ---- running ----------------------------------------------------------------------------

    def launch(self, flight: Flight, priority: int, peer: Peer) -> None:
        """Queue ``flight`` on the model as ``peer``'s work (its connection's and its token
        subject's share: see ``ai.suggest.scheduler``)."""
        flight.job = self.scheduler.submit(
            lambda: self._fly(flight), priority, owner=owner_of(peer), subject=subject_of(peer)
        )
        self.metrics.queue_depth.set(self.scheduler.depth)
        state = self.room_state(flight.room)
        state.flights.add(flight)
        flight.job.add_done_callback(lambda job: self._landed(flight, job))

    async def _fly(self, flight: Flight) -> None:
        """Run on the scheduler's worker: generate, fanning each piece out to every request
        served from this flight."""
        generation = GenerationRequest(
            prompt=flight.prompt.text,
            session=flight.session,
            max_tokens=flight.max_tokens,
            stop=flight.prompt.stop,
            # A prefetch nobody waits for yet gives the model up sooner to a request.
            background=flight.prefetch_for is not None and not flight.served,
            must_start=self.settings.must_start and flight.prompt.kind == "complete",
        )

        def emit(piece: str) -> None:
            if flight.finished:
                return
            first = not flight.text
            flight.text += piece
            for suggestion in flight.subscribers:
                if not suggestion.finished:
                    self.send_delta(suggestion, piece)
            if first:
                self._embed_context(flight)

        flight.screen = screening(self.settings, flight.prompt)
        loop = asyncio.get_running_loop()
        began = loop.time()
        try:
            result, _ = await run_generation(
                self.provider,
                generation,
                flight.cancel,
                emit,
                interval=self.settings.coalesce_seconds,
                timeout=self.settings.request_timeout,
                metrics=self.metrics,
                requested_at=None,  # TTFT is per request: see send_delta
                path="ws",
                screen=flight.screen,
                **shaping(self.settings, flight.prompt.kind),
            )
        finally:
            if flight.prefetch_for is not None:
                self.budget.record(began, loop.time())
        flight.pieces = result.pieces
        flight.junk = result.junk
        if not flight.finished:
            self._complete(flight)

    def _complete(self, flight: Flight) -> None:
        flight.finished = True
        if flight.prefetch_for is not None:
            self.prefetch_counts["completed"] += 1
        state = self.rooms.get(flight.room.name)
        if state is not None:
            state.flights.discard(flight)
        if self.cache is not None and flight.text and flight.junk is None:
            self._store(flight)  # junk is never cached, nor what was shown before it
        for suggestion in flight.subscribers:
            if not suggestion.finished and not suggestion.held:  # a held one ends when released
                self.finish(suggestion, flight.pieces)

    def _store(self, flight: Flight) -> None:
        assert self.cache is not None
        vector = None
        if flight.embed_text is not None and self.embedder is not None:
            vector = self.embedder.cached(flight.embed_text)
        entry = self.cache.put(flight.query, flight.text, vector, prefetched=not flight.served)
        if entry is not None and vector is None and flight.embed_text is not None:
            self.embed_later(flight.embed_text, entry)

    def _embed_context(self, flight: Flight) -> None:
        """The flight's first text is out: embed its context now, so the entry it is about to
        become has its vector by the time the editor's next request (a fixed typo) may need
        it. Not before: its requests' first token must not wait for the CPU this takes."""
        text = flight.embed_text
        if text is not None and self.embedder is not None and self.embedder.cached(text) is None:
            self.embed_later(text, None)

    def _landed(self, flight: Flight, job: asyncio.Future[Any]) -> None:
        """The scheduler is done with ``flight``'s job: ran, failed, or cancelled (by us, or
        preempted as a prefetch nobody waited for)."""
        self.metrics.queue_depth.set(self.scheduler.depth)
        if flight.finished:
            return
        if job.cancelled():
            self.end(flight, "cancelled")
            return
        error = job.exception()
        flight.finished = True
        self.room_state(flight.room).flights.discard(flight)
        if error is None:
            return
        if not isinstance(error, AiError):
            log.error("suggestion failed", exc_info=error)
            error = AiError("suggestion failed")
        for suggestion in flight.subscribers:
            if not suggestion.finished:
                suggestion.finished = True
                self.send_error(suggestion.peer, suggestion.request.id, error.code, str(error))

    # ---- streaming to requests ----------------------------------------------------------------

    def send_delta(self, suggestion: Suggestion, text: str) -> None:
        if suggestion.held:
            suggestion.held_text += text
            return
        if suggestion.first_at is None:
            suggestion.first_at = time.perf_counter()
            label = self.provider.name if suggestion.source == MODEL else suggestion.source
            self.metrics.ttft.labels(label, "ws").observe(
                suggestion.first_at - suggestion.requested_at
            )
        suggestion.text += text
        suggestion.peer.send_stateless(SuggestionDelta(suggestion.request.id, text).encode())

    def finish(self, suggestion: Suggestion, pieces: int, junk: str | None = None) -> None:
        """End ``suggestion`` as its text is complete: ``done``, or ``junk:<kind>`` when the
        junk filter ended it (``junk``, else its flight's)."""
        suggestion.finished = True
        if junk is None and suggestion.flight is not None:
            junk = suggestion.flight.junk
        self.metrics.outcomes.labels("done" if junk is None else "junk").inc()
        if junk is not None:
            self.count_junk(junk)
        ttft = None
        if suggestion.first_at is not None:
            ttft = round((suggestion.first_at - suggestion.requested_at) * 1000, 2)
        reason = "done" if junk is None else JUNK_PREFIX + junk
        suggestion.peer.send_stateless(end_of(suggestion, reason, ttft, pieces))

    def count_junk(self, kind: str) -> None:
        """A suggestion ended as junk of ``kind`` (any path: socket, cache, HTTP)."""
        self.junk_counts[kind] += 1
        self.metrics.junk.labels(kind).inc()

    def send_error(self, peer: Peer, request_id: str | None, code: str, message: str) -> None:
        self.metrics.errors.labels(code).inc()
        peer.send_stateless(SuggestionError(request_id, code, message).encode())

    def claim(self, suggestion: Suggestion) -> None:
        """Make ``suggestion`` its editor's current one in this document, superseding the last."""
        key = (suggestion.room.name, suggestion.peer.peer_id)
        previous = self._current.get(key)
        if previous is suggestion:
            return
        self._current[key] = suggestion
        self._remember(suggestion)
        if previous is not None and not previous.finished:
            self.stop(previous, "superseded")

    def _remember(self, suggestion: Suggestion) -> None:
        mine = self.by_peer.setdefault(suggestion.peer.peer_id, {})
        mine.pop(suggestion.request.id, None)
        mine[suggestion.request.id] = suggestion
        while len(mine) > MAX_REMEMBERED:
            oldest = next(iter(mine))
            self.stop(mine.pop(oldest), "cancelled", notify=False)

    # ---- stopping ---------------------------------------------------------------------------

    def end(self, flight: Flight, reason: str) -> None:
        """Stop a flight now (the model stops within one token); its requests end with
        ``reason``."""
        flight.cancel.cancel()
        if flight.job is not None:
            flight.job.cancel()
        if flight.finished:
            return
        flight.finished = True
        state = self.rooms.get(flight.room.name)
        if state is not None:
            state.flights.discard(flight)
        if flight.prefetch_for is not None and not flight.served:
            self.prefetch_counts["wasted"] += 1
        for suggestion in flight.subscribers:
            self.stop(suggestion, reason)

    def stop(self, suggestion: Suggestion, reason: str, *, notify: bool = True) -> None:
        """End one request now. Its flight goes on while other requests (or a prefetch) still
        want it, and stops otherwise."""
        if suggestion.finished:
            return
        suggestion.finished = True
        self.metrics.outcomes.labels(reason).inc()
        if notify:
            if suggestion.held:  # the editor hears of it in order: start, then end
                start = SuggestionStart(suggestion.request.id, suggestion.source)
                suggestion.peer.send_stateless(start.encode())
            suggestion.peer.send_stateless(end_of(suggestion, reason, None, 0))
        suggestion.held = False
        flight = suggestion.flight
        if flight is None or flight.finished:
            return
        if all(s.finished for s in flight.subscribers) and flight.prefetch_for is None:
            self.end(flight, reason)

    def cancel(self, peer: Peer, request_id: str, reason: str) -> None:
        suggestion = self.by_peer.get(peer.peer_id, {}).get(request_id)
        if suggestion is None:
            raise BadRequest(f"no suggestion {request_id!r} to cancel")
        self.stop(suggestion, reason)

    def forget(self, room: Room, peer: Peer) -> None:
        """An editor left: its requests stop without a word (there is no one to tell)."""
        for suggestion in list(self.by_peer.pop(peer.peer_id, {}).values()):
            self.stop(suggestion, "cancelled", notify=False)
        self._current.pop((room.name, peer.peer_id), None)

    def check_soon(self, room: Room, state: RoomState) -> None:
        """After an edit: check for stale flights once the current burst of callbacks has run
        (coalesced: one check per burst, not one per update)."""
        if state.flights and not state.check_scheduled:
            state.check_scheduled = True
            asyncio.get_running_loop().call_soon(self._check_stale, room, state)

    def _check_stale(self, room: Room, state: RoomState) -> None:
        """After edits: stop completions whose text right at the cursor changed, unless what
        was typed there is how the completion begins (type-ahead: it goes on). Edits further
        off (a collaborator at the top of the page) leave them be."""
        state.check_scheduled = False
        if not state.flights:
            return
        for flight in list(state.flights):
            if flight.finished or flight.prompt.kind != "complete":
                continue
            # Only the text near the anchor: a window of the blocks around it, read again only
            # where an edit touched them.
            reading, anchor = state.document.find(room.doc, flight.anchor, before=SPAN)
            text = reading.text
            if anchor.intact(text, span=SHORT_SPAN):
                continue
            typed = anchor.typed(text, span=SHORT_SPAN)
            # What the model wrote, held back or not: typing the start of a word still being
            # judged is typing ahead too.
            written = flight.screen.text if flight.screen is not None else flight.text
            if typed and written.startswith(typed):
                continue
            self.end(flight, "cancelled")

    # ---- background work --------------------------------------------------------------------

    async def warm_up(self, prompt: BuiltPrompt, session: str) -> None:
        """Have the model evaluate ``prompt`` into the warm state ``session`` (one token is
        generated and dropped: the evaluation is the point), at background priority."""
        request = GenerationRequest(
            prompt=prompt.text, session=session, max_tokens=1, stop=prompt.stop, background=True
        )
        cancel = Cancellation()
        pieces = self.provider.stream(request, cancel)
        try:
            async for _ in pieces:
                pass
        finally:
            cancel.cancel()
            await pieces.aclose()

    def embed_later(self, text: str, entry: int | None) -> None:
        """Embed ``text`` in the background (bounded); give cache entry ``entry`` the vector."""
        if self.embedder is None or not self.embedder.ready or self._embedding >= 8:
            return
        self._embedding += 1
        embedder = self.embedder

        async def embed() -> None:
            try:
                vector = (await embedder.embed([text]))[0]
            except ModelUnavailable:
                return  # the worker is down: this entry stays exact-only, as before loading
            finally:
                self._embedding -= 1
            if entry is not None and self.cache is not None:
                self.cache.add_vector(entry, vector)

        self.spawn(embed())

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Future[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background AI work failed", exc_info=task.exception())

    def close(self) -> None:
        for suggestions in self.by_peer.values():
            for suggestion in suggestions.values():
                self.stop(suggestion, "cancelled", notify=False)
        for state in self.rooms.values():
            for flight in list(state.flights):
                self.end(flight, "cancelled")
        for task in self._tasks:
            task.cancel()

"""The AI extension: suggestion requests arriving on a document's Stateless frames, served from
the server-held document through the scheduler and a provider, streamed back on the same socket.

Attached to collab through hooks; never runs on the sync path: ``on_change`` only marks state
dirty and schedules a coalesced check for stale in-flight requests. Knows nothing of frames:
replies go through ``peer.send_stateless``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import time
from collections import Counter as CounterType
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from pycrdt import Doc, StickyIndex, Text

from protocol.ai import (
    Accept,
    Cancel,
    InvalidAiMessage,
    Suggest,
    SuggestionAccepted,
    SuggestionDelta,
    SuggestionEnd,
    SuggestionError,
    SuggestionStart,
    decode_client_message,
)

from .anchors import TextAnchor
from .cache import (
    EXACT,
    PREFETCH,
    TYPEAHEAD,
    CacheHit,
    CacheQuery,
    SuggestionCache,
    embedding_text,
    exact_key,
    typed_ahead,
)
from .context import BuiltPrompt, ContextBuilder, ContextMemo
from .errors import AiError, BadRequest, Busy, Forbidden
from .generation import run_generation
from .metrics import AiMetrics
from .positions import index_to_utf8, utf16_to_index
from .prefetch import DutyCycle, Pause, edited_end
from .providers.base import Cancellation, GenerationRequest, Provider
from .regions import RegionIndex
from .scheduler import INTERACTIVE, Scheduler
from .scheduler import PREFETCH as PREFETCH_PRIORITY

if TYPE_CHECKING:
    from collab.peer import Peer
    from collab.room import Room

    from .embedder import Embedder

log = logging.getLogger(__name__)

TEXT_NAME = "content"
AI_ORIGIN = "ai"
MAX_REMEMBERED = 16  # finished suggestions an editor can still accept
MODEL = "model"  # suggestion.start's source when the model computes the answer for it


@dataclass(frozen=True, slots=True)
class AiSettings:
    default_max_tokens: int = 24
    coalesce_seconds: float = 0.05
    request_timeout: float = 60.0
    queue_limit: int = 8
    context_budget_tokens: int = 700
    # Prefetch: after an editor's typing pauses this long, compute the suggestion at its
    # cursor ahead of any request (0: off), within this share of the model's time.
    prefetch_seconds: float = 0.2
    prefetch_budget: float = 0.5


@dataclass(eq=False)
class Flight:
    """One model generation. Several requests can take their text from it: the one that
    started it, a later one with the same context (an exact repeat, or the request a prefetch
    was computed for), and one whose editor has typed its first characters (type-ahead)."""

    room: Room
    query: CacheQuery
    key: bytes
    prompt: BuiltPrompt
    # Where the generation belongs; typing there that is not its own start makes it stale.
    anchor: TextAnchor
    max_tokens: int
    session: str  # the provider's warm-state key: one per (document, editor)
    embed_text: str | None  # what the semantic layer embeds for this context
    prefetch_for: int | None = None  # the editor's peer id when computed ahead for it
    cancel: Cancellation = field(default_factory=Cancellation)
    subscribers: list[Suggestion] = field(default_factory=list)
    text: str = ""
    pieces: int = 0  # the provider's pieces (tokens), reported in suggestion.end
    finished: bool = False
    served: bool = False  # some request has taken text from it
    job: asyncio.Future[Any] | None = None


@dataclass(eq=False)
class Suggestion:
    """One ``suggest`` request, served from the cache or from a flight."""

    request: Suggest
    peer: Peer
    room: Room
    prompt: BuiltPrompt
    # Where the text goes, found again after concurrent edits by the text around it: the
    # cursor (complete), or the selection's start plus the selected passage (rewrite).
    anchor: TextAnchor
    passage: str | None
    requested_at: float
    query: CacheQuery
    source: str = MODEL
    flight: Flight | None = None
    text: str = ""  # what this editor has been sent
    first_at: float | None = None
    finished: bool = False
    # Held: the model started at once, but the semantic layer (its embedding still being
    # computed) may yet answer instead; the stream is kept back until that is decided.
    held: bool = False
    held_text: str = ""


@dataclass
class _RoomState:
    regions: RegionIndex
    flights: set[Flight] = field(default_factory=set)  # unfinished ones
    memos: dict[int, ContextMemo] = field(default_factory=dict)  # per editor (peer id)
    pauses: dict[int, Pause] = field(default_factory=dict)  # per editor: typing debounce
    prefetches: dict[int, Flight] = field(default_factory=dict)  # per editor: the latest
    # Per editor: the length its completions ask for, so its prefetch computes the same one.
    lengths: dict[int, int] = field(default_factory=dict)
    # Per editor: where its cursor was last known (its last completion or prefetch), and when
    # (loop time).
    cursors: dict[int, tuple[TextAnchor, float]] = field(default_factory=dict)
    seen_text: str | None = None  # the text when prefetch last looked: its diff base
    check_scheduled: bool = False


class AiEngine:
    def __init__(
        self,
        provider: Provider,
        scheduler: Scheduler,
        metrics: AiMetrics,
        settings: AiSettings | None = None,
        *,
        count_tokens: Any = None,
        cache: SuggestionCache | None = None,
        embedder: Embedder | None = None,
    ) -> None:
        self.provider = provider
        self.scheduler = scheduler
        self.metrics = metrics
        self.settings = settings or AiSettings()
        self._count_tokens = count_tokens or _approximate_tokens
        self.builder = ContextBuilder(
            self._count_tokens, budget_tokens=self.settings.context_budget_tokens
        )
        self.cache = cache
        self.embedder = embedder  # None: no semantic layer; loads in the background
        self.budget = DutyCycle(self.settings.prefetch_budget)
        self.prefetch_counts: CounterType[str] = CounterType()  # see metrics.CacheCollector
        self._rooms: dict[str, _RoomState] = {}
        # (peer id, request id) → suggestion; in flight or finished and still acceptable
        self._by_peer: dict[int, dict[str, Suggestion]] = {}
        self._current: dict[tuple[str, int], Suggestion] = {}  # one in flight per editor+doc
        self._tasks: set[asyncio.Future[Any]] = set()
        self._embedding = 0  # background embeddings queued (bounded)

    # ---- hooks ------------------------------------------------------------------------------

    async def on_load(self, room: Room) -> None:
        self._room_state(room).seen_text = str(room.doc.get(TEXT_NAME, type=Text))

    async def on_stateless(self, room: Room, peer: Peer, payload: str) -> None:
        try:
            message = decode_client_message(payload)
        except InvalidAiMessage as exc:
            self._error(peer, exc.request_id, "bad_request", str(exc))
            return
        try:
            if isinstance(message, Suggest):
                self._start(room, peer, message)
            elif isinstance(message, Cancel):
                self._cancel(peer, message.id, "cancelled")
            elif isinstance(message, Accept):
                # Off the connection's receive loop: the accept waits for its write to be durable.
                self._spawn(self._accept_reporting(room, peer, message.id))
        except AiError as exc:
            self._error(peer, message.id, exc.code, str(exc))
        except Exception:
            log.exception("handling %s failed", type(message).__name__)
            self._error(peer, message.id, "internal", "the request failed")

    async def _accept_reporting(self, room: Room, peer: Peer, request_id: str) -> None:
        try:
            await self._accept(room, peer, request_id)
        except AiError as exc:
            self._error(peer, request_id, exc.code, str(exc))
        except Exception:
            log.exception("accepting a suggestion failed")
            self._error(peer, request_id, "internal", "accepting the suggestion failed")

    def on_change(self, room: Room, update: bytes, origin: object) -> None:
        # The sync path: O(1) bookkeeping only; the work happens in callbacks scheduled here.
        state = self._rooms.get(room.name)
        if state is None:
            return
        state.regions.mark_dirty()
        loop = asyncio.get_running_loop()
        if state.flights and not state.check_scheduled:
            state.check_scheduled = True
            loop.call_soon(self._check_stale, room, state)
        peer_id = getattr(origin, "peer_id", None)
        if peer_id is not None and self.settings.prefetch_seconds > 0 and origin.writable:  # type: ignore[attr-defined]
            pause = state.pauses.get(peer_id)
            if pause is None:
                pause = state.pauses[peer_id] = Pause()
            if pause.touch(loop.time()):
                loop.call_later(self.settings.prefetch_seconds, self._paused, room, origin)

    def on_detach(self, room: Room, peer: Peer) -> None:
        for suggestion in list(self._by_peer.pop(peer.peer_id, {}).values()):
            self._stop(suggestion, "cancelled", notify=False)
        self._current.pop((room.name, peer.peer_id), None)
        state = self._rooms.get(room.name)
        if state is not None:
            state.memos.pop(peer.peer_id, None)
            state.pauses.pop(peer.peer_id, None)
            state.lengths.pop(peer.peer_id, None)
            state.cursors.pop(peer.peer_id, None)
            prefetch = state.prefetches.pop(peer.peer_id, None)
            if prefetch is not None and not prefetch.subscribers:
                self._end_flight(prefetch, "cancelled")

    async def on_unload(self, room: Room) -> None:
        state = self._rooms.pop(room.name, None)
        if state is not None:
            for flight in list(state.flights):
                self._end_flight(flight, "cancelled")

    # ---- requests ---------------------------------------------------------------------------

    def _start(self, room: Room, peer: Peer, request: Suggest) -> None:
        text_type = room.doc.get(TEXT_NAME, type=Text)
        text = str(text_type)
        state = self._room_state(room)
        state.seen_text = text  # prefetch's next diff starts from what this request saw
        passage: str | None = None
        if request.kind == "rewrite":
            assert request.start is not None and request.end is not None
            begin = utf16_to_index(text, request.start)
            finish = utf16_to_index(text, request.end)
            prompt = self.builder.rewrite(text, begin, finish)
            anchor = TextAnchor.at(text, begin)
            passage = text[begin:finish]
        else:
            cursor = self._cursor(text_type, text, request)
            memo = state.memos.setdefault(peer.peer_id, ContextMemo())
            prompt = self.builder.complete(state.regions, text, cursor, memo)
            anchor = TextAnchor.at(text, cursor)
        max_tokens = request.max_tokens or self.settings.default_max_tokens
        if request.kind == "complete":
            state.lengths[peer.peer_id] = max_tokens
            state.cursors[peer.peer_id] = (anchor, asyncio.get_running_loop().time())
        query = self._query(room, request.kind, max_tokens, prompt)
        suggestion = Suggestion(
            request, peer, room, prompt, anchor, passage, time.perf_counter(), query
        )
        embed_text = self._embed_text(prompt)
        if self._serve_ready(state, suggestion, final=embed_text is None):
            return
        if embed_text is not None:
            vector = self.embedder.cached(embed_text) if self.embedder is not None else None
            if vector is None:
                # Race: the model starts now while the context is embedded (~36 ms on its own
                # thread, off the loop); a semantic hit found first replaces the stream.
                self._to_model(suggestion, max_tokens, embed_text, held=True)
                self._spawn(self._semantic_race(suggestion, embed_text))
                return
            hit = self.cache.lookup(query, vector) if self.cache is not None else None
            if hit is not None:
                self._serve_cached(suggestion, hit)
                return
        self._to_model(suggestion, max_tokens, embed_text)

    async def _semantic_race(self, suggestion: Suggestion, embed_text: str) -> None:
        """Decide a held request: a semantic hit replaces the model's stream (stopped if no
        one else reads it); otherwise the model's stream is released, held text first. A model
        that has already finished wins: its answer was computed for this very context."""
        assert self.embedder is not None and self.cache is not None
        vector = None
        try:
            vector = (await self.embedder.embed([embed_text]))[0]
        except Exception:
            log.exception("embedding a suggestion's context failed; the model answers")
        if suggestion.finished or not suggestion.held:
            return  # superseded, cancelled or failed meanwhile
        flight = suggestion.flight
        hit = None
        if vector is not None and flight is not None and not flight.finished:
            hit = self.cache.lookup(suggestion.query, vector)
        else:
            self.cache.misses += 1
        if hit is None:
            self._release(suggestion)
            return
        suggestion.held = False
        if flight is not None:
            flight.subscribers.remove(suggestion)
            suggestion.flight = None
            if all(s.finished for s in flight.subscribers) and flight.prefetch_for is None:
                self._end_flight(flight, "cancelled")
        self._serve_cached(suggestion, hit)

    def _release(self, suggestion: Suggestion) -> None:
        """A held request goes on with the model: start, what was held back, and the end if
        the model has finished meanwhile."""
        suggestion.held = False
        request = suggestion.request
        suggestion.peer.send_stateless(SuggestionStart(request.id, suggestion.source).encode())
        self.metrics.requests.labels("ws", suggestion.source).inc()
        if suggestion.held_text:
            held, suggestion.held_text = suggestion.held_text, ""
            self._send_delta(suggestion, held)
        flight = suggestion.flight
        if flight is not None and flight.finished:
            self._finish(suggestion, flight.pieces)

    def _serve_ready(self, state: _RoomState, suggestion: Suggestion, *, final: bool) -> bool:
        """Serve from a flight already computing this answer, or from the exact and type-ahead
        layers of the cache. False when neither can."""
        found = self._in_flight(state, suggestion)
        if found is not None:
            flight, offset, source = found
            self._attach(suggestion, flight, offset, source)
            return True
        if self.cache is not None:
            hit = self.cache.lookup(suggestion.query, final=final)
            if hit is not None:
                self._serve_cached(suggestion, hit)
                return True
        return False

    def _in_flight(
        self, state: _RoomState, suggestion: Suggestion
    ) -> tuple[Flight, int, str] | None:
        query = suggestion.query
        key = exact_key(query)
        for flight in state.flights:
            if flight.finished or flight.query.kind != query.kind:
                continue
            if flight.key == key:
                unused_prefetch = flight.prefetch_for is not None and not flight.served
                return flight, 0, PREFETCH if unused_prefetch else EXACT
            if suggestion.request.kind == "complete" and flight.text:
                cut = typed_ahead(flight.query.window, query.window, flight.text)
                if cut is not None:
                    return flight, cut, TYPEAHEAD
        return None

    def _to_model(
        self,
        suggestion: Suggestion,
        max_tokens: int,
        embed_text: str | None,
        *,
        held: bool = False,
    ) -> None:
        room, peer = suggestion.room, suggestion.peer
        flight = Flight(
            room,
            suggestion.query,
            exact_key(suggestion.query),
            suggestion.prompt,
            suggestion.anchor,
            max_tokens,
            f"{room.name}\0{peer.peer_id}",
            embed_text,
        )
        # The editor's previous request is superseded even if this one is then refused as busy
        # (its slot in the queue is freed first).
        self._claim(suggestion)
        try:
            self._launch(flight, INTERACTIVE)  # raises Busy at once when the queue is full
        except AiError:
            suggestion.finished = True
            raise
        self._attach(suggestion, flight, 0, MODEL, held=held)

    def _launch(self, flight: Flight, priority: int) -> None:
        flight.job = self.scheduler.submit(lambda: self._fly(flight), priority)
        self.metrics.queue_depth.set(self.scheduler.depth)
        state = self._room_state(flight.room)
        state.flights.add(flight)
        flight.job.add_done_callback(lambda job: self._landed(flight, job))

    def _attach(
        self,
        suggestion: Suggestion,
        flight: Flight,
        offset: int,
        source: str,
        *,
        held: bool = False,
    ) -> None:
        """``suggestion`` takes its text from ``flight`` from character ``offset`` on (what
        its editor typed already is skipped): what exists now at once, the rest as it comes."""
        if flight.prefetch_for is not None and not flight.served:
            self.prefetch_counts["used"] += 1
            if flight.job is not None:
                self.scheduler.promote(flight.job)  # someone waits now: never preempted
        flight.served = True
        suggestion.flight = flight
        suggestion.source = source
        # Joined before the editor's previous request is superseded: if that one was this
        # flight's only listener, the flight must not stop.
        flight.subscribers.append(suggestion)
        self._claim(suggestion)
        if held:
            suggestion.held = True
            return
        suggestion.peer.send_stateless(SuggestionStart(suggestion.request.id, source).encode())
        self.metrics.requests.labels("ws", source).inc()
        if len(flight.text) > offset:
            self._send_delta(suggestion, flight.text[offset:])

    def _serve_cached(self, suggestion: Suggestion, hit: CacheHit) -> None:
        """An answer from the cache: the whole stream at once, no model involved."""
        self._claim(suggestion)
        request, peer = suggestion.request, suggestion.peer
        suggestion.source = hit.layer
        peer.send_stateless(SuggestionStart(request.id, hit.layer).encode())
        self.metrics.requests.labels("ws", hit.layer).inc()
        self._send_delta(suggestion, hit.text)
        suggestion.finished = True
        ttft = (suggestion.first_at or time.perf_counter()) - suggestion.requested_at
        peer.send_stateless(SuggestionEnd(request.id, "done", round(ttft * 1000, 3), 0).encode())
        self.metrics.outcomes.labels("done").inc()

    def _send_delta(self, suggestion: Suggestion, text: str) -> None:
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

    def _claim(self, suggestion: Suggestion) -> None:
        """Make ``suggestion`` its editor's current one in this document, superseding the last."""
        key = (suggestion.room.name, suggestion.peer.peer_id)
        previous = self._current.get(key)
        if previous is suggestion:
            return
        self._current[key] = suggestion
        self._remember(suggestion)
        if previous is not None and not previous.finished:
            self._stop(previous, "superseded")

    def _cursor(self, text_type: Text, text: str, request: Suggest) -> int:
        if request.anchor is None:
            assert request.pos is not None
            return utf16_to_index(text, request.pos)
        # A client's Yjs relative position, resolved by pycrdt (UTF-16 units). pycrdt 0.14 can
        # panic (a BaseException) or mix units on some inputs (y-crdt/pycrdt#382): contain it.
        try:
            raw = base64.b64decode(request.anchor, validate=True)
            units = StickyIndex.decode(raw, text_type).get_index()
        except binascii.Error as exc:
            raise BadRequest("'anchor' is not base64") from exc
        except BaseException as exc:
            if not isinstance(exc, Exception) and type(exc).__name__ != "PanicException":
                raise
            raise BadRequest("'anchor' is not a Yjs relative position in this document") from exc
        return utf16_to_index(text, units)

    def _query(self, room: Room, kind: str, max_tokens: int, prompt: BuiltPrompt) -> CacheQuery:
        return CacheQuery(
            room.name, f"{kind}:{max_tokens}", self.provider.name, prompt.text, prompt.window
        )

    def _embed_text(self, prompt: BuiltPrompt) -> str | None:
        """What the semantic layer embeds for a completion; None when that layer is off or
        its model still loading."""
        if self.cache is None or self.embedder is None or not self.embedder.ready:
            return None
        if prompt.kind != "complete" or not prompt.window.strip():
            return None
        return embedding_text(prompt.window)

    # ---- flights ----------------------------------------------------------------------------

    async def _fly(self, flight: Flight) -> None:
        """Run on the scheduler's worker: generate, fanning each piece out to every request
        served from this flight."""
        generation = GenerationRequest(
            prompt=flight.prompt.text,
            session=flight.session,
            max_tokens=flight.max_tokens,
            stop=flight.prompt.stop,
        )

        def emit(piece: str) -> None:
            if flight.finished:
                return
            flight.text += piece
            for suggestion in flight.subscribers:
                if not suggestion.finished:
                    self._send_delta(suggestion, piece)

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
                requested_at=None,  # TTFT is per request: see _send_delta
                path="ws",
            )
        finally:
            if flight.prefetch_for is not None:
                self.budget.record(began, loop.time())
        flight.pieces = result.pieces
        if not flight.finished:
            self._complete(flight)

    def _complete(self, flight: Flight) -> None:
        flight.finished = True
        if flight.prefetch_for is not None:
            self.prefetch_counts["completed"] += 1
        state = self._rooms.get(flight.room.name)
        if state is not None:
            state.flights.discard(flight)
        if self.cache is not None and flight.text:
            self._store(flight)
        for suggestion in flight.subscribers:
            if not suggestion.finished and not suggestion.held:  # a held one ends when released
                self._finish(suggestion, flight.pieces)

    def _finish(self, suggestion: Suggestion, pieces: int) -> None:
        suggestion.finished = True
        self.metrics.outcomes.labels("done").inc()
        ttft = None
        if suggestion.first_at is not None:
            ttft = round((suggestion.first_at - suggestion.requested_at) * 1000, 2)
        suggestion.peer.send_stateless(
            SuggestionEnd(suggestion.request.id, "done", ttft, pieces).encode()
        )

    def _store(self, flight: Flight) -> None:
        assert self.cache is not None
        vector = None
        if flight.embed_text is not None and self.embedder is not None:
            vector = self.embedder.cached(flight.embed_text)
        entry = self.cache.put(flight.query, flight.text, vector, prefetched=not flight.served)
        if entry is not None and vector is None and flight.embed_text is not None:
            self._embed_later(flight.embed_text, entry)

    def _landed(self, flight: Flight, job: asyncio.Future[Any]) -> None:
        """The scheduler is done with ``flight``'s job: ran, failed, or cancelled (by us, or
        preempted as a prefetch nobody waited for)."""
        self.metrics.queue_depth.set(self.scheduler.depth)
        if flight.finished:
            return
        if job.cancelled():
            self._end_flight(flight, "cancelled")
            return
        error = job.exception()
        flight.finished = True
        self._room_state(flight.room).flights.discard(flight)
        if error is None:
            return
        if not isinstance(error, AiError):
            log.error("suggestion failed", exc_info=error)
            error = AiError("suggestion failed")
        for suggestion in flight.subscribers:
            if not suggestion.finished:
                suggestion.finished = True
                self._error(suggestion.peer, suggestion.request.id, error.code, str(error))

    def _end_flight(self, flight: Flight, reason: str) -> None:
        """Stop a flight now (the model stops within one token); its requests end with
        ``reason``."""
        flight.cancel.cancel()
        if flight.job is not None:
            flight.job.cancel()
        if flight.finished:
            return
        flight.finished = True
        state = self._rooms.get(flight.room.name)
        if state is not None:
            state.flights.discard(flight)
        if flight.prefetch_for is not None and not flight.served:
            self.prefetch_counts["wasted"] += 1
        for suggestion in flight.subscribers:
            self._stop(suggestion, reason)

    def _stop(self, suggestion: Suggestion, reason: str, *, notify: bool = True) -> None:
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
            suggestion.peer.send_stateless(SuggestionEnd(suggestion.request.id, reason).encode())
        suggestion.held = False
        flight = suggestion.flight
        if flight is None or flight.finished:
            return
        if all(s.finished for s in flight.subscribers) and flight.prefetch_for is None:
            self._end_flight(flight, reason)

    def _cancel(self, peer: Peer, request_id: str, reason: str) -> None:
        suggestion = self._by_peer.get(peer.peer_id, {}).get(request_id)
        if suggestion is None:
            raise BadRequest(f"no suggestion {request_id!r} to cancel")
        self._stop(suggestion, reason)

    def _check_stale(self, room: Room, state: _RoomState) -> None:
        """After edits: stop completions whose text right at the cursor changed, unless what
        was typed there is how the completion begins (type-ahead: it goes on)."""
        state.check_scheduled = False
        if not state.flights:
            return
        text = str(room.doc.get(TEXT_NAME, type=Text))
        for flight in list(state.flights):
            if flight.finished or flight.prompt.kind != "complete":
                continue
            if flight.anchor.intact(text):
                continue
            typed = flight.anchor.typed(text)
            if typed and flight.text.startswith(typed):
                continue
            self._end_flight(flight, "cancelled")

    # ---- prefetch ---------------------------------------------------------------------------

    def _paused(self, room: Room, peer: Peer) -> None:
        """An editor's debounce timer fired: prefetch at its cursor if it has stopped typing."""
        state = self._rooms.get(room.name)
        pause = state.pauses.get(peer.peer_id) if state is not None else None
        if state is None or pause is None:
            return  # the editor left, or the document unloaded
        loop = asyncio.get_running_loop()
        left = pause.remaining(loop.time(), self.settings.prefetch_seconds)
        if left > 0:
            loop.call_later(left, self._paused, room, peer)
            return
        try:
            self._prefetch(room, state, peer)
        except Exception:
            log.exception("prefetch failed")

    def _prefetch(self, room: Room, state: _RoomState, peer: Peer) -> None:
        if peer.peer_id not in state.lengths:
            # Only for editors that ask for completions: scripts, bots and editors with
            # suggestions off never do, and computing theirs would only take the model from
            # (and evict the warm state of) those who do.
            return
        text = str(room.doc.get(TEXT_NAME, type=Text))
        before, state.seen_text = state.seen_text, text
        found = self._cursor_after_typing(state, peer, before, text)
        if found is None:
            return
        cursor, certain = found
        now = asyncio.get_running_loop().time()
        state.cursors[peer.peer_id] = (TextAnchor.at(text, cursor), now)
        memo = state.memos.setdefault(peer.peer_id, ContextMemo())
        if not certain:
            # A guess must not overwrite the context the editor's next request will reuse.
            memo = replace(memo)
        prompt = self.builder.complete(state.regions, text, cursor, memo)
        max_tokens = state.lengths.get(peer.peer_id, self.settings.default_max_tokens)
        query = self._query(room, "complete", max_tokens, prompt)
        embed_text = self._embed_text(prompt)
        if embed_text is not None and self.embedder is not None:
            if self.embedder.cached(embed_text) is None:
                self._embed_later(embed_text, None)  # so the request finds it ready
        key = exact_key(query)
        previous = state.prefetches.get(peer.peer_id)
        if previous is not None and not previous.finished:
            if previous.key == key:
                return
            if not previous.subscribers:
                self._end_flight(previous, "cancelled")
        if (self.cache is not None and self.cache.has_exact(query)) or any(
            f.key == key for f in state.flights
        ):
            return  # already known or being computed
        if not self.scheduler.idle or not self.budget.allows(asyncio.get_running_loop().time()):
            self.prefetch_counts["skipped"] += 1
            return
        flight = Flight(
            room,
            query,
            key,
            prompt,
            TextAnchor.at(text, cursor),
            max_tokens,
            f"{room.name}\0{peer.peer_id}",
            embed_text,
            prefetch_for=peer.peer_id,
        )
        try:
            self._launch(flight, PREFETCH_PRIORITY)
        except Busy:
            self.prefetch_counts["skipped"] += 1
            return
        state.prefetches[peer.peer_id] = flight
        self.prefetch_counts["started"] += 1

    def _cursor_after_typing(
        self, state: _RoomState, peer: Peer, before: str | None, text: str
    ) -> tuple[int, bool] | None:
        """Where an editor's cursor is after a burst of typing, and whether that is certain;
        None when it has typed nothing since its cursor was last known. The server sees
        edits, not cursors: when the editor typed right at its last known cursor (it usually
        goes on from where it asked), the cursor is after what it typed there, whatever others
        did elsewhere; otherwise it is guessed to be where the text changed
        (prefetch.edited_end), which others typing at the same time can mislead."""
        last = state.cursors.get(peer.peer_id)
        pause = state.pauses.get(peer.peer_id)
        if last is not None:
            anchor, known_at = last
            if pause is not None and pause.last <= known_at:
                return None  # it asked (or was prefetched for) after its last edit
            typed = anchor.typed(text)
            where = anchor.resolve(text)
            if typed and where is not None:
                return where + len(typed), True
        cursor = edited_end(before, text) if before is not None else None
        return None if cursor is None else (cursor, False)

    def _embed_later(self, text: str, entry: int | None) -> None:
        """Embed ``text`` in the background (bounded); give cache entry ``entry`` the vector."""
        if self.embedder is None or not self.embedder.ready or self._embedding >= 8:
            return
        self._embedding += 1
        embedder = self.embedder

        async def embed() -> None:
            try:
                vector = (await embedder.embed([text]))[0]
            finally:
                self._embedding -= 1
            if entry is not None and self.cache is not None:
                self.cache.add_vector(entry, vector)

        self._spawn(embed())

    def _spawn(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Future[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background AI work failed", exc_info=task.exception())

    def stats(self) -> dict[str, int]:
        """Prefetch outcomes, counting answers computed ahead that the cache served later or
        dropped unused."""
        counts = dict(self.prefetch_counts)
        if self.cache is not None:
            counts["used"] = counts.get("used", 0) + self.cache.prefetch_used
            counts["wasted"] = counts.get("wasted", 0) + self.cache.prefetch_unused
        return counts

    # ---- accept -----------------------------------------------------------------------------

    async def _accept(self, room: Room, peer: Peer, request_id: str) -> None:
        if not peer.writable:
            raise Forbidden("accepting a suggestion needs read-write scope")
        suggestion = self._by_peer.get(peer.peer_id, {}).get(request_id)
        if suggestion is None or suggestion.room is not room:
            raise BadRequest(f"no suggestion {request_id!r} to accept")
        if not suggestion.finished:
            # Take what has streamed so far; with nothing yet, the editor hears it ended.
            self._stop(suggestion, "cancelled", notify=not suggestion.text)
        if not suggestion.text:
            raise BadRequest("the suggestion has no text yet")
        current = str(room.doc.get(TEXT_NAME, type=Text))
        where = suggestion.anchor.resolve(current)
        if where is None:
            raise BadRequest("the text around the suggestion changed; ask again")
        if suggestion.passage is not None and not current.startswith(suggestion.passage, where):
            raise BadRequest("the selected text changed; ask again")
        insert = suggestion.text
        if suggestion.passage is None:
            # The editor may have typed the suggestion's first characters already (type-ahead):
            # insert only the rest, after them.
            typed = suggestion.anchor.typed(current)
            if typed and insert.startswith(typed):
                where, insert = where + len(typed), insert[len(typed) :]
            if not insert:
                raise BadRequest("the suggestion has been typed in full already")
        self._by_peer.get(peer.peer_id, {}).pop(request_id, None)
        written = room.edit(
            lambda doc: _apply(doc, insert, suggestion.passage, current, where), origin=AI_ORIGIN
        )
        await written
        self.metrics.accepts.inc()
        peer.send_stateless(SuggestionAccepted(request_id).encode())

    # ---- bookkeeping ------------------------------------------------------------------------

    def _room_state(self, room: Room) -> _RoomState:
        state = self._rooms.get(room.name)
        if state is None:
            state = self._rooms[room.name] = _RoomState(RegionIndex(self._count_tokens))
        return state

    def _remember(self, suggestion: Suggestion) -> None:
        mine = self._by_peer.setdefault(suggestion.peer.peer_id, {})
        mine.pop(suggestion.request.id, None)
        mine[suggestion.request.id] = suggestion
        while len(mine) > MAX_REMEMBERED:
            oldest = next(iter(mine))
            self._stop(mine.pop(oldest), "cancelled", notify=False)

    def _error(self, peer: Peer, request_id: str | None, code: str, message: str) -> None:
        self.metrics.errors.labels(code).inc()
        peer.send_stateless(SuggestionError(request_id, code, message).encode())

    def close(self) -> None:
        for suggestions in self._by_peer.values():
            for suggestion in suggestions.values():
                self._stop(suggestion, "cancelled", notify=False)
        for state in self._rooms.values():
            for flight in list(state.flights):
                self._end_flight(flight, "cancelled")
        for task in self._tasks:
            task.cancel()


def _apply(doc: Doc, insert: str, passage: str | None, current: str, where: int) -> None:
    """Insert ``insert`` at ``where`` (replacing ``passage`` there, for a rewrite); pycrdt
    counts UTF-8 bytes."""
    text = doc.get(TEXT_NAME, type=Text)
    start = index_to_utf8(current, where)
    if passage:
        end = index_to_utf8(current, where + len(passage))
        del text[start:end]
    text.insert(start, insert)


def _approximate_tokens(text: str) -> int:
    return max(1, len(text) // 4)

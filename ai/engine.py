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
from dataclasses import dataclass, field
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
from .cache import CacheHit, CacheQuery, SuggestionCache
from .context import BuiltPrompt, ContextBuilder, ContextMemo
from .errors import AiError, BadRequest, Forbidden
from .generation import run_generation
from .metrics import AiMetrics
from .positions import index_to_utf8, utf16_to_index
from .providers.base import Cancellation, GenerationRequest, Provider
from .regions import RegionIndex
from .scheduler import INTERACTIVE, Scheduler

if TYPE_CHECKING:
    from collab.peer import Peer
    from collab.room import Room

log = logging.getLogger(__name__)

TEXT_NAME = "content"
AI_ORIGIN = "ai"
MAX_REMEMBERED = 16  # finished suggestions an editor can still accept


@dataclass(frozen=True, slots=True)
class AiSettings:
    default_max_tokens: int = 24
    coalesce_seconds: float = 0.05
    request_timeout: float = 60.0
    queue_limit: int = 8
    context_budget_tokens: int = 700


@dataclass(eq=False)
class Suggestion:
    request: Suggest
    peer: Peer
    room: Room
    prompt: BuiltPrompt
    # Where the text goes, found again after concurrent edits by the text around it: the
    # cursor (complete), or the selection's start plus the selected passage (rewrite).
    anchor: TextAnchor
    passage: str | None
    requested_at: float
    cancel: Cancellation = field(default_factory=Cancellation)
    query: CacheQuery | None = None  # what its answer is cached under once it completes
    text: str = ""
    finished: bool = False
    job: asyncio.Future[Any] | None = None


@dataclass
class _RoomState:
    regions: RegionIndex
    active: dict[tuple[int, str], Suggestion] = field(default_factory=dict)
    memos: dict[int, ContextMemo] = field(default_factory=dict)  # per editor (peer id)
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
        self._rooms: dict[str, _RoomState] = {}
        # (peer id, request id) → suggestion; in flight or finished and still acceptable
        self._by_peer: dict[int, dict[str, Suggestion]] = {}
        self._current: dict[tuple[str, int], Suggestion] = {}  # one in flight per editor+doc
        self._tasks: set[asyncio.Future[None]] = set()

    # ---- hooks ------------------------------------------------------------------------------

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
                task = asyncio.ensure_future(self._accept_reporting(room, peer, message.id))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        except AiError as exc:
            self._error(peer, message.id, exc.code, str(exc))

    async def _accept_reporting(self, room: Room, peer: Peer, request_id: str) -> None:
        try:
            await self._accept(room, peer, request_id)
        except AiError as exc:
            self._error(peer, request_id, exc.code, str(exc))
        except Exception:
            log.exception("accepting a suggestion failed")
            self._error(peer, request_id, "internal", "accepting the suggestion failed")

    def on_change(self, room: Room, update: bytes, origin: object) -> None:
        state = self._rooms.get(room.name)
        if state is None:
            return
        state.regions.mark_dirty()
        if state.active and not state.check_scheduled:
            state.check_scheduled = True
            asyncio.get_running_loop().call_soon(self._check_stale, room, state)

    def on_detach(self, room: Room, peer: Peer) -> None:
        for suggestion in list(self._by_peer.pop(peer.peer_id, {}).values()):
            self._stop(suggestion, "cancelled", notify=False)
        self._current.pop((room.name, peer.peer_id), None)
        state = self._rooms.get(room.name)
        if state is not None:
            state.memos.pop(peer.peer_id, None)

    async def on_unload(self, room: Room) -> None:
        self._rooms.pop(room.name, None)

    # ---- requests ---------------------------------------------------------------------------

    def _start(self, room: Room, peer: Peer, request: Suggest) -> None:
        text_type = room.doc.get(TEXT_NAME, type=Text)
        text = str(text_type)
        state = self._room_state(room)
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
        previous = self._current.get((room.name, peer.peer_id))
        if previous is not None and not previous.finished:
            self._stop(previous, "superseded")
        suggestion = Suggestion(request, peer, room, prompt, anchor, passage, time.perf_counter())
        max_tokens = request.max_tokens or self.settings.default_max_tokens
        if self.cache is not None:
            suggestion.query = CacheQuery(
                room.name,
                f"{request.kind}:{max_tokens}",
                self.provider.name,
                prompt.text,
                prompt.window,
            )
            hit = self.cache.lookup(suggestion.query)
            if hit is not None:
                self._serve_cached(suggestion, hit)
                return
        suggestion.job = self.scheduler.submit(
            lambda: self._generate(suggestion, max_tokens), INTERACTIVE
        )  # raises Busy at once when the queue is full
        self.metrics.queue_depth.set(self.scheduler.depth)
        self._remember(suggestion)
        state.active[(peer.peer_id, request.id)] = suggestion
        self._current[(room.name, peer.peer_id)] = suggestion
        suggestion.job.add_done_callback(lambda job: self._job_done(suggestion, job))
        peer.send_stateless(SuggestionStart(request.id, "model").encode())
        self.metrics.requests.labels("ws", "model").inc()

    def _serve_cached(self, suggestion: Suggestion, hit: CacheHit) -> None:
        """An answer from the cache: the whole stream at once, no model involved."""
        request, peer = suggestion.request, suggestion.peer
        suggestion.text = hit.text
        suggestion.finished = True
        self._remember(suggestion)
        self._current[(suggestion.room.name, peer.peer_id)] = suggestion
        peer.send_stateless(SuggestionStart(request.id, hit.layer).encode())
        peer.send_stateless(SuggestionDelta(request.id, hit.text).encode())
        ttft = time.perf_counter() - suggestion.requested_at
        peer.send_stateless(SuggestionEnd(request.id, "done", round(ttft * 1000, 3), 0).encode())
        self.metrics.requests.labels("ws", hit.layer).inc()
        self.metrics.ttft.labels(hit.layer, "ws").observe(ttft)
        self.metrics.outcomes.labels("done").inc()

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

    async def _generate(self, suggestion: Suggestion, max_tokens: int) -> None:
        request = suggestion.request
        peer = suggestion.peer
        generation = GenerationRequest(
            prompt=suggestion.prompt.text,
            session=f"{suggestion.room.name}\0{peer.peer_id}",
            max_tokens=max_tokens,
            stop=suggestion.prompt.stop,
        )

        def emit(text: str) -> None:
            if not suggestion.finished:
                suggestion.text += text
                peer.send_stateless(SuggestionDelta(request.id, text).encode())

        result, ttft = await run_generation(
            self.provider,
            generation,
            suggestion.cancel,
            emit,
            interval=self.settings.coalesce_seconds,
            timeout=self.settings.request_timeout,
            metrics=self.metrics,
            requested_at=suggestion.requested_at,
            path="ws",
        )
        if not suggestion.finished:
            suggestion.finished = True
            self.metrics.outcomes.labels("done").inc()
            if self.cache is not None and suggestion.query is not None and suggestion.text:
                self.cache.put(suggestion.query, suggestion.text)
            peer.send_stateless(
                SuggestionEnd(
                    request.id,
                    "done",
                    None if ttft is None else round(ttft * 1000, 2),
                    result.pieces,
                ).encode()
            )

    def _job_done(self, suggestion: Suggestion, job: asyncio.Future[Any]) -> None:
        self.metrics.queue_depth.set(self.scheduler.depth)
        self._settle(suggestion)
        if job.cancelled():
            return
        error = job.exception()
        if error is None or suggestion.finished:
            return
        suggestion.finished = True
        if isinstance(error, AiError):
            self._error(suggestion.peer, suggestion.request.id, error.code, str(error))
        else:
            log.error("suggestion failed", exc_info=error)
            self._error(suggestion.peer, suggestion.request.id, "internal", "suggestion failed")

    def _settle(self, suggestion: Suggestion) -> None:
        state = self._rooms.get(suggestion.room.name)
        if state is not None:
            state.active.pop((suggestion.peer.peer_id, suggestion.request.id), None)

    def _stop(self, suggestion: Suggestion, reason: str, *, notify: bool = True) -> None:
        """End an in-flight suggestion now (the model stops within one token)."""
        suggestion.cancel.cancel()
        if suggestion.job is not None:
            suggestion.job.cancel()
        if suggestion.finished:
            return
        suggestion.finished = True
        self._settle(suggestion)
        self.metrics.outcomes.labels(reason).inc()
        if notify:
            suggestion.peer.send_stateless(SuggestionEnd(suggestion.request.id, reason).encode())

    def _cancel(self, peer: Peer, request_id: str, reason: str) -> None:
        suggestion = self._by_peer.get(peer.peer_id, {}).get(request_id)
        if suggestion is None:
            raise BadRequest(f"no suggestion {request_id!r} to cancel")
        self._stop(suggestion, reason)

    def _check_stale(self, room: Room, state: _RoomState) -> None:
        """After edits: cancel in-flight completions whose text right at the cursor changed."""
        state.check_scheduled = False
        if not state.active:
            return
        text = str(room.doc.get(TEXT_NAME, type=Text))
        for suggestion in list(state.active.values()):
            if suggestion.finished or suggestion.request.kind != "complete":
                continue
            if not suggestion.anchor.intact(text):
                self._stop(suggestion, "cancelled")

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
        self._by_peer.get(peer.peer_id, {}).pop(request_id, None)
        written = room.edit(lambda doc: _apply(doc, suggestion, current, where), origin=AI_ORIGIN)
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


def _apply(doc: Doc, suggestion: Suggestion, current: str, where: int) -> None:
    """Insert (or replace the passage with) the suggestion; pycrdt counts UTF-8 bytes."""
    text = doc.get(TEXT_NAME, type=Text)
    start = index_to_utf8(current, where)
    if suggestion.passage:
        end = index_to_utf8(current, where + len(suggestion.passage))
        del text[start:end]
    text.insert(start, suggestion.text)


def _approximate_tokens(text: str) -> int:
    return max(1, len(text) // 4)

"""The AI extension: suggestion requests arriving on a document's Stateless frames, served from
the server-held document through the scheduler and a provider, streamed back on the same socket.

Attached to collab through hooks; never runs on the sync path: ``on_change`` only marks state
dirty and schedules a coalesced check for stale in-flight requests. This module is the hooks
facade; the work lives in rooms of its own: ``flights`` (generations and their streams),
``serving`` (where a request's answer comes from), ``prefetcher`` (computing ahead) and
``accept`` (writing a suggestion into the document). Knows nothing of frames: replies go
through ``peer.send_stateless``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from tether.protocol.wire.ai_messages import (
    Accept,
    Cancel,
    InvalidAiMessage,
    Suggest,
    WatchStatus,
    decode_client_message,
)

from .cache.suggestions import SuggestionCache
from .errors import AiError, Forbidden
from .metrics import AiMetrics
from .model.providers.base import Provider
from .settings import AiSettings
from .status import StatusBoard
from .suggest.accept import AI_ORIGIN, Acceptor
from .suggest.flights import Flights
from .suggest.prefetcher import Prefetcher
from .suggest.records import TEXT_NAME, Flight, Suggestion
from .suggest.rewarm import Rewarmer
from .suggest.scheduler import Scheduler
from .suggest.serving import RequestServer
from .text.context import ContextBuilder, bounded_count, most_tokens

if TYPE_CHECKING:
    from tether.collab.rooms.room import Room
    from tether.collab.rooms.room_peer import Peer

    from .cache.embedder import Embedder

__all__ = ["AI_ORIGIN", "TEXT_NAME", "AiEngine", "AiSettings", "Flight", "Suggestion"]

log = logging.getLogger(__name__)


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
        budget = self.settings.context_budget_tokens
        count_tokens = bounded_count(count_tokens, budget) if count_tokens else _approximate_tokens
        self.builder = ContextBuilder(
            count_tokens, budget_tokens=self.settings.context_budget_tokens
        )
        self.cache = cache
        self.embedder = embedder  # None: no semantic layer; loads in the background
        self.flights = Flights(
            provider, scheduler, metrics, self.settings, count_tokens, cache, embedder
        )
        self.budget = self.flights.budget
        self.prefetch_counts = self.flights.prefetch_counts  # see metrics.CacheCollector
        self.requests = RequestServer(self.flights, self.builder)
        self.prefetcher = Prefetcher(self.flights, self.builder)
        self.acceptor = Acceptor(self.flights)
        # Warm states lost with a restarted worker, rebuilt (the wiring adds its listener).
        self.rewarmer = Rewarmer(self.flights, self.builder)
        # Whether AI works now, for /health and the editors that asked (set by the wiring).
        self.status: StatusBoard | None = None

    # ---- hooks ------------------------------------------------------------------------------

    async def on_load(self, room: Room) -> None:
        state = self.flights.room_state(room)
        if not state.document.is_rich(room.doc):  # a rich one is read only around cursors
            state.seen_text = state.document.around(room.doc, None).text

    async def on_stateless(self, room: Room, peer: Peer, payload: str) -> None:
        try:
            message = decode_client_message(payload)
        except InvalidAiMessage as exc:
            self.flights.send_error(peer, exc.request_id, "bad_request", str(exc))
            return
        try:
            if isinstance(message, Suggest):
                if not peer.writable:
                    # A suggestion is a proposed edit: a reader could never apply it, and the
                    # model is the scarcest thing the server has. Readonly grants (often the
                    # widely shared ones) get none of it.
                    raise Forbidden("suggestions need read-write scope")
                self.requests.start(room, peer, message)
            elif isinstance(message, Cancel):
                self.flights.cancel(peer, message.id, "cancelled")
            elif isinstance(message, WatchStatus):
                if self.status is not None:
                    self.status.watch(peer, message.id)
            elif isinstance(message, Accept):
                # Off the connection's receive loop: the accept waits for its write to be durable.
                self.flights.spawn(
                    self.acceptor.accept_reporting(
                        room, peer, message.id, confirm_dropped=message.confirm_dropped
                    )
                )
        except AiError as exc:
            self.flights.send_error(peer, message.id, exc.code, str(exc))
        except Exception:
            log.exception("handling %s failed", type(message).__name__)
            self.flights.send_error(peer, message.id, "internal", "the request failed")

    def on_change(self, room: Room, update: bytes, origin: object) -> None:
        # The sync path: O(1) bookkeeping only; the work happens in callbacks scheduled here.
        state = self.flights.rooms.get(room.name)
        if state is None:
            return
        state.regions.mark_dirty()
        peer_id = getattr(origin, "peer_id", None)
        # O(update): what the update touched is read again when next asked for, nothing now.
        # With an update pending in yrs, this one may integrate it too: nothing is followed.
        items = None if getattr(room, "holds_pending", False) else getattr(room, "guard", None)
        state.document.changed(room.doc, update, items, peer_id)
        self.flights.check_soon(room, state)
        if peer_id is not None and self.settings.prefetch_seconds > 0 and origin.writable:  # type: ignore[attr-defined]
            self.prefetcher.typed(room, state, origin)  # type: ignore[arg-type]

    def on_detach(self, room: Room, peer: Peer) -> None:
        self.flights.forget(room, peer)
        if self.status is not None:
            self.status.unwatch(peer)
        state = self.flights.rooms.get(room.name)
        if state is not None:
            state.memos.pop(peer.peer_id, None)
            state.document.forget_peer(peer.peer_id)
            self.prefetcher.forget(state, peer)

    async def on_unload(self, room: Room) -> None:
        state = self.flights.rooms.pop(room.name, None)
        if state is not None:
            for flight in list(state.flights):
                self.flights.end(flight, "cancelled")

    def on_deleted(self, name: str) -> None:
        dropped = self.forget_document(name)
        log.info("document %r deleted: %d cached suggestions dropped", name[:64], dropped)

    def forget_document(self, name: str) -> int:
        """``name`` was deleted: its flights end (none completes into the cache afterwards) and
        every cache entry of its scope goes, so no layer can serve its text again. Returns the
        number of cache entries dropped."""
        state = self.flights.rooms.pop(name, None)
        if state is not None:
            for flight in list(state.flights):
                self.flights.end(flight, "cancelled")
        return self.cache.forget(name) if self.cache is not None else 0

    def health(self) -> dict[str, Any]:
        """``/health``'s AI section: the state, and what the junk filter has dropped."""
        body = self.status.current.health() if self.status is not None else {"state": "off"}
        body["junk_filter"] = {
            "state": "on" if self.settings.junk_filter else "off",
            "dropped": dict(sorted(self.flights.junk_counts.items())),
        }
        upstreams = getattr(self.flights.provider, "health", None)
        if callable(upstreams):  # several model upstreams (ai.model.providers.pool)
            body["upstreams"] = upstreams()
        return body

    def stats(self) -> dict[str, int]:
        """Prefetch outcomes, counting answers computed ahead that the cache served later or
        dropped unused."""
        counts = dict(self.prefetch_counts)
        if self.cache is not None:
            counts["used"] = counts.get("used", 0) + self.cache.prefetch_used
            counts["wasted"] = counts.get("wasted", 0) + self.cache.prefetch_unused
        return counts

    def close(self) -> None:
        self.flights.close()


def _approximate_tokens(text: str) -> int:
    """Without the model's tokenizer: an upper estimate, so emoji cannot overfill a prompt."""
    return max(1, most_tokens(text))

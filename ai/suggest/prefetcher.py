"""The prefetch planner: when an editor's typing pauses, compute the suggestion at its cursor
before it asks, so its next ``suggest`` finds the answer in flight or in the cache.

Decides when and what to compute and launches it through ``Flights`` at prefetch priority;
the pure parts (debounce, cursor inference, duty cycle) are in ``ai/suggest/prefetch.py``.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import TYPE_CHECKING

from ..cache.suggestions import exact_key
from ..errors import Busy
from ..text.anchors import TextAnchor
from ..text.context import ContextBuilder, ContextMemo
from .flights import session_of
from .prefetch import Pause, cursor_after_typing
from .records import Flight, RoomState
from .refresher import Refresher
from .scheduler import PREFETCH

if TYPE_CHECKING:
    from tether.collab.rooms.peer import Peer
    from tether.collab.rooms.room import Room

    from .flights import Flights

log = logging.getLogger(__name__)


class Prefetcher:
    def __init__(self, flights: Flights, builder: ContextBuilder) -> None:
        self.flights = flights
        self.builder = builder
        self.debounce = flights.settings.prefetch_seconds  # 0: prefetch is off
        self.refresher = Refresher(flights, builder)

    def typed(self, room: Room, state: RoomState, peer: Peer) -> None:
        """An editor's edit arrived: O(1), arming its debounce timer if none is pending."""
        loop = asyncio.get_running_loop()
        pause = state.pauses.get(peer.peer_id)
        if pause is None:
            pause = state.pauses[peer.peer_id] = Pause()
        if pause.touch(loop.time()):
            loop.call_later(self.debounce, self._paused, room, peer)
        self.refresher.typed(room, state, peer)

    def forget(self, state: RoomState, peer: Peer) -> None:
        """An editor left: drop what prefetch knew of it, and its prefetch unless a request
        is reading it."""
        state.pauses.pop(peer.peer_id, None)
        state.lengths.pop(peer.peer_id, None)
        state.cursors.pop(peer.peer_id, None)
        prefetch = state.prefetches.pop(peer.peer_id, None)
        if prefetch is not None and not prefetch.subscribers:
            self.flights.end(prefetch, "cancelled")

    def _embed_ahead(self, room: Room, state: RoomState, peer: Peer, text: str) -> None:
        """The edit was away from where the editor last asked (a typo fixed further up):
        it may go back and ask there again, so embed that context ahead if the semantic
        layer could answer it. No model time: only what a semantic hit needs."""
        flights = self.flights
        last = state.cursors.get(peer.peer_id)
        where = last[0].resolve(text) if last is not None else None
        if last is None or where is None or flights.embedder is None:
            return
        cursor = where + len(last[0].typed(text) or "")
        prompt = self.builder.complete(state.regions, text, cursor, None)
        max_tokens = state.lengths.get(peer.peer_id, flights.settings.default_max_tokens)
        query = flights.query(room, "complete", max_tokens, prompt)
        embed_text = flights.embed_text(prompt)
        if flights.semantic_possible(query, embed_text) and embed_text is not None:
            if flights.embedder.cached(embed_text) is None:
                flights.embed_later(embed_text, None)

    def _paused(self, room: Room, peer: Peer) -> None:
        """An editor's debounce timer fired: prefetch at its cursor if it has stopped typing."""
        state = self.flights.rooms.get(room.name)
        pause = state.pauses.get(peer.peer_id) if state is not None else None
        if state is None or pause is None:
            return  # the editor left, or the document unloaded
        loop = asyncio.get_running_loop()
        left = pause.remaining(loop.time(), self.debounce)
        if left > 0:
            loop.call_later(left, self._paused, room, peer)
            return
        try:
            self._prefetch(room, state, peer)
        except Exception:
            log.exception("prefetch failed")

    def _prefetch(self, room: Room, state: RoomState, peer: Peer) -> None:
        flights = self.flights
        if peer.peer_id not in state.lengths:
            # Only for editors that ask for completions: scripts, bots and editors with
            # suggestions off never do, and computing theirs would only take the model from
            # (and evict the warm state of) those who do.
            return
        text = state.document.read(room.doc).text
        before, state.seen_text = state.seen_text, text
        found = cursor_after_typing(
            state.cursors.get(peer.peer_id), state.pauses.get(peer.peer_id), before, text
        )
        if found is None:
            return
        cursor, certain = found
        if not certain:
            self._embed_ahead(room, state, peer, text)
        now = asyncio.get_running_loop().time()
        state.cursors[peer.peer_id] = (TextAnchor.at(text, cursor), now)
        memo = state.memos.setdefault(peer.peer_id, ContextMemo())
        if not certain:
            # A guess must not overwrite the context the editor's next request will reuse.
            memo = replace(memo)
        # As a request would build it (see ai.suggest.refresher for how a stale context is renewed),
        # so the request after this pause finds this very computation.
        prompt = self.builder.complete(state.regions, text, cursor, memo, refresh=False)
        max_tokens = state.lengths.get(peer.peer_id, flights.settings.default_max_tokens)
        query = flights.query(room, "complete", max_tokens, prompt)
        embed_text = flights.embed_text(prompt)
        if flights.semantic_possible(query, embed_text) and flights.embedder is not None:
            assert embed_text is not None
            if flights.embedder.cached(embed_text) is None:
                flights.embed_later(embed_text, None)  # so the request finds it ready
        key = exact_key(query)
        previous = state.prefetches.get(peer.peer_id)
        if previous is not None and not previous.finished:
            if previous.key == key:
                return
            if not previous.subscribers:
                flights.end(previous, "cancelled")
        if (flights.cache is not None and flights.cache.has_exact(query)) or any(
            f.key == key for f in state.flights
        ):
            return  # already known or being computed
        # The editor has paused and will likely ask here: that comes before renewing its
        # context (which goes on at its next edit).
        renewal = self.refresher.yield_to(state, peer)
        idle = flights.scheduler.idle if renewal is None else flights.scheduler.idle_but(renewal)
        if not idle or not flights.budget.allows(asyncio.get_running_loop().time()):
            flights.prefetch_counts["skipped"] += 1
            return
        flight = Flight(
            room,
            query,
            key,
            prompt,
            TextAnchor.at(text, cursor),
            max_tokens,
            session_of(room, peer, memo.epoch),
            embed_text,
            prefetch_for=peer.peer_id,
        )
        try:
            flights.launch(flight, PREFETCH, peer)
        except Busy:
            flights.prefetch_counts["skipped"] += 1
            return
        state.prefetches[peer.peer_id] = flight
        flights.prefetch_counts["started"] += 1

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
from .document_text import Reading
from .flights import session_of
from .prefetch import Pause, cursor_after_typing, edited_end
from .records import Flight, RoomState
from .refresher import Refresher
from .scheduler import PREFETCH

if TYPE_CHECKING:
    from tether.collab.rooms.room import Room
    from tether.collab.rooms.room_peer import Peer

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

    def _embed_ahead(self, room: Room, state: RoomState, peer: Peer) -> None:
        """The edit was away from where the editor last asked (a typo fixed further up):
        it may go back and ask there again, so embed that context ahead if the semantic
        layer could answer it. No model time: only what a semantic hit needs."""
        flights = self.flights
        last = state.cursors.get(peer.peer_id)
        if last is None or flights.embedder is None:
            return
        reading, anchor = state.document.find(room.doc, last[0])
        text = reading.text
        where = anchor.resolve(text)
        if where is None:
            return
        cursor = where + len(anchor.typed(text) or "")
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
        found = self._cursor(room, state, peer)
        if found is None:
            return
        reading, cursor, certain = found
        text = reading.text
        if not certain:
            self._embed_ahead(room, state, peer)
        now = asyncio.get_running_loop().time()
        spot = state.document.spot(reading, TextAnchor.at(text, cursor))
        state.cursors[peer.peer_id] = (spot, now)
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
            spot,
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

    def _cursor(self, room: Room, state: RoomState, peer: Peer) -> tuple[Reading, int, bool] | None:
        """Where the editor's cursor is after its burst of typing, the text around it, and
        whether that is certain (``prefetch.cursor_after_typing``); None when it typed
        nothing since its cursor was last known."""
        document, pause = state.document, state.pauses.get(peer.peer_id)
        last = state.cursors.get(peer.peer_id)
        if not document.is_rich(room.doc):
            reading = document.around(room.doc, None)
            before, state.seen_text = state.seen_text, reading.text
            found = cursor_after_typing(last, pause, before, reading.text)
            return None if found is None else (reading, *found)
        if last is not None:
            spot, known_at = last
            if pause is not None and pause.last <= known_at:
                return None  # it asked (or was prefetched for) after its last edit
            reading, anchor = document.find(room.doc, spot)
            found = cursor_after_typing((anchor, known_at), None, None, reading.text)
            if found is not None:
                return reading, *found
        return self._edited_block(room, state, peer)

    def _edited_block(
        self, room: Room, state: RoomState, peer: Peer
    ) -> tuple[Reading, int, bool] | None:
        """A guess, on a rich document: where the editor's last edit ended in the block it
        touched last (its text now against the text it had when last read)."""
        document = state.document
        ident = document.touched_by(peer.peer_id)
        top = document.index_of(room.doc, ident) if ident is not None else None
        if ident is None or top is None:
            return None
        reading = document.at(room.doc, top, ident)
        old = document.previous_block_text(ident)
        view = reading.view
        start = view.block_start(top) if view is not None else None
        now = view.block_text(top) if view is not None else None
        if old is None or start is None or now is None:
            return None
        text = reading.text
        cursor = edited_end(text[:start] + old + text[start + len(now) :], text)
        return None if cursor is None else (reading, cursor, False)

"""Context refresh: an editor's reused context (``ContextMemo``) grows stale as others edit
elsewhere; renew it while the model is idle, so no request waits for the model to evaluate it.

A rebuilt context changes the prompt from its first changed paragraph on: the model must
evaluate everything after it again, the cursor's own paragraph included (hundreds of tokens,
most of a cold prompt). Done on a request's path that is what the request waits for. Here the
rebuilt context is evaluated at prefetch priority (any request preempts it) into a warm state
of its own (the memo's next ``epoch``), so a request meanwhile still finds the old context
warm; once evaluated, requests take the new one. A preempted refresh keeps what it evaluated,
and the next one goes on from there. Knows nothing of frames.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import TYPE_CHECKING

from ..errors import AiError
from ..text.context import ContextBuilder, ContextMemo
from .flights import owner_of, session_of, subject_of
from .records import RoomState
from .scheduler import PREFETCH

if TYPE_CHECKING:
    from tether.collab.rooms.room import Room
    from tether.collab.rooms.room_peer import Peer

    from .flights import Flights

log = logging.getLogger(__name__)


def _pending() -> asyncio.Future[object]:
    future: asyncio.Future[object] = asyncio.Future()
    future.cancel()  # a placeholder until the job exists: nothing to stop yet
    return future


class Refresher:
    def __init__(self, flights: Flights, builder: ContextBuilder) -> None:
        self.flights = flights
        self.builder = builder

    def yield_to(self, state: RoomState, peer: Peer) -> asyncio.Future[object] | None:
        """A prefetch for this editor is about to start: its renewal stops (it keeps what it
        evaluated) and gives the model up. Returns the stopped job, if one was running."""
        job = state.warming.pop(peer.peer_id, None)
        if job is not None:
            job.cancel()
        return job

    def typed(self, room: Room, state: RoomState, peer: Peer) -> None:
        """An editor's edit arrived: O(1). Renew its context if it is due and the model idle."""
        memo = state.memos.get(peer.peer_id)
        if memo is None or not memo.built_at or peer.peer_id in state.warming:
            return
        loop = asyncio.get_running_loop()
        # loop.time() is time.monotonic(), the clock memos are stamped with.
        if loop.time() - memo.built_at <= self.builder.memo_ttl or not self.flights.scheduler.idle:
            return
        placeholder = state.warming[peer.peer_id] = _pending()
        loop.call_soon(self._start, room, state, peer, memo, placeholder)

    def _start(
        self,
        room: Room,
        state: RoomState,
        peer: Peer,
        live: ContextMemo,
        placeholder: asyncio.Future[object],
    ) -> None:
        if state.warming.get(peer.peer_id) is not placeholder:
            return  # a prefetch came first
        started = False
        try:
            started = self._launch(room, state, peer, live)
        except Exception:
            log.exception("refreshing a context failed")
        if not started:
            state.warming.pop(peer.peer_id, None)

    def _launch(self, room: Room, state: RoomState, peer: Peer, live: ContextMemo) -> bool:
        flights = self.flights
        loop = asyncio.get_running_loop()
        known = state.cursors.get(peer.peer_id)
        if state.memos.get(peer.peer_id) is not live or known is None:
            return False
        if not flights.scheduler.idle or not flights.budget.allows(loop.time()):
            return False
        reading, anchor = state.document.find(room.doc, known[0])
        text = reading.text
        where = anchor.resolve(text)
        if where is None:
            return False
        cursor = where + len(anchor.typed(text) or "")  # it types on at its cursor
        fresh = replace(live)
        prompt = self.builder.complete(state.regions, text, cursor, fresh)
        if not fresh.refreshes(live):
            return False  # it moved to another paragraph: its next request rebuilds anyway
        fresh.epoch = live.epoch + 1
        session = session_of(room, peer, fresh.epoch)

        async def evaluate() -> None:
            began = loop.time()
            try:
                await flights.warm_up(prompt, session)
            finally:
                flights.budget.record(began, loop.time())

        try:
            job = flights.scheduler.submit(
                evaluate, PREFETCH, owner=owner_of(peer), subject=subject_of(peer)
            )
        except AiError:
            return False
        state.warming[peer.peer_id] = job
        job.add_done_callback(lambda done: self._done(done, state, peer.peer_id, live, fresh))
        flights.prefetch_counts["refreshes"] += 1
        return True

    def _done(
        self,
        job: asyncio.Future[object],
        state: RoomState,
        peer_id: int,
        live: ContextMemo,
        fresh: ContextMemo,
    ) -> None:
        if state.warming.get(peer_id) is job:
            del state.warming[peer_id]
        if job.cancelled() or job.exception() is not None:
            return  # preempted or failed: the old context stays; the next refresh goes on
        if state.memos.get(peer_id) is live and live.same_place(fresh):
            state.memos[peer_id] = fresh
            self.flights.prefetch_counts["refreshed"] += 1

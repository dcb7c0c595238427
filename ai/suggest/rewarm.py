"""Warm states rebuilt after the model worker restarts.

The worker keeps each editor's evaluated prompt (its warm state), so the editor's next request
evaluates only what it typed since. A worker that dies (and is restarted by its supervisor)
loses all of them: every editor's next request would evaluate its whole prompt again (about a
second on 2 vCPUs). So once a restarted worker is ready, the contexts of the editors who asked
most recently are evaluated again, each into the warm state its next request uses, at prefetch
priority (any request preempts it), newest first, at most ``MAX_EDITORS``. Knows nothing of
frames.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from ..errors import AiError
from ..text.context import ContextBuilder
from .flights import session_key
from .scheduler import PREFETCH

if TYPE_CHECKING:
    from .flights import Flights
    from .records import RoomState

log = logging.getLogger(__name__)

MAX_EDITORS = 8
RECENT_SECONDS = 600.0  # an editor who last asked longer ago than this is not rewarmed


class Rewarmer:
    def __init__(self, flights: Flights, builder: ContextBuilder) -> None:
        self.flights = flights
        self.builder = builder

    def watch(self, supervisor: Any) -> Any:
        """A listener for ``supervisor``'s state changes that rewarms once it is ready again
        after a restart."""
        seen = {"restarts": supervisor.restarts}

        def changed() -> None:
            if supervisor.state == "ready" and supervisor.restarts > seen["restarts"]:
                seen["restarts"] = supervisor.restarts
                self.worker_back()

        return changed

    def worker_back(self) -> int:
        """Schedule the rewarm of the most recent editors; how many were scheduled."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        recent: list[tuple[float, RoomState, int]] = []
        for state in self.flights.rooms.values():
            for peer_id, (_anchor, asked_at) in state.cursors.items():
                if peer_id in state.memos and now - asked_at <= RECENT_SECONDS:
                    recent.append((asked_at, state, peer_id))
        recent.sort(key=lambda entry: entry[0], reverse=True)
        scheduled = 0
        for _asked_at, state, peer_id in recent[:MAX_EDITORS]:
            if self._rewarm(state, peer_id):
                scheduled += 1
        if scheduled:
            log.info("the model worker is back: rewarming %d editors' contexts", scheduled)
        return scheduled

    def _rewarm(self, state: RoomState, peer_id: int) -> bool:
        room = state.room
        if room is None:
            return False
        flights = self.flights
        reading, anchor = state.document.find(room.doc, state.cursors[peer_id][0])
        text = reading.text
        where = anchor.resolve(text)
        memo = state.memos.get(peer_id)
        if where is None or memo is None:
            return False
        cursor = where + len(anchor.typed(text) or "")
        # As the editor's next request builds it (the same memo: the same warm-state key).
        prompt = self.builder.complete(state.regions, text, cursor, memo, refresh=False)
        session = session_key(room.name, peer_id, memo.epoch)

        async def evaluate() -> None:
            await flights.warm_up(prompt, session)
            flights.prefetch_counts["rewarmed"] += 1

        try:
            flights.scheduler.submit(evaluate, PREFETCH, owner=("rewarm", room.name, peer_id))
        except AiError:
            return False
        return True

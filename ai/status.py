"""Whether AI works right now, for ``/health`` and for the editors that asked (``status``).

The state comes from whoever knows it (the model worker's supervisor, or the pool of model
upstreams: ``degraded`` while none is up); editors subscribed with ``status`` hear every
change on their document's channel. One subscription per editor per document: bounded
by the peers that exist.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tether.protocol.wire.ai_messages import AiStatus

if TYPE_CHECKING:
    from tether.collab.rooms.room_peer import Peer

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AiState:
    state: str  # starting | ready | degraded | off
    reason: str = ""
    model: str | None = None
    quant: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def health(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "reason": self.reason,
            "model": self.model,
            "quant": self.quant,
            **self.details,
        }


class StatusBoard:
    def __init__(self, read: Callable[[], AiState]) -> None:
        self._read = read
        self._watchers: dict[Peer, str] = {}  # peer → the id its status request used
        self._last: tuple[str, str] | None = None

    @property
    def current(self) -> AiState:
        return self._read()

    def watch(self, peer: Peer, request_id: str) -> None:
        self._watchers[peer] = request_id
        peer.send_stateless(self._message(request_id, self.current))

    def unwatch(self, peer: Peer) -> None:
        self._watchers.pop(peer, None)

    def changed(self) -> None:
        """Tell every watcher, if what they would see has changed."""
        state = self.current
        key = (state.state, state.reason)
        if key == self._last:
            return
        self._last = key
        for peer, request_id in list(self._watchers.items()):
            try:
                peer.send_stateless(self._message(request_id, state))
            except Exception:  # a closing peer must not stop the others hearing
                log.debug("could not tell an editor the AI state", exc_info=True)

    @staticmethod
    def _message(request_id: str, state: AiState) -> str:
        return AiStatus(request_id, state.state, state.reason, state.model, state.quant).encode()

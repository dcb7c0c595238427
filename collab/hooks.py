"""Extension points around documents, in the Hocuspocus manner; knows nothing of transports.

An extension is an object with any of these optional methods. They run in registration order;
``on_change`` runs inside the sync path and must stay O(1) (queue work, don't do it).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .peer import Peer
    from .room import Room

log = logging.getLogger(__name__)


class Extension(Protocol):
    """Any subset of: on_load(room), on_change(room, update, origin), on_stateless(room, peer,
    payload), on_detach(room, peer), on_unload(room)."""


class Hooks:
    def __init__(self, extensions: list[Any] | None = None) -> None:
        self.extensions: list[Any] = list(extensions or [])
        # Which extensions implement each hook, worked out once: on_change runs per update.
        self._by_hook: dict[str, list[Any]] = {}

    def add(self, extension: Any) -> None:
        self.extensions.append(extension)
        self._by_hook.clear()

    def remove(self, extension: Any) -> None:
        self.extensions.remove(extension)
        self._by_hook.clear()

    async def on_load(self, room: Room) -> None:
        for ext in self._having("on_load"):
            await ext.on_load(room)

    async def on_unload(self, room: Room) -> None:
        for ext in self._having("on_unload"):
            await ext.on_unload(room)

    def on_change(self, room: Room, update: bytes, origin: object) -> None:
        for ext in self._having("on_change"):
            try:
                ext.on_change(room, update, origin)
            except Exception:  # an extension's bug must not break the sync path
                log.exception("on_change hook failed in %s", type(ext).__name__)

    async def on_stateless(self, room: Room, peer: Peer, payload: str) -> None:
        for ext in self._having("on_stateless"):
            try:
                await ext.on_stateless(room, peer, payload)
            except Exception:  # one extension's bug must not close the editor's socket
                log.exception("on_stateless hook failed in %s", type(ext).__name__)

    def on_detach(self, room: Room, peer: Peer) -> None:
        for ext in self._having("on_detach"):
            try:
                ext.on_detach(room, peer)
            except Exception:
                log.exception("on_detach hook failed in %s", type(ext).__name__)

    def _having(self, name: str) -> list[Any]:
        having = self._by_hook.get(name)
        if having is None:
            having = self._by_hook[name] = [e for e in self.extensions if hasattr(e, name)]
        return having

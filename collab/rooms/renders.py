"""What a document says in each REST format, rendered off the event loop and kept per state.

Reading a rich document's tree is Python per node: one GET of a 50,000-paragraph document held
the loop 1.4-1.8 s in every format, a version's read 1.5 s, each webhook delivery 1.44 s (issue
37). Here the loop only takes a snapshot (the encoded state: 35 ms for that document), and a
thread of the renders pool applies it to a fresh document, in slices so the loop gets the GIL
between them (``collab.updates.slicing``), reads it (``collab.content``) and renders it.

Each render is kept, bounded in bytes, under the digest of the state it came from, so the same
state is rendered once whoever asks (a REST format, a version, a webhook, several readers at
once: they share the render under way). A loaded document is first recognised without a
snapshot, by its state vector and delete set (2.5 ms for that document), which name its state
within that room; a new room (a reload, a delete and a new document) starts afresh.

Knows no HTTP: bodies come back as UTF-8 bytes for the handlers to send.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pycrdt import Doc

from ..content.prosemirror_json import render_prosemirror
from ..content.reading import Content
from ..runtime import pools
from ..runtime.gc_hold import full_collections_held
from ..runtime.heap import give_back_freed
from ..runtime.sync_metrics import Metrics
from .document_edits import content_of_state

if TYPE_CHECKING:
    from .room import Room

FORMATS = ("json", "text", "markdown", "html", "prosemirror")

# What a kept render costs beyond its body (its key, the entry, the dict's slot).
_ENTRY_BYTES = 256
# A render of a state this big gives what it freed back to the system (collab.runtime.heap).
_TRIM_AFTER_BYTES = 1024 * 1024
# Loaded documents' states recognised without a snapshot: (room, state vector, delete set)
# digests, each naming a state digest.
_ROOM_STATES = 4096


@dataclass(frozen=True, slots=True)
class Rendered:
    kind: str  # "rich" or "plain" (collab.content.reading)
    # UTF-8: the text, Markdown or HTML; for "json", the text as a JSON string literal; for
    # "prosemirror", the tree as ProseMirror JSON (collab.content.prosemirror_json).
    body: bytes


class Renders:
    """Renders by state digest, at most ``max_bytes`` of them kept (least recently used go)."""

    def __init__(self, max_bytes: int, metrics: Metrics | None = None) -> None:
        self.max_bytes = max_bytes
        self.kept_bytes = 0
        self._metrics = metrics
        self._kept: OrderedDict[tuple[bytes, str, str], Rendered] = OrderedDict()
        self._flights: dict[tuple[bytes, str, str], asyncio.Future[Rendered]] = {}
        self._room_states: OrderedDict[tuple[int, bytes], bytes] = OrderedDict()
        self._serials: weakref.WeakKeyDictionary[Room, int] = weakref.WeakKeyDictionary()
        self._next_serial = 0

    async def of_room(
        self, room: Room, rich_name: str, export: str, *, refusable: bool = True
    ) -> Rendered:
        """``room``'s document as ``export`` (one of ``FORMATS``). The snapshot is taken now,
        on the loop; ``refusable``: a REST request's, refused with ``PoolFull`` when the
        renders pool is full (a webhook's waits)."""
        seen = (self._serial(room), _state_key(room.doc))
        digest = self._room_states.get(seen)
        if digest is not None:
            self._room_states.move_to_end(seen)
            kept = self._kept_render((digest, rich_name, export))
            if kept is not None:
                return kept
        state = room.doc.get_update()
        digest = hashlib.sha256(state).digest()
        self._room_states[seen] = digest
        if len(self._room_states) > _ROOM_STATES:
            self._room_states.popitem(last=False)
        return await self._render(state, digest, rich_name, export, refusable)

    async def of_state(
        self, state: bytes, rich_name: str, export: str, *, refusable: bool = True
    ) -> Rendered:
        """What a saved full update (a version) says, as ``export``."""
        digest = hashlib.sha256(state).digest()  # hashlib lets the GIL go over big inputs
        return await self._render(state, digest, rich_name, export, refusable)

    async def _render(
        self, state: bytes, digest: bytes, rich_name: str, export: str, refusable: bool
    ) -> Rendered:
        key = (digest, rich_name, export)
        kept = self._kept_render(key)
        if kept is not None:
            return kept
        flight = self._flights.get(key)
        if flight is None:
            pool = pools.current().renders
            reservation = pool.reserve() if refusable else None  # may raise PoolFull
            # A task of its own: a reader that goes away does not take the render from the
            # others waiting on it, and what was computed is kept.
            flight = asyncio.ensure_future(
                self._compute(pool, reservation, key, state, first=not refusable)
            )
            flight.add_done_callback(_retrieved)
            self._flights[key] = flight
        else:
            self._count("shared")
        return await asyncio.shield(flight)

    async def _compute(
        self,
        pool: pools.Pool,
        reservation: pools.Reservation | None,
        key: tuple[bytes, str, str],
        state: bytes,
        *,
        first: bool,
    ) -> Rendered:
        _, rich_name, export = key
        try:
            with full_collections_held():  # a render's objects would make each full pass long
                rendered = await pool.run(render_state, state, rich_name, export, first=first)
        finally:
            del self._flights[key]
            if reservation is not None:
                reservation.release()
        self._count("miss")
        self._keep(key, rendered)
        return rendered

    def _kept_render(self, key: tuple[bytes, str, str]) -> Rendered | None:
        rendered = self._kept.get(key)
        if rendered is not None:
            self._kept.move_to_end(key)
            self._count("hit")
        return rendered

    def _keep(self, key: tuple[bytes, str, str], rendered: Rendered) -> None:
        cost = len(rendered.body) + _ENTRY_BYTES
        if cost > self.max_bytes or key in self._kept:
            return
        self._kept[key] = rendered
        self.kept_bytes += cost
        while self.kept_bytes > self.max_bytes:
            _, gone = self._kept.popitem(last=False)
            self.kept_bytes -= len(gone.body) + _ENTRY_BYTES

    def _serial(self, room: Room) -> int:
        serial = self._serials.get(room)
        if serial is None:
            self._next_serial += 1
            serial = self._serials[room] = self._next_serial
        return serial

    def _count(self, outcome: str) -> None:
        if self._metrics is not None:
            self._metrics.renders.labels(outcome).inc()


def _state_key(doc: Doc) -> bytes:
    """The document's state vector and delete set: within one room, they name its state (an
    item's content never changes; only new items and deletions do)."""
    state_vector = doc.get_state()
    delete_set = doc.get_update(state_vector)  # no items, every deletion: O(items) in yrs
    return hashlib.sha256(state_vector + b"\0" + delete_set).digest()


def render_state(state: bytes, rich_name: str, export: str) -> Rendered:
    """Apply ``state`` to a new document and render it (in a worker thread: the document is
    this call's own); after a big one, what it freed goes back to the system."""
    rendered = _render(content_of_state(state, rich_name), export)
    if len(state) >= _TRIM_AFTER_BYTES:
        give_back_freed()
    return rendered


def _render(content: Content, export: str) -> Rendered:
    if export == "json":
        return Rendered(content.kind, json.dumps(content.text(), ensure_ascii=False).encode())
    if export == "markdown":
        return Rendered(content.kind, content.markdown().encode())
    if export == "html":
        return Rendered(content.kind, content.html().encode())
    if export == "prosemirror":
        return Rendered(content.kind, render_prosemirror(content))
    return Rendered(content.kind, content.text().encode())


def _retrieved(flight: asyncio.Future[Rendered]) -> None:
    if not flight.cancelled():
        flight.exception()  # raised to whoever awaited it; none may be left

"""Accepting a suggestion: its text written into the server-held document, where the text
around it is now (after concurrent edits), as a transaction of the AI's own origin.

Knows nothing of frames: replies go through ``peer.send_stateless``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from pycrdt import Doc, Text

from tether.protocol.ai import SuggestionAccepted

from ..errors import AiError, BadRequest, Forbidden
from ..text.positions import index_to_utf8
from .records import TEXT_NAME

if TYPE_CHECKING:
    from tether.collab.rooms.peer import Peer
    from tether.collab.rooms.room import Room

    from .flights import Flights

log = logging.getLogger(__name__)

AI_ORIGIN = "ai"


class Acceptor:
    def __init__(self, flights: Flights) -> None:
        self.flights = flights

    async def accept_reporting(self, room: Room, peer: Peer, request_id: str) -> None:
        """Accept, telling the editor if that fails (this runs as a task of its own)."""
        try:
            await self.accept(room, peer, request_id)
        except AiError as exc:
            self.flights.send_error(peer, request_id, exc.code, str(exc))
        except Exception:
            log.exception("accepting a suggestion failed")
            self.flights.send_error(peer, request_id, "internal", "accepting the suggestion failed")

    async def accept(self, room: Room, peer: Peer, request_id: str) -> None:
        if not peer.writable:
            raise Forbidden("accepting a suggestion needs read-write scope")
        suggestion = self.flights.by_peer.get(peer.peer_id, {}).get(request_id)
        if suggestion is None or suggestion.room is not room:
            raise BadRequest(f"no suggestion {request_id!r} to accept")
        if not suggestion.finished:
            # Take what has streamed so far; with nothing yet, the editor hears it ended.
            self.flights.stop(suggestion, "cancelled", notify=not suggestion.text)
        if not suggestion.text:
            raise BadRequest("the suggestion has no text yet")
        # A rebuild, or a big update applied in slices, holds the room for a moment: the text
        # is read once whole.
        await room.reloaded()
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
        if room.reloading:
            raise BadRequest("the document is being reloaded; ask again")
        self.flights.by_peer.get(peer.peer_id, {}).pop(request_id, None)
        written = room.edit(
            lambda doc: _apply(doc, insert, suggestion.passage, current, where), origin=AI_ORIGIN
        )
        await written
        self.flights.metrics.accepts.inc()
        peer.send_stateless(SuggestionAccepted(request_id).encode())


def _apply(doc: Doc, insert: str, passage: str | None, current: str, where: int) -> None:
    """Insert ``insert`` at ``where`` (replacing ``passage`` there, for a rewrite); pycrdt
    counts UTF-8 bytes."""
    text = doc.get(TEXT_NAME, type=Text)
    start = index_to_utf8(current, where)
    if passage:
        end = index_to_utf8(current, where + len(passage))
        del text[start:end]
    text.insert(start, insert)

"""Accepting a suggestion: its text written into the server-held document, where the text
around it is now (after concurrent edits), as a transaction of the AI's own origin.

Knows nothing of frames: replies go through ``peer.send_stateless``.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING, Any

from pycrdt import Doc, Text, XmlElement, XmlFragment, XmlText

from tether.protocol.wire.ai_messages import SuggestionAccepted

from ..errors import AiError, BadRequest, ConfirmRequired, Forbidden
from ..text.faithful import summary
from ..text.positions import index_to_utf8
from ..text.rich_view import Slot
from .flights import losses_of
from .records import TEXT_NAME

if TYPE_CHECKING:
    from tether.collab.rooms.room import Room
    from tether.collab.rooms.room_peer import Peer

    from .flights import Flights

log = logging.getLogger(__name__)

AI_ORIGIN = "ai"


class Acceptor:
    def __init__(self, flights: Flights) -> None:
        self.flights = flights

    async def accept_reporting(
        self, room: Room, peer: Peer, request_id: str, *, confirm_dropped: bool = False
    ) -> None:
        """Accept, telling the editor if that fails (this runs as a task of its own)."""
        try:
            await self.accept(room, peer, request_id, confirm_dropped=confirm_dropped)
        except AiError as exc:
            self.flights.send_error(peer, request_id, exc.code, str(exc))
        except Exception:
            log.exception("accepting a suggestion failed")
            self.flights.send_error(peer, request_id, "internal", "accepting the suggestion failed")

    async def accept(
        self, room: Room, peer: Peer, request_id: str, *, confirm_dropped: bool = False
    ) -> None:
        if not peer.writable:
            raise Forbidden("accepting a suggestion needs read-write scope")
        suggestion = self.flights.by_peer.get(peer.peer_id, {}).get(request_id)
        if suggestion is None or suggestion.room is not room:
            raise BadRequest(f"no suggestion {request_id!r} to accept")
        # A rewrite that drops content of its passage (ai.text.faithful) is applied only when
        # the editor confirms it has shown what is lost: the losses its end carried.
        losses = losses_of(suggestion)
        refused = bool(losses) and not confirm_dropped
        if not suggestion.finished:
            # Take what has streamed so far; with nothing yet, the editor hears it ended, and a
            # refused rewrite ends too, so its end names what it would drop.
            self.flights.stop(suggestion, "cancelled", notify=not suggestion.text or refused)
        if not suggestion.text:
            raise BadRequest("the suggestion has no text yet")
        if refused:
            raise ConfirmRequired(
                f"this rewrite drops {summary(losses)}: accept it with 'confirm_dropped' once"
                " the editor has shown that, or ask again"
            )
        # A rebuild, or a big update applied in slices, holds the room for a moment: the text
        # is read once whole.
        await room.reloaded()
        document = self.flights.room_state(room).document
        reading, anchor = document.find(room.doc, suggestion.anchor)
        current = reading.text
        where = anchor.resolve(current)
        if where is None:
            raise BadRequest("the text around the suggestion changed; ask again")
        if suggestion.passage is not None and not current.startswith(suggestion.passage, where):
            raise BadRequest("the selected text changed; ask again")
        insert = suggestion.text
        if suggestion.passage is None:
            # The editor may have typed the suggestion's first characters already (type-ahead):
            # insert only the rest, after them.
            typed = anchor.typed(current)
            if typed and insert.startswith(typed):
                where, insert = where + len(typed), insert[len(typed) :]
            if not insert:
                raise BadRequest("the suggestion has been typed in full already")
        if room.reloading:
            raise BadRequest("the document is being reloaded; ask again")
        passage = suggestion.passage
        if reading.view is None:
            change = partial(_apply, insert=insert, passage=passage, current=current, where=where)
        else:
            located = reading.view.slot_at(where)
            if located is None or located[1] + len(passage or "") > len(located[0].text):
                raise BadRequest("the text around the suggestion changed; ask again")
            slot, offset = located
            root = room.settings.rich_fragment
            change = partial(
                _apply_rich, root=root, slot=slot, offset=offset, insert=insert, passage=passage
            )
        self.flights.by_peer.get(peer.peer_id, {}).pop(request_id, None)
        try:
            written = room.edit(change, origin=AI_ORIGIN)
        except BadRequest:
            document.mark_dirty()  # the slot's text was not the tree's: read it afresh next time
            raise
        await written
        self.flights.metrics.accepts.inc()
        peer.send_stateless(SuggestionAccepted(request_id).encode())


def _apply(doc: Doc, *, insert: str, passage: str | None, current: str, where: int) -> None:
    """Insert ``insert`` at ``where`` (replacing ``passage`` there, for a rewrite); pycrdt
    counts UTF-8 bytes."""
    text = doc.get(TEXT_NAME, type=Text)
    start = index_to_utf8(current, where)
    if passage:
        end = index_to_utf8(current, where + len(passage))
        del text[start:end]
    text.insert(start, insert)


# Marks that do not grow when text is typed at their edge (ProseMirror's ``inclusive: false``:
# Tiptap's link), so an accepted suggestion after a link is not part of it.
NOT_INCLUSIVE = frozenset({"link"})


def _apply_rich(
    doc: Doc, *, root: str, slot: Slot, offset: int, insert: str, passage: str | None
) -> None:
    """Insert ``insert`` at code point ``offset`` of the slot's ``Y.XmlText`` (replacing
    ``passage`` there, for a rewrite), carrying the marks typing there would carry: those of
    the character before (of the first replaced one, for a rewrite; of the first one, at the
    very start). An empty textblock gets a text of its own."""
    node: Any = doc.get(root, type=XmlFragment)
    for index in slot.path:
        children = node.children
        if isinstance(node, XmlText) or index >= len(children):
            raise BadRequest("the text around the suggestion changed; ask again")
        node = children[index]
    if not slot.holds_text:
        if not isinstance(node, XmlElement) or len(node.children) != 0:
            raise BadRequest("the text around the suggestion changed; ask again")
        node.children.append(XmlText()).insert(0, insert)
        return
    if not isinstance(node, XmlText):
        raise BadRequest("the text around the suggestion changed; ask again")
    runs = [(text, attrs or {}) for text, attrs in node.diff() if isinstance(text, str)]
    current = "".join(text for text, _attrs in runs)
    if current != slot.text:
        raise BadRequest("the text around the suggestion changed; ask again")
    marks = _marks_at(runs, offset - 1 if offset > 0 and not passage else offset)
    start = len(current[:offset].encode("utf-8"))  # pycrdt counts UTF-8 bytes
    if passage:
        del node[start : start + len(passage.encode("utf-8"))]
    node.insert(start, insert, marks)


def _marks_at(runs: list[tuple[str, dict[str, Any]]], index: int) -> dict[str, Any]:
    """The marks of the character at code point ``index`` (none past the end)."""
    for text, attrs in runs:
        if index < len(text):
            return {name: value for name, value in attrs.items() if name not in NOT_INCLUSIVE}
        index -= len(text)
    return {}

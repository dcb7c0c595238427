"""Serving one ``suggest`` request: from a flight already computing its answer, from the
cache (exact, type-ahead, or semantic, raced against the model), or from a new flight.

Builds the request's prompt and anchor from the server-held document and hands the streaming
to ``Flights``. Knows nothing of frames: replies go through ``peer.send_stateless``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import time
from typing import TYPE_CHECKING

from tether.protocol.protocol_errors import DecodeError
from tether.protocol.wire.ai_messages import Suggest, SuggestionStart
from tether.protocol.wire.relative_position import decode_relative_position

from ..cache.suggestions import EXACT, PREFETCH, TYPEAHEAD, CacheHit, exact_key, typed_ahead
from ..errors import AiError, BadRequest, ModelUnavailable
from ..text.anchors import TextAnchor
from ..text.context import ContextBuilder, ContextMemo
from ..text.positions import utf16_to_index
from ..text.relative import Place, locate
from ..text.rich_view import Slot
from .document_text import Reading
from .flights import end_of, session_of
from .generation import length_of, rescreen
from .records import MODEL, TEXT_NAME, Flight, RoomState, Suggestion
from .scheduler import INTERACTIVE

if TYPE_CHECKING:
    from tether.collab.rooms.room import Room
    from tether.collab.rooms.room_peer import Peer

    from .flights import Flights

log = logging.getLogger(__name__)


class RequestServer:
    def __init__(self, flights: Flights, builder: ContextBuilder) -> None:
        self.flights = flights
        self.builder = builder

    def start(self, room: Room, peer: Peer, request: Suggest) -> None:
        flights = self.flights
        state = flights.room_state(room)
        passage: str | None = None
        epoch = 0
        # The cursor is found first (bounded: ``relative.locate``), then only the text around
        # it is read: a request that cannot be served costs no reading at all.
        if request.kind == "rewrite":
            reading, begin, finish = _selection(room, state, request)
            text = reading.text
            prompt = self.builder.rewrite(text, begin, finish)
            anchor = TextAnchor.at(text, begin)
            passage = text[begin:finish]
        else:
            reading, cursor = _cursor(room, state, request)
            text = reading.text
            memo = state.memos.setdefault(peer.peer_id, ContextMemo())
            # With prefetch on, the context is refreshed when the editor pauses, where the
            # model's re-evaluation costs no one a wait; a request only uses it.
            refresh = flights.settings.prefetch_seconds <= 0
            prompt = self.builder.complete(state.regions, text, cursor, memo, refresh=refresh)
            epoch = memo.epoch
            anchor = TextAnchor.at(text, cursor)
        if not reading.rich:
            state.seen_text = text  # prefetch's next diff starts from what this request saw
        anchor = state.document.spot(reading, anchor)
        max_tokens = length_of(flights.settings, prompt, request.max_tokens)
        if request.kind == "complete":
            state.lengths[peer.peer_id] = max_tokens
            state.cursors[peer.peer_id] = (anchor, asyncio.get_running_loop().time())
        query = flights.query(room, request.kind, max_tokens, prompt)
        suggestion = Suggestion(
            request, peer, room, prompt, anchor, passage, time.perf_counter(), query
        )
        embed_text = flights.embed_text(prompt)  # also what the answer is stored under
        # Only a context some entry could match is embedded: most are not (new text), and
        # their answers then start at once, not held back by an embedding that cannot help.
        probe = embed_text if flights.semantic_possible(query, embed_text) else None
        if self._serve_ready(state, suggestion, final=probe is None):
            return
        if probe is not None:
            embedder = flights.embedder
            vector = embedder.cached(probe) if embedder is not None else None
            if vector is None:
                # Race: the model starts now while the context is embedded (~20-40 ms on its
                # own thread, off the loop); a semantic hit found first replaces the stream.
                self._to_model(suggestion, max_tokens, embed_text, epoch, held=True)
                flights.spawn(self._semantic_race(suggestion, probe))
                return
            hit = flights.cache.lookup(query, vector) if flights.cache is not None else None
            if hit is not None:
                self._serve_cached(suggestion, hit)
                return
        self._to_model(suggestion, max_tokens, embed_text, epoch)

    async def _semantic_race(self, suggestion: Suggestion, embed_text: str) -> None:
        """Decide a held request: a semantic hit replaces the model's stream (stopped if no
        one else reads it); otherwise the model's stream is released, held text first. A model
        that has already finished wins: its answer was computed for this very context."""
        embedder, cache = self.flights.embedder, self.flights.cache
        assert embedder is not None and cache is not None
        vector = None
        try:
            vector = (await embedder.embed([embed_text]))[0]
        except ModelUnavailable as exc:  # the worker died or restarts: already logged once
            log.debug("no embedding (%s); the model answers", exc)
        except Exception:
            log.exception("embedding a suggestion's context failed; the model answers")
        if suggestion.finished or not suggestion.held:
            return  # superseded, cancelled or failed meanwhile
        flight = suggestion.flight
        hit = None
        if vector is not None and flight is not None and not flight.finished:
            hit = cache.lookup(suggestion.query, vector)
        else:
            cache.misses += 1
        if hit is None:
            self._release(suggestion)
            return
        suggestion.held = False
        if flight is not None:
            flight.subscribers.remove(suggestion)
            suggestion.flight = None
            if all(s.finished for s in flight.subscribers) and flight.prefetch_for is None:
                self.flights.end(flight, "cancelled")
        self._serve_cached(suggestion, hit)

    def _release(self, suggestion: Suggestion) -> None:
        """A held request goes on with the model: start, what was held back, and the end if
        the model has finished meanwhile."""
        suggestion.held = False
        request = suggestion.request
        suggestion.peer.send_stateless(SuggestionStart(request.id, suggestion.source).encode())
        self.flights.metrics.requests.labels("ws", suggestion.source).inc()
        if suggestion.held_text:
            held, suggestion.held_text = suggestion.held_text, ""
            self.flights.send_delta(suggestion, held)
        flight = suggestion.flight
        if flight is not None and flight.finished:
            self.flights.finish(suggestion, flight.pieces)

    def _serve_ready(self, state: RoomState, suggestion: Suggestion, *, final: bool) -> bool:
        """Serve from a flight already computing this answer, or from the exact and type-ahead
        layers of the cache. False when neither can."""
        found = _in_flight(state, suggestion)
        if found is not None:
            flight, offset, source = found
            self._attach(suggestion, flight, offset, source)
            return True
        if self.flights.cache is not None:
            hit = self.flights.cache.lookup(suggestion.query, final=final)
            if hit is not None:
                self._serve_cached(suggestion, hit)
                return True
        return False

    def _to_model(
        self,
        suggestion: Suggestion,
        max_tokens: int,
        embed_text: str | None,
        epoch: int,
        *,
        held: bool = False,
    ) -> None:
        room, peer = suggestion.room, suggestion.peer
        flight = Flight(
            room,
            suggestion.query,
            exact_key(suggestion.query),
            suggestion.prompt,
            suggestion.anchor,
            max_tokens,
            session_of(room, peer, epoch),
            embed_text,
        )
        # The editor's previous request is superseded even if this one is then refused as busy
        # (its slot in the queue is freed first).
        self.flights.claim(suggestion)
        try:
            # Raises at once when the queue is full (Busy) or the editor's connection or token
            # subject has its share in already (QuotaExceeded).
            self.flights.launch(flight, INTERACTIVE, peer)
        except AiError:
            suggestion.finished = True
            raise
        self._attach(suggestion, flight, 0, MODEL, held=held)

    def _attach(
        self,
        suggestion: Suggestion,
        flight: Flight,
        offset: int,
        source: str,
        *,
        held: bool = False,
    ) -> None:
        """``suggestion`` takes its text from ``flight`` from character ``offset`` on (what
        its editor typed already is skipped): what exists now at once, the rest as it comes."""
        flights = self.flights
        if flight.prefetch_for is not None and not flight.served:
            flights.prefetch_counts["used"] += 1
            if flight.job is not None:
                flights.scheduler.promote(flight.job)  # someone waits now: never preempted
        flight.served = True
        suggestion.flight = flight
        suggestion.source = source
        # Joined before the editor's previous request is superseded: if that one was this
        # flight's only listener, the flight must not stop.
        flight.subscribers.append(suggestion)
        flights.claim(suggestion)
        if held:
            suggestion.held = True
            return
        suggestion.peer.send_stateless(SuggestionStart(suggestion.request.id, source).encode())
        flights.metrics.requests.labels("ws", source).inc()
        if len(flight.text) > offset:
            flights.send_delta(suggestion, flight.text[offset:])

    def _serve_cached(self, suggestion: Suggestion, hit: CacheHit) -> None:
        """An answer from the cache: the whole stream at once, no model involved."""
        flights = self.flights
        flights.claim(suggestion)
        request, peer = suggestion.request, suggestion.peer
        suggestion.source = hit.layer
        peer.send_stateless(SuggestionStart(request.id, hit.layer).encode())
        flights.metrics.requests.labels("ws", hit.layer).inc()
        # Checked again at this cursor: a type-ahead or semantic hit was another context's.
        text, junk = rescreen(flights.settings, suggestion.prompt, hit.text)
        if text:
            flights.send_delta(suggestion, text)
        if junk is not None:
            flights.finish(suggestion, 0, junk)
            return
        suggestion.finished = True
        ttft = (suggestion.first_at or time.perf_counter()) - suggestion.requested_at
        peer.send_stateless(end_of(suggestion, "done", round(ttft * 1000, 3), 0))
        flights.metrics.outcomes.labels("done").inc()


def _in_flight(state: RoomState, suggestion: Suggestion) -> tuple[Flight, int, str] | None:
    query = suggestion.query
    key = exact_key(query)
    for flight in state.flights:
        if flight.finished or flight.query.kind != query.kind:
            continue
        if flight.key == key:
            unused_prefetch = flight.prefetch_for is not None and not flight.served
            return flight, 0, PREFETCH if unused_prefetch else EXACT
        if suggestion.request.kind == "complete" and flight.text:
            cut = typed_ahead(flight.query.window, query.window, flight.text)
            if cut is not None:
                return flight, cut, TYPEAHEAD
    return None


_IN_INLINE_NODE = (
    "the anchor is in text inside an inline node (a mention's label, say): suggestions go in a"
    " block's own text"
)
_RICH_NEEDS_ANCHORS = (
    "this is a rich-text document: send 'anchor' (a Yjs relative position in one of its"
    " Y.XmlText), not 'pos'"
)


def _cursor(room: Room, state: RoomState, request: Suggest) -> tuple[Reading, int]:
    """The text around the cursor (a window of the rich view, for a rich document) and the
    cursor's index in it."""
    document = state.document
    if request.anchor is None:
        assert request.pos is not None
        if request.path is not None:
            reading = _around_path(room, state, request.path)
            slot = _slot_at_path(reading, request.path)
            return reading, slot.start + utf16_to_index(slot.text, request.pos)
        if document.is_rich(room.doc):
            raise BadRequest(_RICH_NEEDS_ANCHORS)
        reading = document.around(room.doc, None)
        return reading, utf16_to_index(reading.text, request.pos)
    return _view_index(room, state, _place(room, state, request.anchor))


def _around_path(room: Room, state: RoomState, path: tuple[int, ...]) -> Reading:
    if not path or not state.document.is_rich(room.doc):
        raise BadRequest("'path' is for rich-text documents; this one is plain text")
    return state.document.at(room.doc, path[0])


def _slot_at_path(reading: Reading, path: tuple[int, ...]) -> Slot:
    """The text at ``path`` (child indexes from the fragment) of a rich document."""
    slot = reading.view.slot_of(path) if reading.view is not None else None
    if slot is None:
        raise BadRequest(
            f"no text at path {list(path)} (a path ends at a Y.XmlText or an empty paragraph)"
        )
    return slot


def _selection(room: Room, state: RoomState, request: Suggest) -> tuple[Reading, int, int]:
    """A rewrite's selection as (begin, end) indexes in the text around it; on a rich
    document it must lie within one text (a paragraph, a heading, a list item's line)."""
    document = state.document
    if request.anchor is None:
        assert request.start is not None and request.end is not None
        if request.path is not None:
            reading = _around_path(room, state, request.path)
            slot = _slot_at_path(reading, request.path)
            begin = utf16_to_index(slot.text, request.start)
            return reading, slot.start + begin, slot.start + utf16_to_index(slot.text, request.end)
        if document.is_rich(room.doc):
            raise BadRequest(_RICH_NEEDS_ANCHORS.replace("'anchor'", "'anchor' and 'anchor_end'"))
        reading = document.around(room.doc, None)
        text = reading.text
        return reading, utf16_to_index(text, request.start), utf16_to_index(text, request.end)
    assert request.anchor_end is not None
    start, end = _place(room, state, request.anchor), _place(room, state, request.anchor_end)
    if (start.root, start.path) != (end.root, end.path):
        raise BadRequest(
            "a rewrite's selection must lie within one block (a paragraph, a heading or a list"
            " item's line); select less"
        )
    if end.offset < start.offset:
        start, end = end, start
    reading, begin = _view_index(room, state, start)
    return reading, begin, begin + end.offset - start.offset


def _place(room: Room, state: RoomState, encoded: str) -> Place:
    """A client's base64 Yjs relative position, resolved against the live document (its
    block found where the AI last saw it, when it is still there)."""
    try:
        position = decode_relative_position(base64.b64decode(encoded, validate=True))
    except (binascii.Error, DecodeError) as exc:
        raise BadRequest(f"'anchor' is not a Yjs relative position: {exc}") from exc
    fragment, seen = room.settings.rich_fragment, state.document.seen
    return locate(room.doc, position, room.guard, fragment, TEXT_NAME, seen)


def _view_index(room: Room, state: RoomState, place: Place) -> tuple[Reading, int]:
    document = state.document
    if not document.is_rich(room.doc):
        if place.root != TEXT_NAME:
            raise BadRequest("the anchor is not in this document's text ('content')")
        return document.around(room.doc, None), place.offset
    if place.root == TEXT_NAME:
        raise BadRequest("the anchor is in 'content', but this document is rich text")
    # Found this very moment (no change since): the window takes the block's node as is.
    top, node = place.path[0], place.block_node
    reading = document.at(room.doc, top, place.block, place.block_hash, node=node)
    slot = reading.view.slot_of(place.path) if reading.view is not None else None
    if not _fits(slot, place):
        # A rendering that disagrees with the tree (an update not followed): the block is read
        # afresh once, at once, with the node just found.
        document.forget_block(top)
        reading = document.at(room.doc, top, place.block, place.block_hash, node=node)
        slot = reading.view.slot_of(place.path) if reading.view is not None else None
        if slot is None:
            raise BadRequest(_IN_INLINE_NODE)
        if not _fits(slot, place):
            raise BadRequest("the anchor's text changed; ask again")
    assert slot is not None
    return reading, slot.start + place.offset


def _fits(slot: Slot | None, place: Place) -> bool:
    """Whether the view's slot is the place's text as the tree holds it."""
    return slot is not None and place.offset <= len(slot.text) and slot.text == (place.text or "")

"""What the engine keeps: a flight (one model generation), the suggestions (requests) served
from it, and a document's AI bookkeeping.

Plain data with no behaviour: the flights, serving, prefetch and accept modules act on it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..model.providers.base import Cancellation

if TYPE_CHECKING:
    from tether.collab.rooms.room import Room
    from tether.collab.rooms.room_peer import Peer
    from tether.protocol.wire.ai_messages import Suggest

    from ..cache.suggestions import CacheQuery
    from ..text.anchors import TextAnchor
    from ..text.context import BuiltPrompt, ContextMemo
    from ..text.junk import JunkScreen
    from ..text.regions import RegionIndex
    from .document_text import DocumentText
    from .prefetch import Pause

TEXT_NAME = "content"
MODEL = "model"  # suggestion.start's source when the model computes the answer for it


@dataclass(eq=False)
class Flight:
    """One model generation. Several requests can take their text from it: the one that
    started it, a later one with the same context (an exact repeat, or the request a prefetch
    was computed for), and one whose editor has typed its first characters (type-ahead)."""

    room: Room
    query: CacheQuery
    key: bytes
    prompt: BuiltPrompt
    # Where the generation belongs (``DocumentText.spot``); typing there that is not its own
    # start makes it stale.
    anchor: TextAnchor
    max_tokens: int
    session: str  # the provider's warm-state key: see ``ai.suggest.flights.session_of``
    embed_text: str | None  # what the semantic layer embeds for this context
    prefetch_for: int | None = None  # the editor's peer id when computed ahead for it
    cancel: Cancellation = field(default_factory=Cancellation)
    subscribers: list[Suggestion] = field(default_factory=list)
    text: str = ""
    pieces: int = 0  # the provider's pieces (tokens), reported in suggestion.end
    finished: bool = False
    served: bool = False  # some request has taken text from it
    job: asyncio.Future[Any] | None = None
    # The junk filter on its stream (None: off, or a rewrite): what the model wrote beyond
    # ``text`` while held back; and the junk kind that ended it, if one did.
    screen: JunkScreen | None = None
    junk: str | None = None


@dataclass(eq=False)
class Suggestion:
    """One ``suggest`` request, served from the cache or from a flight."""

    request: Suggest
    peer: Peer
    room: Room
    prompt: BuiltPrompt
    # Where the text goes, found again after concurrent edits by the text around it: the
    # cursor (complete), or the selection's start plus the selected passage (rewrite); on a
    # rich document it names its block (``DocumentText.spot``, ``DocumentText.find``).
    anchor: TextAnchor
    passage: str | None
    requested_at: float
    query: CacheQuery
    source: str = MODEL
    flight: Flight | None = None
    text: str = ""  # what this editor has been sent
    first_at: float | None = None
    finished: bool = False
    # Held: the model started at once, but the semantic layer (its embedding still being
    # computed) may yet answer instead; the stream is kept back until that is decided.
    held: bool = False
    held_text: str = ""


@dataclass
class RoomState:
    regions: RegionIndex
    document: DocumentText  # what the AI reads of it, rich or plain
    room: Room | None = None  # the loaded document this is for
    flights: set[Flight] = field(default_factory=set)  # unfinished ones
    memos: dict[int, ContextMemo] = field(default_factory=dict)  # per editor (peer id)
    pauses: dict[int, Pause] = field(default_factory=dict)  # per editor: typing debounce
    prefetches: dict[int, Flight] = field(default_factory=dict)  # per editor: the latest
    # Per editor: the length its completions ask for, so its prefetch computes the same one.
    lengths: dict[int, int] = field(default_factory=dict)
    # Per editor: where its cursor was last known (its last completion or prefetch), and when
    # (loop time).
    cursors: dict[int, tuple[TextAnchor, float]] = field(default_factory=dict)
    # A plain document's text when prefetch last looked: its diff base (a rich one's is the
    # block the editor touched last, before and after: ``DocumentText.touched_by``).
    seen_text: str | None = None
    # Per editor: the model's evaluation of its renewed context, while it runs
    # (ai.suggest.refresher).
    warming: dict[int, asyncio.Future[Any]] = field(default_factory=dict)
    check_scheduled: bool = False

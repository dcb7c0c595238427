"""A server-side connection to one document: the host app opens it, edits it as CRDT changes
with an origin of its own, reads it and closes it, with the durability of an editor's edit.

Knows nothing of sockets. Edits go through ``Room.edit``, the path an accepted AI suggestion
takes: applied in one transaction with the origin, broadcast to every editor, passed to the
``on_change``/``on_store``/``after_store`` hooks, and stored; ``edit`` returns once the store
says it is durable, which is what an editor's SyncStatus ack means.
"""

from __future__ import annotations

from collections.abc import Callable

from pycrdt import Doc, Text

from ..content.reading import TEXT_NAME, read_content
from .renders import FORMATS, Renders
from .room import Room


class DocumentClosed(RuntimeError):
    """The direct connection's ``async with`` block has ended."""


class DirectConnection:
    """``async with server.open_document(name, origin="my-app") as document:``.

    ``document.doc`` is the live pycrdt ``Doc`` (read it freely; change it only through
    ``edit``, or editors and the store would not hear of the change)."""

    def __init__(self, room: Room, origin: object, renders: Renders) -> None:
        self._room = room
        self.origin = origin
        self.closed = False
        self._renders = renders

    @property
    def name(self) -> str:
        return self._room.name

    @property
    def doc(self) -> Doc:
        return self._room.doc

    @property
    def text(self) -> Text:
        """The ``Y.Text`` the web editor binds to (named "content")."""
        return self._room.doc.get(TEXT_NAME, type=Text)

    def read(self) -> str:
        """The document's text: a rich document's tree as plain text, else ``content``. Read
        on the event loop, O(document): for a big document, ``await export("text")``."""
        return read_content(self._room.doc, self._room.settings.rich_fragment).text()

    def read_markdown(self) -> str:
        """The document as Markdown: a rich document's tree written as Markdown, else the
        ``content`` text as it is (users write Markdown there). Read on the event loop,
        O(document): for a big document, ``await export("markdown")``."""
        return read_content(self._room.doc, self._room.settings.rich_fragment).markdown()

    async def export(self, format: str = "text") -> str:
        """The document as ``format`` ("text", "markdown" or "html"), as REST exports it:
        rendered in the server's renders pool, off the event loop, and kept per state, so a
        host reading a 50,000-paragraph document does not hold every editor up."""
        if format not in FORMATS or format == "json":
            raise ValueError(f"format must be text, markdown or html, not {format!r}")
        rich_name = self._room.settings.rich_fragment
        rendered = await self._renders.of_room(self._room, rich_name, format, refusable=False)
        return rendered.body.decode("utf-8")

    async def edit(self, change: Callable[[Doc], None]) -> None:
        """Run ``change(doc)`` as one CRDT transaction with this connection's origin; returns
        once it is stored durably (raises ``StorageError`` if the store failed). A change that
        raises still publishes what it did before (pycrdt has no rollback), then re-raises."""
        if self.closed:
            raise DocumentClosed(f"the direct connection to {self.name!r} is closed")
        failure: list[BaseException] = []

        def guarded(doc: Doc) -> None:
            try:
                change(doc)
            except Exception as exc:
                failure.append(exc)

        # A rebuild, or a big update applied in slices, holds the room for a moment: wait it out.
        await self._room.reloaded()
        await self._room.edit(guarded, self.origin)
        if failure:
            raise failure[0]

    async def insert(self, index: int, value: str) -> None:
        """Insert into the editor's text at ``index``, as pycrdt's ``Text`` counts."""
        await self.edit(lambda doc: doc.get(TEXT_NAME, type=Text).insert(index, value))

    async def append(self, value: str) -> None:
        await self.edit(lambda doc: _append(doc, value))


def _append(doc: Doc, value: str) -> None:
    text = doc.get(TEXT_NAME, type=Text)
    text += value

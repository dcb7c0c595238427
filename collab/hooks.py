"""Extension points around connections and documents, in the Hocuspocus manner; knows nothing
of transports.

An extension is any object with any of these optional methods; they run in registration order
(a host's extensions first, the AI engine last). ``async`` where they may do I/O:

- ``async on_connect(connection: ConnectionInfo)``: a socket arrived (``/ws`` or ``/yjs``),
  before any document. Raising refuses it (the upgrade fails with 403): ``AuthError``'s text is
  the reason the client sees, any other exception is logged and refused as "connection
  refused". ``connection.context`` is a dict the hook may fill for the later hooks.
- ``async on_authenticate(request: AuthRequest) -> Grant | None``: a token for a document (on
  ``/ws`` per document, on ``/yjs`` per socket, on REST per request, ``document`` None for the
  listing and the suggestion endpoint). Return a ``Grant`` to decide, None to leave it to the
  next extension and then to the built-in authenticator (``--auth jwt|none``). Raising
  denies: ``AuthError``'s text is the reason, any other exception is logged and denied as
  "authentication failed". The grant must still allow the document (``Grant.patterns``).
- ``async on_load(room)``: a document was loaded from the store, before any editor sees it
  (seed a template here with ``await room.edit(change, origin)``).
- ``on_change(room, update, origin)``: a change was applied (an editor's, or the server's own
  ``room.edit``); inside the sync path: keep it O(1), or make it ``async`` (it then runs as a
  task of its own, after the change).
- ``on_store(room, update)``: the change was handed to the store; ``after_store(room,
  update)``: it is durable (what an editor's SyncStatus ack means). Sync or async as on_change.
- ``async on_stateless(room, peer, payload)``: a Stateless message from an editor.
- ``on_presence(room, body)``: this node's editors' presence changed (one joined, moved, left);
  ``body`` is the awareness message the room's editors were sent. Inside the sync path: keep it
  O(1) (e.g. queue it for other nodes), or make it ``async`` as on_change.
- ``remote_presence(room) -> list[AwarenessEntry]``: presence held elsewhere (e.g. other nodes'
  editors) that the room's presence snapshots include after its own editors'. Asked when an
  editor joins or asks for everyone's presence: return what is held, do no I/O.
- ``async before_read(room)``: a REST read or a new version is about to read the document:
  bring it up to date first (e.g. with what other nodes committed). If it fails, the read uses
  what the room holds.
- ``on_detach(room, peer)``: an editor left a document.
- ``async on_disconnect(connection: ConnectionInfo)``: a socket closed (after on_connect).
- ``async on_unload(room)``: a document was stored and is leaving memory.
- ``on_deleted(name)``: a document was deleted, on this node (REST) or on another one, and its
  editors here were revoked: drop whatever is kept for it (e.g. cached AI suggestions). Sync or
  async as on_change.

A failing hook is contained: logged with the extension's name, and the document or
connection goes on (on_connect and on_authenticate fail closed: they refuse).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from .auth.tokens import AuthError, Grant

if TYPE_CHECKING:
    from tether.protocol.wire.sync_payloads import AwarenessEntry

    from .rooms.peer import Peer
    from .rooms.room import Room

log = logging.getLogger(__name__)


class Extension(Protocol):
    """Any subset of the hooks in this module's docstring."""


@dataclass(slots=True)
class ConnectionInfo:
    """A socket as hooks see it. ``headers`` are lower-cased; never log ``query`` (tokens)."""

    endpoint: str  # "ws", "yjs" or "http"
    path: str  # below where tether is mounted
    address: str
    # read-only (collab.connection.request_headers: decoded on first read)
    headers: Mapping[str, str]
    query: str = ""
    document: str | None = None  # /yjs names its one document in the path
    context: dict[str, Any] = field(default_factory=dict)  # filled by hooks, for hooks


@dataclass(frozen=True, slots=True)
class AuthRequest:
    token: str
    document: str | None
    connection: ConnectionInfo | None


class Hooks:
    def __init__(self, extensions: list[Any] | None = None) -> None:
        self.extensions: list[Any] = list(extensions or [])
        # Which extensions implement each hook, worked out once: on_change runs per update.
        self._by_hook: dict[str, list[Any]] = {}
        self._tasks: set[asyncio.Future[Any]] = set()  # async on_change & co. while they run

    def add(self, extension: Any) -> None:
        self.extensions.append(extension)
        self._by_hook.clear()

    def remove(self, extension: Any) -> None:
        self.extensions.remove(extension)
        self._by_hook.clear()

    def has(self, name: str) -> bool:
        return bool(self._having(name))

    async def on_connect(self, connection: ConnectionInfo) -> None:
        """Raises AuthError to refuse (any failure of a hook refuses)."""
        for ext in self._having("on_connect"):
            try:
                await ext.on_connect(connection)
            except AuthError:
                raise
            except Exception as exc:
                log.exception("on_connect hook failed in %s; refused", _name(ext))
                raise AuthError("connection refused") from exc

    async def on_authenticate(self, request: AuthRequest) -> Grant | None:
        """The first grant an extension returns; None when none decided. Raises AuthError."""
        for ext in self._having("on_authenticate"):
            try:
                grant = await ext.on_authenticate(request)
            except AuthError:
                raise
            except Exception as exc:
                log.exception("on_authenticate hook failed in %s; denied", _name(ext))
                raise AuthError("authentication failed") from exc
            if grant is None:
                continue
            if not isinstance(grant, Grant):
                log.error("on_authenticate in %s returned no Grant", _name(ext))
                raise AuthError("authentication failed")
            return grant
        return None

    async def on_load(self, room: Room) -> None:
        for ext in self._having("on_load"):
            try:
                await ext.on_load(room)
            except Exception:  # the document still opens, as stored
                log.exception("on_load hook failed in %s for %r", _name(ext), room.name)

    async def on_unload(self, room: Room) -> None:
        for ext in self._having("on_unload"):
            try:
                await ext.on_unload(room)
            except Exception:
                log.exception("on_unload hook failed in %s for %r", _name(ext), room.name)

    def on_change(self, room: Room, update: bytes, origin: object) -> None:
        for ext in self._having("on_change"):
            self._call("on_change", ext, room, update, origin)

    def on_store(self, room: Room, update: bytes) -> None:
        for ext in self._having("on_store"):
            self._call("on_store", ext, room, update)

    def after_store(self, room: Room, update: bytes) -> None:
        for ext in self._having("after_store"):
            self._call("after_store", ext, room, update)

    async def on_stateless(self, room: Room, peer: Peer, payload: str) -> None:
        for ext in self._having("on_stateless"):
            try:
                await ext.on_stateless(room, peer, payload)
            except Exception:  # one extension's bug must not close the editor's socket
                log.exception("on_stateless hook failed in %s", _name(ext))

    def on_presence(self, room: Room, body: bytes) -> None:
        for ext in self._having("on_presence"):
            self._call("on_presence", ext, room, body)

    def remote_presence(self, room: Room) -> list[AwarenessEntry]:
        entries: list[AwarenessEntry] = []
        for ext in self._having("remote_presence"):
            try:
                entries.extend(ext.remote_presence(room))
            except Exception:  # the snapshot goes out with the presence the others gave
                log.exception("remote_presence hook failed in %s", _name(ext))
        return entries

    async def before_read(self, room: Room) -> None:
        for ext in self._having("before_read"):
            try:
                await ext.before_read(room)
            except Exception:  # the read goes on with what the room holds
                log.exception("before_read hook failed in %s for %r", _name(ext), room.name)

    def on_deleted(self, name: str) -> None:
        for ext in self._having("on_deleted"):
            self._call("on_deleted", ext, name)

    def on_detach(self, room: Room, peer: Peer) -> None:
        for ext in self._having("on_detach"):
            try:
                ext.on_detach(room, peer)
            except Exception:
                log.exception("on_detach hook failed in %s", _name(ext))

    async def on_disconnect(self, connection: ConnectionInfo) -> None:
        for ext in self._having("on_disconnect"):
            try:
                await ext.on_disconnect(connection)
            except Exception:
                log.exception("on_disconnect hook failed in %s", _name(ext))

    def _call(self, hook: str, ext: Any, *args: Any) -> None:
        """A sync-path hook: called at once; if it is async, its coroutine runs as a task."""
        try:
            result = getattr(ext, hook)(*args)
        except Exception:  # an extension's bug must not break the sync path
            log.exception("%s hook failed in %s", hook, _name(ext))
            return
        if inspect.isawaitable(result):
            task = asyncio.ensure_future(_contained(hook, ext, result))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _having(self, name: str) -> list[Any]:
        having = self._by_hook.get(name)
        if having is None:
            having = self._by_hook[name] = [e for e in self.extensions if hasattr(e, name)]
        return having


def _name(ext: Any) -> str:
    """How logs name an extension: its ``name`` if it has one, else its class."""
    return str(getattr(ext, "name", None) or type(ext).__name__)


async def _contained(hook: str, ext: Any, pending: Awaitable[Any]) -> None:
    try:
        await pending
    except Exception:
        log.exception("%s hook failed in %s", hook, _name(ext))

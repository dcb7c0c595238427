"""Extension points around connections and documents, in the Hocuspocus manner; knows nothing
of transports, and of rooms only what hooks hand on (``RoomView``, ``PeerView``).

An extension is any object with some of ``Extension``'s methods (each one's docstring says when
it runs and with what). ``Hooks`` checks an extension when it is registered: a method whose
name looks like a hook (``on_...``, ``before_...``, ``after_...``, ``remote_...``, or
Hocuspocus's ``onChange`` spelling) but is none is an error that names it and the hooks, so a
misspelled hook fails at start-up instead of never being called. Extensions run by
``priority`` (an optional int attribute, higher first, 100 if absent, as in Hocuspocus), and
equal ones in registration order: a host's own ``authenticate`` callback, its extensions, then
the cluster's, the AI engine and the webhooks. ``async`` where they may do I/O.

A failing hook is contained: logged with the extension's name, and the document or
connection goes on (on_connect and on_authenticate fail closed: they refuse).
"""

from __future__ import annotations

import asyncio
import difflib
import inspect
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from .auth.tokens import AuthError, Grant

if TYPE_CHECKING:
    from pycrdt import Doc

    from tether.protocol.wire.sync_payloads import AwarenessEntry

log = logging.getLogger(__name__)

DEFAULT_PRIORITY = 100


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


class RoomView(Protocol):
    """A loaded document as hooks receive it (the server's ``Room``), as far as an extension
    may rely on it."""

    @property
    def name(self) -> str: ...

    @property
    def doc(self) -> Doc:
        """The live pycrdt document: read it freely, change it only through ``edit``."""
        ...

    def edit(self, change: Callable[[Doc], None], origin: object) -> Awaitable[int]:
        """Apply ``change`` as ``origin``: editors see it at once; awaited, it is stored."""
        ...


class PeerView(Protocol):
    """An editor of a document as hooks receive it (the server's ``Peer``)."""

    @property
    def peer_id(self) -> int: ...

    @property
    def writable(self) -> bool: ...

    def send_stateless(self, payload: str) -> None:
        """A Stateless message to this editor."""
        ...


class Extension(Protocol):
    """The hooks: an extension has any subset of these methods (subclassing this class is not
    needed; a subclass has the payloads' types checked and its unwritten hooks stay unset).
    The sync-path hooks (on_change, on_store, after_store, on_presence, on_deleted) may be
    ``async``: their coroutine then runs as a task of its own, after the change."""

    async def on_connect(self, connection: ConnectionInfo) -> None:
        """A socket arrived (``/ws``, ``/yjs`` or an HTTP fallback session), before any
        document. Raising refuses it (the upgrade fails with 403): ``AuthError``'s text is the
        reason the client sees, any other exception is logged and refused as "connection
        refused". ``connection.context`` is a dict the hook may fill for the later hooks."""

    async def on_authenticate(self, request: AuthRequest) -> Grant | None:
        """A token for a document (on ``/ws`` per document, on ``/yjs`` per socket, on REST per
        request, ``document`` None for the listing and the suggestion endpoint). Return a
        ``Grant`` to decide, None to leave it to the next extension and then to the built-in
        authenticator (``--auth jwt|none``). Raising denies: ``AuthError``'s text is the
        reason, any other exception is logged and denied as "authentication failed". The grant
        must still allow the document (``Grant.patterns``)."""

    async def on_load(self, room: RoomView) -> None:
        """A document was loaded from the store, before any editor sees it (seed a template
        here with ``await room.edit(change, origin)``)."""

    def on_change(self, room: RoomView, update: bytes, origin: object) -> Awaitable[None] | None:
        """A change was applied (an editor's, or the server's own ``room.edit``); inside the
        sync path: keep it O(1), or make it ``async``."""

    def on_store(self, room: RoomView, update: bytes) -> Awaitable[None] | None:
        """The change was handed to the store (sync or async as on_change)."""

    def after_store(self, room: RoomView, update: bytes) -> Awaitable[None] | None:
        """The change is durable: what an editor's SyncStatus ack means (sync or async as
        on_change)."""

    async def on_stateless(self, room: RoomView, peer: PeerView, payload: str) -> None:
        """A Stateless message from an editor."""

    def on_presence(self, room: RoomView, body: bytes) -> Awaitable[None] | None:
        """This node's editors' presence changed (one joined, moved, left); ``body`` is the
        awareness message the room's editors were sent. Inside the sync path: keep it O(1)
        (e.g. queue it for other nodes), or make it ``async`` as on_change."""

    def remote_presence(self, room: RoomView) -> list[AwarenessEntry]:
        """Presence held elsewhere (e.g. other nodes' editors) that the room's presence
        snapshots include after its own editors'. Asked when an editor joins or asks for
        everyone's presence: return what is held, do no I/O."""

    async def before_read(self, room: RoomView) -> None:
        """A REST read or a new version is about to read the document: bring it up to date
        first (e.g. with what other nodes committed). If it fails, the read uses what the room
        holds."""

    def on_detach(self, room: RoomView, peer: PeerView) -> None:
        """An editor left a document."""

    async def on_disconnect(self, connection: ConnectionInfo) -> None:
        """A socket closed (after on_connect)."""

    async def on_unload(self, room: RoomView) -> None:
        """A document was stored and is leaving memory."""

    def on_deleted(self, name: str) -> Awaitable[None] | None:
        """A document was deleted, on this node (REST) or on another one, and its editors here
        were revoked: drop whatever is kept for it (e.g. cached AI suggestions). Sync or async
        as on_change."""


# Every hook, in the order Extension declares them: the one list registration checks against.
HOOKS: tuple[str, ...] = tuple(
    name for name, value in vars(Extension).items() if not name.startswith("_") and callable(value)
)
# What a hook's name looks like: a method named so that is not one is a misspelling.
_HOOK_LIKE = re.compile(r"(on|before|after|remote)(_|[A-Z])")


class UnknownHook(TypeError):
    """An extension has a method named like a hook that is none (a misspelled hook would never
    be called), or a hook that is not callable, or a priority that is not an int."""


class Hooks:
    """The registered extensions, each hook calling those that have it (by priority)."""

    def __init__(self, extensions: list[Any] | None = None) -> None:
        self.extensions: list[Any] = []
        # Which extensions implement each hook, worked out once: on_change runs per update.
        self._by_hook: dict[str, list[Any]] = {}
        self._tasks: set[asyncio.Future[Any]] = set()  # async on_change & co. while they run
        for extension in extensions or ():
            self.add(extension)

    def add(self, extension: Any) -> None:
        """Register ``extension``; raises ``UnknownHook`` if it names a hook that is none."""
        check_extension(extension)
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

    async def on_load(self, room: RoomView) -> None:
        for ext in self._having("on_load"):
            try:
                await ext.on_load(room)
            except Exception:  # the document still opens, as stored
                log.exception("on_load hook failed in %s for %r", _name(ext), room.name)

    async def on_unload(self, room: RoomView) -> None:
        for ext in self._having("on_unload"):
            try:
                await ext.on_unload(room)
            except Exception:
                log.exception("on_unload hook failed in %s for %r", _name(ext), room.name)

    def on_change(self, room: RoomView, update: bytes, origin: object) -> None:
        for ext in self._having("on_change"):
            self._call("on_change", ext, room, update, origin)

    def on_store(self, room: RoomView, update: bytes) -> None:
        for ext in self._having("on_store"):
            self._call("on_store", ext, room, update)

    def after_store(self, room: RoomView, update: bytes) -> None:
        for ext in self._having("after_store"):
            self._call("after_store", ext, room, update)

    async def on_stateless(self, room: RoomView, peer: PeerView, payload: str) -> None:
        for ext in self._having("on_stateless"):
            try:
                await ext.on_stateless(room, peer, payload)
            except Exception:  # one extension's bug must not close the editor's socket
                log.exception("on_stateless hook failed in %s", _name(ext))

    def on_presence(self, room: RoomView, body: bytes) -> None:
        for ext in self._having("on_presence"):
            self._call("on_presence", ext, room, body)

    def remote_presence(self, room: RoomView) -> list[AwarenessEntry]:
        entries: list[AwarenessEntry] = []
        for ext in self._having("remote_presence"):
            try:
                entries.extend(ext.remote_presence(room))
            except Exception:  # the snapshot goes out with the presence the others gave
                log.exception("remote_presence hook failed in %s", _name(ext))
        return entries

    async def before_read(self, room: RoomView) -> None:
        for ext in self._having("before_read"):
            try:
                await ext.before_read(room)
            except Exception:  # the read goes on with what the room holds
                log.exception("before_read hook failed in %s for %r", _name(ext), room.name)

    def on_deleted(self, name: str) -> None:
        for ext in self._having("on_deleted"):
            self._call("on_deleted", ext, name)

    def on_detach(self, room: RoomView, peer: PeerView) -> None:
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
            having = [e for e in self.extensions if _implements(e, name)]
            having.sort(key=_priority, reverse=True)  # stable: equal ones in registration order
            self._by_hook[name] = having
        return having


def check_extension(extension: object) -> None:
    """Raises ``UnknownHook`` if ``extension`` has a method named like a hook that is none, a
    hook that cannot be called, or a priority that is no int."""
    for attr in dir(extension):
        if attr in HOOKS:
            if not callable(getattr(extension, attr)):
                raise UnknownHook(f"{_name(extension)}.{attr} is a hook but cannot be called")
        elif _HOOK_LIKE.match(attr) and callable(getattr(extension, attr, None)):
            snake = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", attr).lower()  # onChange: on_change
            near = difflib.get_close_matches(snake, HOOKS, 1)
            guess = f"{near[0]}?" if near else "misspelled?"
            raise UnknownHook(
                f"{_name(extension)}.{attr} is not a tether hook ({guess}); the hooks are "
                + ", ".join(HOOKS)
            )
    priority = getattr(extension, "priority", DEFAULT_PRIORITY)
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise UnknownHook(f"{_name(extension)}.priority must be an int, not {priority!r}")


def _implements(extension: object, hook: str) -> bool:
    """``extension`` has its own ``hook``: not Extension's empty one, inherited by subclassing."""
    if not hasattr(extension, hook):
        return False
    stub = vars(Extension).get(hook)
    inherited = stub is not None and getattr(type(extension), hook, None) is stub
    return not inherited or hook in getattr(extension, "__dict__", ())


def _priority(extension: object) -> int:
    return int(getattr(extension, "priority", DEFAULT_PRIORITY))


def _name(ext: Any) -> str:
    """How logs name an extension: its ``name`` if it has one, else its class."""
    return str(getattr(ext, "name", None) or type(ext).__name__)


async def _contained(hook: str, ext: Any, pending: Awaitable[Any]) -> None:
    try:
        await pending
    except Exception:
        log.exception("%s hook failed in %s", hook, _name(ext))

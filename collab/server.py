"""The Starlette app: the only module that knows Starlette. Each endpoint is short and hands
the work to plain objects (connections, rooms, the store).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import html
import ipaddress
import json
import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from prometheus_client import ProcessCollector
from pycrdt import Text
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from tether.protocol.ai import InvalidAiMessage, Suggest, decode_client_message
from tether.protocol.errors import DecodeError
from tether.protocol.session import QueueBudget

from .auth.grants import authenticate
from .auth.tokens import Authenticator, AuthError, Grant
from .cluster.node import Cluster
from .cluster.stores import build_store
from .config import Settings
from .connection.address_limit import ConnectionsPerAddress
from .connection.close_codes import TRY_AGAIN_LATER, UNAUTHORIZED
from .connection.context import ServerContext, valid_document_name
from .connection.mux import MuxConnection
from .connection.origins import OriginPolicy, normalise_origin
from .connection.request_headers import RequestHeaders
from .connection.yws import YwsConnection
from .connection.yws import authorize as authorize_yws
from .fallback.endpoints import HttpTransport
from .hooks import AuthRequest, ConnectionInfo, Hooks
from .http.documents import DocumentsApi
from .http.web_extras import FAVICON_PATH, favicon, openapi
from .http.webhooks import WebhookExtension
from .rooms.direct import TEXT_NAME, DirectConnection
from .rooms.manager import RoomManager
from .rooms.presence import PresenceLimits
from .rooms.presence_claims import ClaimRegistry
from .runtime.metrics import Metrics, label_value
from .storage.store import Store
from .transport.raw_frames import MessageSink, raw_frames_of
from .version import VERSION

log = logging.getLogger("tether")

WEB_DIST = Path(__file__).resolve().parent.parent / "web" / "dist"  # the committed bundle


class _AsgiWebSocket:
    """A raw ASGI WebSocket as the ``Transport`` the connection loops speak.

    The sync hot path sends one message per editor per edit; going straight to the server's
    ASGI ``send`` skips Starlette's per-message wrappers (measured in ``tether bench sync``).
    """

    __slots__ = ("_raw", "_receive", "_send")

    def __init__(self, receive: Receive, send: Send, scope: Scope | None = None) -> None:
        self._receive = receive
        self._send = send
        # tether serve's uvicorn protocol (collab.transport.raw_frames), offering pre-framed
        # synchronous writes and a receive fast path; None under a host app's server: plain ASGI.
        self._raw = raw_frames_of(scope)

    @property
    def write_now(self) -> Callable[[Sequence[bytes]], bool] | None:
        return None if self._raw is None else self._raw.write_frames

    def set_message_sink(self, sink: MessageSink | None) -> None:
        """Messages go to ``sink.on_message`` as they arrive, where the server can."""
        if self._raw is not None:
            self._raw.message_sink = sink

    async def handshake(self) -> bool:
        """Consume ``websocket.connect``; False if the client left first."""
        message = await self._receive()
        return message["type"] == "websocket.connect"

    async def accept(self) -> None:
        await self._send({"type": "websocket.accept"})

    async def refuse(self, code: int, reason: str) -> None:
        """Close before accepting: the client sees the HTTP upgrade fail with 403."""
        await self._send({"type": "websocket.close", "code": code, "reason": reason})

    async def deny(self, status: int, reason: str, scope: Scope) -> None:
        """Refuse the upgrade with an HTTP status and a JSON body where the server supports
        it (the ASGI websocket.http.response extension); a plain 403 otherwise."""
        if "websocket.http.response" not in scope.get("extensions", {}):
            await self.refuse(1008, reason)
            return
        body = json.dumps({"error": reason}).encode()
        await self._send(
            {
                "type": "websocket.http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await self._send({"type": "websocket.http.response.body", "body": body})

    async def receive(self) -> bytes | None:
        message = await self._receive()
        if message["type"] == "websocket.disconnect":
            return None
        data = message.get("bytes")
        if data is None:
            raise DecodeError("text frames are not part of the protocol")
        return data

    def send(self, data: bytes) -> Awaitable[None]:
        return self._send({"type": "websocket.send", "bytes": data})

    async def close(self, code: int, reason: str) -> None:
        await self._send({"type": "websocket.close", "code": code, "reason": reason})


class TetherServer:
    """The tether server as an object a host app can hold: settings, store, rooms, the AI
    engine, metrics and hooks are named parts, and ``asgi`` is the ASGI app.

    ``tether serve`` runs it under uvicorn (``create_app``); a host mounts ``server.asgi`` (or
    ``server`` itself, it is ASGI too) under any prefix and starts and stops it from its own
    lifespan::

        server = TetherServer(Settings(auth="none", data_dir="data"))

        @contextlib.asynccontextmanager
        async def lifespan(app):
            async with server:  # start() ... stop()
                yield

        app = FastAPI(lifespan=lifespan)
        app.mount("/collab", server.asgi)

    The parts that exist only while running (``store``, ``rooms``, ``ai``, ``context``) are
    None before ``start()`` and after ``stop()``.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        store: Store | None = None,
        extensions: list[Any] | None = None,
        authenticate: AuthCallback | None = None,
    ) -> None:
        settings.validate()
        self.settings = settings
        self.hooks = Hooks(extensions)
        if authenticate is not None:  # before the extensions: the host's own check decides
            self.hooks.extensions.insert(0, _AuthenticateHook(authenticate))
        self.metrics = Metrics()
        ProcessCollector(registry=self.metrics.registry)
        self.authenticator = Authenticator(settings.auth, settings.jwt_secret)
        self.store: Store | None = None
        self.rooms: RoomManager | None = None
        self.ai: Any = None  # ai.engine.AiEngine when suggestions are on
        self.context: ServerContext | None = None
        self.cluster: Cluster | None = None
        self._given_store = store
        self._stack: contextlib.AsyncExitStack | None = None
        self.origins = OriginPolicy.from_settings(settings.allowed_origins, auth=settings.auth)
        self._refused_origins: set[str] = set()  # logged once each (bounded)
        self.addresses = ConnectionsPerAddress(settings.max_connections_per_address)
        self._crowded: set[str] = set()  # addresses logged for the limit (bounded likewise)
        self._said_not_started = False
        # The HTTP fallback for /ws (the same frames, connection logic, auth and limits).
        self.http_transport = HttpTransport(
            settings,
            self.metrics,
            self._session_grant,
            connect=self._session_connect,
            disconnect=self.hooks.on_disconnect,
        )
        self.cors_origins = OriginPolicy.from_settings(settings.cors_origins, auth="jwt")
        self.http_app = Starlette(
            routes=self.routes(), lifespan=self._lifespan, middleware=_cors(self.cors_origins)
        )
        self.asgi: ASGIApp = self  # the object is the ASGI app; the name reads well in mounts

    # ---- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the store, the room manager and the AI engine (its model loads behind)."""
        if self._stack is not None:
            raise RuntimeError("this TetherServer is already started")
        settings = self.settings
        if settings.auth == "none":
            log.warning(
                "AUTH IS OFF (--auth none): anyone who reaches this port "
                "can read and edit every document"
            )
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        stack = contextlib.AsyncExitStack()
        await stack.__aenter__()
        try:
            built = build_store(settings, self.metrics, self._given_store)
            backend = await stack.enter_async_context(built.store)
            rooms = self._room_manager(backend)
            stack.push_async_callback(rooms.close)
            # Scale-out (--bus): fan-out across nodes and backfill; a no-op on one node.
            self.cluster = await stack.enter_async_context(
                Cluster(settings, built, rooms, self.metrics)
            )
            for extension in self.cluster.extensions():
                self.hooks.add(extension)
                stack.callback(self.hooks.remove, extension)
            engine = await _start_ai(settings, stack, self.metrics)
            if engine is not None:
                self.hooks.add(engine)
                stack.callback(self.hooks.remove, engine)
            if settings.webhook_url:
                webhooks = WebhookExtension(
                    settings.webhook_url,
                    settings.webhook_secret,
                    debounce=settings.webhook_debounce,
                    max_wait=max(settings.webhook_debounce * 5, 1.0),
                    events=tuple(settings.webhook_events.split(",")),
                    metrics=self.metrics,
                )
                self.hooks.add(webhooks)
                stack.push_async_callback(webhooks.aclose)
                stack.callback(self.hooks.remove, webhooks)
            budget = QueueBudget(settings.max_queued_bytes_before_auth_total)
            self.store, self.rooms, self.ai = backend, rooms, engine
            self.context = ServerContext(
                settings, self.authenticator, rooms, self.hooks, self.metrics, backend, budget
            )
            await stack.enter_async_context(self.http_transport.running(self.context))
        except BaseException:
            self.context = None
            self.store, self.rooms, self.ai = None, None, None
            await stack.aclose()
            raise
        self._stack = stack

    async def stop(self) -> None:
        """Persist every loaded document and close the store and the AI engine."""
        stack, self._stack = self._stack, None
        self.context = None
        try:
            if stack is not None:
                await stack.aclose()
        finally:
            self.store, self.rooms, self.ai, self.cluster = None, None, None, None

    async def __aenter__(self) -> TetherServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        async with self:
            app.state.ctx = self.context
            yield

    def _room_manager(self, backend: Store) -> RoomManager:
        settings = self.settings
        return RoomManager(
            backend,
            hooks=self.hooks,
            metrics=self.metrics,
            unload_grace=settings.unload_grace,
            compact_threshold=settings.compact_threshold,
            compact_log_ratio=settings.compact_log_ratio,
            max_nesting_depth=settings.max_nesting_depth,
            max_message_bytes=settings.max_outgoing_message_bytes,
            presence_limits=PresenceLimits(
                ids_per_peer=settings.awareness_ids_per_peer,
                entry_bytes=settings.awareness_entry_bytes,
                peer_bytes=settings.awareness_peer_bytes,
                document_bytes=settings.awareness_document_bytes,
            ),
            claims=ClaimRegistry(
                settings.presence_claim_ttl,
                settings.presence_claims,
                settings.presence_claims_per_subject,
            ),
        )

    @contextlib.asynccontextmanager
    async def open_document(
        self, name: str, *, origin: object = "host"
    ) -> AsyncIterator[DirectConnection]:
        """A server-side connection to ``name`` (see ``collab.rooms.direct``): the document stays
        loaded until the block ends; edits carry ``origin`` and are durable when they return."""
        if not valid_document_name(name):
            raise ValueError("invalid document name")
        async with self.ctx.rooms.hold(name) as room:
            connection = DirectConnection(room, origin)
            try:
                yield connection
            finally:
                connection.closed = True

    @property
    def ctx(self) -> ServerContext:
        """The running server's context; raises ``NotStarted`` before ``start()``."""
        if self.context is None:
            raise NotStarted(NOT_STARTED)
        return self.context

    # ---- HTTP routes ---------------------------------------------------------------------------

    def routes(self) -> list[Route | Mount]:
        return [
            Route("/", self.index),
            Route("/d/{name:path}", self.editor),
            _static_route(),
            Route("/health", self.health),
            Route("/metrics", self.metrics_endpoint),
            Route("/api/documents", self.list_documents),
            Route("/api/suggest", self.suggest_endpoint, methods=["POST"]),
            *DocumentsApi(lambda: self.ctx, self._bearer_grant).routes(),
            Route("/openapi.json", openapi),
            Route("/favicon.ico", favicon),
            Route(FAVICON_PATH, favicon),
            *self.http_transport.routes(),
        ]

    async def health(self, request: Request) -> Response:
        ctx = self.ctx
        engine = self.ai
        if engine is not None and engine.status is not None:
            ai = engine.health()
        else:
            ai = {"state": "off", "reason": "AI suggestions are off (--ai-provider none)"}
        body = {
            "status": "ok",
            "version": VERSION,
            "documents_loaded": len(ctx.rooms.rooms),
            "ai": ai,
        }
        if self.cluster is not None:
            body.update(await self.cluster.health())  # node, database, bus
            if body["database"]["state"] != "ok":
                body["status"] = "degraded"  # edits wait, unacked, until the database returns
        return JSONResponse(body)

    async def metrics_endpoint(self, request: Request) -> Response:
        refusal = _metrics_refusal(request, self.settings.metrics_token)
        if refusal is not None:
            self.metrics.limit_refusals.labels("metrics_access").inc()
            status, reason = refusal
            return JSONResponse({"error": reason}, status_code=status)
        return Response(self.metrics.render(), media_type="text/plain; version=0.0.4")

    async def list_documents(self, request: Request) -> Response:
        grant = await self._bearer_grant(request, None)
        if grant is None:
            return _unauthorized()
        ctx = self.ctx
        infos = await ctx.store.list_documents()
        listed = [
            {
                "name": info.name,
                "created_at": info.created_at,
                "updated_at": info.updated_at,
                "stored_bytes": info.stored_bytes,
                "loaded": info.name in ctx.rooms.rooms,
            }
            for info in infos
            if grant.allows(info.name)
        ]
        return JSONResponse({"documents": listed})

    async def suggest_endpoint(self, request: Request) -> Response:
        settings, authenticator = self.settings, self.authenticator
        grant = await self._bearer_grant(request, None)
        if grant is None:
            return _unauthorized()
        rooms = self.ctx.rooms
        engine = self.ai
        if engine is None:
            return JSONResponse({"error": "AI suggestions are off on this server"}, status_code=503)
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type != "application/json":
            # A cross-site <form> can POST text/plain without asking; JSON needs a preflight.
            return JSONResponse({"error": "Content-Type must be application/json"}, 415)
        try:
            body = json.loads(await _read_body(request, settings.max_frame_bytes))
            if not isinstance(body, dict):
                raise ValueError("body must be a JSON object")
            document = body.get("doc")
            if not isinstance(document, str) or not valid_document_name(document):
                raise ValueError("'doc' must name a document")
            uploaded = body.get("text")
            if uploaded is not None and not isinstance(uploaded, str):
                raise ValueError("'text' must be a string")
            fields = {k: v for k, v in body.items() if k not in ("doc", "text", "baseline")}
            fields.setdefault("id", "http-" + secrets.token_hex(6))
            suggestion = decode_client_message(json.dumps({**fields, "type": "suggest"}))
        except (ValueError, InvalidAiMessage) as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        if not isinstance(suggestion, Suggest):
            return JSONResponse({"error": "only 'suggest' requests go here"}, status_code=400)
        try:
            authenticator.check(grant, document)
        except AuthError as exc:
            return JSONResponse({"error": str(exc)}, status_code=403)
        if not grant.writable:  # as on the socket: a reader could never apply a suggestion
            return JSONResponse({"error": "suggestions need read-write scope"}, status_code=403)
        # Whose share of the model this takes: the client's address stands for a connection
        # (each HTTP request is one), the token's subject for the caller behind it.
        owner = ("http", request.client.host if request.client else "")
        subject = None if settings.auth == "none" else "sub:" + grant.subject
        if uploaded is None:
            async with rooms.visit(document) as room:
                text = str(room.doc.get(TEXT_NAME, type=Text))
            session = f"{document}\0http:{grant.subject}"
            cold = bool(body.get("baseline"))
        else:
            text, session, cold = uploaded, "http-baseline", True
        return StreamingResponse(
            _sse(engine, suggestion, text, session, cold, owner, subject),
            media_type="text/event-stream",
        )

    async def _session_connect(self, request: Request) -> ConnectionInfo:
        """An HTTP fallback session arriving: the on_connect hooks, as for a /ws socket (an
        AuthError refuses it, counted as /ws counts it)."""
        address = request.client.host if request.client else "unknown"
        info = _connection_info(request.scope, "http", route_path(request.scope), address)
        try:
            await self.hooks.on_connect(info)
        except AuthError:
            self.metrics.auth_failures.labels("on_connect").inc()
            raise
        return info

    async def _session_grant(
        self, token: str, request: Request, info: ConnectionInfo | None = None
    ) -> Grant:
        """An HTTP fallback session's token, checked as REST's are (hooks first)."""
        if info is None:
            address = request.client.host if request.client else "unknown"
            info = _connection_info(request.scope, "http", route_path(request.scope), address)
        return await authenticate(self.ctx, token, None, info, check=False)

    async def _bearer_grant(self, request: Request, document: str | None) -> Grant | None:
        """The grant of the request's bearer token (hooks first), or None: answer 401."""
        header = request.headers.get("authorization", "")
        token = header[7:] if header.lower().startswith("bearer ") else ""
        address = request.client.host if request.client else "unknown"
        info = _connection_info(request.scope, "http", route_path(request.scope), address)
        try:
            return await authenticate(self.ctx, token, document, info, check=False)
        except AuthError:
            return None

    async def index(self, request: Request) -> Response:
        base = _base(request)
        return _page("tether", "index", {"auth": self.settings.auth, "base": base}, base)

    async def editor(self, request: Request) -> Response:
        name = request.path_params["name"]
        if not valid_document_name(name):
            return JSONResponse({"error": "invalid document name"}, status_code=400)
        settings = self.settings
        base = _base(request)
        config = {
            "auth": settings.auth,
            "document": name,
            "ai": settings.ai_provider != "none",
            "base": base,
        }
        return _page(f"{name} · tether", "editor", config, base)

    # ---- WebSocket endpoints -----------------------------------------------------------------

    async def ws_endpoint(self, ws: _AsgiWebSocket, connection: ConnectionInfo) -> None:
        await ws.accept()
        await MuxConnection(ws, self.ctx, connection).run()

    async def yjs_endpoint(
        self, ws: _AsgiWebSocket, name: str, query: str, connection: ConnectionInfo
    ) -> None:
        ctx = self.ctx
        token = parse_qs(query).get("token", [""])[0]
        try:
            grant = await authorize_yws(ctx, name, token, connection)
        except AuthError as exc:
            ctx.metrics.auth_failures.labels(label_value(str(exc))).inc()
            await ws.refuse(UNAUTHORIZED, str(exc))
            return
        await ws.accept()
        await YwsConnection(ws, ctx, name, grant).run()

    # ---- ASGI ----------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.http_app(scope, receive, send)  # lifespan
            return
        if self.context is None:
            await self._refuse_not_started(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await self.websocket(scope, receive, send)
            return
        refusal = _origin_refusal(scope, self.origins)
        if refusal is not None and self._cors_allows(scope):
            refusal = None  # a listed site calling the REST API (CORS answers its preflight)
        if refusal is not None:
            self.metrics.origin_refusals.labels("http").inc()
            _log_refusal_once(self._refused_origins, scope, refusal)
            await JSONResponse({"error": refusal}, status_code=403)(scope, receive, send)
            return
        await self.http_app(scope, receive, send)

    def _cors_allows(self, scope: Scope) -> bool:
        """A REST request from an origin listed in --cors-origins, to an allowed Host."""
        if not self.cors_origins.allowed_origins or not route_path(scope).startswith("/api/"):
            return False
        headers = {
            k.lower(): v for k, v in scope.get("headers", []) if k.lower() in _ORIGIN_HEADERS
        }
        origin = headers.get(b"origin")
        if origin is None:
            return False
        normalised = normalise_origin(origin.decode("latin-1"))
        host = headers.get(b"host")
        host_ok = self.origins.refusal(host.decode("latin-1") if host else None, None) is None
        return host_ok and normalised in self.cors_origins.allowed_origins

    async def websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Origin, per-address limit, then the endpoint by path."""
        ws = _AsgiWebSocket(receive, send, scope)
        if not await ws.handshake():
            return
        refusal = _origin_refusal(scope, self.origins)
        if refusal is not None:
            self.metrics.origin_refusals.labels("websocket").inc()
            _log_refusal_once(self._refused_origins, scope, refusal)
            await ws.refuse(1008, refusal)  # the upgrade fails with 403: no document byte
            return
        address = _client_address(scope)
        if not self.addresses.enter(address):
            self.metrics.limit_refusals.labels("max_connections_per_address").inc()
            if address not in self._crowded and len(self._crowded) < _MAX_LOGGED_ORIGINS:
                self._crowded.add(address)
                log.warning("refused a socket: too many open from %s", address)
            await ws.refuse(TRY_AGAIN_LATER, "too many connections from this address")
            return
        opened = time.monotonic()
        path = route_path(scope)
        log.debug("socket opened from %s on %s", address, path)
        try:
            if path == "/ws":
                connection = _connection_info(scope, "ws", path, address, hooks=self.hooks)
                if await self._connected(ws, connection):
                    try:
                        await self.ws_endpoint(ws, connection)
                    finally:
                        await self.hooks.on_disconnect(connection)
            elif path.startswith("/yjs/"):
                query = scope.get("query_string", b"").decode("latin-1")
                # scope["path"] is percent-decoded already (once): decoding again made "rep%2541"
                # the document "repA", under a token checked for that name.
                name = path[len("/yjs/") :]
                connection = _connection_info(scope, "yjs", path, address, name, hooks=self.hooks)
                if await self._connected(ws, connection):
                    try:
                        await self.yjs_endpoint(ws, name, query, connection)
                    finally:
                        await self.hooks.on_disconnect(connection)
            else:
                await ws.deny(404, "no such endpoint (tether's are /ws and /yjs/<document>)", scope)
        finally:
            self.addresses.leave(address)
            log.debug(
                "socket from %s on %s ended after %.1f s", address, path, time.monotonic() - opened
            )

    async def _connected(self, ws: _AsgiWebSocket, connection: ConnectionInfo) -> bool:
        """The on_connect hooks; False (and refused: 403 on the upgrade) if one refused."""
        try:
            await self.hooks.on_connect(connection)
        except AuthError as exc:
            self.metrics.auth_failures.labels("on_connect").inc()
            await ws.refuse(UNAUTHORIZED, str(exc))
            return False
        return True

    async def _refuse_not_started(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._said_not_started:
            self._said_not_started = True
            log.error("%s", NOT_STARTED)
        if scope["type"] == "websocket":
            ws = _AsgiWebSocket(receive, send)
            if await ws.handshake():
                await ws.refuse(TRY_AGAIN_LATER, "tether is not started")
            return
        await JSONResponse({"error": NOT_STARTED}, status_code=503)(scope, receive, send)


def _connection_info(
    scope: Scope,
    endpoint: str,
    path: str,
    address: str,
    document: str | None = None,
    *,
    hooks: Hooks | None = None,
) -> ConnectionInfo:
    # Decoded if a hook reads them; not even kept when no extension has a hook that is shown
    # the connection (the scope's copy is then released after the handshake under tether
    # serve: ~1 KB per idle socket).
    seen = hooks is None or any(hooks.has(name) for name in _CONNECTION_HOOKS)
    headers = RequestHeaders(scope.get("headers", []) if seen else ())
    query = scope.get("query_string", b"").decode("latin-1")
    return ConnectionInfo(endpoint, path, address, headers, query, document)


_CONNECTION_HOOKS = ("on_connect", "on_authenticate", "on_disconnect")


def route_path(scope: Scope) -> str:
    """The path below where tether is mounted: Starlette's Mount (and uvicorn's --root-path)
    keep the full path in ``path`` and the prefix in ``root_path``."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root):
        return path[len(root) :] or "/"
    return path


AuthCallback = Callable[[AuthRequest], Awaitable[Grant | None]]


class _AuthenticateHook:
    """``TetherServer(authenticate=...)``: a callback as an on_authenticate extension."""

    def __init__(self, callback: AuthCallback) -> None:
        self.on_authenticate = callback
        self.name = getattr(callback, "__qualname__", None) or repr(callback)


class NotStarted(RuntimeError):
    """A request reached a TetherServer whose ``start()`` has not run (or ``stop()`` has)."""


NOT_STARTED = (
    "tether is not started: a mounted app's lifespan does not run, so the host app must call"
    " 'await server.start()' (or 'async with server:') in its own lifespan; see the README,"
    " 'Embedding tether'"
)


def create_app(
    settings: Settings, *, store: Store | None = None, extensions: list[Any] | None = None
) -> ASGIApp:
    """The ASGI app ``tether serve`` runs: a ``TetherServer`` whose ASGI lifespan starts and
    stops it (uvicorn sends the lifespan; a host that mounts it starts it itself)."""
    return TetherServer(settings, store=store, extensions=extensions).asgi


async def _start_ai(settings: Settings, stack: contextlib.AsyncExitStack, metrics: Metrics) -> Any:
    """The AI engine on the configured provider, or None when AI is off. Returns at once: the
    model worker loads behind, and sync serves meanwhile."""
    from tether.ai.factory import build_embedder, build_engine, build_provider, build_status
    from tether.ai.suggest.scheduler import Scheduler

    provider = build_provider(settings)
    if provider is None:
        log.info("AI suggestions are off (--ai-provider none)")
        return None
    await stack.enter_async_context(provider)
    scheduler = await stack.enter_async_context(
        Scheduler(
            settings.ai_queue_limit,
            per_owner=settings.ai_queue_per_connection,
            per_subject=settings.ai_queue_per_subject,
            on_refusal=_RefusalLog(metrics).refused,
        )
    )
    embedder, embed_worker = build_embedder(settings, provider)
    if embed_worker is not None:
        await stack.enter_async_context(embed_worker)
    engine = build_engine(settings, provider, scheduler, metrics.registry, embedder)
    engine.status = build_status(provider, embed_worker)
    stack.callback(engine.close)
    log.info("AI suggestions from the %r provider", provider.name)
    return engine


class _RefusalLog:
    """Counts AI quota refusals in /metrics and logs them once per connection (a bounded set
    of keys: a flood of refusals costs no log lines and no memory)."""

    _MAX_KEYS = 1024

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics
        self._seen: set[int] = set()

    def refused(self, limit: str, owner: object) -> None:
        self._metrics.limit_refusals.labels(limit).inc()
        key = id(owner)
        if key in self._seen:
            return
        if len(self._seen) >= self._MAX_KEYS:
            self._seen.clear()
        self._seen.add(key)
        log.warning("a connection reached its AI quota (%s); further refusals not logged", limit)


def _client_address(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0])[:64] if client else "unknown"


def _cors(allowed: OriginPolicy) -> list[Middleware]:
    """CORS for the listed origins only (none: no CORS headers at all, the browser default)."""
    if not allowed.allowed_origins:
        return []
    return [
        Middleware(
            CORSMiddleware,
            allow_origins=sorted(allowed.allowed_origins),
            allow_methods=["GET", "POST", "PUT", "DELETE"],
            allow_headers=["authorization", "content-type"],
            max_age=600,
        )
    ]


def _origin_refusal(scope: Scope, origins: OriginPolicy) -> str | None:
    headers = {k.lower(): v for k, v in scope.get("headers", []) if k.lower() in _ORIGIN_HEADERS}
    host, origin = headers.get(b"host"), headers.get(b"origin")
    return origins.refusal(
        host.decode("latin-1") if host is not None else None,
        origin.decode("latin-1") if origin is not None else None,
    )


_ORIGIN_HEADERS = (b"host", b"origin")
_MAX_LOGGED_ORIGINS = 256


def _log_refusal_once(seen: set[str], scope: Scope, reason: str) -> None:
    headers = dict(scope.get("headers", []))
    # Cut to 200 characters: at most 256 short keys, whatever headers a client sends.
    raw = headers.get(b"origin", b"") + b" " + headers.get(b"host", b"")
    key = raw.decode("latin-1")[:200]
    if key in seen or len(seen) >= _MAX_LOGGED_ORIGINS:
        return
    seen.add(key)
    log.warning("refused a request from origin/host %r: %s", key, reason)


async def _read_body(request: Request, limit: int) -> bytes:
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ValueError("request body too large")
        chunks.append(chunk)
    return b"".join(chunks)


async def _sse(
    engine: Any,
    suggestion: Suggest,
    text: str,
    session: str,
    cold: bool,
    owner: object,
    subject: str | None,
) -> AsyncIterator[str]:
    """The suggestion's messages as SSE ``data:`` lines; a client that leaves cancels it."""
    from tether.ai.suggest.http_path import stream_http_suggestion

    messages: asyncio.Queue[str | None] = asyncio.Queue()
    task = asyncio.ensure_future(
        stream_http_suggestion(
            engine,
            suggestion,
            text=text,
            session=session,
            cold=cold,
            send=messages.put_nowait,
            owner=owner,
            subject=subject,
        )
    )
    task.add_done_callback(lambda _t: messages.put_nowait(None))
    try:
        while (message := await messages.get()) is not None:
            yield f"data: {message}\n\n"
    finally:
        task.cancel()


def _static_route() -> Route | Mount:
    if WEB_DIST.is_dir():
        return Mount("/static", StaticFiles(directory=WEB_DIST), name="static")

    async def missing(request: Request) -> Response:
        return JSONResponse({"error": "the web bundle is not built (web/dist)"}, status_code=404)

    return Route("/static/{path:path}", missing)


def _base(request: Request) -> str:
    """Where tether is mounted ("" at the root, "/collab" under a mount): every URL a page
    uses starts with it."""
    return str(request.scope.get("root_path", "")).rstrip("/")


def _page(title: str, bundle: str, config: dict[str, Any], base: str = "") -> Response:
    """An HTML page with its Content-Security-Policy: scripts only from this server (and the
    one inline config script, by a nonce fresh per response), images only from this server or
    data: (a CSS ``url()`` smuggled into a style cannot make the browser fetch elsewhere), no
    plugins, no framing, no <base>. Inline styles stay allowed: CodeMirror and y-codemirror set
    style attributes (remote carets' colours), which is why presence colours are checked on
    the server (protocol.presence) and in the editor. ``no-referrer``: a ``?token=`` in the
    page's URL is never sent to another site."""
    nonce = secrets.token_urlsafe(16)
    policy = "; ".join(
        (
            "default-src 'self'",
            f"script-src 'self' 'nonce-{nonce}'",
            "style-src 'self' 'unsafe-inline'",
            "img-src 'self' data:",
            "connect-src 'self'",  # CSP 3: 'self' covers ws:/wss: to this host as well
            "font-src 'self'",
            "object-src 'none'",
            "base-uri 'none'",
            "form-action 'self'",
            "frame-ancestors 'none'",
        )
    )
    headers = {
        "Content-Security-Policy": policy,
        "Referrer-Policy": "no-referrer",
        "X-Content-Type-Options": "nosniff",
    }
    return HTMLResponse(_shell(title, bundle, config, nonce, base), headers=headers)


def _shell(title: str, bundle: str, config: dict[str, Any], nonce: str, base: str = "") -> str:
    """The HTML page the browser bundle mounts into; config is JSON that cannot end the script."""
    data = json.dumps(config).replace("<", "\\u003c")
    static = html.escape(base + "/static/" + bundle, quote=True)
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title>"
        f'<link rel=icon type="image/svg+xml" href="{html.escape(base + FAVICON_PATH)}">'
        f'<link rel=stylesheet href="{static}.css"></head>'
        f'<body><div id="app"></div><script nonce="{nonce}">window.TETHER = {data};</script>'
        f'<script type=module src="{static}.js"></script></body></html>'
    )


def _metrics_refusal(request: Request, token: str) -> tuple[int, str] | None:
    """Why this request may not read /metrics (status, reason), or None: load, usage and
    refusal counts are for the operator, not for whoever can reach the port."""
    if token:
        header = request.headers.get("authorization", "")
        given = header[7:] if header.lower().startswith("bearer ") else ""
        if hmac.compare_digest(given.encode(), token.encode()):
            return None
        return 401, "/metrics needs the metrics token (--metrics-token)"
    host = request.client.host if request.client is not None else ""
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if loopback:
        return None
    return 403, "/metrics answers loopback clients only (or set --metrics-token)"


def _unauthorized() -> Response:
    return JSONResponse({"error": "missing, invalid or expired token"}, status_code=401)

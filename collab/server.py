"""The tether server: composes the parts (store, rooms, cluster, AI, hooks) and runs them, and
routes each ASGI scope to the part that serves it. The only module that builds the Starlette
app; each endpoint lives with its concern (``connection.sockets``, ``http``,
``transport.http_stream``).
"""

from __future__ import annotations

import contextlib
import logging
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from prometheus_client import ProcessCollector
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from tether.protocol.sessions.server_session import QueueBudget

from .auth.tokens import Authenticator, Grant
from .cluster.node import Cluster, build_store
from .config import Settings
from .connection.admission import Admission, client_address
from .connection.ai_off import AiOff
from .connection.mux import serving
from .connection.server_context import ServerContext, valid_document_name
from .connection.sockets import SocketEndpoints
from .hooks import AuthRequest, Hooks
from .http.documents import DocumentsApi
from .http.pages import Pages
from .http.request_auth import RequestAuth
from .http.status_endpoints import StatusEndpoints
from .http.suggest import SuggestEndpoint
from .http.web_extras import FAVICON_PATH, favicon, openapi
from .http.webhooks import WebhookExtension
from .rooms.direct import DirectConnection
from .rooms.manager import RoomManager
from .rooms.presence_claims import ClaimRegistry
from .rooms.renders import Renders
from .rooms.room_settings import RoomSettings
from .runtime.host_logging import install as bridge_logs_to_host
from .runtime.limits import AiQuotaLog
from .runtime.log_redaction import install as redact_tokens_in_logs
from .runtime.loop_watch import LoopWatch, done, note
from .runtime.pools import Pools, PoolSizes, installed
from .runtime.sync_metrics import Metrics
from .storage.store import StorageError, Store
from .transport.asgi_socket import AsgiWebSocket
from .transport.http_stream.endpoints import HttpTransport
from .transport.send_budget import SendBudget

log = logging.getLogger("tether")


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
        # The host's own check first: it decides before the extensions' on_authenticate.
        first = [] if authenticate is None else [_AuthenticateHook(authenticate)]
        self.hooks = Hooks([*first, *(extensions or ())])
        self.metrics = Metrics()
        ProcessCollector(registry=self.metrics.registry)
        self.authenticator = Authenticator.from_settings(settings)
        # Renders kept per document state, shared by REST, versions and webhooks.
        self.renders = Renders(settings.render_cache_bytes, self.metrics)
        self.store: Store | None = None
        self.rooms: RoomManager | None = None
        self.ai: Any = None  # ai.engine.AiEngine when suggestions are on
        self.context: ServerContext | None = None
        self.cluster: Cluster | None = None
        self._given_store = store
        self._stack: contextlib.AsyncExitStack | None = None
        self._said_not_started = False
        self.admission = Admission(settings, self.metrics)
        self.requests = RequestAuth(self.hooks, self.metrics, lambda: self.ctx)
        self.sockets = SocketEndpoints(self.admission, self.hooks, self.metrics, lambda: self.ctx)
        # The HTTP fallback for /ws (the same frames, connection logic, auth and limits).
        self.http_transport = HttpTransport(
            settings,
            self.metrics,
            self.requests.session_grant,
            connect=self.requests.session_connect,
            disconnect=self.hooks.on_disconnect,
        )
        self.http_app = Starlette(
            routes=self.routes(), lifespan=self._lifespan, middleware=self.admission.middleware()
        )
        self.asgi: ASGIApp = self  # the object is the ASGI app; the name reads well in mounts

    # ---- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the store, the room manager and the AI engine (its model loads behind)."""
        if self._stack is not None:
            raise RuntimeError("this TetherServer is already started")
        settings = self.settings
        # Inside a host app whose server configured only its own loggers, tether's lines go
        # to that server's handlers (under tether serve the root is configured: no-op).
        bridge_logs_to_host()
        if settings.auth == "none":
            log.warning(
                "AUTH IS OFF (--auth none): anyone who reaches this port "
                "can read and edit every document"
            )
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        # Whatever ASGI server runs us has configured its logging by now: tokens in request
        # paths (an access log's /yjs/doc?token=...) are blanked in its handlers too.
        redact_tokens_in_logs()
        stack = contextlib.AsyncExitStack()
        await stack.__aenter__()
        try:
            watch = LoopWatch(self.metrics.loop_lag, until_serving=True)
            await stack.enter_async_context(watch)
            # The identity provider's keys load behind start-up: a JWKS that is down costs
            # the tokens that need it, not the server.
            self.authenticator.start()
            stack.push_async_callback(self.authenticator.aclose)
            # Threads per concern (imports, renders, loads, updates), not the default executor.
            pools = stack.enter_context(installed(Pools(PoolSizes.from_settings(settings))))
            self.metrics.watch_pools(pools)
            built = build_store(settings, self.metrics, self._given_store)
            backend = await stack.enter_async_context(built.store)
            rooms = self._room_manager(backend)
            stack.push_async_callback(rooms.close)
            # Scale-out (--bus): fan-out across nodes and backfill; a no-op on one node.
            self.cluster = await stack.enter_async_context(
                Cluster(settings, built, rooms, self.metrics)
            )
            for extension in self.cluster.extensions():
                self._extend(stack, extension)
            engine = await self._start_ai(stack)
            self._extend(stack, engine if engine is not None else AiOff())
            webhooks = WebhookExtension.from_settings(settings, self.metrics, self.renders)
            if webhooks is not None:
                self.hooks.add(webhooks)
                stack.push_async_callback(webhooks.aclose)
                stack.callback(self.hooks.remove, webhooks)
            budget = QueueBudget(settings.max_queued_bytes_before_auth_total)
            send_budget = SendBudget(
                settings.send_bytes_total, stalled_after=min(10.0, settings.send_timeout / 2)
            )
            self.metrics.watch_send_budget(send_budget)
            self.metrics.watch_store(backend)
            self.store, self.rooms, self.ai = backend, rooms, engine
            self.context = ServerContext(
                settings,
                self.authenticator,
                rooms,
                self.hooks,
                self.metrics,
                backend,
                budget,
                send_budget,
            )
            await stack.enter_async_context(
                self.http_transport.running(serving(self.context, "http"))
            )
            watch.serving()
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

    async def _lifespan_events(self, receive: Receive, send: Send) -> None:
        """The ASGI lifespan (``tether serve``; a host's mount never sees one). A start that
        fails for a reason of the outside world (a database that does not answer, a file that
        cannot be opened) is one line for the operator, not a traceback."""
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.start()
                except (StorageError, OSError) as exc:
                    log.debug("start-up failed", exc_info=True)
                    failure = f"tether could not start: {exc}"
                    await send({"type": "lifespan.startup.failed", "message": failure})
                    return
                except BaseException:
                    failure = traceback.format_exc()
                    await send({"type": "lifespan.startup.failed", "message": failure})
                    raise
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                try:
                    await self.stop()
                except BaseException:
                    failure = traceback.format_exc()
                    await send({"type": "lifespan.shutdown.failed", "message": failure})
                    raise
                await send({"type": "lifespan.shutdown.complete"})
                return

    def _extend(self, stack: contextlib.AsyncExitStack, extension: Any) -> None:
        """A built-in extension, in the hooks until the server stops."""
        self.hooks.add(extension)
        stack.callback(self.hooks.remove, extension)

    async def _start_ai(self, stack: contextlib.AsyncExitStack) -> Any:
        # Imported here: with AI off, the server never loads the AI pipeline's modules.
        from tether.ai.factory import start_engine

        quota = AiQuotaLog(self.metrics)
        return await start_engine(self.settings, stack, self.metrics.registry, quota.refused)

    def _room_manager(self, backend: Store) -> RoomManager:
        settings = self.settings
        return RoomManager(
            backend,
            hooks=self.hooks,
            metrics=self.metrics,
            settings=RoomSettings.from_settings(settings),
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
        """A server-side connection to ``name`` (see ``collab.rooms.direct``): the document
        stays loaded until the block ends; edits carry ``origin`` and are durable when they
        return."""
        if not valid_document_name(name):
            raise ValueError("invalid document name")
        async with self.ctx.rooms.hold(name) as room:
            connection = DirectConnection(room, origin, self.renders)
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

    # ---- routing ------------------------------------------------------------------------------

    def routes(self) -> list[Route | Mount]:
        context, engine = (lambda: self.ctx), (lambda: self.ai)
        grant_of = self.requests.bearer_grant
        return [
            *Pages(self.settings).routes(),
            *StatusEndpoints(
                self.metrics, self.settings.metrics_token, context, engine, lambda: self.cluster
            ).routes(),
            *SuggestEndpoint(self.settings, self.authenticator, grant_of, context, engine).routes(),
            *DocumentsApi(context, grant_of, self.renders).routes(),
            Route("/openapi.json", openapi),
            Route("/favicon.ico", favicon),
            Route(FAVICON_PATH, favicon),
            *self.http_transport.routes(),
        ]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan_events(receive, send)
            return
        if scope["type"] not in ("http", "websocket"):
            await self.http_app(scope, receive, send)
            return
        if self.context is None:
            await self._refuse_not_started(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await self.sockets(scope, receive, send)
            return
        note(f"HTTP {scope.get('method', '')} {scope['path'][:80]}", "", client_address(scope))
        try:
            refusal = self.admission.http_refusal(scope)
            if refusal is not None:
                await JSONResponse({"error": refusal}, status_code=403)(scope, receive, send)
                return
            await self.http_app(scope, receive, send)
        finally:
            done()

    async def _refuse_not_started(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._said_not_started:
            self._said_not_started = True
            log.error("%s", NOT_STARTED)
        if scope["type"] == "websocket":
            ws = AsgiWebSocket(receive, send)
            if await ws.handshake():
                await ws.deny(503, "tether is not started", scope)
            return
        await JSONResponse({"error": NOT_STARTED}, status_code=503)(scope, receive, send)


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
    " 'await server.start()' (or 'async with server:') in its own lifespan; see docs/embedding.md,"
    " 'Mounting it in a host app'"
)


def create_app(
    settings: Settings, *, store: Store | None = None, extensions: list[Any] | None = None
) -> ASGIApp:
    """The ASGI app ``tether serve`` runs: a ``TetherServer`` whose ASGI lifespan starts and
    stops it (uvicorn sends the lifespan; a host that mounts it starts it itself)."""
    return TetherServer(settings, store=store, extensions=extensions).asgi

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
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from prometheus_client import ProcessCollector
from pycrdt import Text
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from tether.protocol.ai import InvalidAiMessage, Suggest, decode_client_message
from tether.protocol.errors import DecodeError
from tether.protocol.session import QueueBudget

from .address_limit import ConnectionsPerAddress
from .auth import Authenticator, AuthError, Grant
from .close_codes import TRY_AGAIN_LATER, UNAUTHORIZED
from .config import Settings
from .context import ServerContext, valid_document_name
from .hooks import Hooks
from .http_transport import HttpTransport
from .metrics import Metrics
from .mux_connection import MuxConnection
from .origins import OriginPolicy
from .presence import PresenceLimits
from .presence_claims import ClaimRegistry
from .rooms import DocumentQuarantined, RoomManager
from .sqlite_store import SQLiteStore
from .storage import Store
from .yws_connection import YwsConnection
from .yws_connection import authorize as authorize_yws

log = logging.getLogger("tether")

TEXT_NAME = "content"  # the shared Y.Text every tether editor binds to
WEB_DIST = Path(__file__).resolve().parent.parent / "web" / "dist"  # the committed bundle


class _AsgiWebSocket:
    """A raw ASGI WebSocket as the ``Transport`` the connection loops speak.

    The sync hot path sends one message per editor per edit; going straight to the server's
    ASGI ``send`` skips Starlette's per-message wrappers (measured in ``tether bench sync``).
    """

    __slots__ = ("_receive", "_send")

    def __init__(self, receive: Receive, send: Send) -> None:
        self._receive = receive
        self._send = send

    async def handshake(self) -> bool:
        """Consume ``websocket.connect``; False if the client left first."""
        message = await self._receive()
        return message["type"] == "websocket.connect"

    async def accept(self) -> None:
        await self._send({"type": "websocket.accept"})

    async def refuse(self, code: int, reason: str) -> None:
        """Close before accepting: the client sees the HTTP upgrade fail with 403."""
        await self._send({"type": "websocket.close", "code": code, "reason": reason})

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


def create_app(
    settings: Settings, *, store: Store | None = None, extensions: list[Any] | None = None
) -> ASGIApp:
    settings.validate()
    hooks = Hooks(extensions)
    metrics = Metrics()
    ProcessCollector(registry=metrics.registry)
    authenticator = Authenticator(settings.auth, settings.jwt_secret)
    holder: dict[str, Any] = {}
    http_transport = HttpTransport(settings, metrics, authenticator)  # the fallback for /ws

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if settings.auth == "none":
            log.warning(
                "AUTH IS OFF (--auth none): anyone who reaches this port "
                "can read and edit every document"
            )
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        async with contextlib.AsyncExitStack() as stack:
            backend = await stack.enter_async_context(
                store or SQLiteStore(settings.data_dir / "tether.db")
            )
            rooms = RoomManager(
                backend,
                hooks=hooks,
                metrics=metrics,
                unload_grace=settings.unload_grace,
                compact_threshold=settings.compact_threshold,
                max_nesting_depth=settings.max_nesting_depth,
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
            stack.push_async_callback(rooms.close)
            engine = await _start_ai(settings, stack, metrics)
            if engine is not None:
                hooks.add(engine)
            budget = QueueBudget(settings.max_queued_bytes_before_auth_total)
            holder["ctx"] = ServerContext(
                settings, authenticator, rooms, hooks, metrics, backend, budget
            )
            holder["ai"] = engine
            app.state.ctx = holder["ctx"]
            await stack.enter_async_context(http_transport.running(holder["ctx"]))
            yield

    async def ws_endpoint(ws: _AsgiWebSocket) -> None:
        await ws.accept()
        await MuxConnection(ws, holder["ctx"]).run()

    async def yjs_endpoint(ws: _AsgiWebSocket, name: str, query: str) -> None:
        ctx = holder["ctx"]
        token = parse_qs(query).get("token", [""])[0]
        try:
            grant = authorize_yws(ctx, name, token)
        except AuthError as exc:
            ctx.metrics.auth_failures.labels(str(exc)).inc()
            await ws.refuse(UNAUTHORIZED, str(exc))
            return
        await ws.accept()
        await YwsConnection(ws, ctx, name, grant).run()

    async def health(request: Request) -> Response:
        ctx = holder["ctx"]
        engine = holder.get("ai")
        if engine is not None and engine.status is not None:
            ai = engine.status.current.health()
        else:
            ai = {"state": "off", "reason": "AI suggestions are off (--ai-provider none)"}
        return JSONResponse({"status": "ok", "documents_loaded": len(ctx.rooms.rooms), "ai": ai})

    async def metrics_endpoint(request: Request) -> Response:
        refusal = _metrics_refusal(request, settings.metrics_token)
        if refusal is not None:
            metrics.limit_refusals.labels("metrics_access").inc()
            status, reason = refusal
            return JSONResponse({"error": reason}, status_code=status)
        return Response(metrics.render(), media_type="text/plain; version=0.0.4")

    async def list_documents(request: Request) -> Response:
        grant = _bearer_grant(request, authenticator)
        if grant is None:
            return _unauthorized()
        ctx = holder["ctx"]
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

    async def get_document(request: Request) -> Response:
        grant = _bearer_grant(request, authenticator)
        name = request.path_params["name"]
        if grant is None:
            return _unauthorized()
        if not valid_document_name(name):  # the rule /ws applies: no NUL, bounded length
            return JSONResponse({"error": "invalid document name"}, status_code=400)
        if not grant.allows(name):
            return JSONResponse({"error": "document not allowed by token"}, status_code=403)
        try:
            async with holder["ctx"].rooms.visit(name) as room:
                text = str(room.doc.get(TEXT_NAME, type=Text))
                peers = len(room.peers)
        except DocumentQuarantined as exc:
            return JSONResponse({"error": str(exc)}, status_code=409)
        return JSONResponse({"name": name, "text": text, "peers": peers})

    async def suggest_endpoint(request: Request) -> Response:
        grant = _bearer_grant(request, authenticator)
        if grant is None:
            return _unauthorized()
        engine = holder.get("ai")
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
            async with holder["ctx"].rooms.visit(document) as room:
                text = str(room.doc.get(TEXT_NAME, type=Text))
            session = f"{document}\0http:{grant.subject}"
            cold = bool(body.get("baseline"))
        else:
            text, session, cold = uploaded, "http-baseline", True
        return StreamingResponse(
            _sse(engine, suggestion, text, session, cold, owner, subject),
            media_type="text/event-stream",
        )

    async def index(request: Request) -> Response:
        return _page("tether", "index", {"auth": settings.auth})

    async def editor(request: Request) -> Response:
        name = request.path_params["name"]
        if not valid_document_name(name):
            return JSONResponse({"error": "invalid document name"}, status_code=400)
        config = {"auth": settings.auth, "document": name, "ai": settings.ai_provider != "none"}
        return _page(f"{name} · tether", "editor", config)

    routes = [
        Route("/", index),
        Route("/d/{name:path}", editor),
        _static_route(),
        Route("/health", health),
        Route("/metrics", metrics_endpoint),
        Route("/api/documents", list_documents),
        Route("/api/suggest", suggest_endpoint, methods=["POST"]),
        Route("/api/documents/{name:path}", get_document),
        *http_transport.routes(),
    ]
    http_app = Starlette(routes=routes, lifespan=lifespan)
    origins = OriginPolicy.from_settings(settings.allowed_origins, auth=settings.auth)
    refused_origins: set[str] = set()  # logged once each (bounded)
    addresses = ConnectionsPerAddress(settings.max_connections_per_address)
    crowded: set[str] = set()  # addresses logged for the limit (bounded like refused_origins)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await http_app(scope, receive, send)  # lifespan
            return
        refusal = _origin_refusal(scope, origins)
        if scope["type"] == "http":
            if refusal is not None:
                metrics.origin_refusals.labels("http").inc()
                _log_refusal_once(refused_origins, scope, refusal)
                await JSONResponse({"error": refusal}, status_code=403)(scope, receive, send)
                return
            await http_app(scope, receive, send)
            return
        ws = _AsgiWebSocket(receive, send)
        if not await ws.handshake():
            return
        if refusal is not None:
            metrics.origin_refusals.labels("websocket").inc()
            _log_refusal_once(refused_origins, scope, refusal)
            await ws.refuse(1008, refusal)  # the upgrade fails with 403: no document byte
            return
        address = _client_address(scope)
        if not addresses.enter(address):
            metrics.limit_refusals.labels("max_connections_per_address").inc()
            if address not in crowded and len(crowded) < _MAX_LOGGED_ORIGINS:
                crowded.add(address)
                log.warning("refused a socket: too many open from %s", address)
            await ws.refuse(TRY_AGAIN_LATER, "too many connections from this address")
            return
        try:
            path: str = scope["path"]
            if path == "/ws":
                await ws_endpoint(ws)
            elif path.startswith("/yjs/"):
                query = scope.get("query_string", b"").decode("latin-1")
                # scope["path"] is percent-decoded already (once): decoding again made "rep%2541"
                # the document "repA", under a token checked for that name.
                await yjs_endpoint(ws, path[len("/yjs/") :], query)
            else:
                await ws.refuse(1008, "no such endpoint")
        finally:
            addresses.leave(address)

    return app


async def _start_ai(settings: Settings, stack: contextlib.AsyncExitStack, metrics: Metrics) -> Any:
    """The AI engine on the configured provider, or None when AI is off. Returns at once: the
    model worker loads behind, and sync serves meanwhile."""
    from tether.ai.factory import build_embedder, build_engine, build_provider, build_status
    from tether.ai.scheduler import Scheduler

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
    from tether.ai.http_path import stream_http_suggestion

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


def _page(title: str, bundle: str, config: dict[str, Any]) -> Response:
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
    return HTMLResponse(_shell(title, bundle, config, nonce), headers=headers)


def _shell(title: str, bundle: str, config: dict[str, Any], nonce: str) -> str:
    """The HTML page the browser bundle mounts into; config is JSON that cannot end the script."""
    data = json.dumps(config).replace("<", "\\u003c")
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title>"
        f'<link rel=stylesheet href="/static/{bundle}.css"></head>'
        f'<body><div id="app"></div><script nonce="{nonce}">window.TETHER = {data};</script>'
        f'<script type=module src="/static/{bundle}.js"></script></body></html>'
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


def _bearer_grant(request: Request, authenticator: Authenticator) -> Grant | None:
    header = request.headers.get("authorization", "")
    token = header[7:] if header.lower().startswith("bearer ") else ""
    try:
        return authenticator.verify(token)
    except AuthError:
        return None


def _unauthorized() -> Response:
    return JSONResponse({"error": "missing, invalid or expired token"}, status_code=401)

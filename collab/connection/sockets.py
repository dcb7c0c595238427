"""The two WebSocket endpoints: a socket is admitted (origin, per-address limit), shown to the
``on_connect`` hooks, then served by path: ``/ws`` (the multiplexed protocol) or ``/yjs/{doc}``
(plain y-websocket). Knows no Starlette routing; the server hands it every WebSocket scope.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from urllib.parse import parse_qs

from starlette.types import Receive, Scope, Send

from ..auth.tokens import AuthError
from ..hooks import ConnectionInfo, Hooks
from ..runtime.sync_metrics import Metrics, label_value
from ..transport.asgi_socket import AsgiWebSocket
from .admission import Admission, connection_info, route_path
from .mux import MuxConnection
from .server_context import ServerContext
from .yws import YwsConnection
from .yws import authorize as authorize_yws

log = logging.getLogger("tether")


class SocketEndpoints:
    def __init__(
        self,
        admission: Admission,
        hooks: Hooks,
        metrics: Metrics,
        context: Callable[[], ServerContext],
    ) -> None:
        self._admission = admission
        self._hooks = hooks
        self._metrics = metrics
        self._context = context  # read per socket: a server may be restarted

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Origin, per-address limit, then the endpoint by path."""
        ws = AsgiWebSocket(receive, send, scope)
        if not await ws.handshake():
            return
        address = await self._admission.admit_socket(ws, scope)
        if address is None:
            return
        opened = time.monotonic()
        path = route_path(scope)
        log.debug("socket opened from %s on %s", address, path)
        try:
            if path == "/ws":
                connection = connection_info(scope, "ws", path, address, hooks=self._hooks)
                if await self._connected(ws, connection, scope):
                    try:
                        await self._serve_mux(ws, connection)
                    finally:
                        await self._hooks.on_disconnect(connection)
            elif path.startswith("/yjs/"):
                query = scope.get("query_string", b"").decode("latin-1")
                # scope["path"] is percent-decoded already (once): decoding again made "rep%2541"
                # the document "repA", under a token checked for that name.
                name = path[len("/yjs/") :]
                connection = connection_info(scope, "yjs", path, address, name, hooks=self._hooks)
                if await self._connected(ws, connection, scope):
                    try:
                        await self._serve_yjs(ws, name, query, connection, scope)
                    finally:
                        await self._hooks.on_disconnect(connection)
            else:
                await ws.deny(404, "no such endpoint (tether's are /ws and /yjs/<document>)", scope)
        finally:
            self._admission.leave(address)
            log.debug(
                "socket from %s on %s ended after %.1f s", address, path, time.monotonic() - opened
            )

    async def _connected(self, ws: AsgiWebSocket, connection: ConnectionInfo, scope: Scope) -> bool:
        """The on_connect hooks; False (and refused: 403 on the upgrade) if one refused."""
        try:
            await self._hooks.on_connect(connection)
        except AuthError as exc:
            self._metrics.auth_failures.labels("on_connect").inc()
            await ws.deny(403, str(exc), scope)
            return False
        return True

    async def _serve_mux(self, ws: AsgiWebSocket, connection: ConnectionInfo) -> None:
        await ws.accept()
        await MuxConnection(ws, self._context(), connection).run()

    async def _serve_yjs(
        self, ws: AsgiWebSocket, name: str, query: str, connection: ConnectionInfo, scope: Scope
    ) -> None:
        ctx = self._context()
        token = parse_qs(query).get("token", [""])[0]
        try:
            grant = await authorize_yws(ctx, name, token, connection)
        except AuthError as exc:
            ctx.metrics.auth_failures.labels(label_value(str(exc))).inc()
            await ws.deny(403, str(exc), scope)  # 403 with the reason: y-websocket retries 44xx
            return
        await ws.accept()
        await YwsConnection(ws, ctx, name, grant).run()

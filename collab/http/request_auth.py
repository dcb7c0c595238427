"""Tokens that arrive over HTTP (REST, the suggestion endpoint, the HTTP fallback's sessions),
checked as a socket's are: the ``on_authenticate`` hooks first, then the built-in check.
Reads a request's headers and address only; knows no routes.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.requests import Request

from ..auth.tokens import AuthError, Grant
from ..connection.admission import connection_info, route_path
from ..connection.grants import authenticate
from ..connection.server_context import ServerContext
from ..hooks import ConnectionInfo, Hooks
from ..runtime.sync_metrics import Metrics


class RequestAuth:
    """``context`` is read per request (a server may restart)."""

    def __init__(self, hooks: Hooks, metrics: Metrics, context: Callable[[], ServerContext]):
        self._hooks = hooks
        self._metrics = metrics
        self._context = context

    async def bearer_grant(self, request: Request, document: str | None) -> Grant | None:
        """The grant of the request's token, ``Bearer <token>`` or the bare token (hooks first), or
        None: answer 401."""
        header = request.headers.get("authorization", "").strip()
        if header.lower().startswith("bearer "):
            token = header[7:].strip()
        else:  # the bare token, as scripts written for Tiptap Cloud send it; never "Basic ..."
            token = header if " " not in header else ""
        try:
            return await authenticate(self._context(), token, document, _info(request), check=False)
        except AuthError:
            return None

    async def session_connect(self, request: Request) -> ConnectionInfo:
        """An HTTP fallback session arriving: the on_connect hooks, as for a /ws socket (an
        AuthError refuses it, counted as /ws counts it)."""
        info = _info(request)
        try:
            await self._hooks.on_connect(info)
        except AuthError:
            self._metrics.auth_failures.labels("on_connect").inc()
            raise
        return info

    async def session_grant(
        self, token: str, request: Request, info: ConnectionInfo | None = None
    ) -> Grant:
        """An HTTP fallback session's token, checked as REST's are (hooks first)."""
        if info is None:
            info = _info(request)
        return await authenticate(self._context(), token, None, info, check=False)


def _info(request: Request) -> ConnectionInfo:
    address = request.client.host if request.client else "unknown"
    return connection_info(request.scope, "http", route_path(request.scope), address)

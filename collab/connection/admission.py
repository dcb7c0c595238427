"""Who may reach the server at all, before any token or document: the ``Origin``/``Host``
checks (with CORS for listed sites calling the REST API), and the open sockets per client
address. Knows no documents, tokens or rooms; refusals are counted and logged once each.
"""

from __future__ import annotations

import logging

from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.types import Scope

from ..config import Settings
from ..hooks import ConnectionInfo, Hooks
from ..runtime.sync_metrics import Metrics
from ..transport.address_limit import ConnectionsPerAddress
from ..transport.asgi_socket import AsgiWebSocket
from .origins import OriginPolicy, normalise_origin
from .request_headers import RequestHeaders

log = logging.getLogger("tether")

_ORIGIN_HEADERS = (b"host", b"origin")
_MAX_LOGGED = 256  # origins and addresses logged for a refusal, at most (each once)
_CONNECTION_HOOKS = ("on_connect", "on_authenticate", "on_disconnect")


class Admission:
    def __init__(self, settings: Settings, metrics: Metrics) -> None:
        self._metrics = metrics
        self.origins = OriginPolicy.from_settings(settings.allowed_origins, auth=settings.auth)
        self.cors_origins = OriginPolicy.from_settings(settings.cors_origins, auth="jwt")
        self.addresses = ConnectionsPerAddress(settings.max_connections_per_address)
        self._refused_origins: set[str] = set()  # logged once each (bounded)
        self._crowded: set[str] = set()  # addresses logged for the limit (bounded likewise)

    async def admit_socket(self, ws: AsgiWebSocket, scope: Scope) -> str | None:
        """The client's address, counted as one more open socket from it; None if the socket
        was refused (a foreign origin, or too many open from that address)."""
        refusal = _origin_refusal(scope, self.origins)
        if refusal is not None:
            self._metrics.origin_refusals.labels("websocket").inc()
            self._log_refusal_once(scope, refusal)
            # The upgrade fails with 403 and the reason (no document byte): a client can tell
            # it from a host app's router refusing a path it does not route (403, no reason).
            await ws.deny(403, refusal, scope)
            return None
        address = client_address(scope)
        if not self.addresses.enter(address):
            self._metrics.limit_refusals.labels("max_connections_per_address").inc()
            if address not in self._crowded and len(self._crowded) < _MAX_LOGGED:
                self._crowded.add(address)
                log.warning("refused a socket: too many open from %s", address)
            await ws.deny(403, "too many connections from this address", scope)
            return None
        return address

    def leave(self, address: str) -> None:
        """A socket ``admit_socket`` let in has ended."""
        self.addresses.leave(address)

    def http_refusal(self, scope: Scope) -> str | None:
        """Why this HTTP request is refused (counted and logged), or None."""
        refusal = _origin_refusal(scope, self.origins)
        if refusal is not None and self._cors_allows(scope):
            refusal = None  # a listed site calling the REST API (CORS answers its preflight)
        if refusal is not None:
            self._metrics.origin_refusals.labels("http").inc()
            self._log_refusal_once(scope, refusal)
        return refusal

    def middleware(self) -> list[Middleware]:
        """CORS for the listed origins only (none: no CORS headers at all, the browser
        default)."""
        allowed = self.cors_origins.allowed_origins
        if not allowed:
            return []
        return [
            Middleware(
                CORSMiddleware,
                allow_origins=sorted(allowed),
                allow_methods=["GET", "POST", "PUT", "DELETE"],
                allow_headers=["authorization", "content-type"],
                max_age=600,
            )
        ]

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

    def _log_refusal_once(self, scope: Scope, reason: str) -> None:
        seen = self._refused_origins
        headers = dict(scope.get("headers", []))
        # Cut to 200 characters: at most 256 short keys, whatever headers a client sends.
        raw = headers.get(b"origin", b"") + b" " + headers.get(b"host", b"")
        key = raw.decode("latin-1")[:200]
        if key in seen or len(seen) >= _MAX_LOGGED:
            return
        seen.add(key)
        log.warning("refused a request from origin/host %r: %s", key, reason)


def _origin_refusal(scope: Scope, origins: OriginPolicy) -> str | None:
    headers = {k.lower(): v for k, v in scope.get("headers", []) if k.lower() in _ORIGIN_HEADERS}
    host, origin = headers.get(b"host"), headers.get(b"origin")
    return origins.refusal(
        host.decode("latin-1") if host is not None else None,
        origin.decode("latin-1") if origin is not None else None,
    )


def connection_info(
    scope: Scope,
    endpoint: str,
    path: str,
    address: str,
    document: str | None = None,
    *,
    hooks: Hooks | None = None,
) -> ConnectionInfo:
    """A socket or request as hooks see it."""
    # Decoded if a hook reads them; not even kept when no extension has a hook that is shown
    # the connection (the scope's copy is then released after the handshake under tether
    # serve: ~1 KB per idle socket).
    seen = hooks is None or any(hooks.has(name) for name in _CONNECTION_HOOKS)
    headers = RequestHeaders(scope.get("headers", []) if seen else ())
    query = scope.get("query_string", b"").decode("latin-1")
    return ConnectionInfo(endpoint, path, address, headers, query, document)


def route_path(scope: Scope) -> str:
    """The path below where tether is mounted: Starlette's Mount (and uvicorn's --root-path)
    keep the full path in ``path`` and the prefix in ``root_path``."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root):
        return path[len(root) :] or "/"
    return path


def client_address(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0])[:64] if client else "unknown"

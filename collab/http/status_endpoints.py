"""``/health`` (for load balancers and editors asking whether AI works), ``/ready`` (the same,
503 while degraded: for health checks) and ``/metrics`` (Prometheus, for the operator only).
Knows the parts it reports on, not how they work.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..connection.server_context import ServerContext
from ..runtime.sync_metrics import Metrics
from ..version import VERSION


class StatusEndpoints:
    """``context``, ``engine`` and ``cluster`` are read per request (a server may restart)."""

    def __init__(
        self,
        metrics: Metrics,
        metrics_token: str,
        context: Callable[[], ServerContext],
        engine: Callable[[], Any],
        cluster: Callable[[], Any],
    ) -> None:
        self._metrics = metrics
        self._metrics_token = metrics_token
        self._context = context
        self._engine = engine
        self._cluster = cluster

    def routes(self) -> list[Route]:
        return [
            Route("/health", self.health),
            Route("/ready", self.ready),
            Route("/metrics", self.metrics),
        ]

    async def health(self, request: Request) -> Response:
        """Everyone sees the states; the operator (loopback, or the metrics token, as for
        /metrics) also sees the details: the model file, the worker's pid, queue and error
        texts, which tell an outsider about the machine. Always 200 while the process
        answers (liveness); /ready is the same body, 503 while degraded."""
        return JSONResponse(await self._health(request))

    async def ready(self, request: Request) -> Response:
        """/health for a readiness probe or a container's health check: 503 while degraded
        (the database unavailable, edits waiting unacknowledged; or AI degraded)."""
        body = await self._health(request)
        return JSONResponse(body, status_code=200 if body["status"] == "ok" else 503)

    async def _health(self, request: Request) -> dict[str, Any]:
        ctx = self._context()
        engine = self._engine()
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
        cluster = self._cluster()
        if cluster is not None:
            body.update(await cluster.health())  # node, database, bus
            if body["database"]["state"] != "ok":
                body["status"] = "degraded"  # edits wait, unacked, until the database returns
        if ai["state"] == "degraded":
            body["status"] = "degraded"  # sync serves; suggestions do not
        if _metrics_refusal(request, self._metrics_token) is not None:
            body = _public(body)
        return body

    async def metrics(self, request: Request) -> Response:
        refusal = _metrics_refusal(request, self._metrics_token)
        if refusal is not None:
            self._metrics.limit_refusals.labels("metrics_access").inc()
            status, reason = refusal
            return JSONResponse({"error": reason}, status_code=status)
        return Response(self._metrics.render(), media_type="text/plain; version=0.0.4")


_PUBLIC_AI = ("state", "reason")
_PUBLIC_PART = ("state", "backend")


def _public(body: dict[str, Any]) -> dict[str, Any]:
    """/health as anyone may read it: states only."""
    public = dict(body)
    public["ai"] = {k: v for k, v in body["ai"].items() if k in _PUBLIC_AI}
    for part in ("database", "bus"):
        if isinstance(body.get(part), dict):
            public[part] = {k: v for k, v in body[part].items() if k in _PUBLIC_PART}
    public.pop("node", None)
    return public


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

"""The HTTP fallback's sessions: created, found by id, run, expired and dropped, all bounded.

Knows nothing of Starlette, nor of what runs on a session: the server hands ``running`` the
``/ws`` connection logic (``collab.connection.mux``), which each session runs on an
``HttpSession``; this module bounds how many there are (in all and per client address) and how
many replay bytes they hold together, and ends those whose client went away: no down
request attached for ``http_session_timeout`` seconds. A session the server closed stays long
enough for its client to read the close (or that timeout), then goes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from prometheus_client import Counter, Gauge

from ...config import Settings
from ...hooks import ConnectionInfo
from ...runtime import gc_policy
from ...runtime.limits import refuse
from ...runtime.sync_metrics import Metrics
from ..address_limit import ConnectionsPerAddress
from .http_session import ByteBudget, HttpSession

log = logging.getLogger(__name__)

_MAX_LOGGED = 256  # addresses logged for a refusal, bounded like the origin log

# Runs the connection logic on one session until it ends (the server's ``MuxConnection``).
ServeSession = Callable[[HttpSession, ConnectionInfo | None], Awaitable[None]]


class SessionRefused(Exception):
    """No session for this request; ``status`` is the HTTP answer, ``limit`` the bound."""

    def __init__(self, status: int, limit: str, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.limit = limit


class HttpSessions:
    def __init__(
        self,
        settings: Settings,
        metrics: Metrics,
        on_end: Callable[[ConnectionInfo], Awaitable[None]] | None = None,
    ) -> None:
        self._settings = settings
        self._on_end = on_end  # the on_disconnect hooks, as when a /ws socket closes
        self._metrics = metrics
        self._sessions: dict[str, HttpSession] = {}
        self._per_address = ConnectionsPerAddress(settings.http_sessions_per_address)
        self._budget = ByteBudget(settings.http_replay_bytes_total)
        self._tasks: set[asyncio.Task[None]] = set()
        self._logged: set[tuple[str, str]] = set()
        self._full_logged: dict[str, set[str]] = {}
        self._serve: ServeSession | None = None
        r = metrics.registry
        self.open_gauge = Gauge("tether_http_sessions", "Open HTTP fallback sessions", registry=r)
        self.replay_gauge = Gauge(
            "tether_http_replay_bytes",
            "Bytes held for HTTP sessions' resumption, all sessions together",
            registry=r,
        )
        self.replay_gauge.set_function(lambda: self._budget.used)
        self.expired = Counter(
            "tether_http_sessions_expired_total",
            "HTTP sessions ended because their client stopped asking (no down request)",
            registry=r,
        )
        self.down_requests = Counter(
            "tether_http_down_requests_total",
            "Down requests on HTTP sessions, by mode (stream or poll)",
            ["mode"],
            registry=r,
        )

    @contextlib.asynccontextmanager
    async def running(self, serve: ServeSession) -> AsyncIterator[HttpSessions]:
        self._serve = serve
        sweeper = asyncio.ensure_future(self._sweep())
        try:
            yield self
        finally:
            sweeper.cancel()
            for session in list(self._sessions.values()):
                session.end()
            for task in list(self._tasks):
                task.cancel()
            for task in list(self._tasks):
                with contextlib.suppress(BaseException):
                    await task

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: str) -> HttpSession | None:
        return self._sessions.get(session_id)

    def create(self, address: str, connection: ConnectionInfo | None = None) -> HttpSession:
        s = self._settings
        if len(self._sessions) >= s.http_sessions:
            self._refused("http_sessions", address)
            raise SessionRefused(503, "http_sessions", "server busy: too many HTTP sessions")
        if not self._per_address.enter(address):
            self._refused("http_sessions_per_address", address)
            raise SessionRefused(
                429, "http_sessions_per_address", "too many HTTP sessions from this address"
            )
        session = HttpSession(
            secrets.token_urlsafe(24),  # 192 bits: the session id is a bearer secret
            address,
            replay_bytes=s.http_replay_bytes,
            budget=self._budget,
            on_full=self._replay_full,
        )
        self._sessions[session.id] = session
        gc_policy.started()
        self.open_gauge.set(len(self._sessions))
        assert self._serve is not None, "sessions are created only while the server runs"
        task = asyncio.ensure_future(self._run(session, self._serve, connection))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return session

    async def _run(
        self, session: HttpSession, serve: ServeSession, connection: ConnectionInfo | None
    ) -> None:
        try:
            await serve(session, connection)
        finally:
            session.finished.set()
            if connection is not None and self._on_end is not None:
                await self._on_end(connection)
        try:
            if session.close_reason is not None and not session.ended:
                # Let the client read why (its stream or next poll) before the id is forgotten.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._settings.http_session_timeout):
                        await session.close_delivered.wait()
        finally:
            self._drop(session)

    def _drop(self, session: HttpSession) -> None:
        if self._sessions.pop(session.id, None) is not None:
            self._per_address.leave(session.address)
            gc_policy.finished()
        session.end()
        session.release()
        self._full_logged.pop(session.id, None)
        self.open_gauge.set(len(self._sessions))

    async def _sweep(self) -> None:
        timeout = self._settings.http_session_timeout
        tick = max(0.05, min(timeout / 4, 1.0))
        while True:
            await asyncio.sleep(tick)
            now = time.monotonic()
            for session in list(self._sessions.values()):
                idle = session.idle_since
                if idle is not None and now - idle > timeout and not session.ended:
                    self.expired.inc()
                    session.end()  # the connection sees its peer leave and detaches

    def _refused(self, limit: str, address: str) -> None:
        self._metrics.limit_refusals.labels(limit).inc()
        key = (limit, address)
        if key not in self._logged and len(self._logged) < _MAX_LOGGED:
            self._logged.add(key)
            log.warning("refused an HTTP session from %s (limit %s)", address, limit)

    def _replay_full(self, session: HttpSession, limit: str) -> None:
        logged = self._full_logged.setdefault(session.id, set())
        refuse(
            self._metrics,
            limit,
            logged,
            f"HTTP session from {session.address}",
            "its client has not acknowledged what it was sent; sending waits",
        )

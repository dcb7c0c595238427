"""The HTTP fallback's endpoints, for editors whose proxies refuse or kill WebSockets.

Carries the same binary frames as ``/ws`` (``protocol.wire.http_wire`` says how) to the same
connection logic (``sessions`` runs a ``MuxConnection`` per session), so auth,
several documents, presence, acks, limits and AI suggestions work unchanged:

    POST   /http/session   Authorization: Bearer <token>   → 201 {"session": id, ...}
    POST   /http/send      Tether-Session, Tether-Ack; body: a batch of frames → 204
    GET    /http/events    Tether-Session, Last-Event-ID; ?mode=poll for long polling
    DELETE /http/session   Tether-Session → 204 (the client leaves)

The token and the session id travel in headers only: URLs end up in access logs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tether.protocol.protocol_errors import DecodeError, FrameTooLarge
from tether.protocol.wire.http_wire import (
    ACK_HEADER,
    BATCH_TYPE,
    HEARTBEAT,
    OPENED,
    RESUME_HEADER,
    SESSION_HEADER,
    STREAM_TYPE,
    batch_slices,
    encode_close,
    encode_event,
)

from ...auth.tokens import AuthError, Grant
from ...config import Settings
from ...hooks import ConnectionInfo
from ...http.numbers import parse_counter
from ...runtime.sync_metrics import Metrics, label_value
from .http_session import HttpSession
from .replay_buffer import ResumeGap
from .sessions import HttpSessions, ServeSession, SessionRefused

log = logging.getLogger(__name__)

# Frames of one batch handled per turn of the event loop.
_FRAMES_PER_SLICE = 256
# A batch's varUint lengths around frames: a body may exceed max_frame_bytes by this much.
_BATCH_OVERHEAD = 64 * 1024
# The close code /ws would send (``collab.connection.close_codes``), for a resume that cannot be.
_POLICY_VIOLATION = 1008
_STREAM_HEADERS = {
    # Buffering proxies (nginx honours X-Accel-Buffering) and caches must pass it through as
    # it comes, untransformed (no compression: a compressor waits for a block to fill).
    "Cache-Control": "no-store, no-transform",
    "X-Accel-Buffering": "no",
}


# Checks a session's bearer token as the server checks any other (raises AuthError).
VerifyToken = Callable[[str, Request, ConnectionInfo | None], Awaitable[Grant]]
# A session arriving, as a socket arrives on /ws: runs the on_connect hooks (raises AuthError
# to refuse); what they filled in ``context`` reaches the session's on_authenticate calls.
Connect = Callable[[Request], Awaitable[ConnectionInfo]]
Disconnect = Callable[[ConnectionInfo], Awaitable[None]]


class HttpTransport:
    def __init__(
        self,
        settings: Settings,
        metrics: Metrics,
        verify: VerifyToken,
        connect: Connect | None = None,
        disconnect: Disconnect | None = None,
    ) -> None:
        self._settings = settings
        self._metrics = metrics
        # The server's own check (on_authenticate hooks, then JWT): a session is refused
        # exactly when a /ws channel with that token would be.
        self._verify = verify
        self._connect = connect
        self._disconnect = disconnect
        self.sessions = HttpSessions(settings, metrics, on_end=disconnect)

    def running(self, serve: ServeSession) -> contextlib.AbstractAsyncContextManager[Any]:
        """Sessions are taken while this runs; ``serve`` runs the connection logic on each."""
        return self.sessions.running(serve)

    def routes(self) -> list[Route]:
        return [
            Route("/http/session", self._session, methods=["POST", "DELETE"]),
            Route("/http/send", self._send, methods=["POST"]),
            Route("/http/events", self._events, methods=["GET"]),
        ]

    # ---- endpoints ---------------------------------------------------------------------------

    async def _session(self, request: Request) -> Response:
        if request.method == "DELETE":
            session = self._find(request)
            if session is not None:
                session.end()
            return Response(status_code=204)
        if "token" in request.query_params:
            return _error(400, "the token goes in the Authorization header, never in the URL")
        header = request.headers.get("authorization", "")
        token = header[7:] if header.lower().startswith("bearer ") else ""
        connection: ConnectionInfo | None = None
        if self._connect is not None:
            try:
                connection = await self._connect(request)
            except AuthError as exc:  # as /ws refuses the upgrade: 403 with the reason
                return _error(403, str(exc))
        try:
            await self._verify(token, request, connection)
        except AuthError as exc:
            self._metrics.auth_failures.labels(label_value(str(exc))).inc()
            await self._ended(connection)
            return _error(401, str(exc))
        address = request.client.host[:64] if request.client else "unknown"
        try:
            session = self.sessions.create(address, connection)
        except SessionRefused as exc:
            await self._ended(connection)
            headers = {"Retry-After": "5"}
            return JSONResponse({"error": str(exc)}, status_code=exc.status, headers=headers)
        s = self._settings
        body = {
            "session": session.id,
            "replay_bytes": s.http_replay_bytes,
            "heartbeat": s.http_heartbeat,
            "poll_timeout": s.http_poll_timeout,
            "session_timeout": s.http_session_timeout,
        }
        return JSONResponse(body, status_code=201, headers={"Cache-Control": "no-store"})

    async def _ended(self, connection: ConnectionInfo | None) -> None:
        """on_disconnect for a session refused after on_connect let it in (hooks pair up)."""
        if connection is not None and self._disconnect is not None:
            await self._disconnect(connection)

    async def _send(self, request: Request) -> Response:
        session = self._find(request)
        if session is None:
            return _no_session()
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type != BATCH_TYPE:
            # A cross-site <form> can POST text/plain without a preflight; this type needs one.
            return _error(415, f"Content-Type must be {BATCH_TYPE}")
        ack, refusal = _counter_header(request, ACK_HEADER)
        if refusal is not None:
            return refusal
        if ack is not None:
            session.ack(ack)
        limit = self._settings.max_frame_bytes + _BATCH_OVERHEAD
        # One POST per session at a time reads its body: concurrent POSTs cannot make us hold
        # many bodies (a waiting one stays in its socket, under uvicorn's flow control).
        async with session.post_lock:
            body = await _read_body(request, limit)
            if body is None:
                delivered = await session.deliver(FrameTooLarge("batch too large"))
            else:
                delivered = await _deliver_in_slices(session, body)
        if delivered:
            return Response(status_code=204)
        return _closed(session)

    async def _events(self, request: Request) -> Response:
        session = self._find(request)
        if session is None:
            return _no_session()
        after, refusal = _counter_header(request, RESUME_HEADER)
        if refusal is not None:
            return refusal
        after = after or 0
        session.ack(after)  # the client has everything up to where it resumes
        poll = request.query_params.get("mode") == "poll"
        self.sessions.down_requests.labels("poll" if poll else "stream").inc()
        stream = session.attach()
        return StreamingResponse(
            self._down(session, stream, after, poll),
            media_type=STREAM_TYPE,
            headers=_STREAM_HEADERS,
        )

    async def _down(
        self, session: HttpSession, stream: int, after: int, poll: bool
    ) -> AsyncIterator[bytes]:
        """Events after ``after`` as they come; a poll returns at its first events or after
        ``http_poll_timeout``, a stream runs until the session closes or a newer one starts."""
        s = self._settings
        start = last_write = time.monotonic()
        sent = after
        try:
            if not poll:
                yield OPENED
            while session.current(stream):
                try:
                    pending = session.replay.after(sent)
                except ResumeGap:
                    yield encode_close(_POLICY_VIOLATION, "cannot resume: those frames are gone")
                    session.end()
                    return
                if pending:
                    yield b"".join(encode_event(seq, frame) for seq, frame in pending)
                    sent, last_write = pending[-1][0], time.monotonic()
                    if poll:
                        return
                    continue
                if session.close_reason is not None:
                    yield encode_close(*session.close_reason)
                    session.close_delivered.set()
                    return
                now = time.monotonic()
                if poll:
                    wait = s.http_poll_timeout - (now - start)
                    if wait <= 0:
                        return
                else:
                    wait = s.http_heartbeat - (now - last_write)
                    if wait <= 0:
                        yield HEARTBEAT
                        last_write = now
                        continue
                await session.changed.wait(wait)
        finally:
            session.detach()

    def _find(self, request: Request) -> HttpSession | None:
        return self.sessions.get(request.headers.get(SESSION_HEADER, ""))


async def _deliver_in_slices(session: HttpSession, body: bytes) -> bool:
    """A batch's frames to the connection a slice at a time, each handled before the next is
    decoded: the event loop turns between slices (one POST of 8 million one-byte frames held it
    14 s, issue 26 finding 5) and memory holds one slice, not the whole batch. Frames before a
    malformed rest are handled, as a socket handles the frames before a broken one."""
    slices = batch_slices(body, _FRAMES_PER_SLICE)
    while True:
        try:
            frames = next(slices, None)
        except DecodeError as exc:
            return await session.deliver(exc)
        if frames is None:
            return True
        if not await session.deliver(frames):
            return False
        await asyncio.sleep(0)  # the receive loop drained the slice without yielding


def _counter_header(request: Request, name: str) -> tuple[int | None, Response | None]:
    """The header's number (None when absent), or a 400 for one that is not a counter."""
    raw = request.headers.get(name)
    if raw is None:
        return None, None
    number = parse_counter(raw)  # ids are counters: ASCII digits, no sign, no "²"
    if number is None:
        return None, _error(400, f"{name} must be a message number")
    return number, None


async def _read_body(request: Request, limit: int) -> bytes | None:
    """The body, or None once it passes ``limit`` (the rest is not read into memory)."""
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _error(status: int, reason: str) -> Response:
    return JSONResponse({"error": reason}, status_code=status)


def _no_session() -> Response:
    # The client starts a new session, as it would open a new socket.
    return _error(404, "no such session (expired, closed or never created)")


def _closed(session: HttpSession) -> Response:
    code, reason = session.close_reason or (1000, "session ended")
    return JSONResponse({"error": "session closed", "code": code, "reason": reason}, 410)

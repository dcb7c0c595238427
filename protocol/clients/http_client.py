"""The client side of the HTTP fallback as a message link (the I/O half; the wire shape is in
``protocol.wire.http_wire``): iterate it for frames, ``send`` frames, ``close`` it, as with a
WebSocket, so ``protocol.clients.tether_client`` serves either the same way.

Down it holds one event stream and resumes it from the last id it has when it drops; when the
stream's first byte does not arrive within ``first_byte_timeout`` (a proxy that buffers it) it
switches to long polls for the rest of the session. Up it POSTs whatever is queued as one batch,
one POST at a time, and acknowledges what it received (on each POST, and on its own when enough
is unacknowledged). A failure it cannot resume from (the session is gone, a POST failed midway:
resending could apply frames twice) ends the link with ``ConnectionError``; the caller starts a
new session and resyncs by state vector, as after a dropped socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import ssl
from collections.abc import AsyncIterator
from typing import Any

import httpx

from ..wire.http_wire import (
    ACK_HEADER,
    BATCH_TYPE,
    MAX_BATCH_FRAMES,
    RESUME_HEADER,
    SESSION_HEADER,
    CloseEvent,
    EventParser,
    FrameEvent,
    encode_batch,
)

log = logging.getLogger(__name__)

ACK_INTERVAL = 1.0  # acknowledge at least this often while something is unacknowledged
RESUME_ATTEMPTS = 3  # a stream that drops this many times in a row without an event: give up


class SessionRefusedError(ConnectionError):
    """The server would not create a session (``status``: 401 for the token, 429/503 busy)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"HTTP session refused ({status}): {reason}")
        self.status = status


class _SessionLost(Exception):
    """The server no longer knows the session: nothing to resume."""


class HttpLink:
    def __init__(
        self,
        base_url: str,
        session: dict[str, Any],
        client: httpx.AsyncClient,
        *,
        first_byte_timeout: float,
        poll: bool,
    ) -> None:
        self.base_url = base_url
        self._client = client
        self._session_id: str = session["session"]
        self._ack_bytes = max(1, int(session.get("replay_bytes", 1 << 20)) // 4)
        self._first_byte_timeout = first_byte_timeout
        self.polling = poll  # True once streams proved buffered (or when asked for)
        self._pending: list[bytes] = []
        self._wake = asyncio.Event()
        self._last_seq = 0  # the newest event received
        self._acked = 0  # the newest id we told the server about
        self._unacked_bytes = 0
        self._failure: BaseException | None = None
        self._closing = False
        self.close_code: int | None = None
        self.close_reason: str = ""
        self.streams = 0  # down requests made (for tests and tooling)
        self._writer = asyncio.ensure_future(self._write())

    @classmethod
    async def open(
        cls,
        base_url: str,
        token: str,
        *,
        timeout: float = 10.0,
        first_byte_timeout: float = 3.0,
        poll: bool = False,
    ) -> HttpLink:
        """Create a session (the token in the Authorization header, never the URL)."""
        client = httpx.AsyncClient(
            base_url=base_url,
            verify=_tls_context(),
            timeout=httpx.Timeout(timeout, read=None),  # a stream or poll may wait long
            headers={"Accept-Encoding": "identity"},
        )
        try:
            reply = await client.post(
                "/http/session", headers={"Authorization": f"Bearer {token}"}, timeout=timeout
            )
            if reply.status_code != 201:
                raise SessionRefusedError(reply.status_code, _error_of(reply))
            session = reply.json()
        except BaseException as exc:
            await client.aclose()
            if isinstance(exc, httpx.HTTPError):
                raise ConnectionError(f"HTTP session not created: {exc!r}") from exc
            raise
        return cls(base_url, session, client, first_byte_timeout=first_byte_timeout, poll=poll)

    # ---- the WebSocket-like surface ----------------------------------------------------------

    async def send(self, frame: bytes) -> None:
        if self._failure is not None:
            raise ConnectionError("HTTP link failed") from self._failure
        self._pending.append(frame)
        self._wake.set()

    async def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        self._writer.cancel()
        with contextlib.suppress(BaseException):
            await self._writer
        with contextlib.suppress(Exception):
            await self._client.delete("/http/session", headers=self._headers(), timeout=2.0)
        await self._client.aclose()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        """Frames from the server until it closes the session (``close_code`` is then set);
        ``ConnectionError`` when the session is lost."""
        drops = 0
        try:
            while not self._closing:
                if self._failure is not None:
                    raise ConnectionError("HTTP link failed") from self._failure
                parser = EventParser()
                got_event = False
                try:
                    async for event in self._down(parser):
                        got_event = True
                        if isinstance(event, CloseEvent):
                            self.close_code, self.close_reason = event.code, event.reason
                            return
                        if event.seq <= self._last_seq:
                            continue  # already had it (a resume overlapped)
                        self._last_seq = event.seq
                        self._unacked_bytes += len(event.frame)
                        if self._unacked_bytes >= self._ack_bytes:
                            self._wake.set()
                        yield event.frame
                except _SessionLost as exc:
                    raise ConnectionError(str(exc)) from None
                except (httpx.HTTPError, OSError) as exc:
                    if self._closing:
                        return
                    log.debug("HTTP down request failed: %r", exc)
                    drops = 0 if got_event else drops + 1
                    if drops >= RESUME_ATTEMPTS:
                        raise ConnectionError(f"HTTP stream keeps failing: {exc!r}") from exc
                    continue
                drops = 0 if (got_event or self.polling) else drops + 1
                if drops >= RESUME_ATTEMPTS:
                    raise ConnectionError("HTTP stream keeps ending at once")
        finally:
            if not self._closing and self.close_code is None:
                self.close_code = 1006

    # ---- internals -----------------------------------------------------------------------------

    def _headers(self, **extra: str) -> dict[str, str]:
        return {SESSION_HEADER: self._session_id, **extra}

    async def _down(self, parser: EventParser) -> AsyncIterator[FrameEvent | CloseEvent]:
        """One down request's events (a stream, or one long poll)."""
        self.streams += 1
        resume = str(self._last_seq)
        if self._last_seq > self._acked:
            self._acked = self._last_seq  # resuming acknowledges
            self._unacked_bytes = 0
        params = {"mode": "poll"} if self.polling else None
        headers = self._headers(**{RESUME_HEADER: resume})
        request = self._client.build_request("GET", "/http/events", params=params, headers=headers)
        reply: httpx.Response | None = None
        first = b""
        try:
            # Headers and the first byte within first_byte_timeout, or the stream is being held
            # by something on the way (a buffering proxy): long polls get through those.
            async with asyncio.timeout(None if self.polling else self._first_byte_timeout):
                reply = await self._client.send(request, stream=True)
                if reply.status_code != 200:
                    await reply.aread()
                    raise _SessionLost(f"HTTP session lost ({reply.status_code})")
                chunks = reply.aiter_raw()
                if not self.polling:
                    first = await anext(chunks, b"")
        except TimeoutError:
            log.info("no first byte on the HTTP stream: switching to long polling")
            self.polling = True
            if reply is not None:
                await reply.aclose()
            return
        try:
            for event in parser.feed(first):
                yield event
            async for chunk in chunks:
                for event in parser.feed(chunk):
                    yield event
        finally:
            await reply.aclose()

    async def _write(self) -> None:
        """POST what is queued, one batch at a time, and acknowledge what arrived."""
        try:
            while True:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(ACK_INTERVAL):
                        await self._wake.wait()
                self._wake.clear()
                ack_due = self._last_seq > self._acked and not self.polling
                if not self._pending and not ack_due:
                    continue
                frames = self._pending[:MAX_BATCH_FRAMES]
                del self._pending[:MAX_BATCH_FRAMES]
                if self._pending:
                    self._wake.set()  # the rest in the next POST, at once
                acked, unacked = self._last_seq, self._unacked_bytes
                headers = self._headers(**{ACK_HEADER: str(acked), "Content-Type": BATCH_TYPE})
                reply = await self._client.post(
                    "/http/send", content=encode_batch(frames), headers=headers
                )
                self._acked = max(self._acked, acked)
                self._unacked_bytes = max(0, self._unacked_bytes - unacked)
                if reply.status_code != 204:
                    # 410: the server closed the session; its stream carries the close event,
                    # and so does the answer, which may come first (the caller judges the close).
                    if reply.status_code == 410:
                        self._closed_by_server(reply)
                    raise ConnectionError(f"HTTP send refused ({reply.status_code})")
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self._failure = exc
            # End the down request too: the link is over, the caller starts a new session.
            with contextlib.suppress(Exception):
                await self._client.aclose()

    def _closed_by_server(self, reply: httpx.Response) -> None:
        """The close a 410 names (``{"code", "reason"}``), unless the stream told it first."""
        if self.close_code is not None:
            return
        try:
            body = reply.json()
            code, reason = int(body["code"]), str(body.get("reason", ""))
        except (ValueError, KeyError, TypeError):
            return
        self.close_code, self.close_reason = code, reason


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """One verifying TLS context for every link: building one loads the CA store (~65 ms of
    CPU here), which a client per session would pay on every reconnect."""
    return ssl.create_default_context()


def _error_of(reply: httpx.Response) -> str:
    try:
        return str(reply.json().get("error", ""))
    except ValueError:
        return reply.text[:200]


def http_base_of(ws_url: str) -> str:
    """``ws://host:port/ws`` → ``http://host:port`` (the fallback lives beside /ws)."""
    scheme, sep, rest = ws_url.partition("://")
    http_scheme = {"ws": "http", "wss": "https"}.get(scheme, scheme)
    host = rest.split("/", 1)[0]
    return f"{http_scheme}{sep}{host}"

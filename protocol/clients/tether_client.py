"""A thin asyncio client over ``ClientSession``: one WebSocket, many documents, reconnects.

With ``protocol.clients.http_client``, the only I/O in the protocol package. Opens several documents
over one socket, exposes each as a pycrdt Doc, waits for "synced", awaits SyncStatus acks,
answers pings, and reconnects with jittered exponential backoff, resyncing by state vector so
offline edits survive.

``transport``: "ws" (the socket only), "http" (the HTTP fallback only, same frames), or "auto":
the socket, falling back to HTTP when the upgrade fails or the socket keeps dying soon after it
opens (a proxy that kills long-lived connections), and trying the socket again every
``ws_retry_interval`` seconds while on HTTP.

A refused write is never reported as saved. Under a read-only grant (the server's
``Authenticated`` scope "readonly") ``insert``, ``append`` and ``delete`` raise
``WriteRefusedError`` at once and change nothing. A change the server answers with SyncStatus 0
under that grant (one made before the grant was known, offline, or in the handle's Doc directly)
makes ``wait_acked()`` raise ``WriteRefusedError`` once the handle holds the server's state
again: the handle's ``doc`` is then a new Doc equal to the server's, and ``error.local_doc`` is
the Doc as this client had it, refused change included (yours, if you passed ``doc=``; it is no
longer synced, so read ``handle.doc``/``handle.text`` afresh after a refusal). Over either
transport.

Two more refusals end the same way, with the server's words as ``error.reason``. An update the
server's guard refuses (too many cuts, a table-size limit, ...) closes the whole connection
(1002, "invalid update: ..."): the client reconnects, and each document that had a write
awaiting its acknowledgement then is rolled back unless the server turns out to hold all of it
(then it resumes and nothing is raised); documents with nothing unacknowledged resume as ever.
A change over the server's ``max_frame_bytes`` revokes its document ("update too large: ..."):
the client asks for it again on the same connection, rolled back. Neither refused change is
sent again. A document refused this way ``MAX_REFUSALS_IN_ROW`` (3) times with none of its
writes applied in between is no longer synced (closed, as by ``close_document``): its waits
raise that error from then on, and ``open`` it again to resume. ``WriteRefusedError`` is a
``PermissionDeniedError``, as an oversized change's refusal was before.

    async with TetherClient("ws://127.0.0.1:8765/ws", token=token) as client:
        notes = await client.open("notes")
        notes.append("hello")
        await notes.wait_acked()
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import logging
import random
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Literal, Self

from pycrdt import Doc, Text, TransactionEvent
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from ..protocol_errors import ProtocolError
from ..sessions.client_session import (
    READONLY_REASON,
    AuthRefused,
    ClientDocument,
    ClientEvent,
    ClientSession,
    StatelessReceived,
    WriteRefused,
    is_refusal_close,
)
from ..wire.ai_messages import (
    ServerAiMessage,
    Suggest,
    SuggestionEnd,
    SuggestionError,
    decode_server_message,
)
from ..wire.messages import Stateless
from .connect_errors import ConnectionFailedError, describe
from .http_client import HttpLink, http_base_of

log = logging.getLogger(__name__)


_CONNECTION_ERRORS = (OSError, ConnectionClosed, InvalidHandshake, TimeoutError, ProtocolError)


Transport = Literal["auto", "ws", "http"]
_request_ids = itertools.count(1)
# A socket that ends abnormally this soon after opening, this many times in a row, counts as
# killed by something between us and the server: "auto" moves to HTTP.
_SHORT_LIVED = 10.0
_DEATHS_BEFORE_FALLBACK = 2


class PermissionDeniedError(Exception):
    """The server refused a document; ``str(exc)`` is its reason."""


class ClientClosedError(Exception):
    """The client was closed while waiting."""


class WriteRefusedError(PermissionDeniedError):
    """The server refused a write to ``document`` for good; ``reason`` says why (a readonly
    grant, or the server's own words: "invalid update: ...", "update too large: ...").
    From an edit method: nothing was changed (``local_doc`` is None). From ``wait_acked()``:
    the handle already holds the server's state again (a new ``doc``), and ``local_doc`` is the
    Doc as this client had it, with every change refused since the last report, so nothing
    typed is lost. ``stopped``: refused too often in a row, the document is no longer synced
    (``local_doc`` is its Doc as it was, unrolled) and every wait on the handle raises this."""

    def __init__(
        self, document: str, reason: str, local_doc: Doc | None = None, *, stopped: bool = False
    ) -> None:
        super().__init__(f"write to {document!r} refused: {reason}")
        self.document = document
        self.reason = reason
        self.local_doc = local_doc
        self.stopped = stopped


class _Changes:
    """A generation counter waiters can block on: every event wakes every waiter once."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def notify(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    async def wait_until(self, predicate: Callable[[], bool], timeout: float) -> None:
        async with asyncio.timeout(timeout):
            while not predicate():
                await self._event.wait()


class SuggestionFailedError(Exception):
    """The server answered a suggestion request with ``suggestion.error``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


def _base64(position: bytes | str | None) -> str | None:
    if isinstance(position, bytes):
        return base64.b64encode(position).decode("ascii")
    return position


class DocumentHandle:
    """One open document: its pycrdt Doc, edit helpers, and waits on sync/ack/text.

    Under a read-only grant the edit helpers raise ``WriteRefusedError``; a change the server
    refuses (readonly, its update guard, its frame limit) makes ``wait_acked()`` raise it, after
    ``doc`` was rolled back to the server's state (a new Doc: see the module's docstring)."""

    def __init__(self, client: TetherClient, state: ClientDocument) -> None:
        self._client = client
        self._state = state
        # Stateless payloads that are not answers to this handle's own suggest() calls.
        self.stateless: asyncio.Queue[str] = asyncio.Queue()
        self._suggestions: dict[str, asyncio.Queue[ServerAiMessage]] = {}
        self._subscription = state.doc.observe(self._on_transaction)
        # Refusals so far, how many of them wait_acked() has reported, and the latest one.
        self._refusals = 0
        self._reported = 0
        self._refusal: WriteRefusedError | None = None
        self._stopped: WriteRefusedError | None = None  # refused too often: no longer synced

    @property
    def name(self) -> str:
        return self._state.channel

    @property
    def doc(self) -> Doc:
        return self._state.doc

    @property
    def text(self) -> Text:
        return self._state.text

    @property
    def scope(self) -> str | None:
        return self._state.scope

    @property
    def synced(self) -> bool:
        return self._state.synced

    @property
    def state(self) -> ClientDocument:
        return self._state

    @property
    def presence(self) -> dict[int, Any]:
        return {cid: json.loads(e.state) for cid, e in self._state.presence.items()}

    def __str__(self) -> str:
        return str(self.text)

    def read(
        self, format: Literal["text", "markdown", "html"] = "text", *, fragment: str = "default"
    ) -> str:
        """The document's content whichever kind it is: its rich tree (the ``Y.XmlFragment``
        ``fragment``, as Tiptap writes it) when that holds anything, else the plain text;
        ``format`` as REST's ``?format=``."""
        from tether.collab.content.reading import read_content  # rendering only, no I/O

        content = read_content(self.doc, fragment)
        if format == "markdown":
            return content.markdown()
        if format == "html":
            return content.html()
        return content.text()

    # ---- edits (indexes in Python code points; pycrdt counts UTF-8 bytes) ----------------------

    def insert(self, index: int, value: str) -> None:
        self._check_writable()
        current = str(self.text)
        self.text.insert(len(current[:index].encode("utf-8")), value)

    def append(self, value: str) -> None:
        self._check_writable()
        self.text.insert(len(str(self.text).encode("utf-8")), value)

    def delete(self, index: int, length: int) -> None:
        self._check_writable()
        current = str(self.text)
        start = len(current[:index].encode("utf-8"))
        end = len(current[: index + length].encode("utf-8"))
        del self.text[start:end]

    def _check_writable(self) -> None:
        if self._state.readonly:
            raise WriteRefusedError(self.name, READONLY_REASON)

    def set_token(self, token: str) -> None:
        """Give this document a new token (refreshed, or another grant): the server verifies it
        at once and ``scope`` follows its answer; reconnects send it from now on."""
        self._client._send_frames(self._client._session.reauthenticate(self.name, token))

    def set_presence(self, presence: dict[str, Any] | None) -> None:
        self._client._send_frames(self._client._session.set_presence(self.name, presence))

    def send_stateless(self, payload: str) -> None:
        self._client._send_frames([Stateless(self.name, payload).encode()])

    # ---- waits -------------------------------------------------------------------------------

    async def suggest(
        self,
        pos: int | None = None,
        *,
        kind: str = "complete",
        start: int | None = None,
        end: int | None = None,
        max_tokens: int | None = None,
        timeout: float = 60.0,
        anchor: bytes | str | None = None,
        anchor_end: bytes | str | None = None,
        path: Sequence[int] | None = None,
    ) -> AsyncIterator[ServerAiMessage]:
        """Ask for a suggestion and yield the server's messages for it as they stream
        (``suggestion.start``, ``suggestion.delta``..., then ``suggestion.end``); a
        ``suggestion.error`` raises SuggestionFailedError. ``pos`` (UTF-16 units, as the wire
        counts) defaults to the end of the text; ``kind="rewrite"`` takes ``start``/``end``.
        The end's ``reason`` says why it ended; ``end.junk`` names the kind when the server's
        junk filter dropped the suggestion (reason ``junk:<kind>``; logged at info).

        On a rich-text document (a Tiptap/ProseMirror tree) the cursor is either ``anchor``, a
        Yjs relative position (bytes or base64, as ``Y.encodeRelativePosition`` or
        y-prosemirror's ``absolutePositionToRelativePosition`` make it; a rewrite's selection
        is ``anchor`` and ``anchor_end``), or ``pos`` (``start``/``end``) counted in the text at
        ``path``, the child indexes from the fragment to a ``Y.XmlText``."""
        if pos is None and kind == "complete" and anchor is None:
            if path is not None:
                raise ValueError("'path' needs 'pos'")
            pos = len(str(self.text).encode("utf-16-le")) // 2
        request_id = f"py-{next(_request_ids)}"
        answers: asyncio.Queue[ServerAiMessage] = asyncio.Queue()
        self._suggestions[request_id] = answers
        try:
            request = Suggest(
                request_id,
                kind,
                pos,
                start,
                end,
                _base64(anchor),
                max_tokens,
                _base64(anchor_end),
                tuple(path) if path is not None else None,
            )
            self.send_stateless(request.encode())
            async with asyncio.timeout(timeout):
                while True:
                    message = await answers.get()
                    if isinstance(message, SuggestionError):
                        raise SuggestionFailedError(message.code, message.message)
                    if isinstance(message, SuggestionEnd) and message.junk is not None:
                        log.info("suggestion %s dropped as junk (%s)", request_id, message.junk)
                    yield message
                    if isinstance(message, SuggestionEnd):
                        return
        finally:
            self._suggestions.pop(request_id, None)

    def _stateless(self, payload: str) -> None:
        try:
            message = decode_server_message(payload)
        except ProtocolError:
            message = None
        answers = self._suggestions.get(getattr(message, "id", None) or "")
        if message is not None and answers is not None:
            answers.put_nowait(message)
        else:
            self.stateless.put_nowait(payload)

    async def wait_synced(self, timeout: float = 10.0) -> None:
        await self.wait_for(lambda: self._state.synced, timeout)

    async def wait_acked(self, timeout: float = 10.0) -> None:
        """Until every local edit so far is acknowledged (durably stored) by the server.

        Raises ``WriteRefusedError`` if the server refused a change of this handle that no
        earlier ``wait_acked()`` reported (a SyncStatus 0 under a readonly grant, a connection
        closed for an invalid update this handle's write may have been, a change over the
        frame limit); by then the handle holds the server's state again."""
        reported = self._reported

        def acked() -> bool:
            if self._refusals > reported and self._refusal is not None:
                self._reported = self._refusals
                raise self._refusal
            return self._client.connected.is_set() and self._state.synced and self._state.all_acked

        await self.wait_for(acked, timeout)

    async def wait_text(self, expected: str | Callable[[str], bool], timeout: float = 10.0) -> str:
        check = expected if callable(expected) else (lambda text: text == expected)
        await self.wait_for(lambda: check(str(self.text)), timeout)
        return str(self.text)

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        def guarded() -> bool:
            if self._stopped is not None:
                raise self._stopped
            if self._state.refused is not None:
                raise PermissionDeniedError(self._state.refused)
            if self._client.closed:
                raise ClientClosedError("client closed")
            return predicate()

        await self._client._changes.wait_until(guarded, timeout)

    def _on_transaction(self, event: TransactionEvent) -> None:
        self._client._send_frames(self._client._session.local_update(self.name, event.update))

    def _rolled_back(self, event: WriteRefused) -> None:
        """The session swapped in the server's state: follow the new Doc, keep the refusal."""
        if event.stopped:
            log.warning("document %r: no longer synced (%s)", self.name, event.reason)
            self._detach()
            self._stopped = WriteRefusedError(
                self.name, event.reason, event.local_doc, stopped=True
            )
            return
        event.local_doc.unobserve(self._subscription)
        self._subscription = self._state.doc.observe(self._on_transaction)
        log.warning("document %r: a write was refused (%s)", self.name, event.reason)
        pending = self._refusal if self._reported < self._refusals else None
        if pending is not None and pending.local_doc is not None:
            # Not reported yet: one error, one local copy holding every refused change.
            pending.local_doc.apply_update(event.local_doc.get_update())
        else:
            self._refusal = WriteRefusedError(self.name, event.reason, event.local_doc)
        self._refusals += 1

    def _detach(self) -> None:
        self._state.doc.unobserve(self._subscription)


class TetherClient:
    def __init__(
        self,
        url: str,
        *,
        token: str = "",
        reconnect: bool = True,
        backoff_initial: float = 0.1,
        backoff_max: float = 5.0,
        open_timeout: float = 10.0,
        transport: Transport = "auto",
        http_url: str | None = None,
        first_byte_timeout: float = 3.0,
        ws_retry_interval: float = 60.0,
    ) -> None:
        if transport not in ("auto", "ws", "http"):
            raise ValueError("transport must be 'auto', 'ws' or 'http'")
        self.url = url
        self.http_url = http_url or http_base_of(url)
        self.transport = transport
        self.token = token
        self._first_byte_timeout = first_byte_timeout
        self._ws_retry_interval = ws_retry_interval
        self._ws_broken_at: float | None = None  # when "auto" last gave up on the socket
        self._ws_deaths = 0
        self._fallbacks = 0  # in a row: each doubles the wait before trying the socket again
        self.transport_in_use: str | None = None  # "ws" or "http" while connected
        self.reconnect = reconnect
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._open_timeout = open_timeout
        self._session = ClientSession()
        self._handles: dict[str, DocumentHandle] = {}
        self._outgoing: asyncio.Queue[bytes] = asyncio.Queue()
        self._changes = _Changes()
        self._runner: asyncio.Task[None] | None = None
        self._paused = asyncio.Event()
        self._paused.set()  # set = allowed to connect
        self._ws: ClientConnection | HttpLink | None = None
        self.connected = asyncio.Event()
        self.closed = False
        self.connects = 0
        self.last_close: tuple[int, str] | None = None
        self._close: tuple[int, str] | None = None  # the current connection's, once it ends
        self._refusal_closes = 0  # connections in a row the server closed for an invalid update
        # The last failed attempt per transport, until one succeeds (the error __aenter__ raises)
        self._attempt_errors: dict[str, BaseException] = {}
        self._gave_up = asyncio.Event()  # no point waiting: a permanent error, or no reconnect

    async def __aenter__(self) -> Self:
        self._runner = asyncio.ensure_future(self._run())
        connected = asyncio.ensure_future(self.connected.wait())
        gave_up = asyncio.ensure_future(self._gave_up.wait())
        try:
            await asyncio.wait(
                {connected, gave_up}, timeout=self._open_timeout, return_when="FIRST_COMPLETED"
            )
        finally:
            connected.cancel()
            gave_up.cancel()
        if not self.connected.is_set():
            error = self._connection_error()
            await self.aclose()
            raise error
        return self

    def _connection_error(self) -> ConnectionFailedError:
        """What the failed attempts say, the socket's first (it is tried first)."""
        if not self._attempt_errors:
            return ConnectionFailedError(
                f"could not connect to {self.url} within {self._open_timeout:g} s"
            )
        parts, permanent = [], True
        for kind, exc in self._attempt_errors.items():
            words, fatal = describe(exc)
            permanent = permanent and fatal
            parts.append(words if kind == "ws" else f"over HTTP: {words}")
        target = self.url if "ws" in self._attempt_errors else self.http_url
        return ConnectionFailedError(
            f"could not connect to {target}: " + "; ".join(parts), permanent=permanent
        )

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        self.closed = True
        self._changes.notify()
        if self._ws is not None:
            with contextlib.suppress(Exception):
                await self._ws.close()
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(BaseException):
                await self._runner

    async def open(
        self, name: str, *, token: str | None = None, doc: Doc | None = None, timeout: float = 10.0
    ) -> DocumentHandle:
        """Open a document and wait until it is synced; PermissionDeniedError if refused."""
        state = self._session.open(name, token if token is not None else self.token, doc)
        handle = DocumentHandle(self, state)
        self._handles[name] = handle
        if self._session.connected:
            self._send_frames(self._session.handshake(name))
        try:
            await handle.wait_synced(timeout)
        except BaseException:
            self._close_document(name)
            raise
        return handle

    async def close_document(self, name: str, *, timeout: float = 10.0) -> None:
        """Close one document (the socket and the others stay); returns once the Close has
        been handed to the connection, or at once while offline (nothing to tell)."""
        self._close_document(name)
        await self._changes.wait_until(
            lambda: self._outgoing.empty() or not self.connected.is_set() or self.closed, timeout
        )

    def _close_document(self, name: str) -> None:
        handle = self._handles.pop(name, None)
        if handle is not None:
            handle._detach()
        self._send_frames(self._session.close(name))

    def document(self, name: str) -> DocumentHandle:
        return self._handles[name]

    # ---- test and tooling controls -----------------------------------------------------------

    async def go_offline(self) -> None:
        """Drop the socket and stay offline until ``go_online`` (edits keep working locally)."""
        self._paused.clear()
        if self._ws is not None:
            await self._ws.close()
        await self._changes.wait_until(lambda: not self.connected.is_set(), 10)

    def go_online(self) -> None:
        self._paused.set()

    # ---- internals ---------------------------------------------------------------------------

    def _send_frames(self, frames: list[bytes]) -> None:
        for frame in frames:
            self._outgoing.put_nowait(frame)

    async def _run(self) -> None:
        attempt = 0
        while not self.closed:
            await self._paused.wait()
            kind = self._next_transport()
            opened_at: float | None = None
            try:
                if kind == "ws":
                    async with connect(
                        self.url, max_size=None, open_timeout=self._open_timeout
                    ) as ws:
                        attempt, opened_at = 0, time.monotonic()
                        self._attempt_errors.clear()
                        await self._serve(ws, "ws")
                else:
                    link = await HttpLink.open(
                        self.http_url,
                        self._session_token(),
                        timeout=self._open_timeout,
                        first_byte_timeout=self._first_byte_timeout,
                    )
                    try:
                        attempt, opened_at = 0, time.monotonic()
                        self._attempt_errors.clear()
                        await self._serve(link, "http")
                    finally:
                        await link.close()
            except _CONNECTION_ERRORS as exc:
                log.debug("connection lost: %r", exc)
                if opened_at is None:  # it never opened: remember why, for __aenter__
                    self._attempt_errors[kind] = exc
                    if describe(exc)[1] and self.transport != "auto":
                        self._gave_up.set()
            finally:
                self._ws = None
                self.transport_in_use = None
                close, self._close = self._close, None
                self._dispatch(self._session.disconnected(close))
                refused = close is not None and is_refusal_close(*close)
                self._refusal_closes = self._refusal_closes + 1 if refused else 0
                self.connected.clear()
                self._changes.notify()
            if kind == "ws":
                self._judge_socket(opened_at)
            if not self.reconnect or self.closed:
                self._gave_up.set()
                break
            # Refusal closes in a row back off as failed attempts do: whatever keeps causing
            # them (each document's are bounded, MAX_REFUSALS_IN_ROW) cannot make a tight loop.
            exponent = attempt + self._refusal_closes
            delay = min(self._backoff_max, self._backoff_initial * 2**exponent)
            attempt += 1
            await asyncio.sleep(delay * random.uniform(0.5, 1.5))  # jittered backoff

    def _next_transport(self) -> str:
        if self.transport != "auto":
            return self.transport
        broken = self._ws_broken_at
        if broken is not None and time.monotonic() - broken < self._retry_interval():
            return "http"
        return "ws"

    def _retry_interval(self) -> float:
        # A proxy that lets the upgrade through but kills the socket would otherwise have us
        # flap between the two every interval: each fallback in a row doubles it (to 16x).
        return self._ws_retry_interval * 2 ** min(max(self._fallbacks - 1, 0), 4)

    def _judge_socket(self, opened_at: float | None) -> None:
        """After a socket ends: did the upgrade fail, or did it die young (again)?"""
        if self.transport != "auto" or self.closed or not self._paused.is_set():
            return
        clean = self.last_close is not None and self.last_close[0] not in (1006, 1011)
        if opened_at is None:
            died = True  # the upgrade failed (refused by a proxy, or timed out)
        elif time.monotonic() - opened_at < _SHORT_LIVED and not clean:
            self._ws_deaths += 1
            died = self._ws_deaths >= _DEATHS_BEFORE_FALLBACK
        else:
            self._ws_deaths, died = 0, False
            self._fallbacks = 0  # the socket lived: it works here
        if died:
            log.info("WebSocket unavailable; falling back to HTTP")
            self._ws_broken_at = time.monotonic()
            self._ws_deaths = 0
            self._fallbacks += 1

    def _session_token(self) -> str:
        """The token that opens an HTTP session: the client's, else any open document's."""
        if self.token:
            return self.token
        return next((d.token for d in self._session.documents.values() if d.token), "")

    async def _probe_socket(self) -> None:
        """While "auto" is on HTTP: every ws_retry_interval, try a WebSocket handshake; return
        once one succeeds (the caller then drops HTTP and reconnects over the socket)."""
        while True:
            await asyncio.sleep(self._retry_interval())
            try:
                async with connect(self.url, open_timeout=self._open_timeout):
                    pass
            except _CONNECTION_ERRORS:
                self._ws_broken_at = time.monotonic()
                continue
            self._ws_broken_at = None
            return

    async def _serve(self, ws: ClientConnection | HttpLink, kind: str) -> None:
        self._ws = ws
        self.transport_in_use = kind
        self.connects += 1
        self._outgoing = asyncio.Queue()
        self._session.connected = True
        for name in list(self._session.documents):
            self._send_frames(self._session.handshake(name))
        self.connected.set()
        self._changes.notify()
        writer = asyncio.ensure_future(self._write(ws, self._outgoing))
        probe = None
        if kind == "http" and self.transport == "auto":
            probe = asyncio.ensure_future(self._probe_socket())
            probe.add_done_callback(lambda t: t.cancelled() or asyncio.ensure_future(ws.close()))
        try:
            async for data in ws:
                if isinstance(data, str):
                    raise ProtocolError("text frame from server")
                replies, events = self._session.receive(data)
                self._send_frames(replies)
                self._dispatch(events)
        finally:
            if ws.close_code is not None:
                self.last_close = self._close = (ws.close_code, ws.close_reason or "")
            for task in (writer, probe):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(BaseException):
                        await task

    async def _write(self, ws: ClientConnection | HttpLink, queue: asyncio.Queue[bytes]) -> None:
        while True:
            frame = await queue.get()
            await ws.send(frame)
            if queue.empty():
                self._changes.notify()  # close_document() waits for the queue to empty

    def _dispatch(self, events: list[ClientEvent]) -> None:
        for event in events:
            if isinstance(event, StatelessReceived):
                handle = self._handles.get(event.channel)
                if handle is not None:
                    handle._stateless(event.payload)
            elif isinstance(event, WriteRefused):
                handle = self._handles.get(event.channel)
                if handle is not None:
                    handle._rolled_back(event)
                if event.stopped:
                    self._handles.pop(event.channel, None)
            elif isinstance(event, AuthRefused):
                log.info("document %r refused: %s", event.channel, event.reason)
        if events:
            self._changes.notify()

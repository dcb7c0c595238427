"""One editor on one document over raw ``/ws`` frames, for benchmarks that must see what the
server answers to each update: its SyncStatus (applied or not) or the close code that ended the
socket. Speaks only the wire (``tether.protocol`` encoders), so it drives old checkouts too.

What others write is never applied here: an attacker's update broadcast to this editor would
cost the benchmark's own process what it costs the server, and skew what it measures.

    async with await WireEditor.open(server.ws_url, "notes", token) as editor:
        applied = await editor.send_and_wait(update, timeout=30)   # True/False, or closed
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from types import TracebackType

from pycrdt import Doc, Text
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from tether.protocol.wire.messages import (
    PING_FRAME,
    PONG_FRAME,
    AuthToken,
    PermissionDenied,
    Sync,
    SyncStatus,
    decode_frame,
)
from tether.protocol.wire.sync_payloads import SyncStep1, SyncStep2, SyncUpdate


class EditorClosed(Exception):
    """The server closed the socket (or refused the document) before answering."""

    def __init__(self, code: int | None, reason: str) -> None:
        super().__init__(f"closed {code}: {reason}" if code is not None else reason)
        self.code = code
        self.reason = reason


class WireEditor:
    """Counts the SyncStatus frames owed (one per update and per step2 reply we send) and wakes
    waiters on each one, and on the socket's end."""

    def __init__(self, ws: ClientConnection, name: str) -> None:
        self.ws = ws
        self.name = name
        self.doc = Doc()
        self.statuses: list[bool] = []
        self.owed = 0  # SyncStatus frames the server owes us
        self.synced = False
        self.denied: str | None = None
        self.closed = False
        self._changed = asyncio.Event()
        self._reader = asyncio.ensure_future(self._read())

    @classmethod
    async def open(cls, ws_url: str, name: str, token: str, timeout: float = 30.0) -> WireEditor:
        """Connected, authenticated and past the first sync of ``name``."""
        ws = await connect(ws_url, max_size=None, open_timeout=timeout, compression=None)
        editor = cls(ws, name)
        await ws.send(AuthToken(name, token, "bench").encode())
        await ws.send(Sync(name, SyncStep1(editor.doc.get_state())).encode())
        await editor._until(lambda: editor.synced, timeout)
        return editor

    @property
    def close_code(self) -> int | None:
        return self.ws.close_code if self.closed else None

    def typed(self, chunk: str) -> bytes:
        """Append to this editor's text; returns the update to send."""
        before = self.doc.get_state()
        text = self.doc.get("content", type=Text)
        text += chunk
        return self.doc.get_update(before)

    async def send_update(self, update: bytes) -> None:
        self.owed += 1
        await self.ws.send(Sync(self.name, SyncUpdate(update)).encode())

    async def acked(self, timeout: float) -> bool:
        """Once every update sent so far is answered: was the last one applied?"""
        await self._until(lambda: len(self.statuses) >= self.owed, timeout)
        return self.statuses[-1]

    async def send_and_wait(self, update: bytes, timeout: float) -> bool:
        await self.send_update(update)
        return await self.acked(timeout)

    async def _until(self, done: Callable[[], bool], timeout: float) -> None:
        async with asyncio.timeout(timeout):
            while not done():
                if self.closed or self.denied is not None:
                    raise EditorClosed(self.close_code, self.denied or self._close_reason())
                self._changed.clear()
                await self._changed.wait()

    def _close_reason(self) -> str:
        return self.ws.close_reason or "connection lost"

    async def _read(self) -> None:
        try:
            async for data in self.ws:
                if isinstance(data, bytes):
                    await self._on_frame(data)
                self._changed.set()
        except ConnectionClosed:
            pass
        finally:
            self.closed = True
            self._changed.set()

    async def _on_frame(self, data: bytes) -> None:
        if data == PING_FRAME:
            await self.ws.send(PONG_FRAME)
            return
        message = decode_frame(data)
        if isinstance(message, SyncStatus):
            self.statuses.append(message.applied)
        elif isinstance(message, PermissionDenied):
            self.denied = message.reason
        elif isinstance(message, Sync):
            await self._on_sync(message.message)

    async def _on_sync(self, sync: SyncStep1 | SyncStep2 | SyncUpdate) -> None:
        if isinstance(sync, SyncStep1):
            self.owed += 1  # our step2 reply is acknowledged like an update
            reply = self.doc.get_update(sync.state_vector)
            await self.ws.send(Sync(self.name, SyncStep2(reply)).encode())
        elif isinstance(sync, SyncStep2):
            self.synced = True

    async def aclose(self) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.ws.close(), 5)
        self._reader.cancel()
        with contextlib.suppress(BaseException):
            await self._reader

    async def __aenter__(self) -> WireEditor:
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

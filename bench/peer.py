"""One editor on one document over the multiplexed protocol, for the benchmarks that need a
handful of simple moves: open, append, a round trip, vanish. Answers pings and the server's
SyncStep1, so it stays a well-behaved peer however long it idles."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from pycrdt import Doc, Text
from websockets.asyncio.client import ClientConnection

from tether.protocol.wire.messages import PONG_FRAME, AuthToken, Sync, SyncStatus, decode_frame
from tether.protocol.wire.sync_payloads import SyncStep1, SyncStep2, SyncUpdate


class BenchPeer:
    """Appends, waits for round trips, and can vanish without a close frame."""

    def __init__(self, ws: ClientConnection, name: str) -> None:
        self.ws = ws
        self.name = name
        self.doc = Doc()
        self.text = self.doc.get("content", type=Text)
        self._got_step2 = asyncio.Event()
        self.on_update: Callable[[bytes], None] | None = None  # called as each update arrives
        self.updates_received = 0
        self.acks = 0  # SyncStatus frames received
        self._arrived = asyncio.Event()  # set on each update or ack that arrives
        self._reader = asyncio.ensure_future(self._read())

    async def open(self, token: str) -> None:
        await self.ws.send(AuthToken(self.name, token, "bench").encode())
        await self.round_trip()

    def local_append(self, chunk: str) -> bytes:
        """Append to this editor's document; returns the update to send."""
        before = self.doc.get_state()
        self.text += chunk
        return self.doc.get_update(before)

    async def send_update(self, update: bytes) -> None:
        await self.ws.send(Sync(self.name, SyncUpdate(update)).encode())

    async def append(self, chunk: str) -> None:
        await self.send_update(self.local_append(chunk))

    async def round_trip(self, timeout: float = 300.0) -> None:
        """Returns once the server answered a step1 sent after everything so far."""
        self._got_step2.clear()
        await self.ws.send(Sync(self.name, SyncStep1(self.doc.get_state())).encode())
        await asyncio.wait_for(self._got_step2.wait(), timeout)

    async def _read(self) -> None:
        try:
            async for data in self.ws:
                if isinstance(data, bytes):
                    await self._on_frame(data)
        except Exception:  # closed under us (the server went away, or vanish()): just stop
            return

    async def wait_for(self, updates: int = 0, acks: int = 0, timeout: float = 300.0) -> None:
        """Returns once this many updates (from others) and acks have arrived in all."""
        async with asyncio.timeout(timeout):
            while self.updates_received < updates or self.acks < acks:
                self._arrived.clear()
                await self._arrived.wait()

    async def _on_frame(self, data: bytes) -> None:
        if data == b"\x09":
            await self.ws.send(PONG_FRAME)
            return
        message = decode_frame(data)
        if isinstance(message, SyncStatus):
            self.acks += 1
            self._arrived.set()
            return
        if not isinstance(message, Sync):
            return
        sync = message.message
        if isinstance(sync, SyncStep2):
            self.doc.apply_update(sync.update)
            self._got_step2.set()
        elif isinstance(sync, SyncUpdate):
            if self.on_update is not None:
                self.on_update(sync.update)
            self.doc.apply_update(sync.update)
            self.updates_received += 1
            self._arrived.set()
        elif isinstance(sync, SyncStep1):
            reply = self.doc.get_update(sync.state_vector)
            await self.ws.send(Sync(self.name, SyncStep2(reply)).encode())

    async def close(self) -> None:
        self._reader.cancel()
        await self.ws.close()

    def vanish(self) -> None:
        """Drop the TCP connection without a close frame, as a phone going out of range does."""
        self._reader.cancel()
        self.ws.transport.abort()

    def go_silent(self) -> None:
        """Stop reading and writing but keep the socket: to the server, a peer that vanished
        without any FIN or RST (its kernel still acknowledges, so buffers do not fill)."""
        self._reader.cancel()
        self.ws.transport.pause_reading()

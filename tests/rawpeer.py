"""A raw ``/ws`` and ``/yjs/{doc}`` test peer: websockets + pycrdt + ``protocol`` encoders.

Tests drive the wire directly with it (no ``protocol.clients.tether_client``), so they see every
frame the server sends: Auth replies, SyncStatus, awareness, Ping, and the close code. A reader task
decodes frames, answers the server's step1 with our diff, applies step2/updates to a pycrdt
``Doc`` per channel, and wakes waiters; nothing sleeps.

    async with MuxPeer.connect(server.ws_url) as peer:
        doc = await peer.open("notes", token)        # waits for the first step2
        await doc.append("hi 👋")
        await doc.wait_acked()
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from pycrdt import Doc, Text
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from tether.protocol.wire.messages import (
    PING_FRAME,
    PONG_FRAME,
    Authenticated,
    AuthToken,
    Awareness,
    Close,
    Message,
    PermissionDenied,
    Ping,
    Pong,
    Stateless,
    Sync,
    SyncStatus,
    decode_frame,
)
from tether.protocol.wire.sync_payloads import (
    AwarenessEntry,
    SyncStep1,
    SyncStep2,
    SyncUpdate,
    decode_awareness,
    encode_awareness,
)
from tether.protocol.wire.yws_frames import YAwareness, YPermissionDenied, YSync, decode_yws_frame

TEXT = "content"


class Watched:
    """State plus one condition: every change wakes every ``until`` waiter."""

    def __init__(self) -> None:
        self._changed = asyncio.Condition()

    async def changed(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def until(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        async with self._changed:
            while not predicate():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), remaining)


@dataclass(eq=False)
class RawDoc:
    """One channel (document) of a ``MuxPeer``, or the single document of a ``YwsPeer``."""

    peer: MuxPeer | YwsPeer
    channel: str
    doc: Doc = field(default_factory=Doc)
    scope: str | None = None
    denied: str | None = None
    synced: bool = False  # the server's step2 arrived
    step2s: int = 0
    sent_updates: int = 0
    statuses: list[bool] = field(default_factory=list)
    frames: list[Message] = field(default_factory=list)  # every channel frame, in order
    awareness: dict[int, str] = field(default_factory=dict)  # client id → state JSON
    stateless: list[str] = field(default_factory=list)
    closed_reason: str | None = None

    @property
    def text(self) -> Text:
        return self.doc.get(TEXT, type=Text)

    def __str__(self) -> str:
        return str(self.text)

    def edit(self, change: Callable[[Text], None]) -> bytes:
        """Apply a local change and return its Yjs update."""
        before = self.doc.get_state()
        change(self.text)
        return self.doc.get_update(before)

    async def send_update(self, update: bytes) -> None:
        self.sent_updates += 1
        await self.peer.send_sync(self.channel, SyncUpdate(update))

    async def append(self, s: str) -> None:
        def change(text: Text) -> None:
            text += s

        await self.send_update(self.edit(change))

    async def insert(self, byte_index: int, s: str) -> None:
        await self.send_update(self.edit(lambda text: text.insert(byte_index, s)))

    async def set_awareness(self, state: dict[str, Any] | None, clock: int = 1) -> None:
        body = json.dumps(state) if state is not None else "null"
        update = encode_awareness([AwarenessEntry(self.doc.client_id, clock, body)])
        await self.peer.send_awareness(self.channel, update)

    async def wait(
        self, predicate: Callable[[], bool], timeout: float = 10.0, what: str = ""
    ) -> None:
        await self.peer.watch.until(predicate, timeout, what or f"a condition on {self.channel}")

    async def wait_synced(self, timeout: float = 10.0) -> None:
        await self.wait(lambda: self.synced or self.denied is not None, timeout, "sync")
        if self.denied is not None:
            raise PermissionError(f"{self.channel}: {self.denied}")

    async def wait_acked(self, timeout: float = 10.0) -> None:
        """Every update we sent has its SyncStatus (applied or not)."""
        await self.wait(
            lambda: len(self.statuses) >= self.sent_updates,
            timeout,
            f"{self.sent_updates} acks on {self.channel} (have {len(self.statuses)})",
        )

    async def wait_text(self, expected: str | Callable[[str], bool], timeout: float = 10.0) -> None:
        check = (lambda t: t == expected) if isinstance(expected, str) else expected
        try:
            await self.wait(lambda: check(str(self)), timeout, f"text of {self.channel}")
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}: text is {str(self)!r}, wanted {expected!r}") from None

    def apply(self, update: bytes) -> None:
        self.doc.apply_update(update)


class _PeerBase:
    ws: ClientConnection
    watch: Watched
    close_code: int | None
    close_reason: str
    _reader: asyncio.Task[None] | None

    def _start(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.watch = Watched()
        self.close_code = None
        self.close_reason = ""
        self.closed = False
        self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        try:
            async for data in self.ws:
                assert isinstance(data, bytes), f"server sent a text frame: {data!r}"
                await self._on_frame(data)
                await self.watch.changed()
        except ConnectionClosed:
            pass
        finally:
            rcvd = self.ws.protocol.close_rcvd
            self.close_code = rcvd.code if rcvd is not None else 1006
            self.close_reason = rcvd.reason if rcvd is not None else ""
            self.closed = True
            await self.watch.changed()

    async def _on_frame(self, data: bytes) -> None:
        raise NotImplementedError

    async def wait_closed(self, timeout: float = 10.0) -> int:
        """The close code the server sent (1006 if the TCP connection just dropped)."""
        await self.watch.until(lambda: self.closed, timeout, "the server to close the socket")
        assert self.close_code is not None
        return self.close_code

    async def aclose(self) -> None:
        with contextlib.suppress(Exception):
            await self.ws.close()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(BaseException):
                await self._reader

    async def __aenter__(self) -> _PeerBase:
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


class MuxPeer(_PeerBase):
    """A raw multiplexed client: several documents over one socket."""

    def __init__(self, ws: ClientConnection, *, answer_pings: bool = True) -> None:
        self.docs: dict[str, RawDoc] = {}
        self.answer_pings = answer_pings
        self.pings = 0
        self.pongs = 0
        self.unknown: list[Message] = []
        self._start(ws)

    @classmethod
    async def connect(cls, url: str, *, answer_pings: bool = True, **kwargs: Any) -> MuxPeer:
        ws = await connect(url, max_size=None, open_timeout=10, **kwargs)
        return cls(ws, answer_pings=answer_pings)

    async def __aenter__(self) -> MuxPeer:
        return self

    def doc(self, channel: str) -> RawDoc:
        if channel not in self.docs:
            self.docs[channel] = RawDoc(self, channel)
        return self.docs[channel]

    async def send(self, frame: bytes) -> None:
        await self.ws.send(frame)

    async def send_sync(self, channel: str, message: SyncStep1 | SyncStep2 | SyncUpdate) -> None:
        await self.send(Sync(channel, message).encode())

    async def send_awareness(self, channel: str, update: bytes) -> None:
        await self.send(Awareness(channel, update).encode())

    async def attach(self, channel: str, token: str) -> RawDoc:
        """Send Token and step1 without waiting, as the Hocuspocus provider does."""
        doc = self.doc(channel)
        doc.synced = False
        await self.send(AuthToken(channel, token, "4.8.0").encode())
        await self.send_sync(channel, SyncStep1(doc.doc.get_state()))
        return doc

    async def open(self, channel: str, token: str, timeout: float = 10.0) -> RawDoc:
        doc = await self.attach(channel, token)
        await doc.wait_synced(timeout)
        return doc

    async def alive(self, timeout: float = 10.0) -> bool:
        """Ping; True once the Pong arrives, False if the server closes first.

        Frames are handled in order, so a Pong means every earlier frame was accepted.
        """
        seen = self.pongs
        with contextlib.suppress(ConnectionClosed):
            await self.send(PING_FRAME)
        await self.watch.until(lambda: self.pongs > seen or self.closed, timeout, "Pong or close")
        return self.pongs > seen

    async def detach(self, channel: str) -> None:
        await self.send(Close(channel).encode())

    async def _on_frame(self, data: bytes) -> None:
        message = decode_frame(data)
        if isinstance(message, Ping):
            self.pings += 1
            if self.answer_pings:
                with contextlib.suppress(ConnectionClosed):
                    await self.send(PONG_FRAME)
            return
        if isinstance(message, Pong):
            self.pongs += 1
            return
        doc = self.doc(message.channel)
        doc.frames.append(message)
        if isinstance(message, Sync):
            await self._on_sync(doc, message.message)
        elif isinstance(message, SyncStatus):
            doc.statuses.append(message.applied)
        elif isinstance(message, Authenticated):
            doc.scope = message.scope
        elif isinstance(message, PermissionDenied):
            doc.denied = message.reason
        elif isinstance(message, Awareness):
            _merge_awareness(doc, message.update)
        elif isinstance(message, Stateless):
            doc.stateless.append(message.payload)
        elif isinstance(message, Close):
            doc.closed_reason = message.reason or ""
        else:
            self.unknown.append(message)

    async def _on_sync(self, doc: RawDoc, message: SyncStep1 | SyncStep2 | SyncUpdate) -> None:
        if isinstance(message, SyncStep1):
            doc.sent_updates += 1  # our step2 reply is acknowledged like an update
            with contextlib.suppress(ConnectionClosed):
                await self.send_sync(
                    doc.channel, SyncStep2(doc.doc.get_update(message.state_vector))
                )
            return
        doc.apply(message.update)
        if isinstance(message, SyncStep2):
            doc.synced = True
            doc.step2s += 1


class YwsPeer(_PeerBase):
    """A raw y-websocket client on ``/yjs/{doc}``: one document, no channel names."""

    def __init__(self, ws: ClientConnection, name: str) -> None:
        self.name = name
        self.single = RawDoc(self, name)
        self.denied: str | None = None
        self._start(ws)

    @classmethod
    async def connect(cls, yjs_url: str, name: str, token: str) -> YwsPeer:
        ws = await connect(f"{yjs_url}/{name}?token={token}", max_size=None, open_timeout=10)
        peer = cls(ws, name)
        await peer.send_sync(name, SyncStep1(peer.single.doc.get_state()))
        return peer

    async def __aenter__(self) -> YwsPeer:
        return self

    async def send(self, frame: bytes) -> None:
        await self.ws.send(frame)

    async def send_sync(self, channel: str, message: SyncStep1 | SyncStep2 | SyncUpdate) -> None:
        await self.send(YSync(message).encode())

    async def send_awareness(self, channel: str, update: bytes) -> None:
        await self.send(YAwareness(update).encode())

    async def roundtrip(self, timeout: float = 10.0) -> bool:
        """Send step1 and wait for its step2: True once the server has handled everything
        sent before; False if it closed the socket instead."""
        doc = self.single
        seen = doc.step2s
        with contextlib.suppress(ConnectionClosed):
            await self.send_sync(self.name, SyncStep1(doc.doc.get_state()))
        await doc.wait(lambda: doc.step2s > seen or self.closed, timeout, "a step2 round trip")
        return doc.step2s > seen

    async def _on_frame(self, data: bytes) -> None:
        message = decode_yws_frame(data)
        doc = self.single
        if isinstance(message, YSync):
            inner = message.message
            if isinstance(inner, SyncStep1):
                with contextlib.suppress(ConnectionClosed):
                    await self.send(
                        YSync(SyncStep2(doc.doc.get_update(inner.state_vector))).encode()
                    )
                return
            doc.apply(inner.update)
            if isinstance(inner, SyncStep2):
                doc.synced = True
                doc.step2s += 1
        elif isinstance(message, YAwareness):
            _merge_awareness(doc, message.update)
        elif isinstance(message, YPermissionDenied):
            self.denied = message.reason


def _merge_awareness(doc: RawDoc, update: bytes) -> None:
    for entry in decode_awareness(update):
        if entry.removed:
            doc.awareness.pop(entry.client_id, None)
        else:
            doc.awareness[entry.client_id] = entry.state


def sync_frames(doc: RawDoc) -> list[Sync]:
    return [f for f in doc.frames if isinstance(f, Sync)]

"""The receive fast path (collab.transport.raw_frames + MuxConnection.on_message) against the real
server, over a raw TCP socket whose bytes the test cuts as it likes: frames split into single bytes
or many to one write, a fragmented message with a ping inside it, and frames that websockets must
refuse (unmasked, too big) all end as they did before the fast path existed."""

from __future__ import annotations

import asyncio
import uuid
from urllib.parse import urlparse

import anyio
import pytest
from pycrdt import Doc, Text
from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.http11 import Response
from websockets.uri import parse_uri

from tests.rawpeer import MuxPeer
from tests.serverproc import ServerProcess
from tether.protocol.wire.messages import (
    Authenticated,
    AuthToken,
    Sync,
    SyncStatus,
    decode_frame,
)
from tether.protocol.wire.sync_payloads import SyncStep1, SyncUpdate


class ByteCutPeer:
    """One /ws editor whose frames are built by websockets' sans-I/O client and written as the
    test chooses; it reads the server's messages and the close code."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.proto: ClientProtocol
        self.messages: list[object] = []
        self.pongs = 0
        self.close_code: int | None = None
        self.doc = Doc()
        self.text = self.doc.get("content", type=Text)

    @classmethod
    async def connect(cls, url: str) -> ByteCutPeer:
        host = urlparse(url)
        reader, writer = await asyncio.open_connection(host.hostname, host.port)
        peer = cls(reader, writer)
        peer.proto = ClientProtocol(parse_uri(url))
        peer.proto.send_request(peer.proto.connect())
        writer.write(b"".join(peer.proto.data_to_send()))
        while not any(isinstance(e, Response) for e in await peer._read_events()):
            pass
        return peer

    def frame(self, payload: bytes) -> bytes:
        """One masked binary frame, as the bytes a browser would send."""
        self.proto.send_binary(payload)
        return b"".join(self.proto.data_to_send())

    def update(self, chars: str) -> bytes:
        before = self.doc.get_state()
        self.text += chars
        return self.doc.get_update(before)

    async def _read_events(self) -> list[object]:
        data = await self.reader.read(65536)
        if not data:
            self.proto.receive_eof()
        else:
            self.proto.receive_data(data)
        events = self.proto.events_received()
        for event in events:
            if isinstance(event, Frame) and event.opcode is Opcode.BINARY:
                self.messages.append(decode_frame(bytes(event.data)))
            elif isinstance(event, Frame) and event.opcode is Opcode.PONG:
                self.pongs += 1
            elif isinstance(event, Frame) and event.opcode is Opcode.CLOSE:
                assert self.proto.close_rcvd is not None
                self.close_code = self.proto.close_rcvd.code
        if not data and self.close_code is None:
            self.close_code = -1  # closed without a close frame
        return events

    async def until(self, done, what: str) -> None:
        with anyio.fail_after(10, shield=False):
            while not done():
                if self.close_code is not None:
                    raise AssertionError(f"closed ({self.close_code}) before {what}")
                await self._read_events()

    def acks(self) -> list[bool]:
        return [m.applied for m in self.messages if isinstance(m, SyncStatus)]

    async def open(self, channel: str, token: str) -> None:
        self.writer.write(self.frame(AuthToken(channel, token, "test").encode()))
        self.writer.write(self.frame(Sync(channel, SyncStep1(self.doc.get_state())).encode()))
        await self.until(
            lambda: any(isinstance(m, Authenticated) for m in self.messages), "authenticated"
        )

    def close(self) -> None:
        self.writer.close()


async def _opened(server: ServerProcess) -> tuple[ByteCutPeer, str]:
    channel = f"cut-{uuid.uuid4().hex[:8]}"
    peer = await ByteCutPeer.connect(server.ws_url)
    await peer.open(channel, server.token([channel]))
    return peer, channel


@pytest.mark.anyio
async def test_frames_cut_into_single_bytes_or_packed_into_one_write_are_all_applied_in_order(
    server: ServerProcess,
) -> None:
    peer, channel = await _opened(server)
    try:
        frames = [peer.frame(Sync(channel, SyncUpdate(peer.update(c))).encode()) for c in "abcdef"]
        for frame in frames[:3]:  # one byte per write: every header and payload cut everywhere
            for i in range(len(frame)):
                peer.writer.write(frame[i : i + 1])
                await peer.writer.drain()
                await asyncio.sleep(0)  # let the server read each byte on its own
        peer.writer.write(b"".join(frames[3:]))  # three frames in one write
        await peer.until(lambda: len(peer.acks()) >= 6, "six acks")
        assert peer.acks() == [True] * 6
        async with await MuxPeer.connect(server.ws_url) as watcher:
            doc = await watcher.open(channel, server.token([channel]))
            await doc.wait_text("abcdef")
    finally:
        peer.close()


@pytest.mark.anyio
async def test_a_fragmented_message_with_a_ping_inside_is_reassembled_and_fast_frames_resume(
    server: ServerProcess,
) -> None:
    peer, channel = await _opened(server)
    try:
        message = Sync(channel, SyncUpdate(peer.update("xy"))).encode()
        peer.proto.send_binary(message[:5], fin=False)
        peer.proto.send_ping(b"in-between")
        peer.proto.send_continuation(message[5:], fin=True)
        peer.writer.write(b"".join(peer.proto.data_to_send()))
        peer.writer.write(peer.frame(Sync(channel, SyncUpdate(peer.update("z"))).encode()))
        await peer.until(lambda: len(peer.acks()) >= 2 and peer.pongs >= 1, "two acks, a pong")
        assert peer.acks() == [True, True]
    finally:
        peer.close()


@pytest.mark.anyio
async def test_an_unmasked_frame_is_refused_with_a_protocol_error(server: ServerProcess) -> None:
    peer, channel = await _opened(server)
    try:
        payload = Sync(channel, SyncUpdate(peer.update("q"))).encode()
        unmasked = Frame(Opcode.BINARY, payload).serialize(mask=False, extensions=[])
        peer.writer.write(unmasked)
        await peer.until(lambda: peer.close_code is not None, "the close")
    except AssertionError:
        pass  # ``until`` raises once closed: the code is what matters
    finally:
        peer.close()
    assert peer.close_code == 1002


@pytest.mark.anyio
async def test_a_frame_announcing_more_than_the_size_limit_is_refused_from_its_header(
    server: ServerProcess,
) -> None:
    peer, _ = await _opened(server)
    try:
        mask = b"\x01\x02\x03\x04"
        peer.writer.write(bytes((0x82, 0x80 | 127)) + (1 << 40).to_bytes(8, "big") + mask)
        await peer.until(lambda: peer.close_code is not None, "the close")
    except AssertionError:
        pass
    finally:
        peer.close()
    assert peer.close_code == 1009

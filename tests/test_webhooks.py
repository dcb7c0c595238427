"""Webhooks through the real server to a receiver on 127.0.0.1: a burst of edits is one signed
notice with the text, a receiver that fails is retried, and the signature checks out
(issue 12, operator conveniences)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from tests.rawpeer import MuxPeer
from tests.serverproc import ServerProcess
from tether.collab.http.webhooks import SIGNATURE_HEADER, sign

pytestmark = pytest.mark.anyio

SECRET = "webhook-secret-for-tests"


class Receiver:
    """A minimal HTTP/1.1 server: records each POST, answers 500 to the first ``fail`` ones."""

    def __init__(self, fail: int = 0) -> None:
        self.fail = fail
        self.posts: list[tuple[dict[str, str], bytes]] = []
        self.arrived = asyncio.Event()
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> Receiver:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/hook"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            line = await reader.readline()
            if not line:
                break
            headers: dict[str, str] = {}
            while (header := await reader.readline()) not in (b"\r\n", b""):
                key, _, value = header.decode().partition(":")
                headers[key.strip().lower()] = value.strip()
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            self.posts.append((headers, body))
            status = (
                "500 Internal Server Error" if len(self.posts) <= self.fail else "204 No Content"
            )
            writer.write(f"HTTP/1.1 {status}\r\ncontent-length: 0\r\n\r\n".encode())
            await writer.drain()
            self.arrived.set()
        writer.close()

    async def wait_for(self, count: int, timeout: float = 20.0) -> None:
        async with asyncio.timeout(timeout):
            while len(self.posts) < count:
                self.arrived.clear()
                await self.arrived.wait()


async def test_a_burst_of_edits_is_one_signed_notice_with_the_text(tmp_path: Path) -> None:
    async with Receiver() as receiver:
        settings = {
            "webhook_url": receiver.url,
            "webhook_secret": SECRET,
            "webhook_events": "change",
            "webhook_debounce": 0.3,
        }
        with ServerProcess(tmp_path, **settings) as server:
            async with await MuxPeer.connect(server.ws_url) as peer:
                doc = await peer.open("hooked", server.token())
                for word in ("one ", "two ", "three"):
                    await doc.append(word)
                await doc.wait_acked()
                await receiver.wait_for(1)
                headers, body = receiver.posts[0]
                notice = json.loads(body)
                assert notice["event"] == "change" and notice["document"] == "hooked"
                assert notice["text"] == "one two three"
                assert headers[SIGNATURE_HEADER.lower()] == sign(SECRET, body)
                assert headers["tether-event"] == "change"
                await doc.append(" four")
                await receiver.wait_for(2)
                assert json.loads(receiver.posts[1][1])["text"] == "one two three four"
                assert len(receiver.posts) == 2  # the burst made one notice, not three


async def test_a_failing_receiver_is_retried_until_it_takes_the_notice(tmp_path: Path) -> None:
    async with Receiver(fail=2) as receiver:
        settings = {"webhook_url": receiver.url, "webhook_events": "store", "webhook_debounce": 0.1}
        with ServerProcess(tmp_path, **settings) as server:
            async with await MuxPeer.connect(server.ws_url) as peer:
                doc = await peer.open("retried", server.token())
                await doc.append("durable")
                await doc.wait_acked()
                await receiver.wait_for(3)
            assert [json.loads(b)["event"] for _, b in receiver.posts] == ["store"] * 3
            assert SIGNATURE_HEADER.lower() not in receiver.posts[0][0]  # no secret, no signature


async def test_a_delete_cancels_pending_notices_and_sends_a_delete_event(tmp_path: Path) -> None:
    """Issue 26, finding 12: a deleted document's text reached the webhook after DELETE
    returned (debounced change/store notices still pending), and there was no delete event."""
    async with Receiver() as receiver:
        settings = {"webhook_url": receiver.url, "webhook_debounce": 1.0}
        with ServerProcess(tmp_path, **settings) as server:
            async with await MuxPeer.connect(server.ws_url) as peer:
                doc = await peer.open("doomed", server.token())
                await doc.append("secret draft")
                await doc.wait_acked()  # change and store notices armed, 1 s away
                async with httpx.AsyncClient(base_url=server.http_url) as http:
                    auth = {"Authorization": f"Bearer {server.token()}"}
                    deleted = await http.delete("/api/documents/doomed", headers=auth)
                    assert deleted.status_code == 200
                await receiver.wait_for(1)
                after = await http_get_after(receiver, 2.0)
        events = [json.loads(body) for _, body in receiver.posts]
        assert [e["event"] for e in events] == ["delete"], events
        assert events[0]["document"] == "doomed" and events[0]["text"] == ""
        assert after == 1  # the debounced change/store notices never came


async def http_get_after(receiver: Receiver, seconds: float) -> int:
    """How many notices the receiver has once the debounce window has surely passed."""
    try:
        await receiver.wait_for(len(receiver.posts) + 1, timeout=seconds)
    except TimeoutError:
        pass  # nothing more arrived in the window: what the test hopes
    return len(receiver.posts)

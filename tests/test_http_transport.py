"""The HTTP fallback against a live server: the /ws frames over POSTs and an event stream (or
long polls), with resumption, expiry, bounds, auth and bad input, over real sockets."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import httpx
import pytest

from tests.ai.asking import UNSHAPED
from tests.httppeer import HttpMuxPeer, create_session
from tests.httpproxy import LoopbackProxy
from tests.metrics_scrape import metric_value, metrics_text
from tests.rawpeer import MuxPeer
from tests.serverproc import ServerProcess
from tether.protocol.clients.tether_client import TetherClient
from tether.protocol.wire.ai_messages import Suggest
from tether.protocol.wire.http_wire import SESSION_HEADER
from tether.protocol.wire.messages import Authenticated, PermissionDenied, Sync
from tether.protocol.wire.sync_payloads import SyncStep2, SyncUpdate

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(
        tmp_path_factory.mktemp("http"),
        http_poll_timeout=1.0,
        http_session_timeout=1.5,
        http_sessions_per_address=12,
        http_sessions=16,
        max_frame_bytes=65536,
    ) as proc:
        yield proc


async def metric(server: ServerProcess, name: str, **labels: str) -> float:
    return metric_value(await metrics_text(server), name, **labels)


@contextlib.asynccontextmanager
async def http_client(url: str, token: str, **options: object) -> AsyncIterator[TetherClient]:
    async with TetherClient(url, token=token, transport="http", **options) as client:  # type: ignore[arg-type]
        yield client


async def test_two_python_clients_converge_over_http(server: ServerProcess) -> None:
    token = server.token()
    with anyio.fail_after(20):
        async with (
            http_client(server.ws_url, token) as alice,
            http_client(server.ws_url, token) as bob,
        ):
            a = await alice.open("converge")
            b = await bob.open("converge")
            for k in range(30):
                a.append(f"a{k} ")
                b.append(f"b{k} ")
            await a.wait_acked()
            await b.wait_acked()
            await a.wait_text(lambda t: t.count("a") == 30 and t.count("b") == 30)
            await b.wait_text(str(a))
            a.set_presence({"user": {"name": "alice"}})
            await b.wait_for(lambda: any(p.get("user") for p in b.presence.values()))
            assert alice.transport_in_use == bob.transport_in_use == "http"
            # and a WebSocket editor of the same document sees the same text
            async with TetherClient(server.ws_url, token=token, transport="ws") as carol:
                c = await carol.open("converge")
                assert str(c) == str(a)
    assert await metric(server, "tether_connections", endpoint="http") == 0


async def test_a_dropped_stream_resumes_without_resending_everything(
    server: ServerProcess,
) -> None:
    token = server.token()
    with anyio.fail_after(20):
        async with await HttpMuxPeer.connect(server.http_url, token) as peer:
            doc = await peer.open("resume", token)
            await doc.append("before ")
            await doc.wait_acked()
            seen = peer.ws.last_seq
            await peer.ws.drop_down()
            async with await MuxPeer.connect(server.ws_url) as writer:
                other = await writer.open("resume", token)
                for k in range(5):
                    await other.append(f"w{k} ")
                await other.wait_acked()
            before = len(peer.ws.events)
            peer.ws.start_down()  # resumes after the last id it has
            await doc.wait_text(lambda t: t.count("w") == 5)
            resumed = peer.ws.events[before:]
            assert resumed[0].seq == seen + 1, "the stream resumed right after the last id"
            assert [e.seq for e in resumed] == list(range(seen + 1, seen + 1 + len(resumed)))
            frames = [doc.frames[i] for i in range(len(doc.frames))]
            assert sum(isinstance(f, Authenticated) for f in frames) == 1, "no re-auth"
            steps = [f for f in frames if isinstance(f, Sync) and isinstance(f.message, SyncStep2)]
            assert len(steps) == 1, "the document was not sent again"
            updates = [
                f for f in frames if isinstance(f, Sync) and isinstance(f.message, SyncUpdate)
            ]
            assert len(updates) == 5


async def test_long_polling_returns_what_is_queued_or_waits(server: ServerProcess) -> None:
    token = server.token()
    with anyio.fail_after(20):
        async with await HttpMuxPeer.connect(server.http_url, token, poll=True) as peer:
            doc = await peer.open("polled", token)
            polls = peer.ws.down_requests
            async with await MuxPeer.connect(server.ws_url) as writer:
                other = await writer.open("polled", token)
                await other.append("over polls")
                await doc.wait_text("over polls")
                await doc.append(" and back")
                await doc.wait_acked()
                await other.wait_text("over polls and back")
            assert peer.ws.down_requests > polls
            # nothing queued: a poll waits, then answers empty, and the session lives on
            idle_before = peer.ws.down_requests
            await doc.wait(lambda: peer.ws.down_requests >= idle_before + 2, 5, "empty polls")
            assert await peer.alive()


async def test_the_python_client_switches_to_long_polls_behind_a_buffering_proxy(
    server: ServerProcess,
) -> None:
    token = server.token()
    async with LoopbackProxy(server.port, buffer_responses=True) as proxy:
        with anyio.fail_after(30):
            async with (
                TetherClient(proxy.ws_url, token=token, first_byte_timeout=1.0) as alice,
                TetherClient(server.ws_url, token=token, transport="ws") as bob,
            ):
                assert proxy.refused_upgrades >= 1 and alice.transport_in_use == "http"
                a = await alice.open("buffered")  # synced only once it polls
                assert alice._ws is not None and getattr(alice._ws, "polling", False)
                b = await bob.open("buffered")
                a.append("through a buffer")
                await b.wait_text("through a buffer")
                b.append("!")
                await a.wait_text("through a buffer!")
                await a.wait_acked()
        assert not any(token in line for line in proxy.request_lines)
        assert any("/http/events?mode=poll" in line for line in proxy.request_lines)


async def test_auto_leaves_a_socket_that_keeps_dying_and_returns_when_sockets_pass(
    server: ServerProcess,
) -> None:
    token = server.token()
    async with LoopbackProxy(server.port, refuse_upgrades=False, kill_upgrades_after=0.3) as proxy:
        with anyio.fail_after(30):
            async with (
                TetherClient(proxy.ws_url, token=token, ws_retry_interval=0.5) as alice,
                TetherClient(server.ws_url, token=token, transport="ws") as bob,
            ):
                a = await alice.open("dying")
                b = await bob.open("dying")
                await a.wait_for(lambda: alice.transport_in_use == "http")
                assert proxy.killed_upgrades >= 2, "two young deaths before falling back"
                a.append("after the fall")
                await b.wait_text("after the fall")
                # the proxy stops killing sockets: the next probe succeeds, alice moves back
                proxy.kill_upgrades_after = None
                await a.wait_for(lambda: alice.transport_in_use == "ws")
                b.append("!")
                await a.wait_text("after the fall!")
                await a.wait_acked()


async def test_the_token_is_never_in_a_url(server: ServerProcess) -> None:
    token = server.token()
    async with LoopbackProxy(server.port) as proxy:
        with anyio.fail_after(20):
            async with TetherClient(proxy.ws_url, token=token) as client:
                assert client.transport_in_use == "http"
                doc = await client.open("urls")
                doc.append("x")
                await doc.wait_acked()
        lines = proxy.request_lines
        assert any(line.startswith("POST /http/session") for line in lines)
        assert any(line.startswith("GET /http/events") for line in lines)
        assert not any(token in line for line in lines), lines
        # the session id is a header too
        session_ids = [line for line in lines if "session=" in line.lower()]
        assert session_ids == []
    async with httpx.AsyncClient(base_url=server.http_url, timeout=5) as http:
        reply = await http.post(f"/http/session?token={token}")
        assert reply.status_code == 400


async def test_auth_is_refused_before_any_document_byte(server: ServerProcess) -> None:
    created = await metric(server, "tether_http_sessions")
    for header in ({}, {"Authorization": "Bearer not-a-token"}):
        async with httpx.AsyncClient(base_url=server.http_url, timeout=5) as http:
            reply = await http.post("/http/session", headers=header)
        assert reply.status_code == 401
        assert set(reply.json()) == {"error"}
    assert await metric(server, "tether_http_sessions") == created
    # a session whose channel token does not cover the document gets PermissionDenied only
    with anyio.fail_after(10):
        async with await HttpMuxPeer.connect(server.http_url, server.token()) as peer:
            doc = await peer.attach("secret", server.token(["other"]))
            await doc.wait(lambda: doc.denied is not None, 5, "PermissionDenied")
            assert all(isinstance(f, PermissionDenied) for f in doc.frames)
            assert str(doc) == ""
    # an unknown session id learns nothing
    async with httpx.AsyncClient(base_url=server.http_url, timeout=5) as http:
        reply = await http.get("/http/events", headers={SESSION_HEADER: "guess"})
        assert reply.status_code == 404


async def test_an_abandoned_session_expires_and_is_cleaned_up(server: ServerProcess) -> None:
    token = server.token()
    expired = await metric(server, "tether_http_sessions_expired_total")
    with anyio.fail_after(20):
        peer = await HttpMuxPeer.connect(server.http_url, token)
        doc = await peer.open("abandoned", token)
        await doc.append("left behind")
        await doc.wait_acked()
        await peer.ws.drop_down()  # the client vanishes: no down request, no DELETE
        async with await MuxPeer.connect(server.ws_url) as watcher:
            seen = await watcher.open("abandoned", token)
            await seen.wait_text("left behind")
        while await metric(server, "tether_http_sessions_expired_total") == expired:
            await anyio.sleep(0.1)  # polling the server's public state; the sweeper is its own
        reply = await peer.ws.http.get("/http/events", headers=peer.ws.headers())
        assert reply.status_code == 404
        await peer.ws.http.aclose()
    async with httpx.AsyncClient(timeout=5) as http:
        info = await http.get(
            f"{server.http_url}/api/documents/abandoned",
            headers={"Authorization": f"Bearer {token}"},
        )
    assert info.json()["peers"] == 0
    # a polite client's DELETE ends it at once
    with anyio.fail_after(10):
        polite = await HttpMuxPeer.connect(server.http_url, token)
        await polite.open("abandoned", token)
        session = polite.ws.session
        await polite.aclose()
        async with httpx.AsyncClient(base_url=server.http_url, timeout=5) as http:
            reply = await http.post(
                "/http/send",
                headers={SESSION_HEADER: session, "Content-Type": "application/octet-stream"},
            )
        assert reply.status_code in (404, 410)


async def test_sessions_are_bounded_per_address_and_in_all(tmp_path: Path) -> None:
    with ServerProcess(tmp_path, http_sessions=3, http_sessions_per_address=2) as bounded:
        token = bounded.token()
        clients = []

        async def create(source: str) -> int:
            http, reply = await create_session(bounded.http_url, token, source=source)
            clients.append(http)
            return reply.status_code

        try:
            assert [await create("127.0.0.1") for _ in range(3)] == [201, 201, 429]
            assert await create("127.0.0.2") == 201
            assert await create("127.0.0.3") == 503  # three in all
            refusals = await metrics_text(bounded)
            for limit in ("http_sessions_per_address", "http_sessions"):
                assert metric_value(refusals, "tether_limit_refusals_total", limit=limit) == 1
            assert metric_value(refusals, "tether_http_sessions") == 3
        finally:
            for http in clients:
                await http.aclose()


async def test_an_unacknowledging_reader_fills_only_its_own_replay_buffer(tmp_path: Path) -> None:
    with ServerProcess(
        tmp_path,
        http_replay_bytes=64 * 1024,
        send_queue_bytes=256 * 1024,
    ) as bounded:
        token = bounded.token()
        with anyio.fail_after(30):
            hog = await HttpMuxPeer.connect(bounded.http_url, token, ack=False, answer_pings=False)
            await hog.open("flood", token)
            async with (
                await MuxPeer.connect(bounded.ws_url) as writer_socket,
                await HttpMuxPeer.connect(bounded.http_url, token) as fair,
            ):
                writer = await writer_socket.open("flood", token)
                reader = await fair.open("flood", token)
                chunk = "x" * 16 * 1024
                for k in range(40):
                    await writer.append(f"{k}{chunk}")
                    await writer.wait_acked()
                    if hog.closed:
                        break
                assert await hog.wait_closed() == 1013  # a slow consumer, as on /ws
                assert all(writer.statuses)
                await reader.wait_text(lambda t: t.count("x") == (k + 1) * len(chunk))
                assert await fair.alive()
            refused = await metric(
                bounded, "tether_limit_refusals_total", limit="http_replay_bytes"
            )
            assert refused >= 1
            assert (
                await metric(bounded, "tether_limit_refusals_total", limit="send_queue_bytes") >= 1
            )
            await hog.aclose()
            held = await metric(bounded, "tether_http_replay_bytes")
            assert held < 64 * 1024, "the hog's bytes were released"


async def test_ai_suggestions_work_unchanged_over_http(tmp_path: Path) -> None:
    script = '{"pieces": [" and", " the", " gulls", " cried."], "delay": 0.01}'
    with ServerProcess(
        tmp_path,
        ai_provider="scripted",
        **UNSHAPED,
        ai_script=script,
    ) as ai_server:
        token = ai_server.token()
        with anyio.fail_after(30):
            async with (
                http_client(ai_server.ws_url, token) as alice,
                TetherClient(ai_server.ws_url, token=token, transport="ws") as bob,
            ):
                doc = await alice.open("ai-over-http")
                other = await bob.open("ai-over-http")
                doc.append("The boats came home")
                await doc.wait_acked()
                doc.send_stateless(Suggest("h1", "complete", pos=19, max_tokens=8).encode())
                text, kinds = "", []
                while not kinds or kinds[-1] not in ("suggestion.end", "suggestion.error"):
                    message = json.loads(await doc.stateless.get())
                    kinds.append(message["type"])
                    text += message.get("text", "") if message["type"].endswith("delta") else ""
                assert kinds[0] == "suggestion.start" and kinds[-1] == "suggestion.end"
                assert text == " and the gulls cried."
                doc.send_stateless('{"type":"accept","id":"h1"}')
                await other.wait_text("The boats came home and the gulls cried.")

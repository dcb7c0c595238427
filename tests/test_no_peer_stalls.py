"""No single peer can stall, starve or poison the server (issue 26): each attack runs against
the real server while a bystander edits another document, and the bystander's edits must all
be acknowledged as stored while the attacker is refused with a clear reason."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator

import httpx
import pytest

from tests.rawpeer import MuxPeer, RawDoc
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(tmp_path_factory.mktemp("stalls")) as running:
        yield running


async def type_steadily(doc: RawDoc, edits: int, pause: float = 0.005) -> None:
    """What a bystander does during an attack: one keystroke every few milliseconds."""
    for i in range(edits):
        await doc.append(f"{i} ")
        await asyncio.sleep(pause)  # pacing the typist, not synchronising the test
    await doc.wait_acked(timeout=30)


async def test_a_version_label_no_store_can_hold_fails_alone(server: ServerProcess) -> None:
    """Finding 4: a label with a lone surrogate (valid JSON) made SQLite raise inside the shared
    batch, and other documents' appends in it were answered "not stored"."""
    token = server.token()
    async with httpx.AsyncClient(base_url=server.http_url) as http:
        http.headers["Authorization"] = f"Bearer {token}"
        made = await http.put(
            "/api/documents/labelled",
            content=_update("x"),
            headers={"Content-Type": "application/octet-stream"},
        )
        assert made.status_code == 200
        async with await MuxPeer.connect(server.ws_url) as bystander:
            doc = await bystander.open("bystander-labels", token)

            async def attack() -> list[int]:
                body = b'{"label": "\\ud800"}'  # valid JSON: a lone surrogate, escaped
                headers = {"Content-Type": "application/json"}
                statuses = []
                for _ in range(30):
                    reply = await http.post("/api/versions/labelled", content=body, headers=headers)
                    statuses.append(reply.status_code)
                return statuses

            statuses, _ = await asyncio.gather(attack(), type_steadily(doc, 60))
            assert set(statuses) == {400}
            assert len(doc.statuses) >= 60 and all(doc.statuses)  # every edit stored
            listed = (await http.get("/api/versions/labelled")).json()["versions"]
            assert listed == []


def _update(text: str) -> bytes:
    from pycrdt import Doc, Text

    doc = Doc()
    doc.get("content", type=Text).insert(0, text)
    return doc.get_update()


async def test_numbers_are_read_strictly_400_with_a_reason_never_500(
    server: ServerProcess,
) -> None:
    """Finding 13: ``str.isdigit`` takes "²", which ``int`` refuses, and 10**30 overflowed
    SQLite: those were 500s with tracebacks."""
    octets = {"Content-Type": "application/octet-stream"}
    async with httpx.AsyncClient(base_url=server.http_url) as http:
        http.headers["Authorization"] = f"Bearer {server.token()}"
        await http.put("/api/documents/numbers", content=_update("n"), headers=octets)
        for ref in ("²", "١٢", "+1", "1e3", ""):
            reply = await http.get(f"/api/versions/numbers?id={ref}")
            assert reply.status_code == 400 and "version number" in reply.json()["error"], ref
        for version in (10**30, -1, 1.5, "7"):
            reply = await http.post("/api/restore/numbers", json={"version": version})
            assert reply.status_code == 400, version
        # Headers are latin-1: b"\xb2" is "²" to the server.
        session = (await http.post("/http/session")).json()["session"]
        headers = {"Tether-Session": session}
        batch = {**headers, "Content-Type": "application/octet-stream", "Tether-Ack": b"\xb2"}
        sent = await http.post("/http/send", content=b"", headers=batch)
        assert sent.status_code == 400 and "Tether-Ack" in sent.json()["error"]
        events = await http.get("/http/events", headers={**headers, "Last-Event-ID": b"\xb2"})
        assert events.status_code == 400 and "Last-Event-ID" in events.json()["error"]


async def test_health_shows_states_to_anyone_and_details_to_the_operator(tmp_path) -> None:
    """Operators' finding: /health showed the model's path and the worker's pid to anyone."""
    metrics_token = "m" * 32
    with ServerProcess(tmp_path, metrics_token=metrics_token, ai_provider="scripted") as srv:
        async with httpx.AsyncClient(base_url=srv.http_url) as http:
            public = (await http.get("/health")).json()
            bearer = {"Authorization": f"Bearer {metrics_token}"}
            operator = (await http.get("/health", headers=bearer)).json()
    assert set(public["ai"]) <= {"state", "reason"} and "node" not in public
    assert set(public["database"]) <= {"state", "backend"}
    assert "model" in operator["ai"] and "junk_filter" in operator["ai"]
    assert operator["database"]["backend"] == "sqlite"


async def _half_sent_request(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection from another loopback address that never finishes its headers."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=("127.0.0.2", 0))
    writer.write(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
    await writer.drain()
    return reader, writer


async def _closed_by_server(reader: asyncio.StreamReader, timeout: float) -> bool:
    try:
        return await asyncio.wait_for(reader.read(1), timeout) == b""
    except ConnectionError:
        return True  # closed with our unread bytes in its buffer: a reset
    except TimeoutError:
        return False


async def test_slow_headers_are_cut_off_and_bounded_per_client(tmp_path) -> None:
    """Finding 7: no request-header timeout and no cap on connections that never upgrade:
    1,100 half-sent requests from one address used up the file limit and /health failed."""
    with ServerProcess(tmp_path, header_timeout=1.0, max_connections_per_address=20) as srv:
        slow = [await _half_sent_request(srv.port) for _ in range(60)]
        try:
            refused = await asyncio.gather(*(_closed_by_server(r, 0.5) for r, _ in slow))
            assert sum(refused) >= 40  # past the 20 a client may have waiting
            async with httpx.AsyncClient(base_url=srv.http_url) as http:
                assert (await http.get("/health")).status_code == 200  # another client
            cut = await asyncio.gather(*(_closed_by_server(r, 5.0) for r, _ in slow))
            assert all(cut)  # the header timeout closed the ones let in
            again = await _half_sent_request(srv.port)
            assert not await _closed_by_server(again[0], 0.3)  # counted down: room again
            again[1].close()
        finally:
            for _, writer in slow:
                writer.close()


async def test_a_fallback_batch_of_millions_of_tiny_frames_is_refused_in_slices(
    server: ServerProcess,
) -> None:
    """Finding 5: one 16 MB POST /http/send of 8 M one-byte frames (a readonly token) was
    decoded at once and drained without yielding: the loop stalled 14 s, +140 MB."""
    readonly = server.token(scope="readonly")
    async with httpx.AsyncClient(base_url=server.http_url, timeout=60) as http:
        made = await http.post("/http/session", headers={"Authorization": f"Bearer {readonly}"})
        headers = {
            "Tether-Session": made.json()["session"],
            "Content-Type": "application/octet-stream",
        }
        flood = b"\x01\x09" * (8 * 1024 * 1024)  # 8 M Ping frames, 16 MiB
        stalls_before = _stalls(await http.get("/metrics"))
        async with await MuxPeer.connect(server.ws_url) as bystander:
            doc = await bystander.open("bystander-flood", server.token())
            posted = asyncio.ensure_future(http.post("/http/send", content=flood, headers=headers))
            await type_steadily(doc, 60)
            reply = await posted
        assert reply.status_code == 410 and "frames in one batch" in reply.json()["reason"]
        assert len(doc.statuses) >= 60 and all(doc.statuses)
        assert _stalls(await http.get("/metrics")) == stalls_before  # no turn over 250 ms


def _stalls(metrics: httpx.Response) -> float:
    """Loop turns late by more than 250 ms so far (tether_event_loop_lag_seconds)."""
    buckets = dict(
        re.findall(r'tether_event_loop_lag_seconds_bucket\{le="([^"]+)"\} (\S+)', metrics.text)
    )
    return float(buckets["+Inf"]) - float(buckets["0.25"])


async def test_versions_are_bounded_per_subject_and_unchanged_state_is_not_copied(
    tmp_path,
) -> None:
    """Finding 10: limits were per document, so a token for team/** turned 3.9 MB of
    requests into 203 MB on disk; and every POST stored another copy of the same state."""
    octets = {"Content-Type": "application/octet-stream"}
    quota = {"max_version_bytes_per_subject": 64 * 1024, "max_version_bytes_total": 96 * 1024}
    with ServerProcess(tmp_path, **quota) as srv:
        async with httpx.AsyncClient(base_url=srv.http_url) as http:
            mallory = {"Authorization": f"Bearer {srv.token(subject='mallory')}"}
            alice = {"Authorization": f"Bearer {srv.token(subject='alice')}"}
            body = _update("x" * 20_000)
            first = await http.put("/api/documents/team/a", content=body, headers=octets | mallory)
            assert first.status_code == 200
            made = await http.post("/api/versions/team/a", json={"label": "v1"}, headers=mallory)
            same = await http.post("/api/versions/team/a", json={"label": "v2"}, headers=mallory)
            assert (made.status_code, same.status_code) == (201, 200)
            assert same.json()["id"] == made.json()["id"]  # no second copy of one state
            statuses = []
            for k in range(8):
                name = f"team/n{k}"
                await http.put(f"/api/documents/{name}", content=body, headers=octets | mallory)
                reply = await http.post(
                    f"/api/versions/{name}", json={"label": "v"}, headers=mallory
                )
                statuses.append(reply.status_code)
            assert statuses[:2] == [201, 201] and set(statuses[3:]) == {409}
            refused = await http.post("/api/versions/team/n7", json={"label": "v"}, headers=mallory)
            assert "max_version_bytes_per_subject" in refused.json()["error"]
            # Another subject still has its own share, until the server's total is reached.
            await http.put("/api/documents/b", content=body, headers=octets | alice)
            ok = await http.post("/api/versions/b", json={"label": "mine"}, headers=alice)
            assert ok.status_code == 201
            await http.put(
                "/api/documents/c", content=_update("y" * 20_000), headers=octets | alice
            )
            full = await http.post("/api/versions/c", json={"label": "more"}, headers=alice)
            assert full.status_code == 409 and "max_version_bytes_total" in full.json()["error"]

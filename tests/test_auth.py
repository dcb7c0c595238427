"""Who may open what: JWT checks on /ws channels, /yjs upgrades and the REST view."""

from __future__ import annotations

import json
import uuid

import anyio
import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tests.rawpeer import MuxPeer, RawDoc, YwsPeer
from tests.serverproc import ServerProcess
from tether.collab.auth.tokens import make_token
from tether.protocol.wire.messages import (
    Authenticated,
    AuthToken,
    Awareness,
    PermissionDenied,
    Sync,
)
from tether.protocol.wire.sync_payloads import AwarenessEntry, SyncStep1, encode_awareness

pytestmark = pytest.mark.anyio


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def rest_text(server: ServerProcess, name: str) -> str:
    async with httpx.AsyncClient() as http:
        response = await http.get(
            f"{server.http_url}/api/documents/{name}",
            headers={"Authorization": f"Bearer {server.token([name])}"},
        )
    if response.status_code == 404:  # never stored (nor loaded with content): no text
        return ""
    response.raise_for_status()
    return str(response.json()["text"])


async def seeded(server: ServerProcess, name: str, text: str) -> None:
    """Give ``name`` some content (and a present editor) that refused clients must not see."""
    async with await MuxPeer.connect(server.ws_url) as writer:
        doc = await writer.open(name, server.token([name]))
        await doc.append(text)
        await doc.wait_acked()


async def barrier(doc: RawDoc) -> None:
    """Round-trip on an open channel: every earlier reply of the server has arrived by now."""
    await doc.append("·")
    await doc.wait_acked()


def assert_refused_without_document_bytes(doc: RawDoc, reason: str) -> None:
    assert doc.denied is not None and reason in doc.denied
    assert [type(f) for f in doc.frames] == [PermissionDenied], "nothing but the refusal"
    assert str(doc) == ""


@pytest.mark.parametrize(
    ("kind", "reason"),
    [("garbage", "invalid token"), ("expired", "token expired"), ("outside", "not allowed")],
)
async def test_a_refused_document_gets_permission_denied_and_no_document_byte_while_another_works(
    server: ServerProcess, kind: str, reason: str
):
    refused, allowed = unique("secret"), unique("team/ok")
    await seeded(server, refused, "confidential")
    bad_token = {
        "garbage": "not-a-jwt",
        "expired": server.token([refused, allowed], ttl=-10),
        "outside": server.token(["team/*"]),
    }[kind]
    with anyio.fail_after(15):
        async with await MuxPeer.connect(server.ws_url) as peer:
            denied = await peer.attach(refused, bad_token)  # token and step1, unawaited
            await denied.wait(lambda: denied.denied is not None, what="PermissionDenied")
            ok = await peer.open(allowed, server.token(["team/*"]))
            assert ok.scope == "read-write"
            # More traffic on the refused channel is dropped, never answered.
            await peer.send_sync(refused, SyncStep1(b"\x00"))
            await denied.set_awareness({"user": "intruder"})
            await barrier(ok)
            assert ok.statuses == [True] * len(ok.statuses)
            assert_refused_without_document_bytes(denied, reason)
            assert not peer.closed
    assert await rest_text(server, refused) == "confidential"


async def test_a_refused_channel_can_retry_with_a_valid_token(server: ServerProcess):
    name = unique("retry")
    await seeded(server, name, "hello")
    with anyio.fail_after(15):
        async with await MuxPeer.connect(server.ws_url) as peer:
            doc = await peer.attach(name, "bad")
            await doc.wait(lambda: doc.denied is not None)
            doc.denied = None
            await peer.open(name, server.token([name]))
            assert str(doc) == "hello"


async def test_an_invalid_document_name_is_refused(server: ServerProcess):
    with anyio.fail_after(10):
        async with await MuxPeer.connect(server.ws_url) as peer:
            doc = await peer.attach("bad\x01name", server.token())
            await doc.wait(lambda: doc.denied is not None)
            assert "invalid document name" in (doc.denied or "")


async def test_a_readonly_write_is_rejected_not_applied_and_not_broadcast(server: ServerProcess):
    name = unique("ro")
    await seeded(server, name, "base")
    with anyio.fail_after(15):
        async with (
            await MuxPeer.connect(server.ws_url) as reader,
            await MuxPeer.connect(server.ws_url) as writer,
        ):
            r = await reader.open(name, server.token([name], scope="readonly"))
            assert r.scope == "readonly"
            w = await writer.open(name, server.token([name]))
            await r.wait_acked()  # our (empty) step2 reply is acknowledged
            await r.append(" READONLY")
            await r.wait_acked()
            assert r.statuses[-1] is False, "SyncStatus 0 for a readonly write"
            # The writer's next edit is fanned out after anything the reader's would have been.
            await w.append(" writer")
            await w.wait_acked()
            await r.wait_text(lambda t: "writer" in t)
            assert str(w) == "base writer"
            assert await rest_text(server, name) == "base writer"


async def test_reauthenticating_an_open_channel_with_a_readonly_token_downgrades_it(
    server: ServerProcess,
):
    name = unique("downgrade")
    with anyio.fail_after(15):
        async with await MuxPeer.connect(server.ws_url) as peer:
            doc = await peer.open(name, server.token([name]))
            await doc.append("a")
            await doc.wait_acked()
            await peer.send(AuthToken(name, server.token([name], scope="readonly")).encode())
            await doc.wait(lambda: doc.scope == "readonly")
            await doc.append("b")
            await doc.wait_acked()
            assert doc.statuses[-1] is False
            assert [f for f in doc.frames if isinstance(f, Authenticated)][-1].scope == "readonly"
    assert await rest_text(server, name) == "a"


@pytest.mark.parametrize("kind", ["garbage", "expired", "outside", "missing"])
async def test_a_yjs_upgrade_with_a_bad_token_is_refused_with_http_403(
    server: ServerProcess, kind: str
):
    name = unique("yjs-refused")
    token = {
        "garbage": "garbage",
        "expired": server.token([name], ttl=-10),
        "outside": server.token(["elsewhere/*"]),
        "missing": "",
    }[kind]
    with anyio.fail_after(10):
        with pytest.raises(InvalidStatus) as refused:
            async with connect(f"{server.yjs_url}/{name}?token={token}"):
                pass
    assert refused.value.response.status_code == 403


async def test_a_yjs_editor_with_a_valid_token_syncs(server: ServerProcess):
    name = unique("yjs-ok")
    await seeded(server, name, "shared")
    with anyio.fail_after(10):
        async with await YwsPeer.connect(server.yjs_url, name, server.token([name])) as peer:
            await peer.single.wait_synced()
            assert str(peer.single) == "shared"


async def test_a_readonly_yjs_editor_cannot_write(server: ServerProcess):
    name = unique("yjs-ro")
    await seeded(server, name, "fixed")
    token = server.token([name], scope="readonly")
    with anyio.fail_after(10):
        async with (
            await YwsPeer.connect(server.yjs_url, name, token) as reader,
            await MuxPeer.connect(server.ws_url) as writer,
        ):
            await reader.single.wait_synced()
            await reader.single.append(" nope")
            await reader.roundtrip()
            w = await writer.open(name, server.token([name]))
            await w.append(" yes")
            await w.wait_acked()
            await reader.single.wait_text(lambda t: " yes" in t)
            assert str(w) == "fixed yes"
    assert await rest_text(server, name) == "fixed yes"


async def test_rest_requires_a_token_and_respects_its_claims(server: ServerProcess):
    inside, outside = unique("rest/in"), unique("other")
    await seeded(server, inside, "visible")
    await seeded(server, outside, "hidden")
    token = server.token(["rest/*"])
    async with httpx.AsyncClient(base_url=server.http_url, timeout=10) as http:
        assert (await http.get(f"/api/documents/{inside}")).status_code == 401
        assert (await http.get("/api/documents")).status_code == 401
        garbage = {"Authorization": "Bearer nope"}
        assert (await http.get(f"/api/documents/{inside}", headers=garbage)).status_code == 401
        expired = {"Authorization": f"Bearer {server.token(['rest/*'], ttl=-10)}"}
        assert (await http.get(f"/api/documents/{inside}", headers=expired)).status_code == 401
        auth = {"Authorization": f"Bearer {token}"}
        forbidden = await http.get(f"/api/documents/{outside}", headers=auth)
        assert forbidden.status_code == 403
        assert "hidden" not in forbidden.text
        ok = await http.get(f"/api/documents/{inside}", headers=auth)
        assert ok.status_code == 200
        assert ok.json()["text"] == "visible"
        listed = await http.get("/api/documents", headers=auth)
        names = {d["name"] for d in listed.json()["documents"]}
        assert inside in names and outside not in names


async def test_a_server_with_auth_none_lets_anyone_in(fresh_server: ServerProcess):
    fresh_server.auth = "none"
    fresh_server.start()
    with anyio.fail_after(15):
        async with await MuxPeer.connect(fresh_server.ws_url) as peer:
            doc = await peer.open("open-doc", "")
            assert doc.scope == "read-write"
            await doc.append("anyone")
            await doc.wait_acked()
            assert doc.statuses[-1] is True
        async with await YwsPeer.connect(fresh_server.yjs_url, "open-doc", "") as y:
            await y.single.wait_synced()
            assert str(y.single) == "anyone"
    async with httpx.AsyncClient(base_url=fresh_server.http_url, timeout=10) as http:
        response = await http.get("/api/documents/open-doc")
    assert response.status_code == 200
    assert response.json()["text"] == "anyone"


async def test_an_open_channel_is_revoked_when_its_token_expires(tmp_path):
    with ServerProcess(tmp_path, ping_interval=0.2, idle_timeout=5, auth_timeout=5) as srv:
        name = unique("expiring")
        with anyio.fail_after(15):
            async with await MuxPeer.connect(srv.ws_url) as peer:
                doc = await peer.open(name, srv.token([name], ttl=1.5))
                other = await peer.open(unique("lasting"), srv.token())
                await doc.wait(lambda: doc.denied is not None, what="revocation")
                assert doc.denied == "token expired"
                frames = len(doc.frames)
                await barrier(other)  # the socket and the other document live on
                assert doc.frames[frames:] == []
                assert not any(isinstance(f, Sync) for f in doc.frames[frames:])


async def test_an_editor_cannot_overwrite_or_remove_another_editors_presence(
    server: ServerProcess,
):
    """Another editor is another token subject (the same subject may take over:
    collab.rooms.room_presence)."""
    name = unique("spoof")
    token = server.token([name])
    with anyio.fail_after(15):
        async with (
            await MuxPeer.connect(server.ws_url) as owner,
            await MuxPeer.connect(server.ws_url) as spoofer,
            await MuxPeer.connect(server.ws_url) as watcher,
        ):
            o = await owner.open(name, token)
            s = await spoofer.open(name, make_token(server.secret, [name], subject="mallory"))
            w = await watcher.open(name, token)
            await o.set_awareness({"user": "owner"})
            victim = o.doc.client_id
            await w.wait(lambda: victim in w.awareness)
            forged = [
                AwarenessEntry(victim, 5, '{"user":"spoofed"}'),
                AwarenessEntry(victim, 6, "null"),
            ]
            for entry in forged:
                await spoofer.send(Awareness(name, encode_awareness([entry])).encode())
            # The spoofer's own presence, sent last, is a barrier for the forged ones.
            await s.set_awareness({"user": "spoofer"})
            await w.wait(lambda: s.doc.client_id in w.awareness)
            assert json.loads(w.awareness[victim]) == {"user": "owner"}
            # A newcomer's snapshot agrees.
            async with await MuxPeer.connect(server.ws_url) as late:
                n = await late.open(name, token)
                await n.wait(lambda: victim in n.awareness and s.doc.client_id in n.awareness)
                assert json.loads(n.awareness[victim]) == {"user": "owner"}


async def test_reauthenticating_an_open_channel_with_a_token_that_no_longer_allows_it_detaches_it(
    server: ServerProcess,
):
    name = unique("revoked")
    token = server.token([name])
    with anyio.fail_after(15):
        async with (
            await MuxPeer.connect(server.ws_url) as peer,
            await MuxPeer.connect(server.ws_url) as writer,
        ):
            doc = await peer.open(name, token)
            keep = await peer.open(unique("kept"), server.token())
            w = await writer.open(name, token)
            await peer.send(AuthToken(name, server.token(["elsewhere"])).encode())
            await doc.wait(lambda: doc.denied is not None, what="PermissionDenied")
            frames = len(doc.frames)
            await w.append("after revocation")
            await w.wait_acked()
            await barrier(keep)  # the writer's edit was fanned out before this round trip
            assert doc.frames[frames:] == []
            assert "after revocation" not in str(doc)
            assert not peer.closed

"""Hooks and the server-side direct connection, through a real host app under uvicorn that
records every hook (tests/hosts/hooks_host.py); one of its extensions fails in every hook,
which tether must contain (issue 12, "Embedding")."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
import websockets

from tests.hostproc import REPO, HostProcess
from tests.httppeer import HttpMuxPeer, create_session
from tests.rawpeer import MuxPeer, YwsPeer
from tests.serverproc import SECRET
from tether.collab.auth.tokens import make_token
from tether.protocol.clients.tether_client import PermissionDeniedError, TetherClient
from tether.protocol.wire.messages import Stateless

pytestmark = pytest.mark.anyio

HOOKS_HOST = REPO / "tests" / "hosts" / "hooks_host.py"


@pytest.fixture
def host(tmp_path: Path) -> Iterator[HostProcess]:
    with HostProcess(HOOKS_HOST, tmp_path, "--secret", SECRET, ready_path="/t/health") as proc:
        yield proc


def events_until(host: HostProcess, needle: str) -> list[str]:
    """Every event so far, once one containing ``needle`` has happened (the host waits)."""
    reply = httpx.get(host.http_url + "/events", params={"until": needle}, timeout=15)
    assert reply.status_code == 200, f"no {needle!r} in {reply.json()['events']}"
    return list(reply.json()["events"])


def after(events: list[str], first: str, then: str) -> bool:
    firsts = [i for i, e in enumerate(events) if first in e]
    return bool(firsts) and any(then in e for e in events[firsts[0] + 1 :])


async def test_on_connect_refuses_by_raising_and_fills_the_context_later_hooks_see(host):
    with pytest.raises(websockets.InvalidStatus) as refused:
        await MuxPeer.connect(host.ws("/t/ws"), additional_headers={"x-banned": "1"})
    assert refused.value.response.status_code == 403
    async with await MuxPeer.connect(host.ws("/t/ws"), additional_headers={"x-user": "carol"}) as p:
        doc = await p.open("hooks/ctx", "db:carol")
        assert doc.scope == "read-write"
    events = events_until(host, "disconnect ws user=carol")
    assert "connect ws user=carol" in events
    # on_connect's context reached it, and so did the headers
    assert "authenticate hooks/ctx ws user=carol header=carol" in events


async def test_hooks_see_the_headers_after_the_accept_under_tether_serves_protocol(tmp_path):
    """SlimWebSocketsProtocol drops the scope's headers once accepted; on_authenticate runs
    later (per document) and must still read them."""
    args = ("--secret", SECRET, "--slim-ws")
    with HostProcess(HOOKS_HOST, tmp_path, *args, ready_path="/t/health") as slim:
        url = slim.ws("/t/ws")
        async with await MuxPeer.connect(url, additional_headers={"x-user": "erin"}) as p:
            doc = await p.open("hooks/late", "db:erin")
            assert doc.scope == "read-write"
            second = await p.open("hooks/later", "db:erin")  # after the accept, long after
            assert second.scope == "read-write"
        events = events_until(slim, "disconnect ws user=erin")
    assert "authenticate hooks/later ws user=erin header=erin" in events


async def test_on_authenticate_grants_denies_or_falls_through_to_jwt(host):
    url = host.ws("/t/ws")
    async with TetherClient(url) as client:
        alice = await client.open("hooks/a", token="db:alice")
        assert alice.scope == "read-write"
        alice.append("stored, so REST lists it")
        await alice.wait_acked()
        assert (await client.open("hooks/r", token="db:reader")).scope == "readonly"
        with pytest.raises(PermissionDeniedError, match="no such user in the host's database"):
            await client.open("hooks/n", token="db:nobody")
        with pytest.raises(PermissionDeniedError, match="authentication failed"):
            await client.open("hooks/b", token="db:boom")  # the hook crashed: denied, logged
        with pytest.raises(PermissionDeniedError, match="document not allowed by token"):
            await client.open("elsewhere", token="db:alice")  # the grant still governs
        with pytest.raises(PermissionDeniedError, match="invalid token"):
            await client.open("hooks/x", token="not-a-jwt")  # None: tether's JWT check decides
        token = make_token(SECRET, ["jwt/*"])
        other = await client.open("jwt/doc", token=token)
        assert other.scope == "read-write"
        other.append("not alice's")
        await other.wait_acked()
    assert "on_authenticate hook failed in HostDatabase.on_authenticate" in host.log()
    # /yjs and REST ask the same hook
    async with await YwsPeer.connect(host.ws("/t/yjs"), "hooks/y", "db:alice") as peer:
        await peer.single.wait_synced()
    with pytest.raises(websockets.InvalidStatus):
        await YwsPeer.connect(host.ws("/t/yjs"), "hooks/y", "db:nobody")
    headers = {"Authorization": "Bearer db:alice"}
    listed = httpx.get(host.http_url + "/t/api/documents", headers=headers).json()["documents"]
    names = {d["name"] for d in listed}
    assert "hooks/a" in names and "jwt/doc" not in names
    assert httpx.get(host.http_url + "/t/api/documents/jwt/doc", headers=headers).status_code == 403
    bad = {"Authorization": "Bearer db:nobody"}
    assert httpx.get(host.http_url + "/t/api/documents", headers=bad).status_code == 401


async def test_on_load_seeds_a_template_once_and_editors_receive_it(host):
    async with TetherClient(host.ws("/t/ws"), token="db:alice") as client:
        doc = await client.open("hooks/template-1")
        assert str(doc) == "# Template\n"  # in the first sync: seeded before any editor
        doc.append("mine")
        await doc.wait_acked()
        await client.close_document("hooks/template-1")
    events_until(host, "unload hooks/template-1")
    async with TetherClient(host.ws("/t/ws"), token="db:alice") as client:
        doc = await client.open("hooks/template-1")
        assert str(doc) == "# Template\nmine"  # reloaded from the store, not seeded again
    assert "on_load hook failed in Broken" in host.log()  # and the later extensions still ran


async def test_an_edit_runs_change_store_after_store_stateless_disconnect_unload(host):
    async with await MuxPeer.connect(host.ws("/t/ws"), additional_headers={"x-user": "dan"}) as p:
        doc = await p.open("hooks/flow", "db:dan")
        await doc.append("hello")
        await doc.wait_acked()  # the Broken extension's failures did not cost the ack
        await p.send(Stateless("hooks/flow", '{"ping":1}').encode())
        events_until(host, 'stateless hooks/flow {"ping":1}')
    events = events_until(host, "unload hooks/flow text='hello'")
    assert after(events, "load hooks/flow", "change hooks/flow origin=editor")
    assert after(events, "change hooks/flow origin=editor", "store hooks/flow")
    assert after(events, "store hooks/flow", "after_store hooks/flow")
    assert after(events, "after_store hooks/flow", "disconnect ws user=dan")
    log = host.log()
    for hook in ("on_change", "on_store", "after_store", "on_stateless", "on_detach"):
        assert f"{hook} hook failed in Broken" in log, hook
    assert "on_disconnect hook failed in Broken" in log
    assert "on_unload hook failed in Broken" in log


async def test_presence_reads_and_deletes_run_their_hooks_and_failing_ones_are_contained(host):
    headers = {"Authorization": "Bearer db:alice"}
    async with await MuxPeer.connect(host.ws("/t/ws")) as p:
        doc = await p.open("hooks/cycle", "db:alice")
        await doc.wait(lambda: 900 in doc.awareness, what="presence held elsewhere")
        await doc.append("kept")
        await doc.wait_acked()
        await doc.set_awareness({"name": "Alice"})
        events_until(host, "presence hooks/cycle")
        url = host.http_url + "/t/api/documents/hooks/cycle"
        reply = httpx.get(url, headers=headers, timeout=10)
        assert reply.json()["text"] == "kept"  # the Broken before_read did not stop the read
        assert "before_read hooks/cycle" in events_until(host, "before_read hooks/cycle")
        assert httpx.delete(url, headers=headers, timeout=10).json() == {
            "name": "hooks/cycle",
            "deleted": True,
        }
    events_until(host, "deleted hooks/cycle")
    log = host.log()
    for hook in ("on_presence", "remote_presence", "before_read", "on_deleted"):
        assert f"{hook} hook failed in Broken" in log, hook


async def test_a_direct_connection_edits_as_the_host_and_is_durable_when_it_returns(host):
    async with TetherClient(host.ws("/t/ws"), token="db:alice") as client:
        editor = await client.open("hooks/direct")
        editor.append("from the editor. ")
        await editor.wait_acked()
        reply = httpx.post(
            host.http_url + "/direct/" + quote("hooks/direct"),
            json={"append": "from the host."},
            timeout=10,
        )
        assert reply.json() == {
            "text": "from the editor. from the host.",
            "origin": "host-app",
        }
        await editor.wait_text("from the editor. from the host.")  # broadcast to editors
    assert "change hooks/direct origin=host-app" in events_until(host, "after_store hooks/direct")
    # The reply came after the commit: a crash now loses nothing.
    assert host.proc is not None
    host.proc.send_signal(signal.SIGKILL)
    host.proc.wait(10)
    host.start()
    reply = httpx.get(host.http_url + "/direct/" + quote("hooks/direct"), timeout=10)
    assert reply.json()["text"] == "from the editor. from the host."


async def test_a_direct_change_that_fails_halfway_still_reaches_editors_and_the_store(host):
    async with TetherClient(host.ws("/t/ws"), token="db:alice") as client:
        editor = await client.open("hooks/half")
        reply = httpx.post(
            host.http_url + "/direct/hooks/half",
            json={"append": "b", "fail_after": "a"},
            timeout=10,
        )
        assert reply.json()["text"] == "ab"  # pycrdt has no rollback: what was done is kept...
        await editor.wait_text("ab")  # ...and published, not left only in the server's copy


async def test_http_fallback_sessions_run_the_same_on_connect_hooks_as_ws(host):
    """A session on the HTTP fallback is a socket arriving: on_connect refuses it (403 with
    the hook's reason, as the /ws upgrade is refused) or fills the context that every
    on_authenticate of the session then sees, and on_disconnect follows when it ends."""
    base = host.http_url + "/t"
    http, refused = await create_session(base, "db:carol", headers={"x-banned": "1"})
    await http.aclose()
    assert refused.status_code == 403
    assert refused.json() == {"error": "banned by the host"}
    peer = await HttpMuxPeer.connect(base, "db:dave", headers={"x-user": "dave"})
    async with peer:
        doc = await peer.open("hooks/http", "db:dave")
        assert doc.scope == "read-write"
    events = events_until(host, "disconnect http user=dave")
    assert "connect http user=dave" in events
    assert "authenticate None http user=dave header=dave" in events  # the session's own token
    assert "authenticate hooks/http http user=dave header=dave" in events  # a channel's, in it
    assert after(events, "connect http user=dave", "disconnect http user=dave")
    metrics = httpx.get(host.http_url + "/t/metrics", timeout=5).text
    assert 'tether_auth_failures_total{reason="on_connect"}' in metrics

"""Real JS clients (@hocuspocus/provider 4.8 on /ws, y-websocket 3 on /yjs/{doc}) against the
real server, alongside a raw Python editor. These fail, never skip, without Node."""

from __future__ import annotations

import json
import uuid
from typing import Any

import anyio
import httpx
import pytest

from tests.jsclient import NODE_MODULES_MISSING, JsEditor, node_available
from tests.rawpeer import MuxPeer
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.anyio


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def has_state(event: dict[str, Any], doc: str, client_id: int, name: str | None = None) -> bool:
    if event.get("event") != "awareness" or event.get("doc") != doc:
        return False
    for entry in event["states"]:
        if entry["clientID"] == client_id:
            return name is None or (entry["state"] or {}).get("user", {}).get("name") == name
    return False


def lacks_state(event: dict[str, Any], doc: str, client_id: int) -> bool:
    return (
        event.get("event") == "awareness"
        and event.get("doc") == doc
        and all(entry["clientID"] != client_id for entry in event["states"])
    )


async def rest_text(server: ServerProcess, name: str) -> str:
    async with httpx.AsyncClient(timeout=10) as http:
        response = await http.get(
            f"{server.http_url}/api/documents/{name}",
            headers={"Authorization": f"Bearer {server.token([name])}"},
        )
    if response.status_code == 404:  # never stored (nor loaded with content): no text
        return ""
    response.raise_for_status()
    return str(response.json()["text"])


def test_node_and_the_js_client_packages_are_installed():
    assert node_available(), NODE_MODULES_MISSING


async def test_js_editors_on_both_endpoints_and_a_python_editor_converge_with_emoji(
    server: ServerProcess,
):
    doc, second = unique("interop"), unique("interop-second")
    token = server.token([doc, second])
    with anyio.fail_after(60):
        async with (
            JsEditor.hocuspocus(server.ws_url, docs=[doc, second], token=token) as hoc,
            JsEditor.y_websocket(server.yjs_url, doc=doc, token=token) as yws,
            await MuxPeer.connect(server.ws_url) as py,
        ):
            await hoc.wait_synced(doc)
            await hoc.wait_synced(second)
            await yws.wait_synced(doc)
            p = await py.open(doc, token)
            p2 = await py.open(second, token)

            # Hocuspocus → y-websocket and Python.
            await hoc.insert(doc, 0, "héllo 👋")
            await yws.wait_text(doc, "héllo 👋")
            await p.wait_text("héllo 👋")

            # y-websocket → Hocuspocus and Python, right after and right before a surrogate
            # pair (JS indices are UTF-16 code units: 👋 spans 6..8).
            await yws.insert(doc, 8, " 🌍")
            await yws.insert(doc, 6, "«")
            expected = "héllo «👋 🌍"
            await hoc.wait_text(doc, expected)
            await p.wait_text(expected)

            # Python → both JS editors.
            await p.append(" 🐍")
            await p.wait_acked()
            assert all(p.statuses)
            expected += " 🐍"
            await hoc.wait_text(doc, expected)
            await yws.wait_text(doc, expected)

            # A delete of the whole pair, from Hocuspocus.
            await hoc.delete(doc, 7, 2)
            expected = "héllo « 🌍 🐍"
            await yws.wait_text(doc, expected)
            await p.wait_text(expected)

            # The second document on the same Hocuspocus socket, both ways.
            await hoc.insert(second, 0, "second 📄")
            await p2.wait_text("second 📄")
            await p2.append("!")
            await hoc.wait_text(second, "second 📄!")

            assert second not in yws.texts, "the y-websocket editor only has its own document"
            assert await hoc.get_text(doc) == expected
            assert await yws.get_text(doc) == expected
            assert await rest_text(server, doc) == expected
            assert hoc.errors() == [] and yws.errors() == []


async def test_hocuspocus_unsynced_changes_return_to_zero_as_acks_arrive(server: ServerProcess):
    doc, second = unique("acks"), unique("acks-second")
    token = server.token([doc, second])
    with anyio.fail_after(30):
        async with JsEditor.hocuspocus(server.ws_url, docs=[doc, second], token=token) as hoc:
            await hoc.wait_synced(doc)
            await hoc.wait_synced(second)
            for k in range(20):
                await hoc.insert(doc, 0, f"{k}😀")
                await hoc.insert(second, 0, f"{k}é")
            for name in (doc, second):
                await hoc.wait_text(name, lambda t: t.startswith("19"))
            # Every update gets its SyncStatus: the counter settles at zero.
            for name in (doc, second):
                state = await hoc.state(name)
                while state["unsynced"] != 0:
                    await hoc.wait_for(
                        lambda e, n=name: e.get("event") == "unsynced" and e["doc"] == n
                    )
                    state = await hoc.state(name)
                assert state["synced"] is True and state["scope"] == "read-write"


async def test_presence_flows_between_hocuspocus_y_websocket_and_python_and_leaves_with_them(
    server: ServerProcess,
):
    doc = unique("presence")
    token = server.token([doc])
    with anyio.fail_after(60):
        async with await MuxPeer.connect(server.ws_url) as py:
            p = await py.open(doc, token)
            hoc = await JsEditor.hocuspocus(server.ws_url, docs=[doc], token=token).start()
            yws = await JsEditor.y_websocket(server.yjs_url, doc=doc, token=token).start()
            try:
                hoc_id = hoc.ready["clientIDs"][doc]
                yws_id = yws.ready["clientIDs"][doc]
                await hoc.wait_synced(doc)
                await yws.wait_synced(doc)
                await hoc.set_awareness(doc, {"user": {"name": "Ann 👩"}})
                await yws.set_awareness(doc, {"user": {"name": "Bob"}})
                await yws.wait_for(lambda e: has_state(e, doc, hoc_id, "Ann 👩"))
                await hoc.wait_for(lambda e: has_state(e, doc, yws_id, "Bob"))
                await p.wait(lambda: hoc_id in p.awareness and yws_id in p.awareness)
                assert json.loads(p.awareness[hoc_id])["user"]["name"] == "Ann 👩"

                # Python → JS.
                await p.set_awareness({"user": {"name": "Py"}})
                py_id = p.doc.client_id
                await hoc.wait_for(lambda e: has_state(e, doc, py_id, "Py"))
                await yws.wait_for(lambda e: has_state(e, doc, py_id, "Py"))

                # Leaving removes the presence for everyone else.
                await hoc.quit()
                await yws.wait_for(lambda e: lacks_state(e, doc, hoc_id))
                await p.wait(lambda: hoc_id not in p.awareness, what="Hocuspocus presence gone")
                await yws.quit()
                await p.wait(lambda: yws_id not in p.awareness, what="y-websocket presence gone")
            finally:
                await hoc.quit()
                await yws.quit()


async def test_a_python_editor_leaving_removes_its_presence_from_js_editors(
    server: ServerProcess,
):
    doc = unique("py-leaves")
    token = server.token([doc])
    with anyio.fail_after(30):
        async with (
            JsEditor.hocuspocus(server.ws_url, docs=[doc], token=token) as hoc,
            JsEditor.y_websocket(server.yjs_url, doc=doc, token=token) as yws,
        ):
            await hoc.wait_synced(doc)
            await yws.wait_synced(doc)
            py = await MuxPeer.connect(server.ws_url)
            p = await py.open(doc, token)
            await p.set_awareness({"user": {"name": "ghost"}})
            py_id = p.doc.client_id
            await hoc.wait_for(lambda e: has_state(e, doc, py_id, "ghost"))
            await yws.wait_for(lambda e: has_state(e, doc, py_id, "ghost"))
            py.ws.transport.abort()  # no goodbye: the server must clean up
            await py.aclose()
            await hoc.wait_for(lambda e: lacks_state(e, doc, py_id))
            await yws.wait_for(lambda e: lacks_state(e, doc, py_id))


def sync_status_frames(editor: JsEditor, doc: str) -> list[str]:
    """Hex of every SyncStatus (type 8) frame a traced Hocuspocus editor received for doc."""
    return [
        e["hex"]
        for e in editor.events
        if e.get("event") == "frame"
        and e.get("dir") == "in"
        and e.get("type") == 8
        and e.get("name") == doc
    ]


async def test_a_readonly_hocuspocus_editor_cannot_write_but_still_receives_edits(
    server: ServerProcess,
):
    doc = unique("readonly-js")
    token = server.token([doc])
    readonly = server.token([doc], scope="readonly")
    with anyio.fail_after(60):
        async with (
            await MuxPeer.connect(server.ws_url) as py,
            JsEditor.y_websocket(server.yjs_url, doc=doc, token=token) as yws,
            JsEditor.hocuspocus(server.ws_url, docs=[doc], token=readonly, trace=True) as ro,
        ):
            writer = await py.open(doc, token)
            await writer.append("base")
            await writer.wait_acked()
            auth = await ro.wait_event("authenticated", doc=doc)
            assert auth["scope"] == "readonly"
            await ro.wait_synced(doc)
            await ro.wait_text(doc, "base")
            await yws.wait_text(doc, "base")
            is_frame = lambda e: e.get("event") == "frame"  # noqa: E731
            while not sync_status_frames(ro, doc):  # the ack of its (empty) step2 reply
                await ro.wait_for(is_frame)
            acks_before = len(sync_status_frames(ro, doc))

            await ro.insert(doc, 0, "RO✗ ")
            while len(sync_status_frames(ro, doc)) == acks_before:
                await ro.wait_for(is_frame)
            new_acks = sync_status_frames(ro, doc)[acks_before:]
            assert new_acks and all(h.endswith("0800") for h in new_acks), new_acks

            # The writer's next edit reaches everyone after the refused one would have.
            await writer.append(" writer")
            await writer.wait_acked()
            await yws.wait_text(doc, "base writer")
            await ro.wait_text(doc, lambda t: "writer" in t)
            assert "RO" not in str(writer)
            assert await rest_text(server, doc) == "base writer"
            state = await ro.state(doc)
            assert state["scope"] == "readonly"


async def test_a_hocuspocus_document_detached_and_reattached_on_a_shared_socket_resyncs(
    server: ServerProcess,
):
    doc, second = unique("attach"), unique("attach-second")
    token = server.token([doc, second])
    with anyio.fail_after(30):
        async with (
            JsEditor.hocuspocus(server.ws_url, docs=[doc, second], token=token) as hoc,
            await MuxPeer.connect(server.ws_url) as py,
        ):
            await hoc.wait_synced(doc)
            await hoc.wait_synced(second)
            p = await py.open(doc, token)
            p2 = await py.open(second, token)
            await hoc.send({"cmd": "detach", "doc": second})
            # The server handles one socket's frames in order: once an edit hoc makes after the
            # detach reaches py, the server has processed the detach's Close too.
            await hoc.insert(doc, 0, "after detach ")
            await p.wait_text("after detach ")
            await p2.append("while detached")
            await p2.wait_acked()
            # The attached document keeps flowing on the same socket meanwhile.
            await p.append("attached")
            await hoc.wait_text(doc, "after detach attached")
            assert hoc.texts.get(second, "") == ""
            await hoc.send({"cmd": "attach", "doc": second})
            await hoc.wait_text(second, "while detached")
            await hoc.insert(second, 0, "back: ")
            await p2.wait_text("back: while detached")


async def test_a_hocuspocus_editor_with_session_awareness_syncs_and_shares_presence(
    server: ServerProcess,
):
    doc = unique("session")
    token = server.token([doc])
    with anyio.fail_after(30):
        async with (
            JsEditor.hocuspocus(
                server.ws_url, docs=[doc], token=token, session_awareness=True
            ) as hoc,
            JsEditor.y_websocket(server.yjs_url, doc=doc, token=token) as yws,
        ):
            await hoc.wait_synced(doc)
            await yws.wait_synced(doc)
            await hoc.insert(doc, 0, "session ✓")
            await yws.wait_text(doc, "session ✓")
            await yws.insert(doc, 0, ">")
            await hoc.wait_text(doc, ">session ✓")
            hoc_id = hoc.ready["clientIDs"][doc]
            await hoc.set_awareness(doc, {"user": {"name": "S"}})
            await yws.wait_for(lambda e: has_state(e, doc, hoc_id, "S"))


async def test_js_editors_reconnect_after_a_server_crash_and_deliver_offline_edits(
    fresh_server: ServerProcess,
):
    fresh_server.start()
    doc = "reconnect-js"
    token = fresh_server.token([doc])
    with anyio.fail_after(60):
        async with (
            JsEditor.hocuspocus(fresh_server.ws_url, docs=[doc], token=token) as hoc,
            JsEditor.y_websocket(fresh_server.yjs_url, doc=doc, token=token) as yws,
        ):
            await hoc.wait_synced(doc)
            await yws.wait_synced(doc)
            await hoc.insert(doc, 0, "before")
            await yws.wait_text(doc, "before")
            # Let the insert's ack land so "before" is durable, then crash.
            state = await hoc.state(doc)
            while state["unsynced"]:
                await hoc.wait_for(lambda e: e.get("event") == "unsynced")
                state = await hoc.state(doc)
            fresh_server.kill()
            await hoc.wait_for(lambda e: e.get("event") == "close")
            await yws.wait_for(lambda e: e.get("event") == "close")
            await hoc.insert(doc, 6, " hoc-offline")
            await yws.insert(doc, 0, "yws-offline ")
            fresh_server.start()
            expected = "yws-offline before hoc-offline"
            await hoc.wait_text(doc, expected, timeout=20)
            await yws.wait_text(doc, expected, timeout=20)
            assert await rest_text(fresh_server, doc) == expected


async def test_idle_js_editors_stay_connected_past_the_idle_timeout(tmp_path):
    """The Hocuspocus provider answers our Ping; y-websocket gets keepalive frames."""
    doc = "idle-js"
    with ServerProcess(tmp_path, idle_timeout=1.5, ping_interval=0.25, auth_timeout=1) as srv:
        token = srv.token([doc])
        with anyio.fail_after(30):
            async with (
                JsEditor.hocuspocus(srv.ws_url, docs=[doc], token=token) as hoc,
                JsEditor.y_websocket(srv.yjs_url, doc=doc, token=token) as yws,
                await MuxPeer.connect(srv.ws_url) as clock,
            ):
                await hoc.wait_synced(doc)
                await yws.wait_synced(doc)
                await clock.open(doc, token)
                # Server pings are our clock: wait for two idle timeouts to pass.
                await clock.watch.until(lambda: clock.pings >= 12, 15, "server pings")
                closes = [e for e in hoc.events + yws.events if e.get("event") == "close"]
                assert closes == []
                await hoc.insert(doc, 0, "still here")
                await yws.wait_text(doc, "still here")


async def test_a_name_with_a_slash_a_space_and_accents_is_one_document_on_both_endpoints(
    server: ServerProcess,
):
    doc = f"team/notes é {uuid.uuid4().hex[:6]}"
    token = server.token(["team/*"])
    with anyio.fail_after(30):
        async with (
            JsEditor.hocuspocus(server.ws_url, docs=[doc], token=token) as hoc,
            JsEditor.y_websocket(server.yjs_url, doc=doc, token=token) as yws,
        ):
            await hoc.wait_synced(doc)
            await yws.wait_synced(doc)
            await yws.insert(doc, 0, "via yjs")
            await hoc.wait_text(doc, "via yjs")
            await hoc.insert(doc, 7, " + ws")
            await yws.wait_text(doc, "via yjs + ws")
        assert await rest_text(server, doc) == "via yjs + ws"


async def test_the_python_tether_client_and_js_editors_agree_on_code_point_edits(
    server: ServerProcess,
):
    from tether.protocol.clients.tether_client import TetherClient

    doc = unique("tether-client")
    token = server.token([doc])
    with anyio.fail_after(30):
        async with (
            JsEditor.hocuspocus(server.ws_url, docs=[doc], token=token) as hoc,
            JsEditor.y_websocket(server.yjs_url, doc=doc, token=token) as yws,
            TetherClient(server.ws_url, token=token) as client,
        ):
            await hoc.wait_synced(doc)
            await yws.wait_synced(doc)
            d = await client.open(doc)
            await hoc.insert(doc, 0, "a👋b")
            await d.wait_text("a👋b")
            d.insert(2, "🌍")  # code points: right after 👋
            d.insert(1, "«")  # right before it
            await d.wait_acked()
            await yws.wait_text(doc, "a«👋🌍b")
            await hoc.wait_text(doc, "a«👋🌍b")
            d.delete(2, 1)  # the 👋
            await hoc.wait_text(doc, "a«🌍b")
            await yws.wait_text(doc, "a«🌍b")  # its indices must mean what we think
            await yws.insert(doc, 5, "!")  # UTF-16: a « 🌍(2) b → end is 5
            await d.wait_text("a«🌍b!")


async def test_a_hocuspocus_editor_refused_one_document_keeps_the_other_on_the_same_socket(
    server: ServerProcess,
):
    allowed, refused = unique("ok"), unique("nope")
    async with await MuxPeer.connect(server.ws_url) as seeder:
        secret = await seeder.open(refused, server.token([refused]))
        await secret.append("secret")
        await secret.wait_acked()
    with anyio.fail_after(30):
        async with (
            JsEditor.hocuspocus(
                server.ws_url, docs=[allowed, refused], token=server.token([allowed])
            ) as hoc,
            await MuxPeer.connect(server.ws_url) as py,
        ):
            denied = await hoc.wait_event("denied", doc=refused)
            assert "not allowed" in denied["reason"]
            await hoc.wait_synced(allowed)
            p = await py.open(allowed, server.token([allowed]))
            await hoc.insert(allowed, 0, "fine")
            await p.wait_text("fine")
            assert hoc.texts.get(refused, "") == ""
            state = await hoc.state(refused)
            assert state["text"] == "" and state["synced"] is False

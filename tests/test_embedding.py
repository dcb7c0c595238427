"""tether mounted inside host apps (FastAPI, Starlette) under a prefix, each a real process
under uvicorn: the editor page and its bundle, /ws sync, REST, and the host's lifespan
starting and stopping tether (issue 12, "Embedding")."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import httpx
import pytest
import websockets

from tests.hostproc import REPO, HostProcess
from tether.protocol.clients.tether_client import TetherClient

pytestmark = pytest.mark.anyio

FASTAPI_EXAMPLE = REPO / "examples" / "fastapi_mount.py"
STARLETTE_HOST = REPO / "tests" / "hosts" / "starlette_host.py"


def page_config(page: str) -> dict[str, object]:
    match = re.search(r"window\.TETHER = (\{.*?\});</script>", page)
    assert match, page
    return dict(json.loads(match.group(1)))


def stopped_cleanly(host: HostProcess) -> None:
    """SIGTERM: uvicorn runs the host's lifespan shutdown (tether's stop()), then re-raises
    the signal, so -15 is its clean exit."""
    assert host.stop() in (0, -signal.SIGTERM), host.log()
    assert "Application shutdown complete" in host.log()
    assert "Traceback" not in host.log()


async def two_editors_sync(url: str, name: str) -> None:
    async with TetherClient(url) as alice, TetherClient(url) as bob:
        a = await alice.open(name)
        b = await bob.open(name)
        a.append("typed through the mount")
        await a.wait_acked()  # acked = durably stored
        await b.wait_text("typed through the mount")


async def test_a_fastapi_app_serves_tether_under_collab_editor_ws_and_rest(tmp_path: Path):
    pytest.importorskip("fastapi")
    with HostProcess(FASTAPI_EXAMPLE, tmp_path, ready_path="/hello") as host:
        async with httpx.AsyncClient(base_url=host.http_url) as http:
            page = await http.get("/collab/d/team/notes")
            assert page.status_code == 200, page.text
            assert 'src="/collab/static/editor.js"' in page.text
            assert 'href="/collab/static/editor.css"' in page.text
            assert page_config(page.text)["base"] == "/collab"
            assert page_config(page.text)["document"] == "team/notes"
            bundle = await http.get("/collab/static/editor.js")
            assert bundle.status_code == 200
            assert "javascript" in bundle.headers["content-type"]
            index = await http.get("/collab/")
            assert 'src="/collab/static/index.js"' in index.text
            assert (await http.get("/collab/static/index.js")).status_code == 200

            await two_editors_sync(host.ws("/collab/ws"), "team/notes")

            doc = await http.get("/collab/api/documents/team/notes")
            assert doc.status_code == 200, doc.text
            assert doc.json()["text"] == "typed through the mount"
            listed = (await http.get("/collab/api/documents")).json()["documents"]
            assert [d["name"] for d in listed] == ["team/notes"]
            assert (await http.get("/collab/health")).json()["status"] == "ok"
            assert (await http.get("/hello")).json()["hello"] == "from the host"
            # The prefix is tether's; the host's root is not.
            assert (await http.get("/ws")).status_code == 404
        stopped_cleanly(host)
    # The host's lifespan stopped tether cleanly: a new host process finds the edit.
    with HostProcess(FASTAPI_EXAMPLE, tmp_path, ready_path="/hello") as host:
        reply = httpx.get(host.http_url + "/collab/api/documents/team/notes")
        assert reply.json()["text"] == "typed through the mount"


async def test_a_starlette_app_mounts_tether_under_a_nested_prefix(tmp_path: Path):
    with HostProcess(STARLETTE_HOST, tmp_path, "--prefix", "/apps/tether") as host:
        async with httpx.AsyncClient(base_url=host.http_url) as http:
            assert (await http.get("/")).text == "the host's own page"
            page = await http.get("/apps/tether/d/draft")
            assert 'src="/apps/tether/static/editor.js"' in page.text
            assert page_config(page.text)["base"] == "/apps/tether"
            assert (await http.get("/apps/tether/static/editor.js")).status_code == 200
            await two_editors_sync(host.ws("/apps/tether/ws"), "draft")
            assert (await http.get("/apps/tether/api/documents/draft")).json()["text"] == (
                "typed through the mount"
            )
        # the y-websocket endpoint is routed by the path below the prefix too; its token in
        # the URL stays out of the host's uvicorn access log (issue 26: only tether serve
        # redacted it)
        secret = "eyJhbGciOiJIUzI1NiJ9.e30.hostsecretsig"
        async with websockets.connect(host.ws(f"/apps/tether/yjs/draft?token={secret}")) as ws:
            with anyio.fail_after(10):
                first = await ws.recv()  # the server's step1 opens the handshake
            assert isinstance(first, bytes) and first[:2] == b"\x00\x00"
        stopped_cleanly(host)
        assert "yjs/draft?token=[REDACTED]" in host.log() and secret not in host.log()


async def test_a_mount_whose_host_never_starts_tether_says_so(tmp_path: Path):
    with HostProcess(STARLETTE_HOST, tmp_path, "--prefix", "/collab", "--no-start") as host:
        reply = httpx.get(host.http_url + "/collab/api/documents")
        assert reply.status_code == 503
        message = reply.json()["error"]
        assert "not started" in message and "lifespan" in message and "start()" in message
        assert httpx.get(host.http_url + "/collab/health").status_code == 503
        with pytest.raises(websockets.InvalidStatus) as refused:
            async with websockets.connect(host.ws("/collab/ws")):
                pass
        assert refused.value.response.status_code == 503
        assert b"tether is not started" in refused.value.response.body
        stopped_cleanly(host)
        assert host.log().count("tether is not started") == 1  # logged once, not per request


def test_the_embedding_api_example_runs(tmp_path: Path):
    """examples/embedding_api.py: settings, a store, an extension, an auth callback and a
    direct connection, served by uvicorn, with a Python client editing alongside."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / "embedding_api.py")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "change to notes/today by an editor",
        "change to notes/today by 'host-app'",
        "host reads: Typed in an editor. Added by the host.",
        "editor sees: Typed in an editor. Added by the host.",
    ]

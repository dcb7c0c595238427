"""Token edge cases (issue 10, item 14), against the real server: a string ``exp``, a token
without ``scope``, double percent-decoding on /yjs, prompt expiry on /yjs, path-aware ``docs``
globs, ``--jwt-secret`` on the command line, and who may read /metrics.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import anyio
import httpx
import jwt
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tests.rawpeer import MuxPeer, YwsPeer
from tests.serverproc import SECRET, ServerProcess, free_port
from tether.collab.auth.globs import matches
from tether.collab.connection.close_codes import TOKEN_EXPIRED

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parent.parent


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def minted(claims: dict[str, object]) -> str:
    return jwt.encode(claims, SECRET, algorithm="HS256")


async def test_a_string_exp_is_refused_everywhere(server: ServerProcess) -> None:
    name = unique("strexp")
    token = minted({"docs": [name], "scope": "read-write", "exp": str(int(time.time()) + 3600)})
    with anyio.fail_after(10):
        async with await MuxPeer.connect(server.ws_url) as peer:
            doc = await peer.attach(name, token)
            await doc.wait(lambda: doc.denied is not None, what="the refusal")
        with pytest.raises(InvalidStatus) as refused:
            async with connect(f"{server.yjs_url}/{name}?token={token}"):
                pass
    assert doc.denied is not None and "'exp' must be a number" in doc.denied
    assert refused.value.response.status_code == 403
    async with httpx.AsyncClient(base_url=server.http_url) as http:
        reply = await http.get(
            f"/api/documents/{name}", headers={"Authorization": f"Bearer {token}"}
        )
    assert reply.status_code == 401


@pytest.mark.parametrize("exp", [True, 1e400, 10**400, None, [1]])
async def test_other_non_numeric_exps_are_refused(server: ServerProcess, exp: object) -> None:
    claims: dict[str, object] = {"docs": ["*"], "scope": "read-write"}
    claims["exp"] = float("inf") if exp == 1e400 else exp
    token = minted(claims)
    async with httpx.AsyncClient(base_url=server.http_url) as http:
        reply = await http.get("/api/documents", headers={"Authorization": f"Bearer {token}"})
    assert reply.status_code == 401


async def test_a_token_without_scope_is_readonly(server: ServerProcess) -> None:
    name = unique("noscope")
    token = minted({"docs": [name], "exp": int(time.time()) + 3600})
    with anyio.fail_after(10):
        async with await MuxPeer.connect(server.ws_url) as peer:
            doc = await peer.open(name, token)
            await doc.append("not allowed")
            # The first SyncStatus answers the client's (empty) step2, the second the edit.
            await doc.wait(lambda: len(doc.statuses) == 2, what="the edit's SyncStatus")
    assert doc.scope == "readonly"
    assert doc.statuses == [True, False]
    async with httpx.AsyncClient(base_url=server.http_url) as http:
        reply = await http.get(
            f"/api/documents/{name}", headers={"Authorization": f"Bearer {server.token([name])}"}
        )
    assert reply.status_code == 404  # the readonly edit stored nothing: still unknown


async def test_yjs_document_names_are_percent_decoded_once(server: ServerProcess) -> None:
    name = f"rep%41-{uuid.uuid4().hex[:6]}"  # a name with a literal "%41" in it
    decoded_twice = name.replace("%41", "A")
    token = server.token([name])  # allows only the literal name
    with anyio.fail_after(10):
        # On the wire "%" is "%25": /yjs/rep%2541-… is the document "rep%41-…".
        async with await YwsPeer.connect(server.yjs_url, name.replace("%", "%25"), token) as peer:
            await peer.single.wait_synced()
            await peer.single.append("literal")
            assert await peer.roundtrip()
    everything = server.token()
    async with httpx.AsyncClient(base_url=server.http_url) as http:
        headers = {"Authorization": f"Bearer {everything}"}
        # The listing reads the store, and /yjs has no acks: the append is listed once its
        # commit is in, which the roundtrip above does not wait for.
        with anyio.fail_after(10):
            while True:
                listed = (await http.get("/api/documents", headers=headers)).json()["documents"]
                names = {d["name"] for d in listed}
                if name in names:
                    break
                await anyio.sleep(0.05)
        got = await http.get(f"/api/documents/{name.replace('%', '%25')}", headers=headers)
    assert decoded_twice not in names
    assert got.json()["name"] == name and got.json()["text"] == "literal"


async def test_a_yjs_socket_closes_at_its_tokens_expiry_not_at_the_next_keepalive(
    server: ServerProcess,
) -> None:
    # The shared server pings every 15 s (the default): the close must come well before.
    name = unique("yjs-exp")
    expires = int(time.time()) + 2
    token = minted({"docs": [name], "scope": "read-write", "exp": expires})
    with anyio.fail_after(8):
        async with await YwsPeer.connect(server.yjs_url, name, token) as peer:
            await peer.single.wait_synced()
            code = await peer.wait_closed(timeout=6)
            closed_at = time.time()
    assert code == TOKEN_EXPIRED
    assert expires <= closed_at < expires + 2  # at expiry (allowing for a slow machine)


async def test_docs_globs_are_path_aware_and_a_lone_star_is_everything(
    server: ServerProcess,
) -> None:
    team = unique("team")
    one_level = server.token([f"{team}/*"])
    deep = server.token([f"{team}/**"])
    with anyio.fail_after(15):
        async with await MuxPeer.connect(server.ws_url) as peer:
            await peer.open(f"{team}/notes", one_level)
            nested = await peer.attach(f"{team}/secret/plans", one_level)
            await nested.wait(lambda: nested.denied is not None, what="refusal")
            await peer.open(f"{team}/secret/plans2", deep)
            await peer.open(f"{team}/a/b/c", server.token(["*"]))
    assert nested.denied == "document not allowed by token"


def test_glob_rules() -> None:
    assert matches("team/notes", "team/*") and not matches("team/a/b", "team/*")
    assert matches("team/a/b", "team/**") and matches("team/", "team/**")
    assert matches("a/b/c", "*") and matches("", "*")
    assert matches("doc1", "doc?") and not matches("doc/", "doc?")
    assert matches("v2", "v[0-9]") and not matches("v/", "v[!a]") and matches("vb", "v[!a]")
    assert not matches("a/b", "a[/]b")  # a class never matches "/"
    assert matches("x.md", "*.md") and not matches("xmd", "*.md")  # "." is literal
    assert matches("a+b(c)", "a+b(c)") and matches("[x", "[x")  # no regex leaks through
    assert matches("^x", "[^]x") and not matches("yx", "[^]x")


def test_a_jwt_secret_flag_is_discouraged_in_help_and_warned_about(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    help_text = subprocess.run(
        [sys.executable, "-m", "tether.collab.cli", "serve", "--help"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "visible to every user in ps" in " ".join(help_text.split())
    port = free_port()
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "tether.collab.cli", "serve"),
            *("--jwt-secret", SECRET, "--port", str(port), "--data-dir", str(tmp_path)),
            *("--ai-provider", "none", "--log-level", "warning"),
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()  # the warning comes before uvicorn starts
        while line and "--jwt-secret" not in line:
            line = proc.stderr.readline()
    finally:
        proc.terminate()
        proc.wait(10)
    assert "given on the command line" in line and "TETHER_JWT_SECRET" in line
    assert SECRET not in line


async def test_metrics_take_a_bearer_token_when_one_is_set(tmp_path: Path) -> None:
    with ServerProcess(tmp_path, metrics_token="scrape-me-0123456789") as srv:
        async with httpx.AsyncClient(base_url=srv.http_url) as http:
            missing = await http.get("/metrics")
            wrong = await http.get("/metrics", headers={"Authorization": "Bearer nope"})
            right = await http.get(
                "/metrics", headers={"Authorization": "Bearer scrape-me-0123456789"}
            )
    assert missing.status_code == wrong.status_code == 401
    assert right.status_code == 200
    assert 'tether_limit_refusals_total{limit="metrics_access"} 2.0' in right.text


def _non_loopback_address() -> str | None:
    """This machine's address on its default route (no packet is sent), if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.254.254.254", 1))
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if address.startswith("127.") else address


async def test_metrics_answer_only_loopback_clients_without_a_token(tmp_path: Path) -> None:
    address = _non_loopback_address()
    if address is None:
        pytest.skip("this machine has no non-loopback address to connect from")
    with ServerProcess(tmp_path, host="0.0.0.0") as srv:
        async with httpx.AsyncClient() as http:
            local = await http.get(f"http://127.0.0.1:{srv.port}/metrics")
            remote = await http.get(f"http://{address}:{srv.port}/metrics")
            health = await http.get(f"http://{address}:{srv.port}/health")
    assert local.status_code == 200
    assert remote.status_code == 403 and "loopback" in remote.json()["error"]
    assert health.status_code == 200  # only /metrics is guarded

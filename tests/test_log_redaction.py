"""Tokens never reach the server's log (issue 10, item 11): the real server with the access
log on, tokens in query strings of /yjs upgrades (accepted and refused) and of the editor page.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import anyio
import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tests.rawpeer import YwsPeer
from tests.serverproc import ServerProcess
from tether.collab.runtime.log_redaction import MARKER, redact

pytestmark = pytest.mark.anyio


async def test_tokens_in_query_strings_are_redacted_in_the_access_log(tmp_path: Path) -> None:
    name = f"logged-{uuid.uuid4().hex[:8]}"
    server = ServerProcess(tmp_path, log_level="info")  # info: uvicorn's access log is on
    with server:
        good = server.token([name])
        other = server.token(["elsewhere"])  # refused for this document: a 403 upgrade line
        with anyio.fail_after(10):
            async with await YwsPeer.connect(server.yjs_url, name, good) as peer:
                assert await peer.roundtrip()
            with pytest.raises(InvalidStatus):
                async with connect(f"{server.yjs_url}/{name}?token={other}"):
                    pass
            async with httpx.AsyncClient(base_url=server.http_url) as http:
                page = await http.get(f"/d/{name}", params={"token": good, "x": "1"})
                assert page.status_code == 200
                junk = await http.get("/health", params={"token": "not-a-jwt-but-secret"})
                assert junk.status_code == 200
    log = server.log_path.read_text(errors="replace")  # the whole log, after the server exited
    assert f"/yjs/{name}" in log and f"/d/{name}" in log, log  # the requests were logged...
    for secret in (good, other, "not-a-jwt-but-secret"):
        assert secret not in log  # ...without their tokens
        assert secret.split(".")[-1] not in log  # not even the signature
    assert f"token={MARKER}" in log


def test_redact_blanks_query_tokens_and_bare_jwts_and_leaves_the_rest() -> None:
    jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl"
    assert (
        redact(f"GET /yjs/a?token={jwt}&v=2 HTTP/1.1") == f"GET /yjs/a?token={MARKER}&v=2 HTTP/1.1"
    )
    assert redact("/d/x?Access_Token=abc#frag") == f"/d/x?Access_Token={MARKER}#frag"
    assert redact(f"Authorization: Bearer {jwt}") == f"Authorization: Bearer {MARKER}"
    assert redact("/d/tokens?mytoken=1&page=token") == "/d/tokens?mytoken=1&page=token"

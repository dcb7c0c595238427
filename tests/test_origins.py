"""Web pages the user visits cannot reach the server: Origin and Host checks and JSON-only
POSTs, attacked the way a hostile page would, against the real server (issue 10, item 10)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tests.metrics_scrape import metric_value, metrics_text
from tests.serverproc import ServerProcess
from tether.collab.connection.origins import OriginPolicy, normalise_origin

pytestmark = pytest.mark.anyio


async def upgrade_status(url: str, **headers: str) -> int:
    try:
        async with connect(url, additional_headers=headers, open_timeout=5):
            return 101
    except InvalidStatus as exc:
        return exc.response.status_code


async def test_auth_none_refuses_foreign_origins_and_rebinding_hosts(tmp_path: Path) -> None:
    with ServerProcess(tmp_path, auth="none") as server:
        own = f"http://127.0.0.1:{server.port}"
        assert await upgrade_status(server.ws_url, Origin="https://evil.example") == 403
        assert await upgrade_status(f"{server.yjs_url}/d", Origin="https://evil.example") == 403
        assert await upgrade_status(server.ws_url, Origin="null") == 403
        assert await upgrade_status(server.ws_url, Origin=own) == 101  # the web editor
        assert await upgrade_status(server.ws_url) == 101  # scripts send no Origin
        async with httpx.AsyncClient(base_url=server.http_url, timeout=10) as http:
            # DNS rebinding: evil.example resolved to 127.0.0.1, the page is "same-origin".
            rebound = {"Host": f"evil.example:{server.port}"}
            assert (await http.get("/api/documents/d", headers=rebound)).status_code == 403
            assert (await http.get("/api/documents/d")).status_code == 404  # let in: unknown
            assert (await http.get("/health", headers={"Host": "localhost"})).status_code == 200
            # A cross-site form posts text/plain without a preflight: refused unread.
            form = await http.post(
                "/api/suggest",
                content='{"doc":"d","kind":"complete","pos":0}',
                headers={"Content-Type": "text/plain"},
            )
            assert form.status_code in (415, 503), form.text  # 503: AI is off in this test
            text = await metrics_text(server)
        assert metric_value(text, "tether_origin_refusals_total", kind="websocket") == 3
        assert metric_value(text, "tether_origin_refusals_total", kind="http") == 1


async def test_jwt_mode_checks_origin_and_honours_the_allowed_list(tmp_path: Path) -> None:
    allowed = "https://docs.example.com"
    with ServerProcess(tmp_path, allowed_origins=allowed) as server:
        url = f"{server.yjs_url}/d?token={server.token()}"
        assert await upgrade_status(url, Origin="https://evil.example") == 403
        assert await upgrade_status(url, Origin=allowed) == 101
        assert await upgrade_status(url, Origin="https://DOCS.example.com:443") == 101
        async with httpx.AsyncClient(base_url=server.http_url, timeout=10) as http:
            # With tokens the Host is not checked (a rebinding page has no token to send).
            reply = await http.get(
                "/api/documents/d",
                headers={"Authorization": f"Bearer {server.token()}", "Host": "tether.internal"},
            )
            assert reply.status_code == 404  # let in (an unknown document), not 403


def test_the_policy_normalises_origins_and_knows_loopback() -> None:
    assert normalise_origin("HTTP://Example.COM:80/") == "http://example.com"
    assert normalise_origin("https://a.b:8443") == "https://a.b:8443"
    assert normalise_origin("ftp://a.b") is None
    assert normalise_origin("https://a.b/path") is None
    policy = OriginPolicy.from_settings("https://docs.example.com", auth="none")
    assert policy.refusal("localhost:8765", "http://localhost:3000") is None
    assert policy.refusal("[::1]:8765", "http://[::1]:8765") is None
    assert policy.refusal("192.168.1.5:8765", "http://192.168.1.5:8765") is None
    assert policy.refusal("docs.example.com", "https://docs.example.com") is None
    assert policy.refusal("evil.example:8765", "http://evil.example:8765") is not None
    assert policy.refusal("127.0.0.1:8765", "http://127.0.0.1.evil.example") is not None

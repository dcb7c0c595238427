"""CORS for the REST API, for the origins an operator lists (--cors-origins) and no others;
listing a site for REST gives its pages no WebSocket access (issue 12, operator conveniences)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tests.serverproc import ServerProcess

pytestmark = pytest.mark.anyio

APP = "https://app.example"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(
        tmp_path_factory.mktemp("cors"), cors_origins=f"{APP}, https://b.example"
    ) as s:
        yield s


async def test_a_listed_origin_gets_its_preflight_and_its_answers(server: ServerProcess) -> None:
    async with httpx.AsyncClient(base_url=server.http_url, timeout=10) as http:
        preflight = await http.options(
            "/api/documents",
            headers={
                "Origin": APP,
                "Access-Control-Request-Method": "GET",
                "Access-Control-Request-Headers": "authorization",
            },
        )
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == APP
        assert "authorization" in preflight.headers["access-control-allow-headers"].lower()
        listed = await http.get(
            "/api/documents",
            headers={"Origin": APP, "Authorization": f"Bearer {server.token()}"},
        )
        assert listed.status_code == 200
        assert listed.headers["access-control-allow-origin"] == APP


async def test_other_origins_and_other_paths_stay_refused(server: ServerProcess) -> None:
    async with httpx.AsyncClient(base_url=server.http_url, timeout=10) as http:
        evil = await http.get(
            "/api/documents",
            headers={"Origin": "https://evil.example", "Authorization": f"Bearer {server.token()}"},
        )
        assert evil.status_code == 403
        assert "access-control-allow-origin" not in evil.headers
        page = await http.get("/d/notes", headers={"Origin": APP})
        assert page.status_code == 403  # only the REST API is opened to the listed site
    with pytest.raises(InvalidStatus) as refused:
        async with connect(server.ws_url, origin=APP, open_timeout=10):  # type: ignore[arg-type]
            pass
    assert refused.value.response.status_code == 403

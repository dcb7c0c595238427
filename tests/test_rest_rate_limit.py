"""The REST API's request rate per client address (issue 39, item 2), through the real server:
past the burst an address gets 429 with Retry-After on every REST path, whatever its token,
while other addresses are served; behind a trusted proxy each forwarded address is its own,
behind an untrusted one they share the proxy's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.metrics_scrape import metric_value, metrics_text
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.anyio

BURST = 6


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    # A slow refill (one request a minute once the burst is spent): nothing comes back
    # between the requests of a test, however slow the machine.
    with ServerProcess(
        tmp_path_factory.mktemp("rate"),
        rest_rate_limit=1,
        rest_rate_window=60,
        rest_rate_burst=BURST,
    ) as running:
        yield running


def client_at(address: str) -> dict[str, str]:
    """A request as a trusted proxy (uvicorn trusts loopback by default) says ``address``
    sent it."""
    return {"X-Forwarded-For": address}


async def test_past_the_burst_an_address_gets_429_with_retry_after_and_others_are_served(
    server: ServerProcess,
) -> None:
    bearer = {"Authorization": f"Bearer {server.token()}"}
    async with httpx.AsyncClient(base_url=server.http_url, headers=bearer) as http:
        busy = client_at("203.0.113.7")
        put = await http.put(
            "/api/documents/rated", content=b"hello", headers=busy | {"Content-Type": "text/plain"}
        )
        assert put.status_code == 200
        for _ in range(BURST - 1):
            assert (await http.get("/api/documents/rated", headers=busy)).status_code == 200
        refused = await http.get("/api/documents/rated", headers=busy)
        assert refused.status_code == 429
        assert 1 <= int(refused.headers["Retry-After"]) <= 60
        assert "rest_rate_limit" in refused.json()["error"]
        # Every REST path counts, with or without a token; health and metrics do not.
        for method, path in (
            ("GET", "/api/documents"),
            ("GET", "/api/versions/rated"),
            ("POST", "/api/restore/rated"),
            ("POST", "/api/duplicate/rated"),
            ("PATCH", "/api/documents/rated"),
        ):
            reply = await http.request(method, path, headers=busy)
            assert reply.status_code == 429, (method, path)
        anonymous = await http.get("/api/documents/rated", headers={**busy, "Authorization": ""})
        assert anonymous.status_code == 429
        assert (await http.get("/health", headers=busy)).status_code == 200
        # Another address, and another host's IPv6 /64, are served as before.
        served = await http.get("/api/documents/rated", headers=client_at("203.0.113.8"))
        assert served.json()["text"] == "hello"
        v6 = client_at("2001:db8:7::1")
        for _ in range(BURST):
            assert (await http.get("/api/documents/rated", headers=v6)).status_code == 200
        same_host = client_at("2001:db8:7::ffff")
        assert (await http.get("/api/documents/rated", headers=same_host)).status_code == 429
        other_host = client_at("2001:db8:8::1")
        assert (await http.get("/api/documents/rated", headers=other_host)).status_code == 200
        text = await metrics_text(server)
        assert metric_value(text, "tether_limit_refusals_total", limit="rest_rate_limit") == 8


async def test_behind_an_untrusted_proxy_the_forwarded_addresses_share_the_proxys(
    tmp_path: Path,
) -> None:
    with ServerProcess(
        tmp_path,
        rest_rate_limit=1,
        rest_rate_window=60,
        rest_rate_burst=2,
        forwarded_allow_ips="192.0.2.1",
    ) as server:
        async with httpx.AsyncClient(base_url=server.http_url) as http:
            bearer = {"Authorization": f"Bearer {server.token()}"}
            statuses = [
                (
                    await http.get("/api/documents", headers=bearer | client_at(f"198.51.100.{i}"))
                ).status_code
                for i in range(3)
            ]
    # The X-Forwarded-For of an address it does not trust is ignored: one client, loopback.
    assert statuses == [200, 200, 429]


async def test_a_limit_of_zero_turns_the_rate_off(tmp_path: Path) -> None:
    with ServerProcess(tmp_path, rest_rate_limit=0) as server:
        async with httpx.AsyncClient(base_url=server.http_url) as http:
            bearer = {"Authorization": f"Bearer {server.token()}"}
            for _ in range(250):  # past the default burst of 200
                assert (await http.get("/api/documents", headers=bearer)).status_code == 200

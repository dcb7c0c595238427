"""Reading the server's Prometheus text in tests."""

from __future__ import annotations

import re

import httpx

from tests.serverproc import ServerProcess


async def metrics_text(server: ServerProcess) -> str:
    async with httpx.AsyncClient(base_url=server.http_url) as http:
        response = await http.get("/metrics")
    assert response.status_code == 200
    return response.text


def metric_value(text: str, name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels``."""
    total = 0.0
    for line in text.splitlines():
        match = re.match(rf"^{re.escape(name)}(?:\{{(.*)\}})? (\S+)$", line)
        if match is None:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1) or ""))
        if all(found.get(k) == v for k, v in labels.items()):
            total += float(match.group(2))
    return total

"""The real server as a subprocess for tests (see ``bench.launcher``)."""

from __future__ import annotations

import httpx

from tether.bench.launcher import DEFAULT_SECRET, ServerProcess, free_port

SECRET = DEFAULT_SECRET

__all__ = ["SECRET", "ServerProcess", "free_port", "rest_text"]


async def rest_text(server: ServerProcess, name: str) -> str:
    """What another user reads over REST ('' for a document never stored)."""
    async with httpx.AsyncClient() as http:
        response = await http.get(
            f"{server.http_url}/api/documents/{name}",
            headers={"Authorization": f"Bearer {server.token([name], subject='carol')}"},
        )
    if response.status_code == 404:
        return ""
    response.raise_for_status()
    return str(response.json()["text"])

"""REST readers attach no editor: reading a document must not keep it loaded forever, and the
names REST accepts are the names /ws accepts (issue 10, item 9; real server, real HTTP)."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

import anyio
import httpx
import pytest
from pycrdt import Doc, Text

from tests.serverproc import ServerProcess
from tether.protocol.clients.tether_client import TetherClient

pytestmark = pytest.mark.anyio

READS = 200


def _update(text: str) -> bytes:
    doc = Doc()
    doc.get("content", type=Text).insert(0, text)
    return doc.get_update()


async def loaded(http: httpx.AsyncClient) -> int:
    return int((await http.get("/health")).json()["documents_loaded"])


async def test_many_rest_reads_leave_no_document_pinned_loaded(tmp_path: Path) -> None:
    with ServerProcess(tmp_path, unload_grace=0.2) as server:
        async with TetherClient(server.ws_url, token=server.token()) as client:
            kept = await client.open("kept-open")
            kept.append("an editor is here")
            await kept.wait_acked()
            headers = {"Authorization": f"Bearer {server.token()}"}
            async with httpx.AsyncClient(base_url=server.http_url, headers=headers) as http:
                octets = {"Content-Type": "application/octet-stream"}
                for i in range(READS):
                    # Unknown names are 404 and never loaded; an import and a read load one.
                    assert (await http.get(f"/api/documents/read-{i}")).status_code == 404
                    imported = await http.put(
                        f"/api/documents/read-{i}", content=_update(f"r{i}"), headers=octets
                    )
                    assert imported.status_code == 200, imported.text
                    reply = await http.get(f"/api/documents/read-{i}")
                    assert reply.status_code == 200, reply.text
                assert (await http.get("/api/documents/kept-open")).json()["text"] == (
                    "an editor is here"
                )
                with anyio.fail_after(20):  # unloads after the grace period, on its own timer
                    while await loaded(http) > 1:
                        await anyio.sleep(0.05)
                assert await loaded(http) == 1  # the document with an editor stays
                kept.append(", still")
                await kept.wait_acked()


@pytest.mark.parametrize("name", ["nul\x00byte", "x" * 5000])
async def test_rest_refuses_the_names_ws_refuses(tmp_path: Path, name: str) -> None:
    with ServerProcess(tmp_path) as server:
        headers = {"Authorization": f"Bearer {server.token()}"}
        async with httpx.AsyncClient(base_url=server.http_url, headers=headers) as http:
            reply = await http.get(f"/api/documents/{quote(name)}")
            assert reply.status_code == 400, reply.text
            assert "invalid document name" in json.loads(reply.text)["error"]
            assert await loaded(http) == 0

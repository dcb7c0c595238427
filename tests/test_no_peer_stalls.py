"""No single peer can stall, starve or poison the server (issue 26): each attack runs against
the real server while a bystander edits another document, and the bystander's edits must all
be acknowledged as stored while the attacker is refused with a clear reason."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest

from tests.rawpeer import MuxPeer, RawDoc
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(tmp_path_factory.mktemp("stalls")) as running:
        yield running


async def type_steadily(doc: RawDoc, edits: int, pause: float = 0.005) -> None:
    """What a bystander does during an attack: one keystroke every few milliseconds."""
    for i in range(edits):
        await doc.append(f"{i} ")
        await asyncio.sleep(pause)  # pacing the typist, not synchronising the test
    await doc.wait_acked(timeout=30)


async def test_a_version_label_no_store_can_hold_fails_alone(server: ServerProcess) -> None:
    """Finding 4: a label with a lone surrogate (valid JSON) made SQLite raise inside the shared
    batch, and other documents' appends in it were answered "not stored"."""
    token = server.token()
    async with httpx.AsyncClient(base_url=server.http_url) as http:
        http.headers["Authorization"] = f"Bearer {token}"
        made = await http.put(
            "/api/documents/labelled",
            content=_update("x"),
            headers={"Content-Type": "application/octet-stream"},
        )
        assert made.status_code == 200
        async with await MuxPeer.connect(server.ws_url) as bystander:
            doc = await bystander.open("bystander-labels", token)

            async def attack() -> list[int]:
                body = b'{"label": "\\ud800"}'  # valid JSON: a lone surrogate, escaped
                headers = {"Content-Type": "application/json"}
                statuses = []
                for _ in range(30):
                    reply = await http.post("/api/versions/labelled", content=body, headers=headers)
                    statuses.append(reply.status_code)
                return statuses

            statuses, _ = await asyncio.gather(attack(), type_steadily(doc, 60))
            assert set(statuses) == {400}
            assert len(doc.statuses) >= 60 and all(doc.statuses)  # every edit stored
            listed = (await http.get("/api/versions/labelled")).json()["versions"]
            assert listed == []


def _update(text: str) -> bytes:
    from pycrdt import Doc, Text

    doc = Doc()
    doc.get("content", type=Text).insert(0, text)
    return doc.get_update()

"""One editor's request costs the model its own share and fails alone (issue 26, findings 14
and 15), on the real server with the real embedded model: a paragraph far larger than any
prompt is cut by characters before it is tokenized or framed, so it neither breaks the worker
channel nor holds the model for seconds, and the worker is never killed for it."""

from __future__ import annotations

import json
from collections.abc import Iterator

import anyio
import httpx
import pytest

from tests.ai.asking import ask, collect, utf16_len
from tests.serverproc import ServerProcess
from tether.protocol.clients.tether_client import TetherClient
from tether.protocol.wire.ai_messages import Suggest

pytestmark = pytest.mark.anyio

# 400,000 emoji in one paragraph: 1.6 MB of UTF-8, 4.8 MB once JSON-escaped in a frame.
HUGE_PARAGRAPH = "Notes: " + "😀" * 400_000


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(
        tmp_path_factory.mktemp("ai-attacks"),
        ai_provider="local",
        ai_max_tokens=4,
        ai_semantic="off",
    ) as server:
        yield server


def worker_pid(server: ServerProcess) -> int:
    return int(server.health()["ai"]["worker_pid"])


async def test_suggests_in_a_huge_paragraph_are_answered_and_the_worker_lives(
    local: ServerProcess,
) -> None:
    before = worker_pid(local)
    async with TetherClient(local.ws_url, token=local.token(), reconnect=False) as client:
        doc = await client.open("huge-paragraph")
        doc.append(HUGE_PARAGRAPH)
        await doc.wait_acked()
        for k in range(6):
            with anyio.fail_after(30):
                answer = await ask(doc, f"huge-{k}", max_tokens=4)
            assert answer.end["type"] == "suggestion.end", answer.end
        bystander = await client.open("huge-bystander")
        bystander.append("The weather today is")
        assert (await ask(bystander, "bystander")).end["type"] == "suggestion.end"
    assert worker_pid(local) == before  # never killed as hung or as a crash
    assert local.health()["ai"]["state"] == "ready"


async def test_a_huge_selection_to_rewrite_is_refused_alone(local: ServerProcess) -> None:
    async with TetherClient(local.ws_url, token=local.token(), reconnect=False) as client:
        doc = await client.open("huge-rewrite")
        doc.append("x" * 20_000)
        await doc.wait_acked()
        doc.send_stateless(Suggest("rw", "rewrite", start=0, end=20_000).encode())
        refused = await collect(doc, "rw")
        assert refused.end["type"] == "suggestion.error", refused.end
        assert refused.end["code"] == "bad_request" and "too long" in refused.end["message"]
        doc.append(". Then")
        assert (await ask(doc, "after")).end["type"] == "suggestion.end"


async def test_an_uploaded_huge_text_over_http_is_answered_and_the_worker_lives(
    local: ServerProcess,
) -> None:
    before = worker_pid(local)
    body = {"doc": "huge-upload", "text": HUGE_PARAGRAPH, "kind": "complete", "max_tokens": 4}
    body["pos"] = utf16_len(HUGE_PARAGRAPH)
    headers = {"Authorization": f"Bearer {local.token()}"}
    async with httpx.AsyncClient(base_url=local.http_url, timeout=60) as http:
        for _ in range(3):
            reply = await http.post("/api/suggest", json=body, headers=headers)
            events = [
                json.loads(line[6:]) for line in reply.text.splitlines() if line[:6] == "data: "
            ]
            assert events and events[-1]["type"] == "suggestion.end", events[-1:]
    assert worker_pid(local) == before

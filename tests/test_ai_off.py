"""A server without AI (``--ai-provider none``) answers every AI request at once: a suggestion,
an accept or a rewrite gets ``suggestion.error`` ``unavailable`` with the reason, a status watch
says ``off``, and the Python client raises SuggestionFailedError (issue 28, item 4: before, no
answer came, and the client waited 60 s for a bare TimeoutError). A host's own stateless
messages get no AI error."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import pytest

from tests.serverproc import ServerProcess
from tether.client import TetherClient
from tether.protocol.clients.tether_client import SuggestionFailedError

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(tmp_path_factory.mktemp("ai-off"), ai_provider="none") as running:
        yield running


async def test_a_suggestion_is_refused_at_once_with_the_reason(server: ServerProcess) -> None:
    async with TetherClient(server.ws_url, token=server.token()) as client:
        doc = await client.open("ai-off")
        doc.append("Hello")
        await doc.wait_acked()
        for kind in ("complete", "rewrite"):
            began = time.monotonic()
            with pytest.raises(SuggestionFailedError, match="AI is off on this server") as failed:
                async for _ in doc.suggest(kind=kind, start=0, end=5, timeout=10):
                    pass
            assert failed.value.code == "unavailable"
            assert time.monotonic() - began < 5


async def test_status_says_off_and_other_stateless_messages_get_no_ai_answer(
    server: ServerProcess,
) -> None:
    async with TetherClient(server.ws_url, token=server.token()) as client:
        doc = await client.open("ai-off-status")
        doc.send_stateless("a host's own message, not JSON")
        doc.send_stateless(json.dumps({"type": "status", "id": "w1"}))
        answer = json.loads(await asyncio.wait_for(doc.stateless.get(), timeout=10))
        assert (answer["type"], answer["state"]) == ("ai.status", "off")  # the first answer
        assert doc.stateless.empty()

"""The Python client as a script author meets it: a failed connection says what happened
(refused port, wrong path, refused upgrade) instead of a bare TimeoutError, ``suggest()``
streams a suggestion's messages, and ``close_document`` can be awaited (issue 12)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from websockets.asyncio import client as websockets_client

from tests.ai.asking import UNSHAPED
from tests.serverproc import ServerProcess
from tether.bench.launcher import free_port
from tether.client import ConnectionFailedError, TetherClient
from tether.protocol.wire.ai_messages import SuggestionDelta, SuggestionEnd, SuggestionStart

pytestmark = pytest.mark.anyio

SCRIPT = {"pieces": [" world", " again"], "delay": 0.0}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(
        tmp_path_factory.mktemp("client"),
        ai_provider="scripted",
        **UNSHAPED,
        ai_script=json.dumps(SCRIPT),
    ) as server:
        yield server


async def test_a_refused_port_says_so_promptly() -> None:
    started = time.monotonic()
    url = f"ws://127.0.0.1:{free_port()}/ws"
    with pytest.raises(ConnectionFailedError, match="connection refused"):
        async with TetherClient(url, transport="ws", reconnect=False, open_timeout=10):
            pass
    assert time.monotonic() - started < 5  # no reconnect: no waiting out the open timeout


async def test_a_wrong_path_is_named_and_not_retried(server: ServerProcess) -> None:
    started = time.monotonic()
    with pytest.raises(ConnectionFailedError, match="404") as failed:
        async with TetherClient(f"ws://127.0.0.1:{server.port}/nope", transport="ws"):
            pass
    assert failed.value.permanent
    assert time.monotonic() - started < 5  # a permanent answer ends the wait at once


async def test_a_refused_upgrade_names_the_status(
    server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cross-site Origin is refused at the upgrade (issue 10): the error says 403 and why."""
    original = websockets_client.connect

    def from_another_site(*args: object, **kwargs: object) -> object:
        return original(*args, origin="https://evil.example", **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr("tether.protocol.clients.tether_client.connect", from_another_site)
    with pytest.raises(ConnectionFailedError, match="HTTP 403"):
        async with TetherClient(server.ws_url, transport="ws", reconnect=False):
            pass


async def test_suggest_streams_and_close_document_can_be_awaited(server: ServerProcess) -> None:
    async with TetherClient(server.ws_url, token=server.token()) as client:
        notes = await client.open("client-notes")
        notes.append("hello")
        await notes.wait_acked()
        messages = [m async for m in notes.suggest()]
        assert isinstance(messages[0], SuggestionStart)
        assert isinstance(messages[-1], SuggestionEnd) and messages[-1].reason == "done"
        text = "".join(m.text for m in messages if isinstance(m, SuggestionDelta))
        assert text == " world again"
        await client.close_document("client-notes")
        with pytest.raises(KeyError):
            client.document("client-notes")
        again = await client.open("client-notes")  # the socket stayed; the document reopens
        assert str(again) == "hello"

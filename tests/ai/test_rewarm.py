"""Warm states rebuilt after the model worker restarts (``ai.suggest.rewarm``), through the real
server and the real model: the worker is killed; once its replacement is ready, the context of
the editor who had asked is evaluated again before the editor asks, so the editor's next
request finds its state warm instead of evaluating the whole prompt."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import anyio
import pytest

from tests.ai.asking import UNSHAPED, metric, wait_metric
from tests.serverproc import ServerProcess
from tether.protocol.clients.tether_client import TetherClient
from tether.protocol.wire.ai_messages import SuggestionEnd

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TEXT = (
    "The lighthouse keeper climbed the stairs every evening at dusk. He lit the lamp, wound the"
    " clock and wrote a line in the logbook about the weather and"
)


async def test_after_a_worker_restart_the_editors_context_is_warm_before_it_asks(
    tmp_path: Path,
) -> None:
    with ServerProcess(
        tmp_path,
        ai_provider="local",
        ai_semantic="off",
        **UNSHAPED,
        ai_cache_entries=0,
        ai_prefetch_ms=0,  # only requests (and the rewarm) evaluate contexts
    ) as server:
        worker = int(server.wait_ai(settled=("ready",))["worker_pid"])
        async with TetherClient(server.ws_url, token=server.token(["rewarm"])) as client:
            doc = await client.open("rewarm")
            doc.append(TEXT)
            await doc.wait_acked()
            with anyio.fail_after(60):
                async for message in doc.suggest(max_tokens=2):
                    assert not isinstance(message, SuggestionEnd) or message.reason == "done"
            os.kill(worker, signal.SIGKILL)
            server.wait_ai(settled=("ready",), restarts=1, timeout=90)
            await wait_metric(server, "tether_ai_rewarmed_total", lambda v: v >= 1, timeout=60)
            # The restarted worker has served nothing but the rewarm, which found no state.
            assert await metric(server, "tether_ai_warm_state_hits_total") == 0
            with anyio.fail_after(60):
                async for message in doc.suggest(max_tokens=2):
                    assert not isinstance(message, SuggestionEnd) or message.reason == "done"
            assert await metric(server, "tether_ai_warm_state_hits_total") == 1

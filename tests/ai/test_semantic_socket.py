"""The semantic layer over the real socket: the real MiniLM embedder in the server, the scripted
provider for answers. Near-identical contexts are served from cache; near misses that change
the right answer, other documents, and documents the editor cannot read are not."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ai.asking import UNSHAPED, ask, metric, wait_metric
from tests.serverproc import ServerProcess
from tether.protocol.clients.tether_client import PermissionDeniedError, TetherClient

pytestmark = pytest.mark.anyio

# The model starts at once while the request's context is embedded; a semantic hit found
# before the model finishes replaces its stream. 0.4 s per piece keeps the (scripted) model
# slower than an embedding even on a loaded machine.
SCRIPT = '{"pieces": [" by", " twelve", " percent."], "delay": 0.4}'
ANSWER = " by twelve percent."
TYPO = "Our quarterly reprot for the northern region shows that revenue from online sales grew"
FIXED = TYPO.replace("reprot", "report")


def semantic_server(path: Path, **settings: object) -> ServerProcess:
    return ServerProcess(
        path,
        ai_provider="scripted",
        **UNSHAPED,
        ai_script=SCRIPT,
        ai_semantic="on",
        **settings,
    )


async def embedder_ready(server: ServerProcess) -> None:
    # The model loads in the background after start (~11 s, longer on a busy CI machine).
    await wait_metric(server, "tether_ai_embedder_ready", lambda v: v == 1, timeout=180)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with semantic_server(tmp_path_factory.mktemp("semantic")) as proc:
        yield proc


@pytest.fixture(scope="module")
def bounded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    # ~2 entries fit in 4 KB (each holds a 1.5 KB vector); each lives 8 s, longer than the
    # three answers take (1.2 s each).
    with semantic_server(
        tmp_path_factory.mktemp("bounded"), ai_cache_mb=0.004, ai_cache_ttl=8
    ) as proc:
        yield proc


async def test_a_fixed_typo_is_served_from_the_semantic_layer(server: ServerProcess) -> None:
    await embedder_ready(server)
    async with TetherClient(server.ws_url, token=server.token()) as client:
        doc = await client.open("semantic-typo")
        doc.append(TYPO)
        await doc.wait_acked()
        first = await ask(doc, "s1")
        at = TYPO.index("reprot")
        doc.delete(at, len("reprot"))
        doc.insert(at, "report")
        await doc.wait_acked()
        second = await ask(doc, "s2")
    assert (first.source, first.text) == ("model", ANSWER)
    assert (second.source, second.text) == ("semantic", ANSWER)
    assert await metric(server, "tether_ai_cache_hits_total", layer="semantic") >= 1


async def test_a_negation_is_a_near_miss_and_goes_to_the_model(server: ServerProcess) -> None:
    await embedder_ready(server)
    cached = "The patient is allergic to penicillin, so for the infection the doctor will"
    async with TetherClient(server.ws_url, token=server.token()) as client:
        doc = await client.open("semantic-negation")
        doc.append(cached)
        await doc.wait_acked()
        assert (await ask(doc, "n1")).source == "model"
        doc.insert(cached.index("allergic"), "not ")
        await doc.wait_acked()
        assert (await ask(doc, "n2")).source == "model"


async def test_another_documents_entry_is_never_served(server: ServerProcess) -> None:
    await embedder_ready(server)
    async with TetherClient(server.ws_url, token=server.token()) as client:
        holder = await client.open("semantic-holder")
        holder.append(TYPO)
        await holder.wait_acked()
        assert (await ask(holder, "h1")).source == "model"
        other = await client.open("semantic-other")
        other.append(FIXED)  # what would be a semantic hit within one document
        await other.wait_acked()
        assert (await ask(other, "o1")).source == "model"
        again = await client.open("semantic-again")
        again.append(TYPO)  # what would be an exact hit within one document
        await again.wait_acked()
        assert (await ask(again, "o2")).source == "model"


async def test_a_document_only_another_user_can_read_never_feeds_my_answers(
    server: ServerProcess,
) -> None:
    await embedder_ready(server)
    secret = "Acquisition of Northwind closes on the ninth; the board expects the price to be"
    alice = server.token(["perm-alice-*"])
    bob = server.token(["perm-bob-*"])
    async with TetherClient(server.ws_url, token=alice) as client:
        doc = await client.open("perm-alice-plans")
        doc.append(secret)
        await doc.wait_acked()
        assert (await ask(doc, "a1")).source == "model"
        assert (await ask(doc, "a2")).source == "exact"  # cached for Alice's document
    async with TetherClient(server.ws_url, token=bob) as client:
        with pytest.raises(PermissionDeniedError):
            await client.open("perm-alice-plans")
        doc = await client.open("perm-bob-notes")
        doc.append(secret)  # Bob types the very same words into his own document
        await doc.wait_acked()
        assert (await ask(doc, "b1")).source == "model"


async def test_size_and_ttl_evictions_remove_the_vectors(bounded: ServerProcess) -> None:
    await embedder_ready(bounded)
    sentences = [
        "The lighthouse keeper wrote in his log that the storm had",
        "Every spring the orchard on the hill fills with blossom and",
        "Our new onboarding guide explains how to request a laptop and",
    ]
    async with TetherClient(bounded.ws_url, token=bounded.token()) as client:
        for n, sentence in enumerate(sentences):
            doc = await client.open(f"bounded-{n}")
            doc.append(sentence)
            await doc.wait_acked()
            assert (await ask(doc, f"e{n}")).source == "model"
    # Three answers with vectors do not fit in 4 KB: the oldest went, and its vector with it.
    assert await metric(bounded, "tether_ai_cache_evictions_total", reason="bytes") >= 1
    vectors = await metric(bounded, "tether_ai_cache_vectors")
    assert 1 <= vectors < len(sentences)
    assert vectors == await metric(bounded, "tether_ai_cache_entries")
    # After the TTL nothing is left, in the tables or in the FAISS indexes.
    await wait_metric(bounded, "tether_ai_cache_vectors", lambda v: v == 0, timeout=30)
    assert await metric(bounded, "tether_ai_cache_entries") == 0
    assert await metric(bounded, "tether_ai_cache_evictions_total", reason="ttl") >= 1

"""The default suggestion length through the real server: one word, from a healed prompt (the
configuration ``tether bench quality`` found acceptable most often), with the cache serving
the same word again. The scripted provider shows the mechanics exactly; the embedded model
shows a real model's stream is cut the same way."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ai.asking import ask
from tests.serverproc import ServerProcess
from tether.protocol.clients.tether_client import TetherClient

pytestmark = pytest.mark.anyio

PIECES = [" and", " the", " gulls", " cried."]


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    script = json.dumps({"pieces": PIECES, "delay": 0.01})
    with ServerProcess(
        Path(tmp_path_factory.mktemp("word")), ai_provider="scripted", ai_script=script
    ) as proc:
        yield proc


@pytest.fixture(scope="module")
def unspaced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A model that goes on with the typed word instead of writing the typed space."""
    script = json.dumps({"pieces": ["xt", " words"], "delay": 0.01})
    with ServerProcess(
        Path(tmp_path_factory.mktemp("unspaced")), ai_provider="scripted", ai_script=script
    ) as proc:
        yield proc


async def test_the_default_stops_after_one_word_and_the_cache_serves_it(scripted) -> None:
    async with TetherClient(scripted.ws_url, token=scripted.token()) as client:
        doc = await client.open("word-default")
        doc.append("The boats came home")
        await doc.wait_acked()
        first = await ask(doc, "w1", max_tokens=None)
        second = await ask(doc, "w2", max_tokens=None)
    assert (first.source, first.text) == ("model", " and")
    assert first.end["type"] == "suggestion.end" and first.end["reason"] == "done"
    # The model's two tokens: " the" ended the word, and the model was asked for no more.
    assert first.end["tokens"] == 2
    assert (second.source, second.text) == ("exact", " and")
    assert second.end["reason"] == "done"


async def test_after_a_typed_space_the_model_writes_it_and_the_editor_gets_the_word(
    scripted,
) -> None:
    async with TetherClient(scripted.ws_url, token=scripted.token()) as client:
        doc = await client.open("word-healed")
        doc.append("The boats came ")
        await doc.wait_acked()
        answer = await ask(doc, "h1", max_tokens=None)
    assert answer.text == "and"  # the model's " and" less the space the editor typed
    assert answer.end["reason"] == "done"


async def test_a_model_that_does_not_write_the_typed_space_shows_nothing(unspaced) -> None:
    async with TetherClient(unspaced.ws_url, token=unspaced.token()) as client:
        doc = await client.open("word-unspaced")
        doc.append("The boats came ne")
        await doc.wait_acked()
        joined = await ask(doc, "u0", max_tokens=None)  # no typed space: shown as it comes
        doc.append(" ")
        await doc.wait_acked()
        healed = await ask(doc, "u1", max_tokens=None)
    assert joined.text == "xt"
    assert healed.text == ""
    # Nothing to show is junk of the kind "empty" (the junk filter is on by default).
    assert healed.end["type"] == "suggestion.end" and healed.end["reason"] == "junk:empty"


async def test_the_embedded_model_under_the_default_suggests_one_word(tmp_path: Path) -> None:
    prose = (
        "The lighthouse keeper climbed the stairs every evening at dusk. He lit the lamp, wound"
        " the clock and wrote a line in the logbook about the weather and the "
    )
    with ServerProcess(tmp_path, ai_provider="local", ai_semantic="off") as server:
        async with TetherClient(server.ws_url, token=server.token()) as client:
            doc = await client.open("word-local")
            doc.append(prose)
            await doc.wait_acked()
            answer = await ask(doc, "l1", max_tokens=None)
    assert answer.end["type"] == "suggestion.end" and answer.end["reason"] == "done"
    assert answer.source == "model"
    assert not any(ch.isspace() for ch in answer.text.strip()), answer.text
    assert answer.end["tokens"] <= 24

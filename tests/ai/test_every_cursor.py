"""A suggestion at every cursor, as long as the model is sure (issue 28), through the real
server: the embedded model at a sentence end and at a paragraph start (where it used to answer
nothing), the ``sure`` stopping rule on scripted confidences (exact) and on the real model's
(carried from the worker), and a request's ``max_tokens`` bounding it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.ai.asking import ask
from tests.serverproc import ServerProcess
from tether.protocol.clients.tether_client import TetherClient

pytestmark = pytest.mark.anyio

# A document long enough that SmolLM2, asked to continue it after its last full stop, ends its
# turn at once (checked below with --ai-start off).
NOTES = (
    "Release notes\n\nThis release fixes a crash when the configuration file is empty. It also"
    " makes the parser faster on large files, and it adds a command that prints the effective"
    " settings.\n\nUpgrading is safe: the file format has not changed, and old files load as"
    " before. Users of the previous version should upgrade as soon as they can.\n\nThe command"
    " line tool now accepts a directory as well as a file. When it is given a directory, it"
    " reads every file ending in .conf, in name order."
)


async def _suggest(server: ServerProcess, name: str, text: str, max_tokens: int | None = None):
    async with TetherClient(server.ws_url, token=server.token()) as client:
        doc = await client.open(name)
        doc.append(text)
        await doc.wait_acked()
        return await ask(doc, "r1", max_tokens=max_tokens)


async def test_the_embedded_model_starts_the_next_sentence_and_paragraph(tmp_path: Path) -> None:
    with ServerProcess(
        tmp_path / "off", ai_provider="local", ai_semantic="off", ai_start="off"
    ) as server:
        before = await _suggest(server, "sentence-end", NOTES + " ")
    # Without the rule the model ends its turn: nothing to show (what issue 28 measured).
    assert before.end.get("reason") == "junk:empty", before

    with ServerProcess(tmp_path / "on", ai_provider="local", ai_semantic="off") as server:
        sentence = await _suggest(server, "sentence-end", NOTES + " ")
        paragraph = await _suggest(server, "paragraph", NOTES + "\n\n")
    for answer in (sentence, paragraph):
        assert answer.end["type"] == "suggestion.end" and answer.end["reason"] == "done", answer
        assert answer.source == "model"
        word = answer.text.strip()
        assert word and not any(ch.isspace() for ch in word), answer.text
        assert word[0].isalnum(), answer.text  # a word, not a mark or the end of a turn
    # The typed space is the editor's; at a line start no line break of the model's is shown.
    assert not sentence.text.startswith(" ")
    assert not paragraph.text.startswith(("\n", " "))


@pytest.fixture(scope="module")
def sure_script(tmp_path_factory: pytest.TempPathFactory):
    script = {
        "pieces": [" United", " States", " of", " America", " and", " more"],
        "confidences": [0.2, 0.9, 0.8, 0.95, 0.3, 0.99],
    }
    with ServerProcess(
        Path(tmp_path_factory.mktemp("sure")),
        ai_provider="scripted",
        ai_script=json.dumps(script),
        ai_stop="sure",
        ai_sure="0.5",
        ai_semantic="off",
    ) as server:
        yield server


async def test_sure_extends_word_by_word_while_the_model_is_sure(sure_script) -> None:
    answer = await _suggest(sure_script, "sure", "She moved to the ")
    assert answer.end["reason"] == "done", answer
    assert answer.text == "United States of America"  # " and" fell short of 0.5


async def test_sure_is_bounded_by_the_request_s_max_tokens(sure_script) -> None:
    answer = await _suggest(sure_script, "sure-capped", "She moved to the ", max_tokens=2)
    assert answer.text == "United States"
    assert answer.end["tokens"] <= 2


async def test_the_real_model_s_confidences_reach_the_rule_through_its_worker(
    tmp_path: Path,
) -> None:
    prose = "We will reply to every message as soon "
    lengths = {}
    for threshold in ("1.0", "0.01"):
        with ServerProcess(
            tmp_path / threshold,
            ai_provider="local",
            ai_semantic="off",
            ai_stop="sure",
            ai_sure=threshold,
        ) as server:
            answer = await _suggest(server, "sure-real", prose, max_tokens=6)
        assert answer.end["reason"] == "done", answer
        lengths[threshold] = len(answer.text.split())
    # Nothing is that sure: the first word alone. Everything is: words up to the cap or a
    # sentence's end. Without confidences from the worker both would be one word.
    assert lengths["1.0"] == 1
    assert lengths["0.01"] >= 2

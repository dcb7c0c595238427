"""The junk filter through the real server: a junk suggestion ends with ``junk:<kind>`` and not
one character of it reaches the editor, on the socket, over HTTP (SSE), from prefetch and from
the cache. The scripted provider answers per document (its ``replies`` are keyed by a marker
in the prompt), so one server shows every kind; the embedded model shows a real model's
stream obeys the same rule."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.ai.asking import Answer, ask, metric, utf16_len, wait_metric
from tests.serverproc import ServerProcess
from tether.ai.text.junk import junk_kind
from tether.protocol.clients.tether_client import DocumentHandle, TetherClient
from tether.protocol.wire.ai_messages import SuggestionDelta, SuggestionEnd

pytestmark = pytest.mark.anyio

# Under the default (one word, healed prompt): the word decides.
WORD_REPLIES = {
    "case-good": [" harbour", " at", " dusk"],
    "case-echo": [" the", " coast", "."],  # the document ends with "the"
    "case-empty": [".", "\n\n", "Then"],  # a lone full stop: the paragraph ends
    "case-language": [" море", " и", " небо"],
}
# Under --ai-stop sentence: the first phrase is judged, then the stream word by word.
SENTENCE_REPLIES = {
    "case-chat": [" Sure", "!", " Here", " is", " the", " next", " sentence", "."],
    "case-loop": [" the", " the", " the", " the", "."],
    "case-later-loop": [" gulls", " over", " bay", " gulls", " over", " bay", "."],
    "case-sentence": [" The", " gulls", " came", " back", " at", " dusk", "."],
    "case-typeahead": [" at", " the", " pier"],
}
DELAY = 0.01  # between pieces: a stream, not one lump


@pytest.fixture(scope="module")
def word(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    script = json.dumps({"replies": WORD_REPLIES, "delay": DELAY})
    with ServerProcess(
        Path(tmp_path_factory.mktemp("junk-word")), ai_provider="scripted", ai_script=script
    ) as proc:
        yield proc


@pytest.fixture(scope="module")
def sentence(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    script = json.dumps({"replies": SENTENCE_REPLIES, "delay": DELAY})
    with ServerProcess(
        Path(tmp_path_factory.mktemp("junk-sentence")),
        ai_provider="scripted",
        ai_script=script,
        ai_stop="sentence",
        ai_prefetch_ms=100,
    ) as proc:
        yield proc


async def opened(client: TetherClient, case: str, text: str) -> DocumentHandle:
    doc = await client.open(f"doc-{case}")
    doc.append(f"Notes ({case}). {text}")
    await doc.wait_acked()
    return doc


async def asked(server: ServerProcess, case: str, text: str, *request_ids: str) -> list[Answer]:
    async with TetherClient(server.ws_url, token=server.token()) as client:
        doc = await opened(client, case, text)
        return [await ask(doc, request_id, max_tokens=None) for request_id in request_ids]


@pytest.mark.parametrize(
    ("case", "text", "kind"),
    [
        ("case-echo", "We sailed along the", "echo"),
        ("case-empty", "We sailed home", "empty"),
        ("case-language", "We sailed under the open", "language"),
    ],
)
async def test_a_junk_word_ends_with_its_kind_and_no_text(word, case, text, kind) -> None:
    before = await metric(word, "tether_ai_junk_total", kind=kind)
    (answer,) = await asked(word, case, text, "j1")
    assert answer.source == "model"
    assert answer.text == ""  # not one delta
    assert answer.end["type"] == "suggestion.end"
    assert answer.end["reason"] == f"junk:{kind}"
    assert "ttft_ms" not in answer.end  # nothing was sent
    assert await metric(word, "tether_ai_junk_total", kind=kind) == before + 1


async def test_a_good_word_passes_and_the_cache_serves_it_again(word) -> None:
    first, second = await asked(word, "case-good", "The boats came into the", "g1", "g2")
    assert (first.source, first.text, first.end["reason"]) == ("model", " harbour", "done")
    assert (second.source, second.text, second.end["reason"]) == ("exact", " harbour", "done")


async def test_junk_is_not_cached_so_asking_again_asks_the_model_again(word) -> None:
    first, second = await asked(word, "case-echo", "Gulls flew over the", "e1", "e2")
    assert first.end["reason"] == second.end["reason"] == "junk:echo"
    assert second.source == "model"  # no cache layer had it
    assert first.text == second.text == ""


async def test_the_python_client_exposes_the_end_reason_and_logs_it(word, caplog) -> None:
    caplog.set_level(logging.INFO)
    async with TetherClient(word.ws_url, token=word.token()) as client:
        doc = await opened(client, "case-echo", "We rowed past the")
        messages = [message async for message in doc.suggest()]
    end = messages[-1]
    assert isinstance(end, SuggestionEnd)
    assert (end.reason, end.junk) == ("junk:echo", "echo")
    assert not any(isinstance(message, SuggestionDelta) for message in messages)
    assert "dropped as junk (echo)" in caplog.text


async def test_health_says_the_filter_is_on_and_what_it_dropped(word) -> None:
    await asked(word, "case-empty", "The ship sailed home", "h1")
    async with httpx.AsyncClient(base_url=word.http_url) as http:
        health = (await http.get("/health")).json()
    junk = health["ai"]["junk_filter"]
    assert junk["state"] == "on"
    assert junk["dropped"]["empty"] >= 1
    assert junk["dropped"]["empty"] == await metric(word, "tether_ai_junk_total", kind="empty")


async def sse(server: ServerProcess, text: str) -> list[dict[str, Any]]:
    body = {"doc": "http-junk", "id": "h", "kind": "complete", "pos": utf16_len(text)}
    body["text"] = text
    headers = {"Authorization": f"Bearer {server.token()}"}
    messages: list[dict[str, Any]] = []
    async with (
        httpx.AsyncClient(base_url=server.http_url, timeout=15) as http,
        http.stream("POST", "/api/suggest", json=body, headers=headers) as response,
    ):
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line:
                messages.append(json.loads(line.removeprefix("data: ")))
    return messages


async def test_the_http_path_ends_junk_the_same_way(word) -> None:
    junk = await sse(word, "Notes (case-echo). We walked to the")
    assert [m["type"] for m in junk] == ["suggestion.start", "suggestion.end"]
    assert junk[-1]["reason"] == "junk:echo"
    good = await sse(word, "Notes (case-good). We walked to the")
    assert [m["type"] for m in good] == ["suggestion.start", "suggestion.delta", "suggestion.end"]
    assert (good[1]["text"], good[-1]["reason"]) == (" harbour", "done")


@pytest.mark.parametrize(
    ("case", "kind"), [("case-chat", "chat"), ("case-loop", "loop")], ids=["chat", "loop"]
)
async def test_chat_talk_and_loops_are_caught_before_any_text(sentence, case, kind) -> None:
    (answer,) = await asked(sentence, case, "We saw", "s1")
    assert (answer.text, answer.end["reason"]) == ("", f"junk:{kind}")


async def test_a_longer_suggestion_streams_then_ends_before_its_loop(sentence) -> None:
    text = "From the pier we watched"
    (answer,) = await asked(sentence, "case-later-loop", text, "l1")
    assert answer.end["reason"] == "junk:loop"
    # What came before the loop was clean, and the word that made it a loop never came.
    assert answer.text == " gulls over bay gulls over "
    assert junk_kind(answer.text, text) is None
    (clean,) = await asked(sentence, "case-sentence", text, "c1")
    assert (clean.text, clean.end["reason"]) == (" The gulls came back at dusk.", "done")


async def test_a_cached_answer_is_judged_again_at_the_cursor_it_is_served_to(sentence) -> None:
    async with TetherClient(sentence.ws_url, token=sentence.token()) as client:
        doc = await opened(client, "case-typeahead", "We walked on the pier. Later we sat")
        first = await ask(doc, "t1", max_tokens=None)
        doc.append(" at")  # the start of the cached answer: the cache has the rest
        await doc.wait_acked()
        rest = await ask(doc, "t2", max_tokens=None)
    assert (first.text, first.end["reason"]) == (" at the pier", "done")
    # " the pier" alone, after "...at", copies two words of the text before: junk there.
    assert rest.source == "typeahead"
    assert (rest.text, rest.end["reason"]) == ("", "junk:echo")


async def test_a_prefetched_junk_answer_is_neither_stored_nor_served(sentence) -> None:
    completed = await metric(sentence, "tether_ai_prefetch_total", outcome="completed")
    async with TetherClient(sentence.ws_url, token=sentence.token()) as client:
        doc = await opened(client, "case-chat", "The tide")
        await ask(doc, "p0", max_tokens=None)  # prefetch serves editors who ask
        doc.append(" came in")
        await doc.wait_acked()
        # The editor paused: the server computes its next suggestion, which is junk.
        await wait_metric(
            sentence, "tether_ai_prefetch_total", lambda v: v > completed, outcome="completed"
        )
        answer = await ask(doc, "p1", max_tokens=None)
    assert answer.source == "model"  # the prefetched answer was not kept
    assert (answer.text, answer.end["reason"]) == ("", "junk:chat")


async def test_the_embedded_model_never_streams_junk(tmp_path: Path) -> None:
    """SmolLM2 under the default (one word, healed prompt, filter on): every suggestion ends
    ``done`` with a clean word, or ``junk:<kind>`` with no text at all."""
    prompts = [
        "The lighthouse keeper climbed the stairs every evening and looked out over the ",
        "Please continue the text. The report is due on",
        "She said it again and again and again and",
    ]
    with ServerProcess(tmp_path, ai_provider="local", ai_semantic="off") as server:
        async with TetherClient(server.ws_url, token=server.token()) as client:
            answers = []
            for number, prompt in enumerate(prompts):
                doc = await client.open(f"local-{number}")
                doc.append(prompt)
                await doc.wait_acked()
                answers.append((prompt, await ask(doc, f"m{number}", max_tokens=None)))
    for prompt, answer in answers:
        reason = answer.end["reason"]
        assert reason == "done" or reason.startswith("junk:"), answer.end
        if reason == "done":
            assert answer.text.strip() and junk_kind(answer.text, prompt) is None, answer
        else:
            assert answer.text == "", answer

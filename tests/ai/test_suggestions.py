"""AI suggestions against the real server (a subprocess) over real sockets.

The local-model tests run SmolLM2 through llama.cpp with a short ``max_tokens`` on one
module-scoped server (the model loads once); the mechanics (supersede, cancel, busy, stale-context
cancellation, readonly refusals, bad payloads, provider failure, coalescing) run on the scripted
provider, whose ``delay`` keeps a stream open long enough to act on it. Every wait is on a message
or an ack, bounded by ``anyio.fail_after``; nothing sleeps for synchronisation.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
import pytest
from pycrdt import Assoc

from tests.ai.asking import UNSHAPED
from tests.metrics_scrape import metric_value, metrics_text
from tests.serverproc import ServerProcess
from tether.protocol.clients.tether_client import DocumentHandle, TetherClient
from tether.protocol.wire.ai_messages import decode_server_message

pytestmark = pytest.mark.anyio

PIECES = [" one", " two", " three", " four", " five", " six", " seven", " eight"]
SLOW = {"pieces": PIECES, "delay": 0.05}  # ~0.4 s per suggestion: long enough to act on
SUGGESTION_TYPES = ("suggestion.start", "suggestion.delta", "suggestion.end", "suggestion.error")


# ---- servers ---------------------------------------------------------------------------------


@contextlib.contextmanager
def _server(tmp: pytest.TempPathFactory, label: str, **settings: object) -> Iterator[ServerProcess]:
    with ServerProcess(tmp.mktemp(label), **settings) as proc:
        yield proc


@pytest.fixture(scope="module")
def local_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with _server(
        tmp_path_factory,
        "local",
        ai_provider="local",
        **UNSHAPED,
        ai_max_tokens=6,
    ) as proc:
        yield proc


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with _server(
        tmp_path_factory,
        "scripted",
        ai_provider="scripted",
        **UNSHAPED,
        ai_script=json.dumps(SLOW),
    ) as proc:
        yield proc


@pytest.fixture(scope="module")
def narrow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """Queue limit 1 and a slow script: the second waiting request is refused."""
    script = {"pieces": PIECES, "delay": 0.1}
    with _server(
        tmp_path_factory,
        "narrow",
        ai_provider="scripted",
        **UNSHAPED,
        ai_script=json.dumps(script),
        ai_queue_limit=1,
    ) as proc:
        yield proc


@pytest.fixture(scope="module")
def failing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with _server(
        tmp_path_factory,
        "failing",
        ai_provider="scripted",
        **UNSHAPED,
        ai_script='{"fail": "boom"}',
    ) as proc:
        yield proc


FAST_PIECES = [chr(ord("a") + i % 26) for i in range(40)]


@pytest.fixture(scope="module")
def fast(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    script = {"pieces": FAST_PIECES, "delay": 0.005}
    with _server(
        tmp_path_factory,
        "fast",
        ai_provider="scripted",
        **UNSHAPED,
        ai_script=json.dumps(script),
    ) as proc:
        yield proc


# ---- editors and their AI messages -------------------------------------------------------------


class Disconnected(Exception):
    """The server dropped the editor's socket while a test waited for a message."""


@dataclass(eq=False)
class Editor:
    """One editor: its socket, one open document, and every AI message it received, in order.

    A pump task takes each Stateless payload as it arrives (so ``arrived`` holds true arrival
    times) and wakes the waiters; a watcher marks a dropped socket so waits fail at once.
    """

    client: TetherClient
    doc: DocumentHandle
    messages: list[dict[str, Any]] = field(default_factory=list)
    arrived: list[float] = field(default_factory=list)  # time.monotonic() of each message
    disconnected: bool = False
    failure: BaseException | None = None
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    def send(self, **body: Any) -> None:
        self.doc.send_stateless(json.dumps(body))

    def suggest(self, request_id: str, pos: int, **extra: Any) -> None:
        self.send(type="suggest", id=request_id, kind="complete", pos=pos, **extra)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def pump(self) -> None:
        while True:
            payload = await self.doc.stateless.get()
            try:
                message = json.loads(payload)
                if message.get("type") in SUGGESTION_TYPES and not (
                    message["type"] == "suggestion.error" and "id" not in message
                ):  # (an error without an id: see test_error_without_id_decodes)
                    decode_server_message(payload)  # the published codec reads it all
            except Exception as exc:
                self.failure = exc
                message = {"type": "undecodable", "payload": payload}
            self.messages.append(message)
            self.arrived.append(time.monotonic())
            self._notify()

    async def watch(self) -> None:
        with contextlib.suppress(Exception):
            await self.doc.wait_for(lambda: not self.client.connected.is_set(), 3600)
            self.disconnected = True
            self._notify()

    async def wait(
        self, predicate: Callable[[dict[str, Any]], bool], start: int = 0
    ) -> dict[str, Any]:
        """The first message from index ``start`` (seen or yet to come) matching ``predicate``."""
        index = start
        while True:
            if self.failure is not None:
                raise AssertionError("the server sent an undecodable message") from self.failure
            while index < len(self.messages):
                if predicate(self.messages[index]):
                    return self.messages[index]
                index += 1
            if self.disconnected:
                raise Disconnected(f"socket dropped; messages so far: {self.messages}")
            await self._changed.wait()

    async def got(self, kind: str, request_id: str | None) -> dict[str, Any]:
        return await self.wait(lambda m: m["type"] == kind and m.get("id") == request_id)

    async def finished(self, request_id: str) -> dict[str, Any]:
        """The request's suggestion.end or suggestion.error."""
        return await self.wait(
            lambda m: (
                m.get("id") == request_id and m["type"] in ("suggestion.end", "suggestion.error")
            )
        )

    async def error(self, request_id: str | None) -> dict[str, Any]:
        return await self.got("suggestion.error", request_id)

    def of(self, request_id: str) -> list[dict[str, Any]]:
        return [m for m in self.messages if m.get("id") == request_id]

    def deltas(self, request_id: str) -> list[str]:
        return [m["text"] for m in self.of(request_id) if m["type"] == "suggestion.delta"]

    def text_of(self, request_id: str) -> str:
        return "".join(self.deltas(request_id))

    def index_of(self, message: dict[str, Any]) -> int:
        return next(i for i, m in enumerate(self.messages) if m is message)

    def arrival(self, message: dict[str, Any]) -> float:
        return self.arrived[self.index_of(message)]

    async def edit_acked(self, change: Callable[[DocumentHandle], None]) -> None:
        change(self.doc)
        await self.doc.wait_acked()


@contextlib.asynccontextmanager
async def editor(
    server: ServerProcess, name: str, *, scope: str = "read-write"
) -> AsyncIterator[Editor]:
    token = server.token([name], scope=scope)
    async with TetherClient(server.ws_url, token=token, reconnect=False) as client:
        handle = await client.open(name)
        ed = Editor(client, handle)
        tasks = [asyncio.ensure_future(ed.pump()), asyncio.ensure_future(ed.watch())]
        try:
            yield ed
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


def doc_name(label: str) -> str:
    return f"ai-{label}-{uuid.uuid4().hex[:8]}"


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


async def rest_text(server: ServerProcess, name: str) -> str:
    async with httpx.AsyncClient(base_url=server.http_url) as http:
        response = await http.get(
            f"/api/documents/{name}", headers={"Authorization": f"Bearer {server.token([name])}"}
        )
    if response.status_code == 404:  # never stored (nor loaded with content): no text
        return ""
    assert response.status_code == 200, response.text
    return str(response.json()["text"])


async def expect_text(ed: Editor, expected: str, timeout: float = 5.0) -> None:
    """Wait for the editor's text; on timeout, fail showing the text it has."""
    try:
        await ed.doc.wait_text(expected, timeout=timeout)
    except TimeoutError:
        assert str(ed.doc) == expected


async def seeded(ed: Editor, text: str) -> None:
    await ed.edit_acked(lambda d: d.append(text))


def assert_end_after_stream(ed: Editor, request_id: str, reason: str = "done") -> dict[str, Any]:
    """start first, then deltas, then exactly one end with ``reason`` and nothing after it."""
    mine = ed.of(request_id)
    assert mine[0]["type"] == "suggestion.start", mine
    ends = [m for m in mine if m["type"] == "suggestion.end"]
    assert len(ends) == 1, mine
    assert mine[-1] is ends[0], f"messages after the end: {mine}"
    assert ends[0]["reason"] == reason, mine
    return ends[0]


# ---- the real local model ------------------------------------------------------------------------

PROSE = (
    "The lighthouse keeper climbed the stairs every evening at dusk. He lit the lamp, wound the"
    " clock and wrote a line in the logbook about the weather and the ships he had seen."
)


async def test_local_model_streams_start_deltas_end(local_server: ServerProcess) -> None:
    name = doc_name("local-stream")
    with anyio.fail_after(40):  # the first request pays the cold prefill
        async with editor(local_server, name) as a:
            await seeded(a, PROSE + " The next morning")
            a.suggest("s1", utf16_len(str(a.doc)))
            start = await a.got("suggestion.start", "s1")
            assert start["source"] == "model"
            end = await a.finished("s1")
    assert end["type"] == "suggestion.end", end
    assert_end_after_stream(a, "s1")
    assert len(a.deltas("s1")) >= 1
    assert a.text_of("s1")
    assert isinstance(end["ttft_ms"], int | float) and end["ttft_ms"] > 0
    assert 1 <= end["tokens"] <= 6
    metrics = await metrics_text(local_server)
    assert metric_value(metrics, "tether_ai_ttft_seconds_count", provider="local", path="ws") >= 1
    assert metric_value(metrics, "tether_ai_requests_total", path="ws") >= 1


async def test_local_sync_keeps_flowing_while_a_suggestion_streams(
    local_server: ServerProcess,
) -> None:
    name = doc_name("local-live")
    # A long document makes the prefill of this new session take a while: the stream stays
    # open across several sync round trips.
    opening = " ".join([PROSE] * 4) + " At night"
    tail = "\n\nAppendix: tide tables."
    with anyio.fail_after(40):
        async with editor(local_server, name) as a, editor(local_server, name) as b:
            await seeded(a, opening + tail)
            await b.doc.wait_text(opening + tail)
            a.suggest("live", utf16_len(opening), max_tokens=6)
            await a.got("suggestion.start", "live")
            # B types at the very end, far after A's cursor, and is acknowledged and seen by A
            # while A's suggestion is still streaming.
            acked_during_stream = 0
            typed = ""
            while True:
                await b.edit_acked(lambda d: d.append("~"))
                typed += "~"
                await a.doc.wait_text(opening + tail + typed)
                if any(m["type"] in ("suggestion.end", "suggestion.error") for m in a.of("live")):
                    break
                acked_during_stream += 1
                if acked_during_stream >= 10:
                    break
            end = await a.finished("live")
    assert acked_during_stream >= 1, a.of("live")
    assert end["type"] == "suggestion.end" and end["reason"] == "done", end
    assert_end_after_stream(a, "live")


async def test_local_accept_is_a_durable_crdt_edit_seen_by_another_editor(
    local_server: ServerProcess,
) -> None:
    name = doc_name("local-accept")
    before = PROSE + " On Sunday"
    after = "\n\nThe end."
    with anyio.fail_after(40):
        async with editor(local_server, name) as a, editor(local_server, name) as b:
            await seeded(a, before + after)
            await b.doc.wait_text(before + after)
            a.suggest("acc", utf16_len(before))
            end = await a.finished("acc")
            assert end["type"] == "suggestion.end", end
            suggestion = a.text_of("acc")
            assert suggestion
            a.send(type="accept", id="acc")
            await a.got("suggestion.accepted", "acc")
            expected = before + suggestion + after
            await b.doc.wait_text(expected)
            await a.doc.wait_text(expected)
            assert await rest_text(local_server, name) == expected
            # Accepting twice is refused: the suggestion is used up.
            a.send(type="accept", id="acc")
            assert (await a.error("acc"))["code"] == "bad_request"
    assert await rest_text(local_server, name) == expected


EMOJI_TEXT = "héllo 😀𝄞 "  # 9 code points, 16 UTF-8 bytes, 11 UTF-16 units


async def test_local_suggest_at_the_utf16_end_after_emoji(local_server: ServerProcess) -> None:
    name = doc_name("local-utf16")
    assert utf16_len(EMOJI_TEXT) == 11 and len(EMOJI_TEXT) == 9
    with anyio.fail_after(40):
        async with editor(local_server, name) as a:
            await seeded(a, EMOJI_TEXT)
            a.suggest("u", 11)  # the end, as JS counts it
            end = await a.finished("u")
            # One past the end (in UTF-16 units) is refused, not clamped.
            a.suggest("past", 12)
            error = await a.error("past")
    assert end["type"] == "suggestion.end" and end["reason"] == "done", end
    assert_end_after_stream(a, "u")
    assert a.text_of("u")
    assert error["code"] == "bad_request"
    assert await rest_text(local_server, name) == EMOJI_TEXT


async def test_local_accept_after_emoji_lands_after_them(local_server: ServerProcess) -> None:
    name = doc_name("local-utf16-accept")
    with anyio.fail_after(40):
        async with editor(local_server, name) as a, editor(local_server, name) as b:
            await seeded(a, EMOJI_TEXT)
            await b.doc.wait_text(EMOJI_TEXT)
            a.suggest("u", utf16_len(EMOJI_TEXT))
            end = await a.finished("u")
            suggestion = a.text_of("u")
            assert end["type"] == "suggestion.end" and suggestion, end
            a.send(type="accept", id="u")
            with anyio.fail_after(3):  # an accept answers in milliseconds; never hang
                reply = await a.wait(
                    lambda m: (
                        m.get("id") == "u"
                        and m["type"] in ("suggestion.accepted", "suggestion.error")
                    )
                )
            assert reply["type"] == "suggestion.accepted", reply
            await b.doc.wait_text(EMOJI_TEXT + suggestion)
    assert await rest_text(local_server, name) == EMOJI_TEXT + suggestion


# ---- scripted: streaming mechanics -----------------------------------------------------------


async def test_new_suggest_supersedes_the_previous_one(scripted: ServerProcess) -> None:
    name = doc_name("supersede")
    with anyio.fail_after(10):
        async with editor(scripted, name) as a:
            await seeded(a, "Once upon a time")
            a.suggest("first", 16)
            await a.got("suggestion.delta", "first")
            a.suggest("second", 16)
            first_end = await a.finished("first")
            second_end = await a.finished("second")
    assert first_end["type"] == "suggestion.end" and first_end["reason"] == "superseded"
    assert_end_after_stream(a, "first", "superseded")
    assert second_end["type"] == "suggestion.end", second_end
    assert_end_after_stream(a, "second", "done")
    assert second_end["tokens"] == len(PIECES)
    assert a.text_of("second") == "".join(PIECES)
    assert len(a.text_of("first")) < len("".join(PIECES))
    # The superseded stream said nothing more once the new one started.
    first_end_at = a.index_of(first_end)
    assert all(m.get("id") != "first" for m in a.messages[first_end_at + 1 :])


async def test_cancel_ends_the_stream_and_no_delta_follows(scripted: ServerProcess) -> None:
    name = doc_name("cancel")
    with anyio.fail_after(10):
        async with editor(scripted, name) as a:
            await seeded(a, "Dear diary,")
            a.suggest("c1", 11)
            await a.got("suggestion.delta", "c1")
            a.send(type="cancel", id="c1")
            end = await a.finished("c1")
            # A later request runs after c1's generation is over: anything c1 still emitted
            # would have arrived before this one finishes.
            a.suggest("c2", 11)
            after = await a.finished("c2")
    assert end["type"] == "suggestion.end" and end["reason"] == "cancelled", end
    assert_end_after_stream(a, "c1", "cancelled")
    assert len(a.deltas("c1")) < len(PIECES)
    assert after["type"] == "suggestion.end" and after["reason"] == "done"


async def test_queue_full_answers_busy_at_once_while_others_complete(
    narrow: ServerProcess,
) -> None:
    name = doc_name("busy")
    count = 4
    with anyio.fail_after(20):
        async with contextlib.AsyncExitStack() as stack:
            editors = [await stack.enter_async_context(editor(narrow, name)) for _ in range(count)]
            await seeded(editors[0], "Busy day at the office")
            for ed in editors[1:]:
                await ed.doc.wait_text("Busy day at the office")
            sent_at = time.monotonic()
            for i, ed in enumerate(editors):
                ed.suggest(f"b{i}", 4 + i)  # distinct contexts: identical ones share a flight
            outcomes = [await ed.finished(f"b{i}") for i, ed in enumerate(editors)]
            busy = [i for i, o in enumerate(outcomes) if o["type"] == "suggestion.error"]
            done = [i for i, o in enumerate(outcomes) if o["type"] == "suggestion.end"]
            # An editor refused as busy may ask again once the queue has room.
            retry = editors[busy[0]] if busy else editors[0]
            retry.suggest("again", 4)
            again = await retry.finished("again")
    assert all(outcomes[i]["code"] == "busy" for i in busy), outcomes
    assert all(outcomes[i]["reason"] == "done" for i in done), outcomes
    # One runs and one waits (or only one, when both arrive before the worker takes the first):
    # the rest are refused.
    assert 1 <= len(done) <= 2 and len(busy) == count - len(done), outcomes
    first_end = min(editors[i].arrival(outcomes[i]) for i in done)
    for i in busy:
        refused_at = editors[i].arrival(outcomes[i])
        assert refused_at < first_end, "busy must be answered at once, not after a wait"
        assert refused_at - sent_at < 0.5
    assert again["type"] == "suggestion.end" and again["reason"] == "done", again


async def test_an_edit_a_few_words_before_the_cursor_leaves_the_stream_going(
    scripted: ServerProcess,
) -> None:
    """In a short document every edit is within the anchor's whole span of the cursor: a
    collaborator fixing a word earlier in the sentence (or typing at the top of the page)
    does not stop the completion being streamed at its end; a change right at the cursor
    still does."""
    name = doc_name("near")
    text = "The meeting is on Tuesday at noon."
    with anyio.fail_after(15):
        async with editor(scripted, name) as a, editor(scripted, name) as b:
            await seeded(a, text)
            await b.doc.wait_text(text)
            a.suggest("kept", utf16_len(text))
            await a.got("suggestion.delta", "kept")
            await b.edit_acked(lambda d: d.insert(len("The meeting"), "s"))  # 23 chars back
            await b.edit_acked(lambda d: d.insert(0, "Note: "))
            kept_end = await a.finished("kept")
            edited = "Note: The meetings is on Tuesday at noon."
            await a.doc.wait_text(edited)
            a.suggest("stale", utf16_len(edited))
            await a.got("suggestion.delta", "stale")
            await b.edit_acked(lambda d: d.insert(len(edited) - len("noon."), "high "))
            stale_end = await a.finished("stale")
    assert kept_end["type"] == "suggestion.end" and kept_end["reason"] == "done", kept_end
    assert a.text_of("kept") == "".join(PIECES)
    assert stale_end["type"] == "suggestion.end" and stale_end["reason"] == "cancelled"


async def test_edit_before_the_cursor_cancels_an_edit_elsewhere_does_not(
    scripted: ServerProcess,
) -> None:
    name = doc_name("stale")
    head = "The meeting is on Tuesday."
    far = "\n\n" + "Unrelated notes about something else entirely. " * 8
    with anyio.fail_after(15):
        async with editor(scripted, name) as a, editor(scripted, name) as b:
            await seeded(a, head + far)
            await b.doc.wait_text(head + far)

            # Another editor rewrites the word right before A's cursor: the context is stale.
            a.suggest("stale", utf16_len(head))
            await a.got("suggestion.delta", "stale")
            await b.edit_acked(lambda d: d.insert(len(head) - 1, "!"))
            stale_end = await a.finished("stale")

            # An edit far after the cursor leaves the context alone.
            await a.doc.wait_text(head[:-1] + "!." + far)
            text = str(a.doc)
            cursor = len(head) + 1
            a.suggest("kept", utf16_len(text[:cursor]))
            await a.got("suggestion.delta", "kept")
            await b.edit_acked(lambda d: d.append(" Appended far away."))
            await a.doc.wait_text(lambda t: t.endswith("Appended far away."))
            kept_end = await a.finished("kept")
    assert stale_end["type"] == "suggestion.end" and stale_end["reason"] == "cancelled"
    assert_end_after_stream(a, "stale", "cancelled")
    assert kept_end["type"] == "suggestion.end" and kept_end["reason"] == "done", kept_end
    assert a.text_of("kept") == "".join(PIECES)


async def test_readonly_editor_may_neither_ask_nor_accept(
    scripted: ServerProcess,
) -> None:
    name = doc_name("readonly")
    original = "Read but do not touch."
    with anyio.fail_after(10):
        async with editor(scripted, name) as w:
            await seeded(w, original)
            w.suggest("w1", utf16_len(original))  # the writer's own, for the reader to name
            await w.finished("w1")
            async with editor(scripted, name, scope="readonly") as r:
                assert r.doc.scope == "readonly"
                r.suggest("ro", utf16_len(original))
                refused = await r.error("ro")
                r.send(type="accept", id="w1")
                error = await r.error("w1")
                # The writer's own edit after the refusals arrives: nothing came before it.
                await w.edit_acked(lambda d: d.append("!"))
                await r.doc.wait_text(original + "!")
    assert refused["code"] == "forbidden" and "read-write" in refused["message"], refused
    assert r.of("ro") == [refused]  # no start, no stream: the model was never asked
    assert error["code"] == "forbidden"
    assert await rest_text(scripted, name) == original + "!"


async def test_accept_lands_at_a_relative_position_despite_concurrent_edits(
    scripted: ServerProcess,
) -> None:
    name = doc_name("relative")
    before, after = "Chapter one. ", "Chapter two."
    with anyio.fail_after(10):
        async with editor(scripted, name) as a, editor(scripted, name) as b:
            await seeded(a, before + after)
            await b.doc.wait_text(before + after)
            a.suggest("rel", utf16_len(before))
            await a.finished("rel")
            # After the stream, B inserts at the start: the cursor has moved by 9 characters.
            await b.edit_acked(lambda d: d.insert(0, "Preface. "))
            await a.doc.wait_text("Preface. " + before + after)
            a.send(type="accept", id="rel")
            await a.got("suggestion.accepted", "rel")
            expected = "Preface. " + before + "".join(PIECES) + after
            await b.doc.wait_text(expected)
    assert await rest_text(scripted, name) == expected


async def test_accept_mid_stream_inserts_what_was_streamed(scripted: ServerProcess) -> None:
    name = doc_name("midstream")
    with anyio.fail_after(10):
        async with editor(scripted, name) as a, editor(scripted, name) as b:
            await seeded(a, "Halfway")
            await b.doc.wait_text("Halfway")
            a.suggest("mid", 7)
            await a.got("suggestion.delta", "mid")
            a.send(type="accept", id="mid")
            accepted = await a.got("suggestion.accepted", "mid")
            streamed = "".join(
                m["text"]
                for m in a.messages[: a.index_of(accepted)]
                if m.get("id") == "mid" and m["type"] == "suggestion.delta"
            )
            await b.doc.wait_text("Halfway" + streamed)
            # The accepted stream is over: a round trip later, nothing more came for it.
            a.send(type="cancel", id="nope")
            await a.error("nope")
    assert streamed and len(streamed) < len("".join(PIECES))
    accepted_at = a.index_of(accepted)
    assert all(m.get("id") != "mid" for m in a.messages[accepted_at + 1 :])
    assert await rest_text(scripted, name) == "Halfway" + streamed


async def test_utf16_position_between_astral_characters(scripted: ServerProcess) -> None:
    """``pos`` counts UTF-16 units: 'héllo 😀' is 8 units, so the text goes between 😀 and 𝄞."""
    name = doc_name("utf16-mid")
    text = "héllo 😀𝄞!"
    with anyio.fail_after(10):
        async with editor(scripted, name) as a, editor(scripted, name) as b:
            await seeded(a, text)
            a.suggest("m", utf16_len("héllo 😀"))
            await a.finished("m")
            a.send(type="accept", id="m")
            await a.got("suggestion.accepted", "m")
            expected = "héllo 😀" + "".join(PIECES) + "𝄞!"
            await b.doc.wait_text(expected)
    assert await rest_text(scripted, name) == expected


async def test_anchor_is_preferred_over_pos(scripted: ServerProcess) -> None:
    name = doc_name("anchor")
    text = "alpha beta gamma"
    with anyio.fail_after(10):
        async with editor(scripted, name) as a, editor(scripted, name) as b:
            await seeded(a, text)
            sticky = a.doc.text.sticky_index(len("alpha"), Assoc.BEFORE)
            anchor = base64.b64encode(sticky.encode()).decode()
            a.suggest("an", 0, anchor=anchor)  # pos says 0, the anchor says after "alpha"
            await a.finished("an")
            a.send(type="accept", id="an")
            await a.got("suggestion.accepted", "an")
            expected = "alpha" + "".join(PIECES) + " beta gamma"
            await b.doc.wait_text(expected)


async def test_accept_after_non_ascii_text_follows_concurrent_edits(
    scripted: ServerProcess,
) -> None:
    """Cursor after 'ééé' (3 UTF-16 units, 6 bytes); B then types right after the cursor."""
    name = doc_name("relative-utf")
    with anyio.fail_after(10):
        async with editor(scripted, name) as a, editor(scripted, name) as b:
            await seeded(a, "éééabcdef")
            await b.doc.wait_text("éééabcdef")
            a.suggest("r", 3)
            end = await a.finished("r")
            assert end["type"] == "suggestion.end", end
            await b.edit_acked(lambda d: d.insert(4, "Q"))  # after the 'a' that follows
            await a.doc.wait_text("éééaQbcdef")
            a.send(type="accept", id="r")
            await a.got("suggestion.accepted", "r")
            expected = "ééé" + "".join(PIECES) + "aQbcdef"
            await expect_text(b, expected, timeout=3)


async def test_anchor_after_emoji(scripted: ServerProcess) -> None:
    """A client's relative position (made as JS would, in UTF-16 units) after two emoji."""
    name = doc_name("anchor-utf")
    text = "😀😀 x"
    with anyio.fail_after(10):
        async with editor(scripted, name) as a, editor(scripted, name) as b:
            await seeded(a, text)
            sticky = a.doc.text.sticky_index(utf16_len("😀😀 "), Assoc.BEFORE)
            anchor = base64.b64encode(sticky.encode()).decode()
            a.suggest("an", 0, anchor=anchor)
            end = await a.finished("an")
            assert end["type"] == "suggestion.end", end
            a.send(type="accept", id="an")
            await a.got("suggestion.accepted", "an")
            await expect_text(b, "😀😀 " + "".join(PIECES) + "x", timeout=3)


async def test_error_without_id_decodes_with_the_published_codec(
    scripted: ServerProcess,
) -> None:
    name = doc_name("codec")
    with anyio.fail_after(10):
        async with editor(scripted, name) as a:
            a.doc.send_stateless("not json")
            error = await a.error(None)
    decoded = decode_server_message(json.dumps(error))
    assert decoded.code == "bad_request"


BAD_PAYLOADS: list[tuple[str, str | None]] = [
    ("not json", None),
    ("{}", None),
    ("[]", None),
    ('"suggest"', None),
    ('{"type":"suggest","id":"x","kind":"nope","pos":1}', "x"),
    ('{"type":"suggest","id":"neg","kind":"complete","pos":-1}', "neg"),
    ('{"type":"suggest","id":"frac","kind":"complete","pos":1.5}', "frac"),
    ('{"type":"suggest","id":"nopos","kind":"complete"}', "nopos"),
    ('{"type":"suggest","id":"zero","kind":"complete","pos":1,"max_tokens":0}', "zero"),
    ('{"type":"suggest","id":"huge","kind":"complete","pos":1,"max_tokens":1000000000}', "huge"),
    ('{"type":"suggest","id":"rw","kind":"rewrite","from":5,"to":2}', "rw"),
    ('{"type":"suggest","id":"far","kind":"complete","pos":100000}', "far"),
    ('{"type":"suggest","id":"b64","kind":"complete","anchor":"%%%"}', "b64"),
    ('{"type":"cancel","id":"unknown-c"}', "unknown-c"),
    ('{"type":"accept","id":"unknown-a"}', "unknown-a"),
    ('{"type":"wat","id":"w"}', "w"),
    (json.dumps({"type": "suggest", "id": "i" * 10_000, "kind": "complete", "pos": 0}), None),
]


async def test_bad_payloads_get_errors_and_the_socket_keeps_syncing(
    scripted: ServerProcess,
) -> None:
    name = doc_name("bad")
    with anyio.fail_after(15):
        async with editor(scripted, name) as a, editor(scripted, name) as b:
            await seeded(a, "Still here")
            for payload, request_id in BAD_PAYLOADS:
                seen = len(a.messages)
                a.doc.send_stateless(payload)
                error = await a.wait(lambda m: m["type"] == "suggestion.error", seen)
                assert error.get("id") == request_id, (payload[:80], error)
                assert error["code"] == "bad_request", (payload[:80], error)
                assert error["message"]
            # Never a close: the same socket still syncs and still serves suggestions.
            assert a.client.connects == 1 and a.client.connected.is_set()
            await a.edit_acked(lambda d: d.append(" and syncing"))
            await b.doc.wait_text("Still here and syncing")
            a.suggest("ok", 4)
            end = await a.finished("ok")
    assert end["type"] == "suggestion.end" and end["reason"] == "done", end
    # The 10 KB id is not echoed back.
    assert all(len(json.dumps(m)) < 1000 for m in a.messages)


async def test_garbage_anchor_gets_an_error_not_a_dropped_socket(scripted: ServerProcess) -> None:
    name = doc_name("anchor-garbage")
    with anyio.fail_after(10):
        async with editor(scripted, name) as a:
            await seeded(a, "anchored")
            a.suggest("g", 0, anchor=base64.b64encode(b"AAAA").decode())
            error = await a.error("g")
            assert error["code"] == "bad_request"
            await a.edit_acked(lambda d: d.append("!"))
            assert a.client.connects == 1


async def test_provider_failure_is_a_clear_error_and_the_socket_stays_usable(
    failing: ServerProcess,
) -> None:
    name = doc_name("fail")
    with anyio.fail_after(10):
        async with editor(failing, name) as a, editor(failing, name) as b:
            await seeded(a, "Try this")
            a.suggest("f1", 8)
            error = await a.finished("f1")
            assert error["type"] == "suggestion.error", error
            assert error["code"] == "provider_error"
            assert "boom" in error["message"]
            await a.edit_acked(lambda d: d.append(" again"))
            await b.doc.wait_text("Try this again")
            a.suggest("f2", 14)
            second = await a.finished("f2")
    assert second["type"] == "suggestion.error" and second["code"] == "provider_error"
    assert a.client.connects == 1
    metrics = await metrics_text(failing)
    assert metric_value(metrics, "tether_ai_errors_total", code="provider_error") >= 2


async def test_first_piece_goes_alone_then_frames_are_coalesced(fast: ServerProcess) -> None:
    name = doc_name("coalesce")
    with anyio.fail_after(10):
        async with editor(fast, name) as a:
            await seeded(a, "abc")
            a.suggest("co", 3, max_tokens=len(FAST_PIECES))
            end = await a.finished("co")
    assert end["type"] == "suggestion.end" and end["reason"] == "done", end
    assert end["tokens"] == len(FAST_PIECES)
    frames = a.deltas("co")
    assert frames[0] == FAST_PIECES[0]
    assert "".join(frames) == "".join(FAST_PIECES)
    assert 2 <= len(frames) <= 20, frames  # 40 pieces over ~0.2 s, one frame per 50 ms


async def test_metrics_after_a_suggestion(scripted: ServerProcess) -> None:
    name = doc_name("metrics")
    with anyio.fail_after(10):
        async with editor(scripted, name) as a:
            await seeded(a, "Measure me")
            a.suggest("mx", 10)
            await a.finished("mx")
    metrics = await metrics_text(scripted)
    assert "tether_ai_ttft_seconds" in metrics
    ttft_count = metric_value(
        metrics, "tether_ai_ttft_seconds_count", provider="scripted", path="ws"
    )
    assert ttft_count >= 1
    assert metric_value(metrics, "tether_ai_requests_total", path="ws", source="model") >= 1
    assert metric_value(metrics, "tether_ai_outcomes_total", reason="done") >= 1

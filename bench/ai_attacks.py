"""The AI attacks of issue 37 for ``tether bench attacks``: what asking for suggestions costs the
event loop on a 50,000-paragraph rich document (``ai-keystroke``), anchors that are costly to
resolve (``ai-inline-anchor``, ``ai-long-text-anchor``), and one editor's requests holding the
embedded model against another's (``ai-fairness``).

The first three talk to a well-behaved model server of the bench's own
(``surroundings.healthy_model``): what they time is the server's work around the model.
``ai-fairness`` runs the embedded model (``--ai-provider local``), whose worker is what is
shared. Editors speak the wire only (``asking_editor``), so an old checkout is attacked the
same way.
"""

from __future__ import annotations

import asyncio
import base64
import statistics
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import httpx
from pycrdt import Text

from tether.protocol.wire.relative_position import RelativePosition

from .asking_editor import Answer, AskingEditor
from .attack_base import Attack, FiguredStrike, Strike
from .launcher import ServerProcess
from .rich_attacks import PARAGRAPHS, RICH_DOC, counted
from .rich_fixture import (
    Anchored,
    last_text,
    long_items_text,
    opened,
    rich_document,
    with_inline_node,
)
from .surroundings import AI_PLAIN, healthy_model

ISSUE = 37
KEYSTROKES = 20
ASKS = 3  # anchored asks, one after another
LONG_TEXT_ITEMS = 400_000
FAIRNESS_PARAGRAPH_BYTES = 2_000_000
FAIRNESS_ASKS = 4
VICTIM_TOKENS = 4
_TYPIST_CLIENT = 37_000_010
_ATTACKER_SENTENCE = "The harbour keeper watched the old pier on a cold and quiet day. "


def ai_attacks(scale: float) -> list[Attack]:
    def sized(n: int) -> int:
        return max(1, round(n * scale))

    big = partial(rich_document, sized(PARAGRAPHS))
    keystrokes = max(3, sized(KEYSTROKES))
    long_text = partial(long_items_text, max(1000, sized(LONG_TEXT_ITEMS)))
    repeats = max(1, sized(FAIRNESS_PARAGRAPH_BYTES) // len(_ATTACKER_SENTENCE))
    paragraph = _ATTACKER_SENTENCE * repeats
    return [
        Attack(
            "ai-keystroke",
            1,
            keystrokes,
            partial(ai_keystroke, big, keystrokes),
            surroundings=healthy_model,
            issue=ISSUE,
        ),
        Attack(
            "ai-inline-anchor",
            1,
            len(big()),
            partial(ai_anchor, big, None),
            surroundings=healthy_model,
            issue=ISSUE,
        ),
        Attack(
            "ai-long-text-anchor",
            1,
            len(long_text().update),
            partial(ai_anchor, None, long_text),
            surroundings=healthy_model,
            issue=ISSUE,
        ),
        Attack(
            "ai-fairness",
            3,
            len(paragraph),
            partial(ai_fairness, paragraph),
            surroundings=embedded_model,
            issue=ISSUE,
        ),
    ]


@asynccontextmanager
async def embedded_model(log_dir: Path) -> AsyncIterator[dict[str, object]]:
    """The embedded model, as the server runs it by default, each request reaching it."""
    yield {**AI_PLAIN, "ai_provider": "local"}


def milliseconds(values: list[float | None]) -> dict[str, Any]:
    """p50 and max of what was measured, and how many were not (``None``)."""
    known = sorted(v for v in values if v is not None)
    if not known:
        return {"p50": None, "max": None, "missing": len(values)}
    return {
        "p50": round(statistics.median(known), 1),
        "max": round(known[-1], 1),
        "missing": len(values) - len(known),
    }


# ---- typing and asking on a 50,000-paragraph document -------------------------------------


@asynccontextmanager
async def ai_keystroke(
    fixture: Callable[[], bytes], keystrokes: int, server: ServerProcess, timeout: float
) -> AsyncIterator[Strike]:
    """The typist stores the big document, then types at the end of its last paragraph,
    asking for a suggestion after each keystroke and waiting for it."""
    update = await asyncio.to_thread(fixture)
    token = server.token([RICH_DOC], subject="typist")
    async with await AskingEditor.open(server.ws_url, RICH_DOC, token, timeout) as typist:
        typist.doc = await asyncio.to_thread(opened, update, _TYPIST_CLIENT)
        if not await typist.send_and_wait(update, 4 * timeout):
            raise RuntimeError("the server did not store the rich document")
        index, text = last_text(typist.doc)

        async def strike(it: FiguredStrike) -> str:
            acks: list[float | None] = []
            answers: list[Answer] = []
            for _ in range(keystrokes):
                before = typist.doc.get_state()
                text.insert(len(text), "x")  # ASCII: pycrdt's length is the characters'
                began = time.perf_counter()
                await typist.send_and_wait(typist.doc.get_update(before), timeout)
                acks.append((time.perf_counter() - began) * 1000)
                # str() of an XmlText writes its marks as tags: the characters are the runs'
                pos = len("".join(run for run, _ in text.diff()).encode("utf-16-le")) // 2
                fields = {"pos": pos, "path": [index, 0], "max_tokens": 4}
                answers.append(await typist.ask(fields, timeout))
                it.figures["keystroke_ack_ms"] = milliseconds(acks)
                it.figures["answer_ms"] = milliseconds([a.end_ms for a in answers])
            outcomes = counted([a.outcome for a in answers])
            return f"{keystrokes} keystrokes, answers: {outcomes}{_message(answers)}"

        yield FiguredStrike(strike)


# ---- anchors that cost the loop to resolve --------------------------------------------------


@asynccontextmanager
async def ai_anchor(
    base: Callable[[], bytes] | None,
    shape: Callable[[], Anchored] | None,
    server: ServerProcess,
    timeout: float,
) -> AsyncIterator[Strike]:
    """The asker stores ``base`` with a mention after it (``shape`` None: the cursor in the
    mention's label), or ``shape`` alone; then asks ``ASKS`` times, anchored at the cursor."""
    name = "anchored"
    token = server.token([name], subject="asker")
    base_update = await asyncio.to_thread(base) if base is not None else None
    if shape is not None:
        anchored = await asyncio.to_thread(shape)
    else:
        assert base_update is not None
        anchored = await asyncio.to_thread(with_inline_node, base_update)
    async with await AskingEditor.open(server.ws_url, name, token, timeout) as asker:
        for update in (base_update, anchored.update):
            if update is not None and not await asker.send_and_wait(update, 4 * timeout):
                raise RuntimeError("the server did not store the anchored document")
        anchor = base64.b64encode(RelativePosition(item=anchored.item).encode()).decode()

        async def strike(it: FiguredStrike) -> str:
            answers = []
            for _ in range(ASKS):
                answers.append(await asker.ask({"anchor": anchor, "max_tokens": 4}, timeout))
                it.figures["answer_ms"] = milliseconds([a.end_ms for a in answers])
            return counted([a.outcome for a in answers]) + _message(answers)

        yield FiguredStrike(strike)


def _message(answers: list[Answer]) -> str:
    """The last error's message, in brackets ("" when none failed)."""
    for answer in reversed(answers):
        message = (answer.end or {}).get("message")
        if message:
            return f" ({str(message)[:80]})"
    return ""


# ---- one editor's requests against another's on the embedded model ------------------------


@asynccontextmanager
async def ai_fairness(
    paragraph: str, server: ServerProcess, timeout: float
) -> AsyncIterator[Strike]:
    """An attacker with one long paragraph asks ``FAIRNESS_ASKS`` times without waiting, each
    from a socket of its own at another place in the paragraph (one socket's asks would
    supersede each other); then a victim on another document (another user) asks for a few
    tokens."""
    async with AsyncExitStack() as stack:
        attacker = await _writer(stack, server, "fair-attacker", "attacker", paragraph, timeout)
        token = server.token(["fair-attacker"], subject="attacker")
        sockets = [attacker] + [
            await stack.enter_async_context(
                await AskingEditor.open(server.ws_url, "fair-attacker", token, timeout)
            )
            for _ in range(FAIRNESS_ASKS - 1)
        ]
        victim = await _writer(
            stack, server, "fair-victim", "victim", "The weather in the harbour today is", timeout
        )
        alone = [await victim.ask(_at_end(victim, VICTIM_TOKENS), timeout) for _ in range(2)]
        restarts = await _worker_restarts(server)
        units = len(paragraph.encode("utf-16-le")) // 2

        async def strike(it: FiguredStrike) -> str:
            it.figures["victim_alone_ms"] = _first_piece(alone[-1])
            asks = [
                await socket.send_ask({"pos": units * (k + 1) // FAIRNESS_ASKS})
                for k, socket in enumerate(sockets)
            ]
            answer = await victim.send_ask(_at_end(victim, VICTIM_TOKENS))
            await it.time("victim_answer_ms", victim.answered(answer, timeout))
            it.figures["victim_ttft_ms"] = _first_piece(answer)
            await asyncio.gather(
                *(socket.answered(a, timeout) for socket, a in zip(sockets, asks, strict=True))
            )
            it.figures["worker_restarts"] = await _worker_restarts(server) - restarts
            return (
                f"victim {answer.outcome}; attacker: {counted([a.outcome for a in asks])};"
                f" worker restarts {it.figures['worker_restarts']}"
            )

        yield FiguredStrike(strike)


async def _writer(
    stack: AsyncExitStack,
    server: ServerProcess,
    name: str,
    subject: str,
    text: str,
    timeout: float,
) -> AskingEditor:
    token = server.token([name], subject=subject)
    editor = await stack.enter_async_context(
        await AskingEditor.open(server.ws_url, name, token, timeout)
    )
    if not await editor.send_and_wait(editor.typed(text), 4 * timeout):
        raise RuntimeError(f"the server did not store {name}")
    return editor


def _at_end(editor: AskingEditor, max_tokens: int | None) -> dict[str, Any]:
    text = str(editor.doc.get("content", type=Text))
    fields: dict[str, Any] = {"pos": len(text.encode("utf-16-le")) // 2}
    if max_tokens is not None:
        fields["max_tokens"] = max_tokens
    return fields


def _first_piece(answer: Answer) -> float | str:
    """The first piece's time, else the end's marked with its outcome, else unanswered."""
    if answer.first_piece_ms is not None:
        return answer.first_piece_ms
    if answer.end_ms is not None:
        return f"{answer.outcome} at {answer.end_ms:.0f}"
    return "unanswered"


async def _worker_restarts(server: ServerProcess) -> int:
    async with httpx.AsyncClient(timeout=10) as http:
        reply = await http.get(server.http_url + "/health")
    return int((reply.json().get("ai") or {}).get("restarts") or 0)

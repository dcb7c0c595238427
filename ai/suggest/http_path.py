"""The HTTP suggestion path: one request, one SSE stream of the same JSON messages as the socket.

It serves clients without WebSockets (server-held document, warm state per subject), and with
``text`` in the request it is the request-per-suggestion baseline of ``tether bench ai``: the
uploaded text, a prompt rebuilt from scratch and a cold model, every time. Knows nothing of
Starlette: ``send`` gets each message's JSON.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Hashable

from tether.protocol.wire.ai_messages import (
    JUNK_PREFIX,
    Suggest,
    SuggestionDelta,
    SuggestionEnd,
    SuggestionError,
    SuggestionStart,
)

from ..engine import AiEngine
from ..errors import AiError, BadRequest
from ..model.providers.base import Cancellation, GenerationRequest
from ..text.positions import utf16_to_index
from ..text.regions import RegionIndex
from .flights import dropped_by
from .generation import length_of, run_generation, screening, shaping
from .scheduler import INTERACTIVE


async def stream_http_suggestion(
    engine: AiEngine,
    request: Suggest,
    *,
    text: str,
    session: str,
    cold: bool,
    send: Callable[[str], None],
    owner: Hashable = None,
    subject: str | None = None,
) -> None:
    """Stream one suggestion to ``send``; ``owner`` and ``subject`` are whose share of the
    model it takes (see ``ai.suggest.scheduler``)."""
    requested_at = time.perf_counter()
    engine.metrics.requests.labels("http", "model").inc()
    try:
        prompt = _prompt(engine, request, text)
    except AiError as exc:
        send(SuggestionError(request.id, exc.code, str(exc)).encode())
        return
    cancel = Cancellation()
    generation = GenerationRequest(
        prompt=prompt.text,
        session=session,
        max_tokens=length_of(engine.settings, prompt, request.max_tokens),
        stop=prompt.stop,
        cold=cold,
        must_start=engine.settings.must_start and prompt.kind == "complete",
    )
    path = "http-baseline" if cold else "http"
    send(SuggestionStart(request.id, "model").encode())
    shown: list[str] = []  # a rewrite's text, for what it drops

    def emit(piece: str) -> None:
        if prompt.kind == "rewrite":
            shown.append(piece)
        send(SuggestionDelta(request.id, piece).encode())

    job: asyncio.Future[object] | None = None
    try:
        job = engine.scheduler.submit(
            lambda: run_generation(
                engine.provider,
                generation,
                cancel,
                emit,
                interval=engine.settings.coalesce_seconds,
                timeout=engine.settings.request_timeout,
                metrics=engine.metrics,
                requested_at=requested_at,
                path=path,
                screen=screening(engine.settings, prompt),
                **shaping(engine.settings, prompt.kind),
            ),
            INTERACTIVE,
            owner=owner,
            subject=subject,
        )
        result, ttft = await job  # type: ignore[misc]
    except AiError as exc:
        engine.metrics.errors.labels(exc.code).inc()
        send(SuggestionError(request.id, exc.code, str(exc)).encode())
        return
    finally:
        cancel.cancel()
        if job is not None and not job.done():
            job.cancel()  # the HTTP client went away
    ttft_ms = None if ttft is None else round(ttft * 1000, 2)
    reason = "done"
    if result.junk is not None:
        reason = JUNK_PREFIX + result.junk
        engine.flights.count_junk(result.junk)
    losses = None
    if prompt.kind == "rewrite" and shown:  # the passage is the rewrite prompt's window
        losses = dropped_by(prompt.window, "".join(shown))
    send(SuggestionEnd(request.id, reason, ttft_ms, result.pieces, losses).encode())


def _prompt(engine: AiEngine, request: Suggest, text: str):
    if request.kind == "rewrite":
        assert request.start is not None and request.end is not None
        return engine.builder.rewrite(
            text, utf16_to_index(text, request.start), utf16_to_index(text, request.end)
        )
    if request.pos is None:
        raise BadRequest("the HTTP path takes 'pos', not 'anchor'")
    # A fresh index every request costs only the paragraphs near the cursor: the builder cuts
    # the text to what a prompt could hold before splitting or counting anything.
    regions = RegionIndex(engine.builder.count_tokens)
    return engine.builder.complete(regions, text, utf16_to_index(text, request.pos))

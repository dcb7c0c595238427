"""One generation, whichever path asked for it: stream the provider through the coalescer within
a time limit, and record TTFT and inter-token latency. Knows nothing of sockets or documents.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .errors import ProviderTimeout
from .metrics import AiMetrics
from .providers.base import Cancellation, GenerationRequest, Provider
from .stopping import TOKENS, heal_prompt, shape
from .streamer import StreamResult, stream_coalesced

if TYPE_CHECKING:
    from .engine import AiSettings


async def run_generation(
    provider: Provider,
    generation: GenerationRequest,
    cancel: Cancellation,
    emit: Callable[[str], None],
    *,
    interval: float,
    timeout: float,
    metrics: AiMetrics,
    requested_at: float | None,
    path: str,
    stop_rule: str = TOKENS,
    heal: bool = False,
) -> tuple[StreamResult, float | None]:
    """Returns the stream's result and the time to first token in seconds (None if no text,
    or no ``requested_at``: a prefetch nobody has asked for yet has no TTFT).

    ``heal`` and ``stop_rule`` (see ``ai.stopping``) shape completions: the prompt ends before
    the typed space, and the stream stops as soon as the rule has decided."""
    leftover = ""
    if heal:
        healed, leftover = heal_prompt(generation.prompt)
        generation = dataclasses.replace(generation, prompt=healed)
    pieces = provider.stream(generation, cancel)
    if leftover or stop_rule != TOKENS:
        pieces = shape(pieces, leftover=leftover, rule=stop_rule)
    try:
        async with asyncio.timeout(timeout):
            result = await stream_coalesced(pieces, emit, interval=interval)
    except TimeoutError as exc:
        raise ProviderTimeout("the model did not finish in time") from exc
    for before, after in zip(result.piece_times, result.piece_times[1:], strict=False):
        metrics.itl.labels(provider.name, path).observe(after - before)
    if result.first_piece_at is None or requested_at is None:
        return result, None
    ttft = result.first_piece_at - requested_at
    metrics.ttft.labels(provider.name, path).observe(ttft)
    return result, ttft


def shaping(settings: AiSettings, kind: str) -> dict[str, Any]:
    """``run_generation``'s stopping and healing arguments for a prompt of ``kind``: the
    settings' for completions; rewrites are whole passages, neither cut nor healed."""
    if kind != "complete":
        return {}
    return {"stop_rule": settings.stop_rule, "heal": settings.heal}

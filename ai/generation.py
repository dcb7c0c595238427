"""One generation, whichever path asked for it: stream the provider through the coalescer within
a time limit, and record TTFT and inter-token latency. Knows nothing of sockets or documents.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from .errors import ProviderTimeout
from .metrics import AiMetrics
from .providers.base import Cancellation, GenerationRequest, Provider
from .streamer import StreamResult, stream_coalesced


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
) -> tuple[StreamResult, float | None]:
    """Returns the stream's result and the time to first token in seconds (None if no text,
    or no ``requested_at``: a prefetch nobody has asked for yet has no TTFT)."""
    pieces = provider.stream(generation, cancel)
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

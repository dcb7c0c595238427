"""One generation, whichever path asked for it: stream the provider through the coalescer within
a time limit, and record TTFT and inter-token latency. Knows nothing of sockets or documents.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from tether.protocol.wire.ai_messages import MAX_TOKENS_LIMIT

from ..errors import ProviderTimeout
from ..metrics import AiMetrics
from ..model.providers.base import Cancellation, GenerationRequest, Provider
from ..text.context import most_tokens
from ..text.junk import JunkScreen, RewriteScreen, screened
from ..text.junk import screen as screen_whole
from ..text.stopping import DEFAULT_SURE, TOKENS, heal_prompt, shape
from .streamer import StreamResult, stream_coalesced

if TYPE_CHECKING:
    from ..settings import AiSettings
    from ..text.context import BuiltPrompt


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
    sure: float = DEFAULT_SURE,
    heal: bool = False,
    screen: JunkScreen | None = None,
) -> tuple[StreamResult, float | None]:
    """Returns the stream's result and the time to first token in seconds (None if no text,
    or no ``requested_at``: a prefetch nobody has asked for yet has no TTFT). The result's
    ``pieces`` are the model's tokens, whatever was shown of them.

    ``heal`` and ``stop_rule`` (see ``ai.text.stopping``) shape completions: the prompt ends before
    the typed space, and the stream stops as soon as the rule has decided. ``screen`` (see
    ``ai.text.junk``) holds text back until it is known not to be junk, and ends the stream at the
    first junk (``result.junk`` says which kind)."""
    leftover = ""
    if heal:
        healed, leftover = heal_prompt(generation.prompt)
        generation = dataclasses.replace(generation, prompt=healed)
    # A completion at the start of a line: the model's own line breaks before its first word
    # are dropped (``heal_output``).
    line_start = heal and generation.prompt.endswith("\n")
    tokens = _Counted(provider.stream(generation, cancel))
    pieces: AsyncIterator[str] = tokens
    if leftover or line_start or stop_rule != TOKENS:
        pieces = shape(pieces, leftover=leftover, rule=stop_rule, sure=sure, line_start=line_start)
    if screen is not None:
        pieces = screened(pieces, screen)
    try:
        async with asyncio.timeout(timeout):
            result = await stream_coalesced(pieces, emit, interval=interval)
    except TimeoutError as exc:
        raise ProviderTimeout("the model did not finish in time") from exc
    result.pieces = tokens.count
    result.junk = screen.kind if screen is not None else None
    for before, after in zip(result.piece_times, result.piece_times[1:], strict=False):
        metrics.itl.labels(provider.name, path).observe(after - before)
    if result.first_piece_at is None or requested_at is None:
        return result, None
    ttft = result.first_piece_at - requested_at
    metrics.ttft.labels(provider.name, path).observe(ttft)
    return result, ttft


class _Counted:
    """The model's stream, counting its tokens."""

    def __init__(self, pieces: AsyncIterator[str]) -> None:
        self._pieces = aiter(pieces)
        self.count = 0

    def __aiter__(self) -> _Counted:
        return self

    async def __anext__(self) -> str:
        piece = await anext(self._pieces)
        self.count += 1
        return piece

    async def aclose(self) -> None:
        closer = getattr(self._pieces, "aclose", None)
        if closer is not None:
            await closer()


def screening(settings: AiSettings, prompt: BuiltPrompt) -> JunkScreen | None:
    """The junk filter for one generation of ``prompt``, with the filter on
    (``--ai-junk-filter``): a completion's, or a rewrite's (chat talk only: a rewrite repeats
    its passage by design, so echoes are its point)."""
    if not settings.junk_filter:
        return None
    if prompt.kind == "rewrite":
        return RewriteScreen()
    return JunkScreen(prompt.before, settings.stop_rule)


def rescreen(settings: AiSettings, prompt: BuiltPrompt, text: str) -> tuple[str, str | None]:
    """A cached answer served for ``prompt``: what of it may be shown there, and the junk kind
    that ends it (None: clean, or the filter is off)."""
    if not settings.junk_filter:
        return text, None
    if prompt.kind == "rewrite":
        screen_ = RewriteScreen()
        shown = screen_.feed(text)
        return shown + screen_.close(), screen_.kind
    return screen_whole(text, prompt.before, settings.stop_rule)


def length_of(settings: AiSettings, prompt: BuiltPrompt, asked: int | None) -> int:
    """The most tokens a generation of ``prompt`` may write: what the request asked, else the
    settings' default. A rewrite that asked for nothing gets room for its whole passage, twice
    its estimated tokens and 8 more (``prompt.window`` is the passage): cut at a completion's
    24 tokens, a long sentence's rewrite drops its end; much more lets a model that loops go
    on for a page."""
    if asked is not None:
        return asked
    if prompt.kind == "rewrite":
        room = 2 * most_tokens(prompt.window) + 8
        return min(MAX_TOKENS_LIMIT, max(settings.default_max_tokens, room))
    return settings.default_max_tokens


def shaping(settings: AiSettings, kind: str) -> dict[str, Any]:
    """``run_generation``'s stopping and healing arguments for a prompt of ``kind``: the
    settings' for completions; rewrites are whole passages, neither cut nor healed."""
    if kind != "complete":
        return {}
    return {"stop_rule": settings.stop_rule, "sure": settings.sure, "heal": settings.heal}

"""Turns a provider's token stream into frames: the first piece alone at once, later pieces
coalesced so at most one frame goes out per interval (50 ms by default).

Knows nothing of sockets: ``emit`` is called with each frame's text.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field


@dataclass(slots=True)
class StreamResult:
    text: str = ""
    pieces: int = 0
    frames: int = 0
    first_piece_at: float | None = None
    piece_times: list[float] = field(default_factory=list)
    junk: str | None = None  # the junk kind that ended the stream (see ai.text.junk), if any


async def stream_coalesced(
    pieces: AsyncIterator[str],
    emit: Callable[[str], None],
    *,
    interval: float = 0.05,
    clock: Callable[[], float] = time.perf_counter,
) -> StreamResult:
    result = StreamResult()
    parts: list[str] = []
    buffer: list[str] = []
    last_flush = 0.0
    iterator = aiter(pieces)
    pending: asyncio.Future[str] | None = None

    def flush() -> None:
        nonlocal last_flush
        if buffer:
            emit("".join(buffer))
            buffer.clear()
            result.frames += 1
        last_flush = clock()

    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(iterator))
            timeout = None if not buffer else max(0.0, last_flush + interval - clock())
            done, _ = await asyncio.wait({pending}, timeout=timeout)
            if not done:
                flush()  # the model is slower than the interval: don't sit on text
                continue
            try:
                piece = pending.result()
            except StopAsyncIteration:
                break
            finally:
                pending = None if done else pending
            now = clock()
            result.pieces += 1
            result.piece_times.append(now)
            parts.append(piece)
            if result.first_piece_at is None:
                result.first_piece_at = now
                emit(piece)  # the first token goes out alone, at once
                result.frames += 1
                last_flush = now
                continue
            buffer.append(piece)
            if now - last_flush >= interval:
                flush()
        flush()
    finally:
        if pending is not None and not pending.done():
            pending.cancel()
            with contextlib.suppress(BaseException):
                await pending
        closer = getattr(iterator, "aclose", None)
        if closer is not None:
            with contextlib.suppress(BaseException):
                await closer()
    result.text = "".join(parts)
    return result

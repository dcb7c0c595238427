"""How a connection ends, for both endpoints: the receive loop and a monitor run side by side;
whichever finishes first decides. Peers are detached at once (before anything that could block
on a peer that stopped reading), then the close is attempted within a bound, then the writer
stops. Knows nothing of protocols or Starlette.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from tether.protocol.errors import ProtocolError

from .close_codes import close_for
from .context import Transport
from .metrics import Metrics, label_value
from .outbox import Outbox, SlowConsumer
from .room import InvalidUpdate

log = logging.getLogger(__name__)

CLOSE_TIMEOUT = 1.0


class CloseConnection(Exception):
    """End this connection with ``code`` and ``reason`` (raised or returned by its loops)."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


async def run_connection(
    *,
    receive_loop: Coroutine[Any, Any, None],
    monitor: Coroutine[Any, Any, CloseConnection | None],
    outbox: Outbox,
    transport: Transport,
    detach: Callable[[], None],
    metrics: Metrics,
) -> None:
    writer = asyncio.ensure_future(outbox.drain_forever())
    receiver = asyncio.ensure_future(receive_loop)
    watcher = asyncio.ensure_future(monitor)
    close: CloseConnection | None = None
    try:
        done, _ = await asyncio.wait({receiver, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if watcher in done and not watcher.cancelled():
            close = watcher.result()
        if close is None and receiver in done and not receiver.cancelled():
            close = _decision(receiver.exception())
    finally:
        for task in (receiver, watcher):
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        detach()
        if close is not None:
            metrics.closes.labels(label_value(close.reason.split(":")[0])).inc()
            log.info("closing a connection: %d %s", close.code, close.reason)
            with contextlib.suppress(Exception):
                await outbox.flush(timeout=CLOSE_TIMEOUT)
            outbox.close()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(CLOSE_TIMEOUT):
                    await transport.close(close.code, close.reason)
        outbox.close()
        writer.cancel()
        with contextlib.suppress(BaseException):
            await writer


def _decision(exc: BaseException | None) -> CloseConnection | None:
    if exc is None:
        return None  # the peer went away
    if isinstance(exc, CloseConnection):
        return exc
    if not isinstance(exc, ProtocolError | InvalidUpdate):
        log.error("connection failed", exc_info=exc)
    return CloseConnection(*close_for(exc))


def detach_each(detachers: list[Callable[[], None]]) -> None:
    """Run every detacher even if one fails: one bad document must not pin the others."""
    for detacher in detachers:
        try:
            detacher()
        except Exception:
            log.exception("detaching a peer failed")


def slow_consumer(metrics: Metrics, outbox: Outbox) -> CloseConnection:
    """The close for an overflowed outbox; counted and logged here, once: the connection ends."""
    limit = outbox.overflow_limit or "send_queue_frames"
    metrics.limit_refusals.labels(limit).inc()
    log.warning("closing a slow consumer: its send queue passed %s", limit)
    return CloseConnection(*close_for(SlowConsumer(f"send queue over {limit}")))

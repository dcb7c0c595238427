"""How a connection is set up to send and how it ends, alike for both endpoints. ``outgoing``
makes its outbox, initial sync and end decision. Its receive loop runs until the connection's
``ConnectionEnd`` is decided, by the loop itself (the peer left, a protocol error) or from
outside it (the connection's timer, its outbox overflowing, its room), whichever comes first.
Peers are detached at once (before anything that could block on a peer that stopped reading),
then the close is attempted within a bound, then the writer stops. Knows nothing of protocols
or Starlette.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from tether.protocol.protocol_errors import ProtocolError

from ..rooms.initial_sync import InitialSync
from ..rooms.room import InvalidUpdate
from ..runtime.sync_metrics import Metrics, label_value
from ..transport.outbox import Outbox, SlowConsumer
from .close_codes import close_for
from .server_context import ServerContext, Transport

log = logging.getLogger(__name__)

CLOSE_TIMEOUT = 1.0


def outgoing(transport: Transport, ctx: ServerContext) -> tuple[Outbox, InitialSync, ConnectionEnd]:
    """A new connection's way out, the same for both endpoints: its bounded outbox (writing
    through the transport's pre-framed path and waiting on its drain, where it offers them), the
    initial sync that sends through it, and the end decision that closes it."""
    s = ctx.settings
    outbox = Outbox(
        transport.send,
        s.send_queue_frames,
        s.send_queue_bytes,
        getattr(transport, "write_now", None),  # collab.transport.raw_frames, where offered
        ctx.send_budget,
        drained=getattr(transport, "wait_drained", None),
    )
    initial_sync = InitialSync(outbox, s.initial_sync_piece_bytes, ctx.metrics)
    return outbox, initial_sync, ConnectionEnd(ctx.metrics, outbox)


class CloseConnection(Exception):
    """End this connection with ``code`` and ``reason`` (raised or returned by its loops)."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


class ConnectionEnd:
    """The decision to end one connection: a future, decided once (later decisions are
    ignored). ``None`` means the peer went away (nothing to send it). Decided from outside the
    receive loop (a timer, another connection's fan-out, the room), it interrupts the loop
    wherever it waits; decided from inside it, the loop sees ``ended`` after the frame it is
    handling. One future per connection rather than a task per reason to end it, and the loop
    runs in the connection's own task: idle sockets cost memory."""

    __slots__ = ("_metrics", "_outbox", "_receiving", "decided")

    def __init__(self, metrics: Metrics, outbox: Outbox) -> None:
        self.decided: asyncio.Future[CloseConnection | None] = (
            asyncio.get_running_loop().create_future()
        )
        self._metrics = metrics
        self._outbox = outbox
        self._receiving: asyncio.Task[Any] | None = None  # the task running the receive loop

    @property
    def ended(self) -> bool:
        return self.decided.done()

    def close(self, decision: CloseConnection | None) -> None:
        if self.decided.done():
            return
        self.decided.set_result(decision)
        task = self._receiving
        if task is not None and task is not asyncio.current_task():
            task.cancel()  # the receive loop's own task: run_connection takes it back

    def overflowed(self) -> None:
        """The outbox overflowed (its ``on_overflow``, called inside ``put``): counted once."""
        if not self.decided.done():
            self.close(slow_consumer(self._metrics, self._outbox))


async def run_connection(
    *,
    receive_loop: Coroutine[Any, Any, None],
    end: ConnectionEnd,
    outbox: Outbox,
    transport: Transport,
    detach: Callable[[], None],
    metrics: Metrics,
) -> None:
    """Runs ``receive_loop`` in this task (it must return once ``end.ended``, after the frame
    it is handling) until ``end`` is decided, then closes the connection."""
    writer = asyncio.ensure_future(outbox.drain_forever())
    outbox.on_overflow = end.overflowed
    close: CloseConnection | None = None
    try:
        if outbox.overflow_limit:  # overflowed before the hook was set (an initial burst)
            end.overflowed()
        await _receive_until_ended(receive_loop, end)
        close = end.decided.result()
    finally:
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


async def _receive_until_ended(receive_loop: Coroutine[Any, Any, None], end: ConnectionEnd) -> None:
    task = asyncio.current_task()
    if end.ended:
        receive_loop.close()
        return
    end._receiving = task
    try:
        await receive_loop
        end.close(None)  # the peer went away, or the loop saw ``ended``
    except asyncio.CancelledError:
        # Ours (``end.close`` from outside): taken back. Another cancellation too (the
        # server stopping): it goes on.
        if not end.ended or (task is not None and task.uncancel() > 0):
            raise
    except BaseException as exc:
        end.close(decision_for(exc))
        if not isinstance(exc, Exception):
            raise
    finally:
        end._receiving = None


def decision_for(exc: BaseException | None) -> CloseConnection | None:
    """How a connection ends after ``exc`` (None: the peer went away); unexpected errors are
    logged here."""
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


def send_timed_out(outbox: Outbox, timeout: float, now: float) -> bool:
    """Close a peer whose queued frames made no progress for ``timeout`` seconds: it sends (so
    it is not idle) but stopped reading, and holds what was queued for it. Its queue is freed
    now; the outbox's overflow closes the connection as a slow consumer (``send_timeout``)."""
    if outbox.stalled_for(now) <= timeout:
        return False
    outbox.evict("send_timeout")
    return True


def slow_consumer(metrics: Metrics, outbox: Outbox) -> CloseConnection:
    """The close for an overflowed outbox; counted and logged here, once: the connection ends."""
    limit = outbox.overflow_limit or "send_queue_frames"
    metrics.limit_refusals.labels(limit).inc()
    log.warning("closing a slow consumer: its send queue passed %s", limit)
    return CloseConnection(*close_for(SlowConsumer(f"send queue over {limit}")))

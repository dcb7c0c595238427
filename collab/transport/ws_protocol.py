"""uvicorn's sans-I/O websockets protocol, lighter per connection: what ``tether serve`` runs.

An idle socket is mostly what it holds, not what it does. ``WebSocketsSansIOProtocol`` (the
one uvicorn's ``ws=auto`` picks) keeps, for the socket's whole life, an ``asyncio.Queue`` for
received messages (four waiter/item deques, ~740 bytes each), an ``asyncio.Event`` for write
flow control (another deque), and the parsed upgrade request and the response object with
their headers (~2.5 KB), both used only during the handshake (the ASGI scope keeps its own copy
of the request headers), all in a 1.5 KB instance dict. Here the queue and the event are slim
equivalents (a list, waiters made on first wait), the attributes are slots, and the handshake
objects (and the scope's headers, which only tether's app reads, before it accepts) are
emptied or dropped once used; keepalive pings wait in the shared timer wheel.
Behaviour is unchanged; host apps that mount tether's ASGI app under their own server do not
get the saving.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from ..runtime import gc_policy
from .slim_event import SlimEvent
from .timer_wheel import ConnectionTimer


class _SlimQueue:
    """The ``asyncio.Queue`` subset uvicorn's protocol uses: ``put_nowait``, ``get``,
    ``empty``. Unbounded like uvicorn's (it pauses reading after each message instead)."""

    __slots__ = ("_getters", "_items")

    def __init__(self) -> None:
        self._items: list[Any] = []
        self._getters: list[asyncio.Future[None]] | None = None

    def empty(self) -> bool:
        return not self._items

    def qsize(self) -> int:
        return len(self._items)

    def put_nowait(self, item: Any) -> None:
        self._items.append(item)
        if self._getters:
            for getter in self._getters:
                if not getter.done():
                    getter.set_result(None)
                    break

    async def get(self) -> Any:
        while not self._items:
            getter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            if self._getters is None:
                self._getters = []
            self._getters.append(getter)
            try:
                await getter
            except BaseException:
                # Cancelled after being woken: pass the wake-up on, as asyncio.Queue does.
                if getter.done() and not getter.cancelled() and self._items:
                    self._wake_next(getter)
                raise
            finally:
                self._getters.remove(getter)
                if not self._getters:
                    self._getters = None
        return self._items.pop(0)

    def _wake_next(self, woken: asyncio.Future[None]) -> None:
        for getter in self._getters or ():
            if getter is not woken and not getter.done():
                getter.set_result(None)
                return


class SlimWebSocketsProtocol(WebSocketsSansIOProtocol):
    # Every attribute uvicorn 0.55's protocol sets, as slots: it sets 37, past the 30 an
    # instance dict shares its keys for, so each socket got its own 1.5 KB dict. (A name a later
    # uvicorn adds just lands in the instance dict, as before.)
    __slots__ = (
        "app",
        "app_state",
        "asgi_version",
        "client",
        "close_sent",
        "close_timeout",
        "close_timer",
        "config",
        "conn",
        "connections",
        "curr_msg_data_type",
        "default_headers",
        "disconnected",
        "frames",
        "handshake_complete",
        "handshake_initiated",
        "initial_response",
        "last_ping_rtt",
        "logger",
        "loop",
        "pending_ping_payload",
        "ping_interval",
        "ping_sent_at",
        "ping_timeout",
        "ping_timer",
        "pong_timer",
        "queue",
        "read_paused",
        "request",
        "response",
        "root_path",
        "scheme",
        "scope",
        "server",
        "tasks",
        "transport",
        "writable",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.queue = _SlimQueue()  # type: ignore[assignment]
        self.writable = SlimEvent()  # type: ignore[assignment]
        self.writable.set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        gc_policy.started()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        gc_policy.finished()

    def on_task_complete(self, task: asyncio.Task[None]) -> None:
        # The app has ended (a done-callback, not one more coroutine level under every socket).
        super().on_task_complete(task)
        if not self.disconnected:
            _abort_if_lingering(self, self.ping_timeout or _LINGER_S)

    def handle_connect(self, event: Any) -> None:
        super().handle_connect(event)
        # The scope holds the headers the app sees; the parsed request is not read again, but
        # websockets' parser keeps it alive (a local of its generator): empty its headers.
        self.request = None
        event.headers.clear()

    def schedule_ping(self) -> None:
        # The next keepalive ping in the shared timer wheel (collab.transport.timer_wheel), not a
        # loop timer of its own (~0.5 KB each under uvloop); ``ping_timer.cancel()`` still works.
        assert self.ping_interval is not None
        timer = ConnectionTimer(self.send_keepalive_ping)
        timer.arm_in(max(0.0, self.ping_interval - self.last_ping_rtt))
        self.ping_timer = timer  # type: ignore[assignment]

    async def send(self, message: Any) -> None:
        await super().send(message)
        if self.handshake_complete and getattr(self, "response", None) is not None:
            self.response = None  # sent (accepted or refused): not read again
            # tether's app reads the scope's headers before it accepts, and keeps the list
            # itself when a hook may read them (collab.connection.admission.connection_info).
            self.scope["headers"] = []


# How long a connection whose app has ended may take to flush its close (when no idle timeout
# is configured; with one, that timeout: a peer silent that long is gone).
_LINGER_S = 30.0


def _abort_if_lingering(protocol: SlimWebSocketsProtocol, delay: float) -> None:
    """Abort the transport if it is still open ``delay`` seconds after the app ended.

    uvicorn only ever calls ``transport.close()``, which waits for the write buffer to drain.
    A peer that vanished without a FIN or RST (a phone out of range), or one that stops reading
    while it is sent to, never drains it: the kernel keeps probing its zero window, and the
    socket, its buffers and the protocol's objects stayed, long after the connection was closed
    and uncounted, and for as long as the peer held its end. Held weakly: a connection that
    closed normally is not kept for the delay.
    """
    held = weakref.ref(protocol)

    def abort() -> None:
        lingering = held()
        if lingering is not None and not lingering.disconnected:
            lingering.transport.abort()

    ConnectionTimer(abort).arm_in(delay)

"""uvicorn's sans-I/O websockets protocol, lighter per connection: what ``tether serve`` runs.

An idle socket is mostly what it holds, not what it does. ``WebSocketsSansIOProtocol`` (the
one uvicorn's ``ws=auto`` picks) keeps, for the socket's whole life, an ``asyncio.Queue`` for
received messages (four waiter/item deques, ~740 bytes each), an ``asyncio.Event`` for write
flow control (another deque), and the parsed upgrade request and the response object with
their headers (~2.5 KB), both used only during the handshake (the ASGI scope keeps its own copy
of the request headers). Here the queue and the event are slim equivalents (a list, waiters made
on first wait) and the handshake objects are emptied or dropped once used. Behaviour is
unchanged; host apps that mount tether's ASGI app under their own server do not get the saving.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from .slim_event import SlimEvent


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
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.queue = _SlimQueue()  # type: ignore[assignment]
        self.writable = SlimEvent()  # type: ignore[assignment]
        self.writable.set()

    def handle_connect(self, event: Any) -> None:
        super().handle_connect(event)
        # The scope holds the headers the app sees; the parsed request is not read again, but
        # websockets' parser keeps it alive (a local of its generator): empty its headers.
        self.request = None
        event.headers.clear()

    async def send(self, message: Any) -> None:
        await super().send(message)
        if self.handshake_complete and getattr(self, "response", None) is not None:
            self.response = None  # sent (accepted or refused): not read again

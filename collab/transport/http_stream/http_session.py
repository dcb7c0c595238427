"""One HTTP fallback session as the ``Transport`` a ``MuxConnection`` speaks.

The connection logic of ``/ws`` runs unchanged on top of it (same frames, auth, limits,
metrics): ``receive`` hands it the frames POSTed up, in order; ``send`` numbers each frame into
a byte-bounded ``ReplayBuffer`` that down requests (a stream, or long polls) read from and
acknowledgements release; ``close`` becomes the stream's ``close`` event. Knows nothing of
Starlette: ``endpoints`` feeds it.

Backpressure is the socket's: a client that does not acknowledge fills its replay buffer,
``send`` then waits, the connection's outbox fills behind it, and the outbox's bounds close it
as a slow consumer, exactly as a peer that stops reading ``/ws`` is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

from tether.protocol.protocol_errors import ProtocolError

from .replay_buffer import ReplayBuffer


class _Signal:
    """Wakes every current waiter once per ``notify`` (a new Event each time)."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def notify(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    async def wait(self, timeout: float | None = None) -> None:
        event = self._event
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await event.wait()


class ByteBudget:
    """Replay bytes of every session together: ``take`` fails past the capacity unless forced
    (a session's only frame always goes in, as with the per-session bound)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self.released = _Signal()

    def take(self, size: int, *, force: bool = False) -> bool:
        if not force and self.used + size > self.capacity:
            return False
        self.used += size
        return True

    def give_back(self, size: int) -> None:
        if size:
            self.used = max(0, self.used - size)
            self.released.notify()


class HttpSession:
    def __init__(
        self,
        session_id: str,
        address: str,
        *,
        replay_bytes: int,
        budget: ByteBudget,
        on_full: Callable[[HttpSession, str], None],
    ) -> None:
        self.id = session_id
        self.address = address
        self.replay = ReplayBuffer(replay_bytes)
        self._budget = budget
        self._on_full = on_full  # counts and logs a wait on a full buffer (limit name)
        # Frames POSTed up, taken by the connection's receive loop. One POST at a time reads
        # its body and hands it over (``post_lock``, held by the endpoint around both), so this
        # and the bodies in memory are at most one bounded body per session.
        self._inbox: asyncio.Queue[bytes | ProtocolError | None] = asyncio.Queue()
        self._holding = False  # the receive loop has an item it has not finished with
        self.post_lock = asyncio.Lock()
        self.changed = _Signal()  # a frame added, acked, closed, ended, a stream replaced
        self.close_reason: tuple[int, str] | None = None
        self.close_delivered = asyncio.Event()
        self.finished = asyncio.Event()  # the connection on top has ended
        self.ended = False  # the client is gone (left, or expired): no more down requests
        self._stream = 0  # which down request is current: a newer one replaces it
        self._attached = 0
        self.idle_since: float | None = time.monotonic()

    # ---- the Transport the connection speaks ---------------------------------------------------

    async def receive(self) -> bytes | None:
        if self._holding:
            self._inbox.task_done()  # the previous frame is handled: its POST may answer
        item = await self._inbox.get()
        self._holding = True
        if isinstance(item, ProtocolError):
            raise item  # a broken batch ends this session the way a broken frame ends a socket
        return item

    async def send(self, data: bytes) -> None:
        size = len(data)
        waited = False
        while not self.ended and self.close_reason is None:
            if self.replay.fits(size):
                if self._budget.take(size, force=not self.replay):
                    break
                limit = "http_replay_bytes_total"
            else:
                limit = "http_replay_bytes"
            if not waited:
                self._on_full(self, limit)
                waited = True
            acked = asyncio.ensure_future(self.changed.wait())
            released = asyncio.ensure_future(self._budget.released.wait())
            try:
                await asyncio.wait({acked, released}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                acked.cancel()
                released.cancel()
        else:
            return  # nobody will read it
        self.replay.add(data)
        self.changed.notify()

    async def close(self, code: int, reason: str) -> None:
        if self.close_reason is None:
            self.close_reason = (code, reason)
            self.changed.notify()

    # ---- what the HTTP endpoints do --------------------------------------------------------------

    async def deliver(self, frames: list[bytes] | ProtocolError) -> bool:
        """Hand a POST's frames to the connection and wait until it has handled them (so the
        answer reflects them); False if the session closed. Call it holding ``post_lock``."""
        if self.finished.is_set() or self.close_reason is not None:
            return False
        for item in frames if isinstance(frames, list) else [frames]:
            self._inbox.put_nowait(item)
        handled = asyncio.ensure_future(self._inbox.join())
        finished = asyncio.ensure_future(self.finished.wait())
        try:
            await asyncio.wait({handled, finished}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            handled.cancel()
            finished.cancel()
        return self.close_reason is None and not self.finished.is_set()

    def ack(self, upto: int) -> None:
        released = self.replay.ack(upto)
        if released:
            self._budget.give_back(released)
            self.changed.notify()

    def attach(self) -> int:
        """A down request starts; it replaces any other (one reader per session)."""
        self._stream += 1
        self._attached += 1
        self.idle_since = None
        self.changed.notify()
        return self._stream

    def detach(self) -> None:
        self._attached -= 1
        if self._attached == 0:
            self.idle_since = time.monotonic()

    def current(self, stream: int) -> bool:
        return stream == self._stream and not self.ended

    def end(self) -> None:
        """The client is gone: the connection's receive loop sees the peer leave."""
        if not self.ended:
            self.ended = True
            self._inbox.put_nowait(None)
            self.changed.notify()

    def release(self) -> None:
        """The session is dropped: its replay bytes go back to the shared budget."""
        self._budget.give_back(self.replay.clear())

"""A connection's bounded send queue and the one task that drains it to the socket.

Knows nothing of documents. Putting a frame never blocks; a full queue is the named condition
``SlowConsumer``: that connection is closed and its queued frames dropped at once, the room never
waits for it. The queue is bounded in frames and in bytes; the frame being written counts until
the socket has taken it (a peer that never reads holds it there). A frame may carry a tag (e.g.
"the full-state answer to this step1"), so a caller can ask whether an answer is still on its way
instead of queueing another copy.

Given a synchronous ``write_now`` (``collab.transport.raw_frames``: pre-framed bytes straight to the
transport), a frame put while nothing is queued is handed to the transport at once, with no
wake-up of the drain task and no callback a loop turn later (uvloop 0.23 writes it to the socket
right away: one syscall per frame, as a flush per turn mostly was too). Whenever ``write_now``
refuses (the transport is paused or closing) frames stay queued, bounded as ever, and the drain
task sends them the ordinary way; while any are queued, later frames queue behind them, so frames
keep their order.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable, Callable, Hashable, Sequence

from .slim_event import SlimEvent

SendBytes = Callable[[bytes], Awaitable[None]]
# Writes all the frames at once and returns True, or writes nothing and returns False.
WriteNow = Callable[[Sequence[bytes]], bool]

DEFAULT_MAX_BYTES = 8 * 1024 * 1024
# Above this many queued bytes the frames go one at a time through the drain task, which waits
# for the transport to drain between them (as a plain ASGI send does): a synchronous write of
# the whole queue would park up to a second queue's worth in the transport's own buffer.
WRITE_NOW_MAX_BYTES = 256 * 1024


class SlowConsumer(Exception):
    """The peer reads slower than its documents change; its queue overflowed."""


class Outbox:
    # One per connection, idle or not: slots keep its twenty fields out of a per-instance dict.
    __slots__ = (
        "_bytes",
        "_closed",
        "_draining",
        "_empty",
        "_frames",
        "_gone",
        "_max_bytes",
        "_max_frames",
        "_ready",
        "_send",
        "_tag_of",
        "_tags",
        "_write_now",
        "on_overflow",
        "overflow_limit",
        "overflowed",
    )

    def __init__(
        self,
        send: SendBytes,
        max_frames: int,
        max_bytes: int = DEFAULT_MAX_BYTES,
        write_now: WriteNow | None = None,
    ) -> None:
        self._send = send
        self._write_now = write_now
        self._draining = False  # the drain task is sending: it alone writes until it is done
        self._max_frames = max_frames
        self._max_bytes = max_bytes
        self._frames: collections.deque[bytes] = collections.deque()
        self._bytes = 0  # queued plus the frame being written
        # Tagged frames by id(): a queued frame object stays alive, so its id is stable.
        self._tag_of: dict[int, Hashable] = {}
        self._tags: collections.Counter[Hashable] = collections.Counter()
        # SlimEvents: an asyncio.Event's waiter deque costs ~740 bytes per idle connection.
        self._ready = SlimEvent()
        self._closed = False
        self._empty = SlimEvent()
        self._empty.set()
        self._gone = SlimEvent()  # closed: nothing more will be sent
        self.overflowed = SlimEvent()
        # Called once when it overflows (from inside put): the connection closes itself
        # without a task per connection waiting on ``overflowed``.
        self.on_overflow: Callable[[], None] | None = None
        # Which bound overflowed: "send_queue_frames" or "send_queue_bytes".
        self.overflow_limit = ""

    def put(self, frame: bytes) -> None:
        """Hand ``frame`` to the transport now if nothing is queued, else queue it."""
        if (
            not self._frames
            and self._write_now is not None
            and not self._draining
            and not self._closed
            and len(frame) <= WRITE_NOW_MAX_BYTES
            and self._write_now((frame,))
        ):
            return  # the transport has it
        self._enqueue(frame)

    def _enqueue(self, frame: bytes) -> bool:
        """Queue ``frame`` for the drain task; False if it was not (closed, or overflowed)."""
        if self._closed:
            return False
        if len(self._frames) >= self._max_frames:
            self._overflow("send_queue_frames")
            return False
        # An empty queue takes any one frame: a document larger than the bound still syncs.
        if self._bytes and self._bytes + len(frame) > self._max_bytes:
            self._overflow("send_queue_bytes")
            return False
        self._bytes += len(frame)
        self._frames.append(frame)
        self._empty.clear()
        self._ready.set()
        return True

    def _all_sent(self) -> None:
        frames = self._frames
        if self._tag_of:
            for frame in frames:
                self._sent(frame)
        self._bytes = 0
        while frames:  # not clear(): that allocates a fresh 0.5 KB block per idle connection
            frames.popleft()
        self._empty.set()

    def put_tagged(self, frame: bytes, tag: Hashable) -> None:
        """Queue ``frame``; ``holds(tag)`` is True until the socket has taken it. Always
        through the queue (these are full-state answers, a few per editor): a repeated request
        finds its answer still on the way there, however fast the transport takes frames."""
        if self._enqueue(frame):
            self._tag_of[id(frame)] = tag
            self._tags[tag] += 1

    def holds(self, tag: Hashable) -> bool:
        return tag in self._tags

    @property
    def queued_bytes(self) -> int:
        return self._bytes

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        self._closed = True
        self._ready.set()
        self._gone.set()

    def __len__(self) -> int:
        return len(self._frames)

    def _overflow(self, limit: str) -> None:
        self._closed = True
        self._gone.set()
        self.overflow_limit = limit
        self._frames.clear()  # released now, not when the peer finally goes
        self._tag_of.clear()
        self._tags.clear()
        self._bytes = 0
        self.overflowed.set()
        if self.on_overflow is not None:
            self.on_overflow()

    def _sent(self, frame: bytes) -> None:
        if self._closed and not self._frames:
            self._bytes = 0
        else:
            self._bytes -= len(frame)
        if self._tag_of:
            tag = self._tag_of.pop(id(frame), None)
            if tag is not None:
                self._tags[tag] -= 1
                if self._tags[tag] <= 0:
                    del self._tags[tag]

    async def drain_forever(self) -> None:
        """Send queued frames in order until closed; socket errors end it."""
        frames = self._frames
        write_now = self._write_now
        while True:
            await self._ready.wait()
            self._ready.clear()
            self._draining = True
            try:
                while frames:
                    if (
                        write_now is not None
                        and self._bytes <= WRITE_NOW_MAX_BYTES
                        and write_now(frames)
                    ):
                        self._all_sent()
                        break
                    frame = frames.popleft()
                    await self._send(frame)
                    self._sent(frame)
            finally:
                self._draining = False
            self._empty.set()
            if self._closed:
                return

    async def wait_sent(self) -> None:
        """Until every queued frame has reached the socket, or the queue is closed (a sender
        pacing itself by the socket must not wait forever on a connection that ended). A frame
        written straight to the transport is taken at the end of this loop turn: one turn is
        waited for, so a sender in a loop lets other traffic go between its frames."""
        if self._closed:
            return
        if self._empty.is_set():
            await asyncio.sleep(0)
            return
        empty = asyncio.ensure_future(self._empty.wait())
        gone = asyncio.ensure_future(self._gone.wait())
        try:
            await asyncio.wait({empty, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            empty.cancel()
            gone.cancel()

    async def flush(self, timeout: float) -> None:
        """Best effort: wait until the queue is empty (used before a polite close)."""
        async with asyncio.timeout(timeout):
            await self._empty.wait()

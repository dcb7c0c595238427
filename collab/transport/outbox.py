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

Frames that queue also count against the server-wide ``SendBudget`` (``collab.transport.
send_budget``), and the outbox says how long its queued bytes have made no progress
(``stalled_for``): a peer that stopped reading is closed after ``send_timeout`` by its
connection, and sooner when the server's budget is full.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Awaitable, Callable, Hashable, Sequence

from .send_budget import SendBudget
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
        "_budget",
        "_bytes",
        "_charged",
        "_closed",
        "_drained",
        "_draining",
        "_empty",
        "_frames",
        "_gone",
        "_max_bytes",
        "_max_frames",
        "_progress_at",
        "_ready",
        "_reserved",
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
        budget: SendBudget | None = None,
        *,
        drained: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._send = send
        # Waits until the transport has passed a big frame on (its buffer below high water):
        # until then the frame counts as queued here, so a peer that stopped reading shows as
        # stalled, and a chunked sync waits for the socket, not for the transport's buffer.
        self._drained = drained
        self._budget = budget
        # What the budget holds for this connection: its queued bytes or its reservation (a
        # chunked sync's diff, whose pieces queue inside it), whichever is more.
        self._reserved = 0
        self._charged = 0
        # When the queued bytes last moved (a frame taken, or the queue starting to fill).
        self._progress_at = 0.0
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
        budget = self._budget
        if budget is not None:
            extra = max(self._reserved, self._bytes + len(frame)) - self._charged
            if extra > 0 and budget.full(extra) and not self._room_in_budget(extra):
                self._overflow("send_bytes_total")
                return False
        if not self._bytes:
            self._progress_at = time.monotonic()
        self._bytes += len(frame)
        if budget is not None:
            self._recharge()
        self._frames.append(frame)
        self._empty.clear()
        self._ready.set()
        return True

    def _room_in_budget(self, size: int) -> bool:
        """The server's budget is full: close stalled peers to make room; if none frees enough,
        a connection far behind (a quarter of its own bound queued) is refused. True: the frame
        may go in (an editor that keeps up is never refused a live edit for others' sake)."""
        budget = self._budget
        assert budget is not None
        budget.evict_stalled(self, needed=size)
        return not budget.full(size) or self._bytes < self._max_bytes // 4

    def _all_sent(self) -> None:
        frames = self._frames
        if self._tag_of:
            for frame in frames:
                self._sent(frame)
        self._progress_at = time.monotonic()
        self._bytes = 0
        if self._budget is not None:
            self._recharge()
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

    def stalled_for(self, now: float) -> float:
        """Seconds the queued bytes have made no progress (0 with nothing queued)."""
        return now - self._progress_at if self._bytes else 0.0

    def evict(self, limit: str) -> None:
        """Close it as a slow consumer (the budget's choice, or its connection's deadline)."""
        if not self._closed or self._bytes:
            self._overflow(limit)

    async def reserve(self, size: int) -> None:
        """Hold ``size`` bytes of the server's budget for an answer on its way (waiting while
        they do not fit); given back with ``unreserve`` or when the connection ends."""
        if self._budget is None:
            return
        await self._budget.wait_for_room(self, size)
        if not self._closed:
            self._reserved += size
            self._recharge()

    def unreserve(self, size: int) -> None:
        self._reserved = max(0, self._reserved - size)
        if self._budget is not None:
            self._recharge()

    def resize_reservation(self, old: int, new: int) -> None:
        """A reservation made for an estimate, set to the real size (which may overshoot the
        budget by the difference: it is already being answered)."""
        if not self._closed:
            self._reserved = max(0, self._reserved - old + new)
            if self._budget is not None:
                self._recharge()

    def budget_full(self, size: int) -> bool:
        """Whether reserving ``size`` would wait."""
        budget = self._budget
        return budget is not None and budget.would_wait(self, size)

    def _recharge(self) -> None:
        """Tell the budget what this connection holds now."""
        budget = self._budget
        assert budget is not None
        charge = max(self._reserved, self._bytes)
        if charge > self._charged:
            budget.add(self, charge - self._charged)
        elif charge < self._charged:
            budget.remove(self, self._charged - charge)
        self._charged = charge

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
        self._release_budget()
        self.overflowed.set()
        if self.on_overflow is not None:
            self.on_overflow()

    def _release_budget(self) -> None:
        """Everything this connection holds goes back (queued frames and reservations)."""
        if self._budget is not None:
            self._budget.remove(self, self._budget.held_by(self))
        self._charged = self._reserved = 0

    def _sent(self, frame: bytes) -> None:
        self._untag(frame)
        self._taken(len(frame))

    def _untag(self, frame: bytes) -> None:
        if self._tag_of:
            tag = self._tag_of.pop(id(frame), None)
            if tag is not None:
                self._tags[tag] -= 1
                if self._tags[tag] <= 0:
                    del self._tags[tag]

    def _taken(self, size: int) -> None:
        """``size`` queued bytes have left: progress."""
        self._progress_at = time.monotonic()
        if self._closed and not self._frames:
            self._bytes = 0
        else:
            self._bytes -= size
        if self._budget is not None:
            self._recharge()

    async def drain_forever(self) -> None:
        """Send queued frames in order until closed; socket errors end it."""
        try:
            await self._drain()
        finally:
            self._release_budget()  # the connection is over: nothing it held stays counted

    async def _drain(self) -> None:
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
                    if self._drained is None:
                        self._sent(frame)
                        continue
                    # The transport holds its own framed copy: ours goes now, but its size
                    # counts as queued until the transport has passed it on.
                    self._untag(frame)
                    size = len(frame)
                    del frame
                    await self._drained()
                    self._taken(size)
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

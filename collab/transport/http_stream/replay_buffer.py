"""The frames an HTTP session has sent but its client has not acknowledged yet, numbered.

Knows nothing of asyncio or HTTP. A dropped stream is resumed from the client's last id, so
the frames after it must still be here; an acknowledgement (``ack``) releases everything up to
an id. Bounded in bytes: ``fits`` says whether one more frame may go in (an empty buffer takes
any one frame, so a document larger than the bound still syncs); the session waits for acks
otherwise, which is what a full socket buffer is for ``/ws``.
"""

from __future__ import annotations

import collections
import itertools


class ResumeGap(Exception):
    """The client asked to resume from before what the buffer still holds."""


class ReplayBuffer:
    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._frames: collections.deque[tuple[int, bytes]] = collections.deque()
        self._bytes = 0
        self.last_seq = 0  # the id of the newest frame ever added
        self.acked = 0  # every frame up to this id has been acknowledged and released

    @property
    def bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._frames)

    def fits(self, size: int) -> bool:
        return not self._frames or self._bytes + size <= self._max_bytes

    def add(self, frame: bytes) -> int:
        self.last_seq += 1
        self._frames.append((self.last_seq, frame))
        self._bytes += len(frame)
        return self.last_seq

    def ack(self, upto: int) -> int:
        """Release every frame up to ``upto``; the bytes released. Ids from the future (a
        confused or hostile client) release only what exists."""
        released = 0
        frames = self._frames
        while frames and frames[0][0] <= upto:
            released += len(frames.popleft()[1])
        self._bytes -= released
        self.acked = max(self.acked, min(upto, self.last_seq))
        return released

    def after(self, seq: int) -> list[tuple[int, bytes]]:
        """The frames after ``seq``, oldest first; ``ResumeGap`` if some were released."""
        if seq < self.acked:
            raise ResumeGap(f"resume from {seq}, but frames up to {self.acked} are released")
        if not self._frames:
            return []
        # Ids are consecutive, so the first wanted frame's index is known without a scan.
        start = max(0, seq - self._frames[0][0] + 1)
        return list(itertools.islice(self._frames, start, None))

    def clear(self) -> int:
        released = self._bytes
        self._frames.clear()
        self._bytes = 0
        return released

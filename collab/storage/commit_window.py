"""When a durable commit waits for company: group commit that waits only when others write.

Every commit costs a hand-off to the writer thread, a transaction and an fsync, whatever it
holds. Waiting a few ms after a batch's first write lets the writes that arrive meanwhile share
it: at 200 editors typing 2 keys a second each (400 writes a second), a 4 ms wait gathers ~1.6
more, half as many commits and fsyncs, and up to 15% less CPU per edit (issue 29). But a
wait pays only when others write meanwhile. One script that awaits each ack before its next
write never brings company, and a wait would cost it the window on every edit.

So the window measures the company a wait would find: how fast writes arrive while another one
is in flight (queued, waiting or committing, until its ack is settled). A writer that awaits
its acks never arrives then; independent editors arrive then as often as at any other time.
The writer waits when that rate, over the last half second or so, brings at least a whole write
per wait (PostgreSQL's ``commit_delay`` asks for ``commit_siblings`` in the same spirit).

Sans-IO: the store hands in the times. ``queued`` and ``settled`` run on the event loop (where
writes are queued and their futures settled); ``wait_before_commit`` on the writer thread,
which only reads two floats.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Expected writes within one wait at or above which a commit waits: one halves the commits.
# At 0.5, 100 writes/s (20 editors typing 5 keys/s, scenario A) made 1 commit in 10 wait in
# bursts, adding 2.5 ms to the ack p99 for no measurable CPU; at 1.0 it is 1 in 100, and 400
# writes/s (scenario B) still wait every time.
WORTH_WAITING = 1.0
# Writes arrived in flight (decayed) before the rate is trusted: two make a rate, one a fluke.
MIN_EVIDENCE = 2.0


@dataclass(slots=True)
class CommitWindow:
    """How long the next commit waits after its first write; ``longest`` 0: never."""

    longest: float  # seconds
    horizon: float = 0.5  # seconds: older evidence weighs e^-1 less per horizon
    waits: int = 0  # commits that waited so far
    in_flight: int = 0  # writes queued and not yet settled
    _company_writes: float = 0.0  # writes that arrived while another was in flight (decayed)
    _busy_s: float = 0.0  # time with a write in flight (decayed)
    _at: float = -math.inf  # the last event

    @property
    def company(self) -> float:
        """Writes a wait of ``longest`` should gather, at the recent rate."""
        if self._company_writes < MIN_EVIDENCE or self._busy_s <= 0:
            return 0.0
        return self._company_writes / self._busy_s * self.longest

    # -- event loop --------------------------------------------------------------------------

    def queued(self, now: float) -> None:
        """A write was queued for the writer."""
        self._advance(now)
        if self.in_flight > 0:
            self._company_writes += 1.0
        self.in_flight += 1

    def settled(self, count: int, now: float) -> None:
        """``count`` writes were settled (acked or failed)."""
        self._advance(now)
        self.in_flight = max(0, self.in_flight - count)

    def _advance(self, now: float) -> None:
        if self._at != -math.inf:
            elapsed = max(0.0, now - self._at)
            keep = math.exp(-elapsed / self.horizon)
            self._company_writes *= keep
            self._busy_s = self._busy_s * keep + (elapsed if self.in_flight > 0 else 0.0)
        self._at = now

    # -- writer thread -----------------------------------------------------------------------

    def wait_before_commit(self) -> float:
        """Seconds to wait after taking a batch's first write, before committing it."""
        if self.longest <= 0 or self.company < WORTH_WAITING:
            return 0.0
        self.waits += 1
        return self.longest

"""Pure parts of prefetch: where an editor's cursor is after a burst of typing, when it paused,
and how much model time prefetch may take.

Prefetch computes a suggestion before anyone asks, so the editor's next ``suggest`` finds it
ready. It is speculative work, so it must never cost an interactive request or the sync path
anything: it runs at low priority, is cancelled by typing, and is held to a duty-cycle budget.
Knows nothing of sockets, documents or models; time is passed in.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from ..text.positions import common_prefix

if TYPE_CHECKING:
    from ..text.anchors import TextAnchor


def edited_end(before: str, after: str) -> int | None:
    """Index in ``after`` just past the span that differs from ``before``: where an editor
    who made the change has its cursor. None when nothing changed. When several editors typed
    in between, the span covers all their edits and this is the end of the last one."""
    if before == after:
        return None
    prefix = common_prefix(before, after)
    limit = min(len(before), len(after)) - prefix
    suffix = common_prefix(before[::-1][:limit], after[::-1][:limit])
    return len(after) - suffix


def cursor_after_typing(
    last: tuple[TextAnchor, float] | None, pause: Pause | None, before: str | None, text: str
) -> tuple[int, bool] | None:
    """Where an editor's cursor is after a burst of typing, and whether that is certain;
    None when it has typed nothing since its cursor was last known (``last``: where, and
    when). The server sees edits, not cursors: when the editor typed right at its last known
    cursor (it usually goes on from where it asked), the cursor is after what it typed there,
    whatever others did elsewhere; otherwise it is guessed to be where the text changed
    (``edited_end``), which others typing at the same time can mislead."""
    if last is not None:
        anchor, known_at = last
        if pause is not None and pause.last <= known_at:
            return None  # it asked (or was prefetched for) after its last edit
        typed = anchor.typed(text)
        where = anchor.resolve(text)
        if typed and where is not None:
            return where + len(typed), True
    cursor = edited_end(before, text) if before is not None else None
    return None if cursor is None else (cursor, False)


class DutyCycle:
    """At most ``fraction`` of the last ``window`` seconds may be spent on prefetch runs."""

    def __init__(self, fraction: float, window: float = 10.0) -> None:
        self.fraction = fraction
        self.window = window
        self._runs: deque[tuple[float, float]] = deque()  # (start, end), oldest first

    def allows(self, now: float) -> bool:
        return self.used(now) < self.fraction * self.window

    def record(self, start: float, end: float) -> None:
        self._runs.append((start, end))

    def used(self, now: float) -> float:
        """Seconds of prefetch within the window ending ``now``."""
        since = now - self.window
        while self._runs and self._runs[0][1] <= since:
            self._runs.popleft()
        return sum(end - max(start, since) for start, end in self._runs)


class Pause:
    """One editor's typing, debounced in O(1) per keystroke: ``touch`` records the time, and
    the owner asks ``remaining`` when its single timer fires (re-arming it if typing went on),
    instead of cancelling and re-creating a timer on every keystroke."""

    __slots__ = ("armed", "last")

    def __init__(self) -> None:
        self.last = 0.0
        self.armed = False

    def touch(self, now: float) -> bool:
        """Record typing; True when the owner must arm a timer (none is pending)."""
        self.last = now
        if self.armed:
            return False
        self.armed = True
        return True

    def remaining(self, now: float, debounce: float) -> float:
        """Seconds until the pause is long enough; 0 means it is now (the timer is spent)."""
        left = self.last + debounce - now
        if left <= 0.001:  # timers fire a hair early or late: a millisecond is "now"
            self.armed = False
            return 0.0
        return left

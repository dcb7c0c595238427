"""A server process's resident memory across an attack, read from outside: ``VmRSS`` of
``/proc/<pid>/status`` before the strike, sampled every few milliseconds during it, and at the
end of the tail (what stays resident after), plus the kernel's own peak (``VmHWM``), reset
just before the strike (``clear_refs`` 5) so that it counts the attack alone. Linux only;
elsewhere every figure is None.

Sampling runs in a thread of its own: the bench's event loop may be busy timing bystanders.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

_MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Memory:
    """MiB: resident before the strike, the most during it (and its tail), and at the end."""

    before: float | None
    peak: float | None
    after: float | None

    def as_dict(self) -> dict[str, float | None]:
        return {"before": self.before, "peak": self.peak, "after": self.after}


def resident_bytes(pid: int, field: str = "VmRSS") -> int | None:
    """``field`` of the process's status in bytes, or None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(field + ":"):
            parts = line.split()
            return int(parts[1]) * 1024 if len(parts) >= 2 and parts[1].isdigit() else None
    return None


class MemoryWatch:
    """``watch.start()`` just before the strike, ``watch.stop()`` at the end of the tail."""

    def __init__(self, pid: int, interval: float = 0.02) -> None:
        self.pid = pid
        self.interval = interval
        self._before: int | None = None
        self._peak = 0
        self._peak_reset = False
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._peak_reset = _reset_peak(self.pid)
        self._before = resident_bytes(self.pid)
        self._peak = self._before or 0
        self._thread = threading.Thread(target=self._sample, name="bench-rss", daemon=True)
        self._thread.start()

    def stop(self) -> Memory:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(5)
        after = resident_bytes(self.pid)
        peak = max(self._peak, after or 0)
        if self._peak_reset:  # the kernel saw every page, between our samples too
            peak = max(peak, resident_bytes(self.pid, "VmHWM") or 0)
        return Memory(_mib(self._before), _mib(peak or None), _mib(after))

    def _sample(self) -> None:
        while not self._stopping.wait(self.interval):
            now = resident_bytes(self.pid)
            if now is None:
                return
            self._peak = max(self._peak, now)


def _reset_peak(pid: int) -> bool:
    """Start ``VmHWM`` over from the current RSS (Linux 4.0+, our own child)."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _mib(size: int | None) -> float | None:
    return None if size is None else round(size / _MIB, 1)

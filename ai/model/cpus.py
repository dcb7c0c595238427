"""CPU lists (``"0,2-3"``) and putting a process's threads on them: the model worker on cores
of its own, the server on the rest (``--ai-cpus``: a list, ``auto`` or ``shared``). Linux;
anything else leaves CPUs alone."""

from __future__ import annotations

import functools
import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def parse_cpu_list(text: str) -> set[int]:
    """``"0,2-3"`` → {0, 2, 3}; ValueError (safe to show) for anything else."""
    cpus: set[int] = set()
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        first, dash, last = part.partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise ValueError(f"not a CPU list: {text[:64]!r} (e.g. '1' or '0,2-3')")
        low, high = int(first), int(last or first)
        if high < low or high > 4095:
            raise ValueError(f"not a CPU range: {part!r}")
        cpus.update(range(low, high + 1))
    if not cpus:
        raise ValueError("an empty CPU list")
    return cpus


AUTO = "auto"
SHARED = "shared"
# ``--ai-cpus auto`` partitions only where the server keeps this many CPUs and the host has at
# least AUTO_MIN_CPUS: on fewer, a model pinned to a core of its own would take half or more of
# the machine from sync while it sits idle between suggestions.
AUTO_MIN_CPUS = 4
AUTO_SERVER_CPUS = 2


def auto_model_cpus(usable: set[int], model_threads: int) -> set[int]:
    """``--ai-cpus auto``: the last ``model_threads`` of the CPUs this process may use for the
    model workers, the rest for sync; or nothing (share them all) on a host too small for it.
    Measured on 2 vCPUs: sharing doubles the server's loop lag p99 under a busy model, a core
    of the model's own leaves it as it is without AI (docs/benchmarks.md, 2026-12-05)."""
    if len(usable) < AUTO_MIN_CPUS or len(usable) - model_threads < AUTO_SERVER_CPUS:
        return set()
    return set(sorted(usable)[-model_threads:])


def model_cpus(settings: Any) -> set[int]:
    """The CPUs the local model's workers run on (none: they share every CPU with sync).
    ``auto`` is decided once per process, before the server moves off the model's CPUs (which
    would change what it may use)."""
    chosen = settings.ai_cpus
    if chosen in ("", SHARED) or settings.ai_provider != "local":
        return set()
    if chosen != AUTO:
        return parse_cpu_list(chosen)
    return set(_auto_cpus(getattr(settings, "ai_workers", 1) * settings.ai_threads))


@functools.cache
def _auto_cpus(model_threads: int) -> frozenset[int]:
    usable = set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else set()
    return frozenset(auto_model_cpus(usable, model_threads))


def pin_this_process(cpus: set[int]) -> bool:
    """Every thread of this process onto ``cpus`` (threads started later inherit it). False,
    changing nothing, where that cannot be done (not Linux, CPUs this process may not use)."""
    if not hasattr(os, "sched_setaffinity"):
        return False
    usable = os.sched_getaffinity(0)
    if not cpus or not cpus <= usable | cpus_online():
        log.warning("cannot pin to CPUs %s (this process may use %s)", sorted(cpus), sorted(usable))
        return False
    try:
        tids = [int(name) for name in os.listdir("/proc/self/task")]
    except OSError:
        tids = [0]
    for tid in tids:
        try:
            os.sched_setaffinity(tid, cpus)
        except (ProcessLookupError, PermissionError, OSError) as exc:
            if tid == 0 or tid == os.getpid():
                log.warning("cannot pin to CPUs %s: %s", sorted(cpus), exc)
                return False
    return True


def cpus_online() -> set[int]:
    try:
        return parse_cpu_list(Path("/sys/devices/system/cpu/online").read_text().strip())
    except (OSError, ValueError):
        return set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else set()

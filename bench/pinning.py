"""``--pin``: the server under test on a CPU of its own, the load generator on the others.

On a small machine the driver (hundreds of editors in one Python process) and the server share
the CPUs, so each steals time, caches and wake-ups from the other, and what is measured as
the server's CPU per edit depends on how the scheduler happened to interleave them: reps of the
same build differed by 15% here. Giving the server the last CPU (every thread of it and of its
children, and threads it starts later inherit it) and the driver the rest is how a server runs
in production (its clients elsewhere), and it treats every target alike. Linux only.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import psutil


def split_cpus() -> tuple[set[int], set[int]]:
    """(the server's CPU, the driver's CPUs) out of those this process may use."""
    usable = sorted(os.sched_getaffinity(0))
    if len(usable) < 2:
        raise SystemExit("--pin needs at least 2 CPUs: one for the server, one for the driver")
    return {usable[-1]}, set(usable[:-1])


MODEL_WORKER = "tether.ai.model.worker"  # on its own CPUs when the server runs --ai-cpus


def pin_process_tree(pid: int, cpus: set[int]) -> None:
    """Every thread of ``pid`` and of its descendants onto ``cpus``; not a model worker that
    has CPUs of its own (``--ai-cpus``)."""
    root = psutil.Process(pid)
    for process in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            if MODEL_WORKER in process.cmdline() and '"cpus": [' in " ".join(process.cmdline()):
                continue
        with contextlib.suppress(psutil.Error):
            for thread in process.threads():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.sched_setaffinity(thread.id, cpus)


@contextlib.contextmanager
def pinned(server_pid: int | None, enabled: bool) -> Iterator[None]:
    """While inside: the server on its own CPU and this (driving) thread on the others."""
    if not enabled or server_pid is None:
        yield
        return
    server_cpus, driver_cpus = split_cpus()
    pin_process_tree(server_pid, server_cpus)
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, driver_cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)

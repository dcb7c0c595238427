"""Deliberate faults for tests and drills, chosen by ``TETHER_AI_FAULT`` in the worker's
environment: they prove the server survives what a broken build or a bad day would do.

    selftest-crash          segfault during the start-up self-test (a build that cannot run)
    crash-after-tokens:N    segfault once N tokens have been streamed since the worker started
    hang-after-tokens:N     stop producing tokens (and progress) after N, without exiting
    oom-after-tokens:N      exhaust a capped address space after N tokens (MemoryError)
"""

from __future__ import annotations

import asyncio
import ctypes
import resource
from dataclasses import dataclass

ENV = "TETHER_AI_FAULT"
KINDS = ("", "selftest-crash", "crash-after-tokens", "hang-after-tokens", "oom-after-tokens")


@dataclass
class Faults:
    kind: str = ""
    after_tokens: int = 0
    streamed: int = 0

    @classmethod
    def parse(cls, spec: str) -> Faults:
        kind, _, count = spec.strip().partition(":")
        if kind not in KINDS:
            raise ValueError(f"unknown {ENV} {spec!r}")
        return cls(kind, int(count or 0))

    def in_selftest(self) -> None:
        if self.kind == "selftest-crash":
            segfault()

    async def after_token(self) -> None:
        """Called by the worker after each token it streams."""
        if not self.kind.endswith("-after-tokens"):
            return
        self.streamed += 1
        if self.streamed < self.after_tokens:
            return
        if self.kind == "crash-after-tokens":
            segfault()
        elif self.kind == "hang-after-tokens":
            await asyncio.Event().wait()  # never set: the generation just stops
        elif self.kind == "oom-after-tokens":
            exhaust_memory()


def segfault() -> None:
    ctypes.string_at(0)  # reads address 0: SIGSEGV, as a faulting native kernel would


def exhaust_memory() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as statm:
        size = int(statm.read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (size + 64 * 2**20, hard))
    hog = [bytearray(2**30) for _ in range(64)]  # raises MemoryError long before the end
    del hog

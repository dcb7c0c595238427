"""What ``tether bench attacks`` runs, whatever the attack: its name, size, setup and strike,
and what it needs around the server (helper processes, settings). Holds no attack itself.

An attack's ``prepared`` is an async context manager: entering it does the setup against the
started server and yields the strike, a coroutine function that sends the attack and returns
what became of it. A strike may carry ``figures``, a dict it fills as it goes (a victim's
time to first token, a bystander's read), so that what it measured before a timeout cut it
short is still reported. ``surroundings``, when set, is entered before the server starts (with
a directory for logs) and yields the settings the server starts with: the addresses of the
model servers or webhook receiver it started for the attack.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .launcher import ServerProcess

Strike = Callable[[], Awaitable[str]]
Prepared = Callable[[ServerProcess, float], AbstractAsyncContextManager[Strike]]
Surroundings = Callable[[Path], AbstractAsyncContextManager[dict[str, object]]]


@dataclass(frozen=True)
class Attack:
    name: str
    finding: int  # the finding's number in its issue's list
    payload_bytes: int
    prepared: Prepared
    surroundings: Surroundings | None = None
    issue: int = 26


@dataclass
class FiguredStrike:
    """A strike that records figures as it goes: ``figures[name]`` is a number (ms, a count) or
    a short text; ``time(name)`` times a step in ms, and leaves ``>N`` (ms so far) if it is
    cut short."""

    run: Callable[[FiguredStrike], Awaitable[str]]
    figures: dict[str, Any] = field(default_factory=dict)

    async def __call__(self) -> str:
        return await self.run(self)

    async def time(self, name: str, step: Awaitable[Any]) -> Any:
        began = time.perf_counter()
        try:
            result = await step
        except Exception as exc:
            spent = (time.perf_counter() - began) * 1000
            self.figures[name] = f"{type(exc).__name__} after {spent:.0f}"
            raise
        except BaseException:  # cancelled: the attack's timeout cut it short
            self.figures[name] = f">{(time.perf_counter() - began) * 1000:.0f}"
            raise
        self.figures[name] = round((time.perf_counter() - began) * 1000, 1)
        return result

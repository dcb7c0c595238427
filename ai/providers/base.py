"""The provider interface: stream text pieces for a prompt, stoppable within one piece.

Knows nothing of documents, editors or sockets.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Self


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    prompt: str
    # Whose warm state this is (document and editor): consecutive requests with the same key
    # share most of their prompt, so a provider can keep that prefix evaluated.
    session: str
    max_tokens: int
    stop: tuple[str, ...] = ()
    # Evaluate the whole prompt from scratch, reusing nothing: the request-per-suggestion
    # baseline the benchmark compares against.
    cold: bool = False


class Cancellation:
    """Set from the event loop, read from a model thread between tokens."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()


class Provider(ABC):
    """One lifecycle: ``async with provider:``."""

    name: str = "provider"

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    @abstractmethod
    def stream(self, request: GenerationRequest, cancel: Cancellation) -> AsyncIterator[str]:
        """Yield text pieces; stop early when ``cancel`` is set; raise ProviderError."""

    def warm_hits(self) -> int:
        """How many requests found their prompt state already warm (for metrics)."""
        return 0

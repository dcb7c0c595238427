"""The provider interface: stream text pieces for a prompt, stoppable within one piece.

Knows nothing of documents, editors or sockets.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
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
    # Sampling: 0 is greedy (the default); above it, seeded, so runs repeat. A repeat penalty
    # above 1 discourages tokens of the last 64 (1: none).
    temperature: float = 0.0
    repeat_penalty: float = 1.0
    seed: int = 0
    # Speculative work (a prefetch, a context renewal) that any request preempts: a local
    # model evaluates its prompt in smaller steps, so it gives the model up sooner.
    background: bool = False
    # The model may not end its answer, or break the line, before it has written a word: at a
    # sentence or paragraph end a small model would otherwise stop at once (issue 28).
    must_start: bool = False


class Piece(str):
    """A piece of generated text that knows how sure the model was of it: the lowest
    probability among its tokens (None where the provider does not say). A ``str``, so
    consumers that only want text need not know."""

    __slots__ = ("confidence",)
    confidence: float | None

    def __new__(cls, text: str, confidence: float | None = None) -> Piece:
        piece = super().__new__(cls, text)
        piece.confidence = confidence
        return piece


def confidence_of(piece: str) -> float | None:
    """A piece's confidence; None for plain text (a provider that gives none)."""
    return piece.confidence if isinstance(piece, Piece) else None


class Cancellation:
    """Set from the event loop, read from a model thread between tokens.

    The model thread also calls ``step()`` between the pieces of work that yield no text (the
    chunks of a long prompt), so whoever watches for a hung model can tell slow from stuck."""

    __slots__ = ("_callbacks", "_event", "on_step")

    def __init__(self) -> None:
        self._event = threading.Event()
        self.on_step: Callable[[], None] | None = None
        self._callbacks: list[Callable[[], None]] = []

    def add_callback(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (on the event loop) when cancelled; at once if already."""
        if self.cancelled:
            callback()
        else:
            self._callbacks.append(callback)

    def step(self) -> None:
        if self.on_step is not None:
            self.on_step()

    def cancel(self) -> None:
        if self._event.is_set():
            return
        self._event.set()
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

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

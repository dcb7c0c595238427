"""A scripted provider for tests of the streaming mechanics (never the default).

It yields a fixed list of pieces (or, with ``replies``, the pieces of the first key that the
prompt contains, so one server can script different answers per document), each with its
confidence when ``confidences`` gives one, optionally waiting on a gate between them so a test
can hold a generation open, and records every prompt it was given.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from ...errors import ProviderError
from .base import Cancellation, GenerationRequest, Piece, Provider


class ScriptedProvider(Provider):
    name = "scripted"

    def __init__(
        self,
        pieces: list[str] | None = None,
        *,
        delay: float = 0.0,
        fail_with: str | None = None,
        replies: dict[str, list[str]] | None = None,
        confidences: list[float] | None = None,
    ) -> None:
        self.pieces = pieces if pieces is not None else [" scripted", " words", "."]
        self.confidences = confidences or []  # the i-th piece's (the sure stopping rule)
        self.replies = replies or {}
        self.delay = delay
        self.fail_with = fail_with
        self.prompts: list[GenerationRequest] = []
        self.gate: asyncio.Event | None = None  # when set by a test, pieces wait for it

    async def stream(self, request: GenerationRequest, cancel: Cancellation) -> AsyncIterator[str]:
        self.prompts.append(request)
        if self.fail_with:
            raise ProviderError(self.fail_with)
        pieces = next((p for key, p in self.replies.items() if key in request.prompt), self.pieces)
        for index, piece in enumerate(pieces[: request.max_tokens]):
            if cancel.cancelled:
                return
            if index and self.gate is not None:
                await self.gate.wait()
            if self.delay:
                await asyncio.sleep(self.delay)  # simulated model latency, not synchronisation
            confidence = self.confidences[index] if index < len(self.confidences) else None
            yield Piece(piece, confidence)


def build(settings: Any) -> ScriptedProvider:
    """The ``scripted`` provider, as ``ai_script`` (JSON) describes it."""
    script = json.loads(settings.ai_script or "{}")
    return ScriptedProvider(
        script.get("pieces"),
        delay=float(script.get("delay", 0.0)),
        fail_with=script.get("fail"),
        replies=script.get("replies"),
        confidences=script.get("confidences"),
    )

"""An editor over raw ``/ws`` frames that also asks for suggestions (Stateless JSON, protocol/
PROTOCOL.md "AI messages") and times each answer as the editor sees it: the first piece of text,
the end, and how many characters came. Speaks only the wire, so it drives old checkouts too.

    async with await AskingEditor.open(server.ws_url, "notes", token) as editor:
        answer = await editor.ask({"kind": "complete", "pos": 5}, timeout=30)
        answer.first_piece_ms, answer.outcome
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.client import ClientConnection

from tether.protocol.wire.messages import Stateless, decode_frame

from .wire_editor import WireEditor

_ENDS = ("suggestion.end", "suggestion.error")
_ids = itertools.count()


@dataclass
class Answer:
    """One suggestion as its editor saw it."""

    request_id: str
    sent: float = field(default_factory=time.perf_counter)
    first_piece: float | None = None
    ended: float | None = None
    end: dict[str, Any] | None = None  # the suggestion.end or suggestion.error message
    chars: int = 0
    done: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def first_piece_ms(self) -> float | None:
        return _ms(self.first_piece, self.sent)

    @property
    def end_ms(self) -> float | None:
        return _ms(self.ended, self.sent)

    @property
    def outcome(self) -> str:
        """``done`` (or another end reason), ``error:<code>``, or ``unanswered``."""
        if self.end is None:
            return "unanswered"
        if self.end.get("type") == "suggestion.error":
            return f"error:{self.end.get('code')}"
        return str(self.end.get("reason"))


def _ms(moment: float | None, since: float) -> float | None:
    return None if moment is None else round((moment - since) * 1000, 1)


class AskingEditor(WireEditor):
    """A ``WireEditor`` that keeps each suggestion it asked for, by id."""

    def __init__(self, ws: ClientConnection, name: str) -> None:
        super().__init__(ws, name)
        self.answers: dict[str, Answer] = {}

    async def send_ask(self, fields: dict[str, Any]) -> Answer:
        """Send ``{"type": "suggest", "id": <fresh>, **fields}``; the answer fills in later."""
        request_id = f"bench-{next(_ids)}"
        answer = Answer(request_id)
        self.answers[request_id] = answer
        body = {"type": "suggest", "id": request_id, "kind": "complete", **fields}
        await self.ws.send(Stateless(self.name, json.dumps(body)).encode())
        answer.sent = time.perf_counter()
        return answer

    async def ask(self, fields: dict[str, Any], timeout: float) -> Answer:
        """Ask and wait for the end (or ``timeout``: then the answer is ``unanswered``)."""
        answer = await self.send_ask(fields)
        await self.answered(answer, timeout)
        return answer

    async def answered(self, answer: Answer, timeout: float) -> Answer:
        try:
            await asyncio.wait_for(answer.done.wait(), timeout)
        except TimeoutError:
            pass
        return answer

    async def _on_frame(self, data: bytes) -> None:
        if data[-1:] == b"}":  # a Stateless JSON payload ends the frame; decode only those
            message = decode_frame(data)
            if isinstance(message, Stateless):
                self._on_ai(message.payload)
                return
        await super()._on_frame(data)

    def _on_ai(self, payload: str) -> None:
        try:
            message = json.loads(payload)
        except ValueError:
            return
        answer = self.answers.get(message.get("id")) if isinstance(message, dict) else None
        if answer is None:
            return
        kind = message.get("type")
        if kind == "suggestion.delta":
            if answer.first_piece is None:
                answer.first_piece = time.perf_counter()
            answer.chars += len(message.get("text") or "")
        elif kind in _ENDS:
            answer.ended = time.perf_counter()
            answer.end = message
            answer.done.set()

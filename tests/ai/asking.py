"""Asking for suggestions over the real socket, and waiting on the server's metrics, in tests."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from tests.metrics_scrape import metric_value, metrics_text
from tests.serverproc import ServerProcess
from tether.protocol.clients.tether_client import DocumentHandle
from tether.protocol.wire.ai_messages import Suggest

# The server's settings for tests of the model's stream itself: no length rule but the token
# limit, no healing, no junk filter (what each test then sees is what the model wrote).
UNSHAPED: dict[str, str] = {"ai_stop": "tokens", "ai_heal": "off", "ai_junk_filter": "off"}


@dataclass
class Answer:
    source: str = ""
    text: str = ""
    end: dict[str, Any] = field(default_factory=dict)


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def send_suggest(doc: DocumentHandle, request_id: str, *, max_tokens: int | None = 8) -> None:
    """A completion request at the end of the document (``max_tokens=None``: the server's
    default length, which is what prefetch computes)."""
    pos = utf16_len(str(doc.text))
    doc.send_stateless(Suggest(request_id, "complete", pos=pos, max_tokens=max_tokens).encode())


async def collect(
    doc: DocumentHandle, request_id: str, *, timeout: float = 15, started: str = ""
) -> Answer:
    """Read ``request_id``'s messages until it ends; other requests' messages are dropped.
    ``started``: the source of its ``suggestion.start``, when the caller has read that already
    (and maybe some text: what follows is collected)."""
    answer = Answer(source=started)
    with anyio.fail_after(timeout):
        while True:
            message = json.loads(await doc.stateless.get())
            if message.get("id") != request_id:
                continue
            if message["type"] == "suggestion.start":
                answer.source = message["source"]
            elif message["type"] == "suggestion.delta":
                assert answer.source, f"text before suggestion.start: {message}"
                answer.text += message["text"]
            elif message["type"] in ("suggestion.end", "suggestion.error"):
                if message["type"] == "suggestion.end":
                    assert answer.source, f"suggestion.end before suggestion.start: {message}"
                answer.end = message
                return answer


async def ask(doc: DocumentHandle, request_id: str, *, max_tokens: int | None = 8) -> Answer:
    send_suggest(doc, request_id, max_tokens=max_tokens)
    return await collect(doc, request_id)


async def wait_metric(
    server: ServerProcess,
    name: str,
    condition: Callable[[float], bool],
    *,
    timeout: float = 30.0,
    **labels: str,
) -> float:
    """Scrape /metrics (every 50 ms, bounded by ``timeout``) until ``name`` meets ``condition``.
    For state the server reaches on its own timers (a debounce, a TTL, a background load)
    there is no event to wait on over the wire."""
    with anyio.fail_after(timeout):
        while True:
            value = metric_value(await metrics_text(server), name, **labels)
            if condition(value):
                return value
            await anyio.sleep(0.05)


async def metric(server: ServerProcess, name: str, **labels: str) -> float:
    return metric_value(await metrics_text(server), name, **labels)

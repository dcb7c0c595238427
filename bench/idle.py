"""``tether bench idle``: many idle connections, each with one document open, and an editor
typing among them.

Opens ``--connections`` sockets over ``--docs`` documents (each syncs, then idles, answering
pings), reads the server's RSS before and after to give memory per idle connection, then has a
writer type into one more document at ``--rate`` chars/s while a reader on the same document
measures fan-out latency: idle sockets must cost memory, not latency. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
from websockets.asyncio.client import connect

from .launcher import ServerProcess
from .peer import BenchPeer


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--connections", type=int, default=5000)
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=200, help="connects in flight")
    parser.add_argument("--rate", type=float, default=5.0, help="writer's chars/s")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of typing")
    parser.add_argument(
        "--type-while-opening",
        action="store_true",
        help="type while the idle sockets open (the server grows: full garbage collections)",
    )
    parser.add_argument(
        "--grow",
        type=int,
        default=0,
        help="idle sockets that open while the writer types, after the others (a quarter more"
        " makes CPython walk every object)",
    )
    parser.add_argument("--json", dest="json_out", default="bench-idle.json")
    parser.add_argument("--png", dest="png_out", default="bench-idle.png")


async def _open_idle(url: str, token: str, name: str, gate: asyncio.Semaphore) -> BenchPeer:
    async with gate:
        ws = await connect(url, max_size=None, compression=None, open_timeout=120)
        peer = BenchPeer(ws, name)
        await peer.open(token)
        return peer


async def _measure_fanout(args: argparse.Namespace, url: str, token: str) -> list[float]:
    writer = BenchPeer(await connect(url, compression=None), "idle-typing")
    reader = BenchPeer(await connect(url, compression=None), "idle-typing")
    await writer.open(token)
    await reader.open(token)
    sent: dict[bytes, float] = {}
    arrived: dict[bytes, float] = {}
    everything = asyncio.Event()

    def stamp(update: bytes) -> None:
        arrived[update] = time.perf_counter()
        if len(arrived) >= expected:
            everything.set()

    reader.on_update = stamp
    expected = max(1, round(args.rate * args.duration))
    interval = 1.0 / args.rate
    for _ in range(expected):
        update = writer.local_append("x")
        sent[update] = time.perf_counter()
        await writer.send_update(update)
        await asyncio.sleep(interval)  # the typing rate itself, not synchronisation
    try:
        await asyncio.wait_for(everything.wait(), 30)
    except TimeoutError:
        pass  # reported: fewer arrivals than edits sent
    await writer.close()
    await reader.close()
    return [arrived[u] - t for u, t in sent.items() if u in arrived]


def _gc_pauses(http_url: str) -> dict[str, dict[str, float]]:
    """Collections so far per generation: count, total seconds, and how many took over 10, 50
    and 100 ms (``tether_gc_pause_seconds``, cumulative)."""
    text = httpx.get(f"{http_url}/metrics", timeout=10).text
    out: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        if not line.startswith("tether_gc_pause_seconds"):
            continue
        series, value = line.rsplit(" ", 1)
        generation = series.split('generation="')[1].split('"')[0]
        entry = out.setdefault(generation, {})
        if series.startswith("tether_gc_pause_seconds_count"):
            entry["count"] = float(value)
        elif series.startswith("tether_gc_pause_seconds_sum"):
            entry["seconds"] = float(value)
        elif 'le="' in series:
            entry["le_" + series.split('le="')[1].split('"')[0]] = float(value)
    for entry in out.values():
        for bound in ("0.01", "0.05", "0.1"):
            entry[f"over_{bound}_s"] = entry.get("count", 0.0) - entry.pop(f"le_{bound}", 0.0)
        for key in [k for k in entry if k.startswith("le_")]:
            del entry[key]
    return out


def _gc_between(before: dict[str, dict[str, float]], after: dict[str, dict[str, float]]) -> Any:
    return {
        generation: {k: round(v - before.get(generation, {}).get(k, 0.0), 4) for k, v in d.items()}
        for generation, d in after.items()
    }


async def drive(args: argparse.Namespace, server: ServerProcess) -> dict[str, Any]:
    assert server.proc is not None
    process = psutil.Process(server.proc.pid)
    token = server.token(["*"])
    rss_before = process.memory_info().rss
    gate = asyncio.Semaphore(args.concurrency)
    typing = None
    if args.type_while_opening:
        typing = asyncio.ensure_future(_measure_fanout(args, server.ws_url, token))
    later: list[BenchPeer] = []
    started = time.perf_counter()
    peers = await asyncio.gather(
        *(
            _open_idle(server.ws_url, token, f"idle-{k % args.docs}", gate)
            for k in range(args.connections)
        )
    )
    opened_in = time.perf_counter() - started
    rss_idle = process.memory_info().rss
    gc_opened = await asyncio.to_thread(_gc_pauses, server.http_url)
    if args.grow:
        typing = asyncio.ensure_future(_measure_fanout(args, server.ws_url, token))
        later = await asyncio.gather(
            *(
                _open_idle(server.ws_url, token, f"idle-{k % args.docs}", gate)
                for k in range(args.grow)
            )
        )
    latencies = await (typing or _measure_fanout(args, server.ws_url, token))
    rss_after = process.memory_info().rss
    gc_typed = await asyncio.to_thread(_gc_pauses, server.http_url)
    for peer in [*peers, *later]:
        peer.vanish()
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] if ordered else None
    return {
        "settings": {
            k: getattr(args, k)
            for k in ("connections", "docs", "rate", "duration", "type_while_opening", "grow")
        },
        "seconds_to_open": round(opened_in, 1),
        "rss_mb_before": round(rss_before / 2**20, 1),
        "rss_mb_idle": round(rss_idle / 2**20, 1),
        "rss_mb_after_typing": round(rss_after / 2**20, 1),
        "kb_per_idle_connection": round((rss_idle - rss_before) / 1024 / args.connections, 2),
        # Garbage-collector pauses while the sockets opened, and while the writer typed
        "gc_opening": gc_opened,
        "gc_typing": _gc_between(gc_opened, gc_typed),
        "fanout_ms": {
            "n": len(ordered),
            "sent": round(args.rate * args.duration),
            "p50": round(statistics.median(ordered) * 1000, 3) if ordered else None,
            "p99": round(p99 * 1000, 3) if p99 is not None else None,
        },
        "latencies_ms": [round(x * 1000, 3) for x in ordered],
    }


def _plot(result: dict[str, Any], png_out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = result["latencies_ms"]
    fig, ax = plt.subplots(figsize=(7, 4))
    if xs:
        ax.plot(xs, [(i + 1) / len(xs) for i in range(len(xs))])
    ax.set_xlabel("fan-out latency (ms)")
    ax.set_ylabel("fraction of edits")
    settings = result["settings"]
    ax.set_title(f"idle: typing among {settings['connections']} idle connections")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(png_out, dpi=110)
    plt.close(fig)


def run(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory() as data_dir:
        server = ServerProcess(
            Path(data_dir),
            ai_provider="none",
            max_connections_per_address=args.connections + args.grow + 64,
        )
        with server:
            result = asyncio.run(drive(args, server))
    Path(args.json_out).write_text(json.dumps(result, indent=2))
    _plot(result, args.png_out)
    print(json.dumps({k: v for k, v in result.items() if k != "latencies_ms"}, indent=2))
    return 0

"""``tether bench storm``: rounds of clients that connect, sync, edit once and vanish.

Each round opens ``--clients`` sockets over ``--docs`` documents, each syncs and appends one
edit, waits for the server to have it (a round trip), then drops its TCP connection without a
close frame. After every round the server's RSS is read; after the last, the driver waits for
every document to unload (``tether_documents_loaded`` reaches 0) and reads RSS again. A server
that leaks per connection or per document shows it here. A benchmark, not a test.

``--vanish silent``: clients stop reading and writing but keep their sockets, as after losing
the network with no FIN or RST: only the server's idle timeout ends them, so documents unload
an idle timeout plus the grace after the last round.
"""

from __future__ import annotations

import argparse
import asyncio
import json
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
    parser.add_argument("--clients", type=int, default=500, help="clients per round")
    parser.add_argument("--docs", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=100, help="connects in flight")
    parser.add_argument("--unload-grace", type=float, default=5.0, help="the server's grace")
    parser.add_argument(
        "--vanish", choices=["rst", "silent"], default="rst", help="how clients disappear"
    )
    parser.add_argument("--idle-timeout", type=float, default=45.0, help="the server's")
    parser.add_argument("--json", dest="json_out", default="bench-storm.json")
    parser.add_argument("--png", dest="png_out", default="bench-storm.png")


async def _one_client(
    url: str, token: str, name: str, gate: asyncio.Semaphore, silent: list[BenchPeer] | None = None
) -> None:
    async with gate:
        ws = await connect(url, max_size=None, compression=None, open_timeout=60)
        peer = BenchPeer(ws, name)
        await peer.open(token)
        await peer.append("x")
        await peer.round_trip()
        if silent is None:
            peer.vanish()
        else:
            peer.go_silent()
            silent.append(peer)  # the socket stays open until the bench ends


async def _loaded_documents(http_url: str) -> int:
    async with httpx.AsyncClient(timeout=10) as http:
        text = (await http.get(f"{http_url}/metrics")).text
    for line in text.splitlines():
        if line.startswith("tether_documents_loaded "):
            return int(float(line.split()[1]))
    raise RuntimeError("tether_documents_loaded missing from /metrics")


async def drive(args: argparse.Namespace, server: ServerProcess) -> dict[str, Any]:
    assert server.proc is not None
    process = psutil.Process(server.proc.pid)
    token = server.token(["*"])
    gate = asyncio.Semaphore(args.concurrency)
    silent: list[BenchPeer] | None = [] if args.vanish == "silent" else None
    rounds: list[dict[str, float]] = []
    rss_start = process.memory_info().rss / 2**20
    for number in range(1, args.rounds + 1):
        started = time.perf_counter()
        await asyncio.gather(
            *(
                _one_client(server.ws_url, token, f"storm-{k % args.docs}", gate, silent)
                for k in range(args.clients)
            )
        )
        rounds.append(
            {
                "round": number,
                "seconds": round(time.perf_counter() - started, 2),
                "rss_mb": round(process.memory_info().rss / 2**20, 1),
            }
        )
        print(json.dumps(rounds[-1]), flush=True)
    waited_from = time.perf_counter()
    deadline = waited_from + args.unload_grace * 4 + args.idle_timeout + 60
    loaded = await _loaded_documents(server.http_url)
    while loaded and time.perf_counter() < deadline:
        await asyncio.sleep(0.5)  # polling an external process's gauge; not a test
        loaded = await _loaded_documents(server.http_url)
    rss_end = round(process.memory_info().rss / 2**20, 1)
    first = rounds[0]["rss_mb"] if rounds else rss_start
    for peer in silent or ():
        peer.vanish()
    keys = ("clients", "docs", "rounds", "unload_grace", "vanish", "idle_timeout")
    return {
        "settings": {k: getattr(args, k) for k in keys},
        "rss_mb_at_start": round(rss_start, 1),
        "rounds": rounds,
        "documents_loaded_at_end": loaded,
        "seconds_until_unloaded": round(time.perf_counter() - waited_from, 1),
        "rss_mb_after_unload": rss_end,
        "rss_mb_growth_since_first_round": round(rss_end - first, 1),
    }


def _plot(result: dict[str, Any], png_out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rounds = result["rounds"]
    fig, ax = plt.subplots(figsize=(7, 4))
    xs = [0] + [r["round"] for r in rounds] + [len(rounds) + 1]
    ys = [result["rss_mb_at_start"]] + [r["rss_mb"] for r in rounds]
    ys.append(result["rss_mb_after_unload"])
    ax.plot(xs, ys, marker="o")
    ax.set_xticks(xs, ["start"] + [str(r["round"]) for r in rounds] + ["unloaded"])
    ax.set_xlabel("round")
    ax.set_ylabel("server RSS (MiB)")
    ax.set_title("storm: connect, sync, edit once, vanish")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(png_out, dpi=110)
    plt.close(fig)


def run(args: argparse.Namespace) -> int:
    silent = args.vanish == "silent"
    with tempfile.TemporaryDirectory() as data_dir:
        server = ServerProcess(
            Path(data_dir),
            ai_provider="none",
            unload_grace=args.unload_grace,
            idle_timeout=args.idle_timeout,
            # Silent clients stay connected until the idle timeout: every round's at once.
            max_connections_per_address=args.clients * (args.rounds if silent else 1) + 64,
        )
        with server:
            result = asyncio.run(drive(args, server))
    Path(args.json_out).write_text(json.dumps(result, indent=2))
    _plot(result, args.png_out)
    print(json.dumps({k: v for k, v in result.items() if k != "rounds"}, indent=2))
    return 0 if result["documents_loaded_at_end"] == 0 else 1

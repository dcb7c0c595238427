"""``tether bench bigdoc``: editors append paragraphs to one document until it is big, and
the server's CPU is read per slice of bytes written.

Cost per edit must not grow with the document. Each update appends ``--per-update`` paragraphs
of ``--paragraph-bytes``; after every ``--slice-mb`` the driver waits for a round trip (a
SyncStep1 answered by a SyncStep2, which a server sends after everything before it) and reads
the server's CPU (its own and its children's). Speaks the multiplexed protocol, so it drives
tether or Hocuspocus (``--url`` and ``--server-pid``). A benchmark, not a test.

``--authors 2`` has two editors take turns, each typing after the other's text. With one
author every append extends that author's last item, and yrs's ``Item::try_squash`` recounts
the merged item's UTF-16 length on each merge (O(item), upstream): turns keep items apart, so
what remains is the server's own cost. ``--typing K`` has a third editor type K one-character
edits at the end after each slice and reads the server's CPU per 1000 of them: the cost of an
ordinary keystroke as the document grows.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
from websockets.asyncio.client import connect

from .launcher import ServerProcess
from .peer import BenchPeer

_MB = 1024 * 1024


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mb", type=float, default=20.0, help="document size to reach")
    parser.add_argument("--slice-mb", type=float, default=2.0, help="bytes per CPU reading")
    parser.add_argument("--paragraph-bytes", type=int, default=100)
    parser.add_argument("--per-update", type=int, default=100, help="paragraphs per update")
    parser.add_argument("--authors", type=int, default=1, help="editors appending in turn")
    parser.add_argument(
        "--typing", type=int, default=0, help="keystrokes typed and measured after each slice"
    )
    parser.add_argument("--url", default=None, help="server to drive (default: start tether)")
    parser.add_argument("--token", default="", help="token to send (default: minted)")
    parser.add_argument("--server-pid", type=int, default=None, help="measure this process")
    parser.add_argument("--ai", choices=["none", "local"], default="none", help="own server's AI")
    parser.add_argument("--json", dest="json_out", default="bench-bigdoc.json")
    parser.add_argument("--png", dest="png_out", default="bench-bigdoc.png")


def cpu_seconds_with_children(pid: int) -> float:
    """CPU of a process and of every process under it (the AI worker, say)."""
    process = psutil.Process(pid)
    total = 0.0
    for each in [process, *process.children(recursive=True)]:
        try:
            times = each.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


async def _open(stack: contextlib.AsyncExitStack, url: str, token: str) -> BenchPeer:
    ws = await stack.enter_async_context(
        connect(url, max_size=None, compression=None, open_timeout=30)
    )
    peer = BenchPeer(ws, "bigdoc")
    await peer.open(token)
    return peer


async def _type(typist: BenchPeer, keystrokes: int, pid: int) -> float:
    """Server CPU s per 1000 one-character edits typed at the end, 50 in flight at most."""
    await typist.round_trip()  # type after everything appended so far
    acks = typist.acks
    started = cpu_seconds_with_children(pid)
    for k in range(keystrokes):
        await typist.append("k")
        if k >= 50:
            await typist.wait_for(acks=acks + k - 50)
    await typist.wait_for(acks=acks + keystrokes)
    return (cpu_seconds_with_children(pid) - started) * 1000 / keystrokes


async def drive(args: argparse.Namespace, url: str, token: str, pid: int) -> dict[str, Any]:
    paragraph = "x" * (args.paragraph_bytes - 1) + "\n"
    chunk = paragraph * args.per_update
    async with contextlib.AsyncExitStack() as stack:
        authors = [await _open(stack, url, token) for _ in range(max(1, args.authors))]
        typist = await _open(stack, url, token) if args.typing else None
        expected = [0] * len(authors)  # updates each author must have before its turn
        slices: list[dict[str, float]] = []
        written = turn = 0
        next_mark = args.slice_mb * _MB
        last_cpu, last_wall = cpu_seconds_with_children(pid), time.perf_counter()
        while written < args.mb * _MB:
            k = turn % len(authors)
            author = authors[k]
            await author.wait_for(updates=expected[k])  # typing on the others' text
            await author.append(chunk)
            expected = [n + (j != k) for j, n in enumerate(expected)]
            written += len(chunk)
            turn += 1
            if written >= next_mark:
                await author.round_trip()
                cpu, wall = cpu_seconds_with_children(pid), time.perf_counter()
                slices.append(
                    {
                        "mb": round(written / _MB, 2),
                        "server_cpu_s": round(cpu - last_cpu, 3),
                        "wall_s": round(wall - last_wall, 3),
                    }
                )
                if typist is not None:
                    per_1000 = await _type(typist, args.typing, pid)
                    slices[-1]["typing_cpu_s_per_1000"] = round(per_1000, 3)
                print(json.dumps(slices[-1]), flush=True)
                last_cpu, last_wall = cpu_seconds_with_children(pid), time.perf_counter()
                next_mark += args.slice_mb * _MB
        for peer in [*authors, *([typist] if typist else [])]:
            await peer.close()
    return {"settings": _settings(args), "slices": slices, "summary": _summary(slices, args)}


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    keys = ("mb", "slice_mb", "paragraph_bytes", "per_update", "authors", "typing", "url", "ai")
    return {key: getattr(args, key) for key in keys}


def _summary(slices: list[dict[str, float]], args: argparse.Namespace) -> dict[str, Any]:
    """CPU per MB near 5 MB and at the end, and their ratio (the issue asks for at most 1.5)."""
    if not slices:
        return {}
    per_mb = [s["server_cpu_s"] / args.slice_mb for s in slices]
    near_five = min(range(len(slices)), key=lambda i: abs(slices[i]["mb"] - 5.0))
    summary = {
        "cpu_s_per_mb_near_5mb": round(per_mb[near_five], 4),
        "cpu_s_per_mb_last": round(per_mb[-1], 4),
        "ratio_last_vs_5mb": round(per_mb[-1] / per_mb[near_five], 2)
        if per_mb[near_five]
        else None,
        "server_cpu_s_total": round(sum(s["server_cpu_s"] for s in slices), 2),
    }
    if "typing_cpu_s_per_1000" in slices[0]:
        near, last = slices[near_five]["typing_cpu_s_per_1000"], slices[-1]["typing_cpu_s_per_1000"]
        summary["typing_cpu_s_per_1000_near_5mb"] = near
        summary["typing_cpu_s_per_1000_last"] = last
        summary["typing_ratio_last_vs_5mb"] = round(last / near, 2) if near else None
    return summary


def _plot(result: dict[str, Any], png_out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    slices = result["slices"]
    typing = "typing_cpu_s_per_1000" in (slices[0] if slices else {})
    fig, axes = plt.subplots(1, 2 if typing else 1, figsize=(12 if typing else 7, 4), squeeze=False)
    ax = axes[0][0]
    ax.plot([s["mb"] for s in slices], [s["server_cpu_s"] for s in slices], marker="o")
    ax.set_xlabel("document size (MB)")
    ax.set_ylabel(f"server CPU s per {result['settings']['slice_mb']} MB appended")
    ax.set_title(f"bigdoc: appending, {result['settings']['authors']} author(s) in turn")
    ax.grid(True, alpha=0.3)
    if typing:
        ax = axes[0][1]
        ax.plot([s["mb"] for s in slices], [s["typing_cpu_s_per_1000"] for s in slices], marker="o")
        ax.set_xlabel("document size (MB)")
        ax.set_ylabel("server CPU s per 1000 keystrokes")
        ax.set_title("bigdoc: typing at the end")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(png_out, dpi=110)
    plt.close(fig)


def run(args: argparse.Namespace) -> int:
    if args.url is not None:
        if args.server_pid is None:
            raise SystemExit("--server-pid is required with --url (whose CPU to read)")
        result = asyncio.run(drive(args, args.url, args.token, args.server_pid))
    else:
        with tempfile.TemporaryDirectory() as data_dir:
            with ServerProcess(Path(data_dir), ai_provider=args.ai) as server:
                assert server.proc is not None
                token = args.token or server.token(["*"])
                result = asyncio.run(drive(args, server.ws_url, token, server.proc.pid))
    Path(args.json_out).write_text(json.dumps(result, indent=2))
    _plot(result, args.png_out)
    print(json.dumps(result["summary"], indent=2))
    return 0

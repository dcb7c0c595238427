"""``tether bench startup``: from ``tether serve`` to the first synced, acknowledged edit, with
the AI configured as users run it, and how long until AI is ready on top.

Each round starts a fresh server (a new data directory, except that the requantised model is
kept, as on any second start), connects as soon as the port answers, types one character and
waits for its durable ack. Loopback only. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from tether.protocol.clients.tether_client import TetherClient

from .launcher import DEFAULT_SECRET, free_port


def add_startup_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ai-provider", default="local", help="local or none")


def run_startup_bench(args: argparse.Namespace) -> int:
    first_edit: list[float] = []
    ai_ready: list[float] = []
    with tempfile.TemporaryDirectory(prefix="tether-startup-") as scratch:
        models = Path(scratch) / "models"  # shared by the rounds: the requantised model
        for round_no in range(args.rounds):
            data_dir = Path(scratch) / f"round-{round_no}"
            data_dir.mkdir()
            if models.exists():
                (data_dir / "models").symlink_to(models, target_is_directory=True)
            edit, ready = asyncio.run(_one_start(data_dir, args.ai_provider))
            if not models.exists() and (data_dir / "models").is_dir():
                (data_dir / "models").rename(models)
            first_edit.append(edit)
            if ready is not None:
                ai_ready.append(ready)
            ready_text = f"{ready * 1000:.0f} ms" if ready is not None else "-"
            print(f"round {round_no}: first acked edit {edit * 1000:.0f} ms, AI ready {ready_text}")
    print(f"median: first acked edit {statistics.median(first_edit) * 1000:.0f} ms", end="")
    if ai_ready:
        print(f", AI ready {statistics.median(ai_ready) * 1000:.0f} ms", end="")
    print(f" ({args.rounds} starts, ai provider {args.ai_provider})")
    return 0


async def _one_start(data_dir: Path, ai_provider: str) -> tuple[float, float | None]:
    port = free_port()
    env = dict(os.environ)
    env.update(
        TETHER_PORT=str(port),
        TETHER_DATA_DIR=str(data_dir),
        TETHER_AUTH="none",
        TETHER_JWT_SECRET=DEFAULT_SECRET,
        TETHER_AI_PROVIDER=ai_provider,
        TETHER_LOG_LEVEL="warning",
    )
    began = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether.collab.cli", "serve"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        client = await _connect(f"ws://127.0.0.1:{port}/ws", port, proc)
        try:
            doc = await client.open("startup")
            doc.append("x")
            await doc.wait_acked(timeout=30)
            edit = time.perf_counter() - began
        finally:
            await client.aclose()
        ready = await _ai_ready(port, began) if ai_provider != "none" else None
        return edit, ready
    finally:
        proc.terminate()
        proc.wait(15)


async def _connect(url: str, port: int, proc: subprocess.Popen[bytes]) -> TetherClient:
    """A client, as soon as the port accepts connections (probed every 5 ms)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("the server exited during start-up")
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.005)  # polling a port that is not open yet
            continue
        writer.close()
        return await TetherClient(url, reconnect=False).__aenter__()
    raise RuntimeError("the server did not open its port in 30 s")


async def _ai_ready(port: int, began: float) -> float | None:
    async with httpx.AsyncClient(timeout=5) as http:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            ai = (await http.get(f"http://127.0.0.1:{port}/health")).json().get("ai", {})
            if ai.get("state") == "ready":
                return time.perf_counter() - began
            if ai.get("state") == "degraded":
                return None
            await asyncio.sleep(0.02)
    return None

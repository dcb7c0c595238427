"""``tether bench shapes``: what one adversarial update costs on the server's real paths, and how
that cost grows with its size (issue 26: no single update may stall the event loop).

For each shape (``bench.shape_updates``) and size N, a child process builds a room from
an in-memory store holding the shape's setup, attaches the attacker and one other peer, and
times the attack's way in as a connection takes it (``Room.receive_update``, read in a worker
thread first when big: scan, merge, guard, origin order, apply, admit, broadcast) and the
longest the event loop went without a turn meanwhile;
then it loads a document whose stored log holds the attack raw, as a log written before the
server re-encoded such shapes would, and times the load and the longest the event loop went
without a turn meanwhile (big documents load in a thread, but yrs holds the GIL). Each case runs
under a time and memory limit, so a runaway one reports "> limit" instead of taking the machine.

Reported per case: the update's bytes, milliseconds and the longest loop stall, microseconds per
byte, the growth exponent against the previous size (1 = linear, 2 = quadratic), the load's
milliseconds and stall, what became of the update and the child's peak RSS. In process and sans
network: a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.collab.auth.tokens import OPEN_GRANT
from tether.collab.hooks import Hooks
from tether.collab.rooms.manager import DocumentQuarantined, RoomManager
from tether.collab.rooms.room import InvalidUpdate
from tether.collab.rooms.room_peer import Peer
from tether.collab.rooms.room_settings import RoomSettings
from tether.collab.runtime.sync_metrics import Metrics
from tether.collab.storage.store import MemoryStore, Store
from tether.collab.transport.outbox import Outbox
from tether.collab.updates.update_reads import reads_off_loop

from .shape_updates import SHAPES

_DOC = "shape"
_DEFAULT_SIZES = "2000,4000,8000,16000,32000"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated shapes")
    parser.add_argument("--sizes", default=_DEFAULT_SIZES, help="comma-separated N")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per case")
    parser.add_argument("--memory-mb", type=int, default=3072, help="address space per case")
    parser.add_argument("--json", dest="json_out", default=None, help="write the rows here")
    parser.add_argument("--one", nargs=2, metavar=("SHAPE", "N"), help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    if args.one:
        print(json.dumps(asyncio.run(_measure(args.one[0], int(args.one[1])))))
        return 0
    rows: list[dict[str, Any]] = []
    print(_HEADER)
    for shape in args.shapes.split(","):
        previous: dict[str, Any] | None = None
        for size in [int(s) for s in args.sizes.split(",")]:
            row = _child(shape, size, args.timeout, args.memory_mb)
            print(_line(row, previous))
            rows.append(row)
            previous = row if row.get("receive_ms") is not None else None
            if row.get("failed"):
                break  # bigger sizes only fail later
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(rows, indent=1))
    return 0


def _child(shape: str, size: int, timeout: float, memory_mb: int) -> dict[str, Any]:
    root = Path(__file__).resolve().parents[1]  # the checkout holding this tether
    env = {**os.environ, "PYTHONPATH": str(root)}
    command = [sys.executable, "-m", "tether.bench.shapes", "--one", shape, str(size)]
    limit = memory_mb * 1024 * 1024

    def cap_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    base: dict[str, Any] = {"shape": shape, "n": size}
    try:
        done = subprocess.run(
            command,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            preexec_fn=cap_memory,
        )
    except subprocess.TimeoutExpired:
        return {**base, "failed": f"> {timeout:.0f} s"}
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["?"])[-1]
        reason = f"> {memory_mb} MB" if "memory" in tail.lower() or done.returncode < 0 else tail
        return {**base, "failed": reason[:60]}
    return {**base, **json.loads(done.stdout.strip().splitlines()[-1])}


@dataclass
class _Stall:
    """The longest the loop went without a turn while something ran beside it."""

    longest: float = 0.0
    running: bool = True

    async def watch(self) -> None:
        last = time.perf_counter()
        while self.running:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            self.longest = max(self.longest, now - last)
            last = now


async def _measure(shape_name: str, size: int) -> dict[str, Any]:
    shape = SHAPES[shape_name](size)
    row: dict[str, Any] = {"bytes": len(shape.attack)}
    row.update(await _receive(shape.setup, shape.attack))
    row.update(await _load([*shape.setup, shape.attack]))
    row["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    return row


def _room_manager(store: Store) -> RoomManager:
    return RoomManager(store, hooks=Hooks(), metrics=Metrics(), settings=RoomSettings())


def _null_peer() -> Peer:
    async def unused(frame: bytes) -> None:
        pass

    outbox = Outbox(unused, max_frames=1 << 30, max_bytes=1 << 40, write_now=lambda f: True)
    return Peer(outbox, OPEN_GRANT, OPEN_GRANT.scope, _DOC)


async def _receive(setup: list[bytes], attack: bytes) -> dict[str, Any]:
    async with MemoryStore() as store:
        for stored in setup:
            await store.append(_DOC, stored)
        room = await _room_manager(store).acquire(_DOC)
        attacker, other = _null_peer(), _null_peer()
        room.attach(attacker)
        room.attach(other)
        outcome = "applied"
        stall = _Stall()
        watcher = asyncio.ensure_future(stall.watch())
        await asyncio.sleep(0.01)  # the watcher is running
        began = time.perf_counter()
        try:
            if reads_off_loop(attack):  # as the connections do
                await room.receive_update_off_loop(attacker, attack)
            else:
                room.receive_update(attacker, attack)
        except InvalidUpdate as exc:
            cause = exc.__cause__
            outcome = "refused: " + getattr(cause, "limit", "invalid")
        elapsed = time.perf_counter() - began
        stall.running = False
        await watcher
        await room.flush()
        stored_bytes = sum(len(u) for u in await store.load(_DOC)) - sum(len(u) for u in setup)
    return {
        "receive_ms": elapsed * 1000,
        "receive_stall_ms": stall.longest * 1000,
        "outcome": outcome,
        "stored_bytes": stored_bytes,
    }


async def _load(stored: list[bytes]) -> dict[str, Any]:
    async with MemoryStore() as store:
        for update in stored:
            await store.append(_DOC, update)
        stall = _Stall()
        watcher = asyncio.ensure_future(stall.watch())
        await asyncio.sleep(0.01)  # the watcher is running
        outcome = "loaded"
        began = time.perf_counter()
        try:
            await _room_manager(store).acquire(_DOC)
        except DocumentQuarantined:
            outcome = "quarantined"
        elapsed = time.perf_counter() - began
        stall.running = False
        await watcher
    return {"load_ms": elapsed * 1000, "load_stall_ms": stall.longest * 1000, "load": outcome}


_HEADER = (
    f"{'shape':<13}{'N':>7}{'bytes':>10}{'recv ms':>9}{'stall':>7}{'us/B':>7}{'growth':>7}"
    f"{'load ms':>9}{'stall':>7}{'RSS MB':>7}  outcome"
)


def _line(row: dict[str, Any], previous: dict[str, Any] | None) -> str:
    if row.get("failed"):
        return f"{row['shape']:<13}{row['n']:>7}  {row['failed']}"
    ms = row["receive_ms"]
    growth = "-"
    if previous is not None and previous["receive_ms"] > 0 and ms > 0:
        growth = f"{math.log(ms / previous['receive_ms']) / math.log(row['n'] / previous['n']):.2f}"
    per_byte = ms * 1000 / row["bytes"]
    return (
        f"{row['shape']:<13}{row['n']:>7}{row['bytes']:>10}{ms:>9.1f}"
        f"{row['receive_stall_ms']:>7.1f}{per_byte:>7.2f}{growth:>7}"
        f"{row['load_ms']:>9.1f}{row['load_stall_ms']:>7.1f}{row['rss_mb']:>7}  "
        f"{row['outcome']}; stored {row['stored_bytes']} B; load {row['load']}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tether.bench.shapes")
    add_arguments(parser)
    return run(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())

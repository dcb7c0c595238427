"""``tether bench reconnect``: an editor comes back online with a burst of offline edits.

A document is written by ``--authors`` editors typing words at random places (a fragmented
text, as real co-authored documents become), ``--kb`` long. One editor keeps typing a character
every ``--interval`` seconds while another watches; then an editor that made ``--offline-edits``
single-character edits at random places while offline reconnects and sends them in one update,
as Yjs clients do. The driver reports how long the server took to take that update (its ack
round trip) and what the watcher saw of the typist meanwhile: the fan-out latency of every
keystroke, before and during the reconnect. The server's guard checks every item of the
burst before applying it, on the event loop, so a check that grows with the document shows
here as a stall for everyone on that server. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from pycrdt import Doc, Text
from websockets.asyncio.client import connect

from .launcher import ServerProcess
from .peer import BenchPeer

_WORDS = ("lorem ", "ipsum ", "dolor ", "sit ", "amet ", "sed ", "do ", "elit ")
_BIG = 512  # bytes: the typist's updates are smaller, the burst's broadcast is not


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kb", type=int, default=100, help="document size before the burst")
    parser.add_argument("--authors", type=int, default=3)
    parser.add_argument("--offline-edits", type=int, default=2000)
    parser.add_argument("--interval", type=float, default=0.02, help="seconds between keys")
    parser.add_argument("--reps", type=int, default=3, help="reconnects, each on a new doc")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", dest="json_out", default="bench-reconnect.json")


def _authored(rng: random.Random, authors: int, size: int) -> bytes:
    docs = [Doc() for _ in range(authors)]
    written = 0
    while written < size:
        doc = rng.choice(docs)
        text = doc.get("content", type=Text)
        state = doc.get_state()
        word = rng.choice(_WORDS)
        text.insert(rng.randint(0, len(text)), word)
        written += len(word)
        update = doc.get_update(state)
        for other in docs:
            if other is not doc:
                other.apply_update(update)
    return docs[0].get_update()


def _offline_burst(rng: random.Random, base: bytes, edits: int) -> bytes:
    doc = Doc()
    doc.apply_update(base)
    text = doc.get("content", type=Text)
    state = doc.get_state()
    for _ in range(edits):
        text.insert(rng.randint(0, len(text)), rng.choice("abcdefgh"))
    return doc.get_update(state)


class _Typist:
    """Types one character every ``interval``; the watcher's arrivals give each its latency."""

    def __init__(self, typist: BenchPeer, watcher: BenchPeer, interval: float) -> None:
        self.typist, self.interval = typist, interval
        self.sent: collections.deque[float] = collections.deque()
        self.latencies: list[tuple[float, float]] = []  # (sent at, latency in s)
        watcher.on_update = self._arrived
        self._stop = asyncio.Event()

    def _arrived(self, update: bytes) -> None:
        if len(update) < _BIG and self.sent:
            sent = self.sent.popleft()
            self.latencies.append((sent, time.perf_counter() - sent))

    async def run(self) -> None:
        while not self._stop.is_set():
            self.sent.append(time.perf_counter())
            await self.typist.append("k")
            try:
                await asyncio.wait_for(self._stop.wait(), self.interval)
            except TimeoutError:
                pass

    def stop(self) -> None:
        self._stop.set()


def _quantiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    return {
        "n": len(ordered),
        "p50_ms": round(1e3 * statistics.median(ordered), 2),
        "p99_ms": round(1e3 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 2),
        "max_ms": round(1e3 * ordered[-1], 2),
    }


async def _one(args: argparse.Namespace, server: ServerProcess, rep: int) -> dict[str, Any]:
    rng = random.Random(args.seed * 1000 + rep)
    name = f"reconnect-{rep}"
    token = server.token([name])
    base = _authored(rng, args.authors, args.kb * 1000)
    burst = _offline_burst(rng, base, args.offline_edits)
    peers: list[BenchPeer] = []

    async def joined() -> BenchPeer:
        ws = await connect(server.ws_url, max_size=None, compression=None, open_timeout=30)
        peers.append(BenchPeer(ws, name))
        await peers[-1].open(token)
        return peers[-1]

    try:
        author = await joined()
        await author.send_update(base)
        await author.round_trip()
        watcher = await joined()
        typist = _Typist(author, watcher, args.interval)
        typing = asyncio.ensure_future(typist.run())
        await asyncio.sleep(1.0)  # a second of ordinary typing first: the baseline
        offline = await joined()
        burst_from = time.perf_counter()
        await offline.send_update(burst)
        await offline.round_trip()
        burst_taken = time.perf_counter() - burst_from
        await asyncio.sleep(0.5)
        typist.stop()
        await typing
        before = [lat for sent, lat in typist.latencies if sent < burst_from]
        during = [
            lat for sent, lat in typist.latencies if burst_from <= sent <= burst_from + burst_taken
        ]
        return {
            "burst_bytes": len(burst),
            "burst_taken_ms": round(1e3 * burst_taken, 1),
            "fanout_before": _quantiles(before),
            "fanout_during": _quantiles(during),
            "fanout_worst_ms": round(1e3 * max((lat for _, lat in typist.latencies), default=0), 1),
        }
    finally:
        for peer in peers:
            await peer.close()


async def drive(args: argparse.Namespace, server: ServerProcess) -> dict[str, Any]:
    reps = []
    for rep in range(args.reps):
        reps.append(await _one(args, server, rep))
        print(json.dumps(reps[-1]), flush=True)
    return {
        "settings": {
            k: getattr(args, k) for k in ("kb", "authors", "offline_edits", "interval", "reps")
        },
        "reps": reps,
        "median_burst_taken_ms": statistics.median(r["burst_taken_ms"] for r in reps),
        "median_fanout_worst_ms": statistics.median(r["fanout_worst_ms"] for r in reps),
    }


def run(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory() as data_dir:
        with ServerProcess(Path(data_dir), ai_provider="none") as server:
            result = asyncio.run(drive(args, server))
    Path(args.json_out).write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k != "reps"}, indent=2))
    return 0

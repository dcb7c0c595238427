"""``tether bench cluster``: the sync bench against one node on SQLite, one node on PostgreSQL,
and N nodes on PostgreSQL + Redis, in the same run, with the same editors and documents.

Editors are spread over the nodes round-robin (so with N nodes, most pairs of editors of one
document are on different nodes). Reports fan-out p50/p99 split into same-node and cross-node
pairs, ack p50/p99 (the PostgreSQL or SQLite commit), and CPU per 1000 edits summed over every
node process (the engines' own CPU is reported apart). A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from tether.protocol.wire.sync_payloads import SyncUpdate

from .engines import PostgresServer, RedisServer
from .launcher import ServerProcess
from .sync_drive import Editor, Recorder, edit_key, percentiles


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--editors", type=int, default=30)
    parser.add_argument("--docs", type=int, default=3)
    parser.add_argument("--rate", type=float, default=5.0, help="chars/s per editor")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of typing")
    parser.add_argument("--json", dest="json_out", default=None, help="write results here")
    parser.add_argument("--seed", type=int, default=1)


@dataclass
class SplitRecorder(Recorder):
    node_of: dict[int, int] = field(default_factory=dict)  # client id → node index
    same: list[float] = field(default_factory=list)
    cross: list[float] = field(default_factory=list)


@dataclass
class NodeEditor(Editor):
    node: int = 0

    def _on_sync(self, message: object, now: float) -> None:
        recorder = self.recorder
        assert isinstance(recorder, SplitRecorder)
        if isinstance(message, SyncUpdate):
            key = edit_key(message.update)
            sent = recorder.sent_at.get(key) if key is not None else None
            if sent is not None and key is not None and key[0] != self.ydoc.client_id:
                if key not in self.seen:
                    same = recorder.node_of.get(key[0]) == self.node
                    (recorder.same if same else recorder.cross).append(now - sent)
        super()._on_sync(message, now)


async def drive(args: argparse.Namespace, urls: list[str], token: str) -> dict[str, Any]:
    rng = random.Random(args.seed)
    recorder = SplitRecorder()
    editors = [
        # Editor i edits document i % docs on node (i // docs) % nodes: every document has
        # editors on every node.
        NodeEditor(
            f"e{i}", f"bench-{i % args.docs}", "tether", recorder, node=(i // args.docs) % len(urls)
        )
        for i in range(args.editors)
    ]
    for editor in editors:
        recorder.node_of[editor.ydoc.client_id] = editor.node
        await editor.connect(urls[editor.node], token)
    tasks = [asyncio.ensure_future(e.read_forever()) for e in editors]
    tasks += [asyncio.ensure_future(e.write_forever()) for e in editors]
    await asyncio.wait_for(asyncio.gather(*(e.synced.wait() for e in editors)), timeout=60)
    started = time.perf_counter()

    async def typist(editor: Editor) -> None:
        interval = 1.0 / args.rate
        next_at = time.perf_counter() + rng.random() * interval
        while next_at < started + args.duration:
            delay = next_at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            editor.type_one(rng.choice("abcdefghijklmnopqrstuvwxyz "))
            next_at += interval

    await asyncio.gather(*(typist(e) for e in editors))
    deadline = time.perf_counter() + 10
    while time.perf_counter() < deadline and any(e.pending_acks for e in editors):
        await asyncio.sleep(0.05)  # a benchmark draining in-flight acks, bounded
    await asyncio.sleep(0.5)  # the last cross-node fan-out
    for editor in editors:
        if editor.ws is not None:
            with contextlib.suppress(Exception):
                await editor.ws.close()
    for task in tasks:
        task.cancel()
    return {
        "updates_sent": recorder.sent,
        "acks_received": len(recorder.acks),
        "fanout_same_node_ms": percentiles(recorder.same),
        "fanout_cross_node_ms": percentiles(recorder.cross),
        "ack_ms": percentiles(recorder.acks),
        "errors": recorder.errors[:5],
    }


def _cpu(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            times = psutil.Process(pid).cpu_times()
            total += times.user + times.system + times.children_user + times.children_system
    return total


def _engine_pids(pg: PostgresServer | None, redis: RedisServer | None) -> list[int]:
    pids: list[int] = []
    if redis is not None and redis.proc is not None:
        pids.append(redis.proc.pid)
    if pg is not None:
        with contextlib.suppress(OSError, ValueError, psutil.Error):
            master = int((pg.data / "postmaster.pid").read_text().split()[0])
            pids.append(master)
            pids += [child.pid for child in psutil.Process(master).children(recursive=True)]
    return pids


def _run_config(
    args: argparse.Namespace, root: Path, label: str, nodes: int, store: str, bus: str,
    engines: tuple[PostgresServer | None, RedisServer | None],
) -> dict[str, Any]:  # fmt: skip
    servers = [
        ServerProcess(
            root / f"{label}-{i}",
            store=store,
            bus=bus,
            node_id=f"{label}-{i}",
            send_queue_frames=8192,
            max_connections_per_address=0,
        )
        for i in range(nodes)
    ]
    try:
        for server in servers:
            server.start()
        pids = [s.proc.pid for s in servers if s.proc is not None]
        engine_pids = _engine_pids(*engines)
        before, engine_before = _cpu(pids), _cpu(engine_pids)
        result = asyncio.run(drive(args, [s.ws_url for s in servers], servers[0].token(["*"])))
        nodes_cpu, engine_cpu = _cpu(pids) - before, _cpu(engine_pids) - engine_before
    finally:
        for server in servers:
            server.stop()
    edits = max(result["updates_sent"], 1)
    result.update(
        config=label,
        nodes=nodes,
        node_cpu_s_per_1000_edits=round(nodes_cpu * 1000 / edits, 3),
        engine_cpu_s_per_1000_edits=round(engine_cpu * 1000 / edits, 3),
    )
    return result


def run(args: argparse.Namespace) -> int:
    results = []
    with tempfile.TemporaryDirectory(prefix="tether-bench-") as tmp:
        root = Path(tmp)
        results.append(_run_config(args, root, "sqlite-1", 1, "", "", (None, None)))
        with PostgresServer() as pg, RedisServer() as redis:
            one = pg.create_database("single")
            results.append(_run_config(args, root, "postgres-1", 1, one, "", (pg, None)))
            many = pg.create_database("cluster")
            label = f"postgres-redis-{args.nodes}"
            results.append(_run_config(args, root, label, args.nodes, many, redis.url, (pg, redis)))
    text = json.dumps(
        {"editors": args.editors, "docs": args.docs, "rate": args.rate, "results": results},
        indent=2,
    )
    if args.json_out:
        Path(args.json_out).write_text(text)
    print(text)
    return 0 if not any(r["errors"] for r in results) else 1

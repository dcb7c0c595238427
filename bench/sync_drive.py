"""The sync bench's editors and what they measure: pycrdt editors (or yjs ones, ``--driver
js``) typing into a server over ``/ws``, ``/yjs`` or the HTTP fallback, the fan-out and ack
latencies they record, and the server's CPU, threads and histograms read around a run. Used by
``tether bench sync`` (``sync``), its ``--compare`` mode (``sync_compare``) and the cluster
bench (``cluster_sync``); knows nothing of how a run is reported.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import random
import shutil
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import psutil
from pycrdt import Doc, Text
from websockets.asyncio.client import ClientConnection, connect

from tether.protocol.clients.http_client import http_base_of
from tether.protocol.protocol_errors import ProtocolError
from tether.protocol.wire.lib0 import Decoder
from tether.protocol.wire.messages import (
    PONG_FRAME,
    AuthToken,
    Sync,
    decode_frame,
)
from tether.protocol.wire.messages import SyncStatus as SyncStatusMessage
from tether.protocol.wire.sync_payloads import SyncStep1, SyncStep2, SyncUpdate, read_sync_message
from tether.protocol.wire.yws_frames import YSync

from .http_link import BenchHttpLink
from .launcher import PRODUCT_AI
from .pinning import split_cpus
from .server_histograms import ACK, LOOP_LAG, Buckets, bound_ms, read_buckets

# Editors on the JS yjs library (--driver js), in the checkout this tether runs from.
JS_DRIVER = Path(__file__).resolve().parents[1] / "tests" / "js" / "bench_sync_driver.mjs"


def edit_key(update: bytes) -> tuple[int, int] | None:
    """(client, clock) of an update's first struct: the same edit however a server re-encodes
    it (y-websocket and Hocuspocus forward re-encoded updates, not the bytes they received)."""
    try:
        decoder = Decoder(update)
        if decoder.read_var_uint() == 0:
            return None
        decoder.read_var_uint()  # number of structs of the first client
        return decoder.read_var_uint(), decoder.read_var_uint()
    except ProtocolError:
        return None


class ThreadTimes(NamedTuple):
    """One server thread's counters as read at one moment."""

    name: str
    user: float  # seconds
    system: float  # seconds
    switches: int  # voluntary and involuntary context switches


@dataclass
class Recorder:
    sent_at: dict[tuple[int, int], float] = field(default_factory=dict)
    duplicates: int = 0  # the same edit delivered twice to one editor
    fanout: list[float] = field(default_factory=list)
    acks: list[float] = field(default_factory=list)
    sent: int = 0
    rejected: int = 0
    errors: list[str] = field(default_factory=list)
    # Edits typed before this (the warm-up) are not counted, nor their fan-out and acks.
    measure_from: float = 0.0


@dataclass
class Editor:
    name: str
    doc_name: str
    protocol: str
    recorder: Recorder
    transport: str = "ws"
    ws: ClientConnection | BenchHttpLink | None = None
    ydoc: Doc = field(default_factory=Doc)
    pending_acks: collections.deque[float | None] = field(default_factory=collections.deque)
    synced: asyncio.Event = field(default_factory=asyncio.Event)
    outgoing: asyncio.Queue[bytes] = field(default_factory=asyncio.Queue)
    seen: set[tuple[int, int]] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.text = self.ydoc.get("content", type=Text)
        self.channel_header = Sync(self.doc_name, SyncUpdate(b"")).encode()[: -len(b"\x02\x00")]

    async def connect(self, url: str, token: str) -> None:
        if self.protocol == "yjs":
            target = f"{url.rstrip('/')}/{self.doc_name}?token={token}"
        else:
            target = url
        if self.transport == "http":
            self.ws = await BenchHttpLink.open(http_base_of(url), token)
        else:
            self.ws = await connect(target, max_size=None, compression=None, open_timeout=30)
        if self.protocol == "tether":
            await self.ws.send(AuthToken(self.doc_name, token, "bench").encode())
            await self.ws.send(Sync(self.doc_name, SyncStep1(self.ydoc.get_state())).encode())
        else:
            await self.ws.send(YSync(SyncStep1(self.ydoc.get_state())).encode())

    def type_one(self, char: str) -> None:
        """One keystroke: a real Yjs update from this editor's own document."""
        assert self.ws is not None
        before = self.ydoc.get_state()
        self.text.insert(len(self.text), char)
        update = self.ydoc.get_update(before)
        now = time.perf_counter()
        key = edit_key(update)
        if key is not None:
            self.recorder.sent_at[key] = now
        if now >= self.recorder.measure_from:
            self.recorder.sent += 1
        if self.protocol == "tether":
            self.pending_acks.append(now)
            frame = Sync(self.doc_name, SyncUpdate(update)).encode()
        else:
            frame = YSync(SyncUpdate(update)).encode()
        self.outgoing.put_nowait(frame)

    async def write_forever(self) -> None:
        assert self.ws is not None
        try:
            while True:
                await self.ws.send(await self.outgoing.get())
        except Exception as exc:
            self.recorder.errors.append(f"{self.name}: send failed: {exc!r}")

    async def read_forever(self) -> None:
        assert self.ws is not None
        try:
            async for data in self.ws:
                if isinstance(data, bytes):
                    self._on_frame(data)
        except Exception as exc:  # the bench reports failures instead of dying
            self.recorder.errors.append(f"{self.name}: {exc!r}")

    def _on_frame(self, data: bytes) -> None:
        now = time.perf_counter()
        if self.protocol == "yjs":
            decoder = Decoder(data)
            if decoder.read_var_uint() != 0:
                return
            self._on_sync(read_sync_message(decoder), now)
            return
        message = decode_frame(data)
        if data == b"\x09":
            self.outgoing.put_nowait(PONG_FRAME)
        elif isinstance(message, Sync):
            self._on_sync(message.message, now)
        elif isinstance(message, SyncStatusMessage):
            sent = self.pending_acks.popleft() if self.pending_acks else None
            measured = sent is not None and sent >= self.recorder.measure_from
            if measured:
                self.recorder.acks.append(now - sent)
            if not message.applied and (sent is None or measured):
                self.recorder.rejected += 1

    def _on_sync(self, message: object, now: float) -> None:
        if isinstance(message, SyncUpdate):
            key = edit_key(message.update)
            sent = self.recorder.sent_at.get(key) if key is not None else None
            if (
                sent is not None
                and sent >= self.recorder.measure_from
                and key is not None
                and key[0] != self.ydoc.client_id
            ):
                if key in self.seen:
                    self.recorder.duplicates += 1
                else:
                    self.seen.add(key)
                    self.recorder.fanout.append(now - sent)
        elif isinstance(message, SyncStep2):
            self.synced.set()
        elif isinstance(message, SyncStep1):
            reply = self.ydoc.get_update(message.state_vector)
            if self.protocol == "tether":
                self.pending_acks.append(None)
                frame = Sync(self.doc_name, SyncStep2(reply)).encode()
            else:
                frame = YSync(SyncStep2(reply)).encode()
            self.outgoing.put_nowait(frame)


async def drive(
    args: argparse.Namespace, url: str, token: str, transport: str = "ws"
) -> dict[str, Any]:
    if getattr(args, "driver", "python") == "js":
        if args.protocol != "tether" or transport != "ws" or args.with_ai:
            raise SystemExit("--driver js speaks Hocuspocus frames over /ws, without --with-ai")
        return await drive_js(args, url, token)
    rng = random.Random(args.seed)
    recorder = Recorder()
    editors = [
        Editor(f"e{i}", f"bench-{i % args.docs}", args.protocol, recorder, transport)
        for i in range(args.editors)
    ]
    connect_started = time.perf_counter()
    for batch in range(0, len(editors), 50):  # connect in waves: no SYN flood on loopback
        chunk = editors[batch : batch + 50]
        await asyncio.gather(*(e.connect(url, token) for e in chunk))
    readers = [asyncio.ensure_future(e.read_forever()) for e in editors]
    readers += [asyncio.ensure_future(e.write_forever()) for e in editors]
    await asyncio.wait_for(asyncio.gather(*(e.synced.wait() for e in editors)), timeout=60)
    connect_seconds = time.perf_counter() - connect_started

    async def typist(editor: Editor) -> None:
        interval = 1.0 / args.rate
        next_at = time.perf_counter() + rng.random() * interval
        end = recorder.measure_from + args.duration
        while next_at < end:
            delay = next_at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            editor.type_one(rng.choice("abcdefghijklmnopqrstuvwxyz "))
            next_at += interval

    recorder.measure_from = time.perf_counter() + args.warmup
    typing = asyncio.gather(*(typist(e) for e in editors))
    await asyncio.sleep(max(0.0, recorder.measure_from - time.perf_counter()))  # the warm-up
    histograms_before = await _server_histograms(url)
    cpu_before = _cpu_seconds(args.server_pid)
    threads_before = _thread_times(args.server_pid)
    started = time.perf_counter()
    ai_stop = asyncio.Event()
    ai_task = asyncio.ensure_future(_ask_forever(url, token, ai_stop)) if args.with_ai else None
    await typing
    typing_seconds = time.perf_counter() - started
    ai_done = 0
    if ai_task is not None:
        ai_stop.set()
        ai_done = await ai_task
    # Let in-flight acks and fan-out arrive, bounded.
    deadline = time.perf_counter() + 10
    while time.perf_counter() < deadline and any(
        e.pending_acks for e in editors if args.protocol == "tether"
    ):
        await asyncio.sleep(0.05)
    cpu_after = _cpu_seconds(args.server_pid)
    threads_after = _thread_times(args.server_pid)
    rss = _rss_mb(args.server_pid)
    seen_by_server = server_figures(histograms_before, await _server_histograms(url))
    for e in editors:
        if e.ws is not None:
            with contextlib.suppress(Exception):
                await e.ws.close()
    for r in readers:
        r.cancel()
    expected_fanout = _expected_fanout(args) * recorder.sent // max(args.editors, 1)
    cpu = None if cpu_before is None or cpu_after is None else cpu_after - cpu_before
    return {
        "protocol": args.protocol,
        "transport": transport,
        "url": url,
        "editors": args.editors,
        "documents": args.docs,
        "rate_per_editor": args.rate,
        "duration_s": round(typing_seconds, 2),
        "connect_s": round(connect_seconds, 2),
        "updates_sent": recorder.sent,
        "updates_per_s": round(recorder.sent / typing_seconds, 1),
        "fanout_received": len(recorder.fanout),
        "fanout_expected": expected_fanout,
        "fanout_duplicates": recorder.duplicates,
        "fanout_ms": percentiles(recorder.fanout),
        "ack_ms": percentiles(recorder.acks),
        "acks_received": len(recorder.acks),
        "rejected": recorder.rejected,
        "server_cpu_s": None if cpu is None else round(cpu, 2),
        "server_cpu_s_per_1000_edits": None
        if cpu is None
        else round(cpu * 1000 / max(recorder.sent, 1), 3),
        "server_threads": thread_shares(threads_before, threads_after),
        "server_switches_per_edit": switches_per_edit(threads_before, threads_after, recorder.sent),
        "server_rss_mb": rss,
        **seen_by_server,
        "with_ai": bool(args.with_ai),
        "ai_suggestions_completed": ai_done,
        "errors": recorder.errors[:20],
        "error_count": len(recorder.errors),
    }


async def drive_js(args: argparse.Namespace, url: str, token: str) -> dict[str, Any]:
    """``drive`` with editors built on the JS ``yjs`` library (``tests/js/bench_sync_driver
    .mjs``), one node process for all of them: the server's CPU is read when their typing
    starts and once it and the acks in flight are done, as ``drive`` reads it."""
    node = shutil.which("node")
    if node is None or not (JS_DRIVER.parent.parent / "node_modules" / "yjs").is_dir():
        raise SystemExit("--driver js needs node on PATH and tests/node_modules (.ci/setup --dev)")
    config = {
        "url": url,
        "token": token,
        "editors": args.editors,
        "docs": args.docs,
        "rate": args.rate,
        "duration": args.duration,
        "warmup": args.warmup,
        "seed": args.seed,
        "acks": True,
    }
    process = await asyncio.create_subprocess_exec(
        node,
        str(JS_DRIVER),
        json.dumps(config),
        cwd=JS_DRIVER.parent,
        stdout=asyncio.subprocess.PIPE,
        limit=2**26,  # the results line holds every latency sample
    )
    assert process.stdout is not None
    cpu_before = cpu_after = rss = None
    histograms_before: dict[str, Buckets | None] = {}
    histograms_after: dict[str, Buckets | None] = {}
    threads_before: dict[int, ThreadTimes] = {}
    threads_after: dict[int, ThreadTimes] = {}
    results: dict[str, Any] = {}
    connect_started = time.perf_counter()
    connect_seconds = 0.0
    timeout = 120 + (args.warmup + args.duration) * 2
    try:
        async with asyncio.timeout(timeout):
            async for line in process.stdout:
                event = json.loads(line)
                if event["event"] == "typing":
                    connect_seconds = time.perf_counter() - connect_started
                    histograms_before = await _server_histograms(url)
                    cpu_before = _cpu_seconds(args.server_pid)
                    threads_before = _thread_times(args.server_pid)
                elif event["event"] == "typed":
                    cpu_after = _cpu_seconds(args.server_pid)
                    threads_after = _thread_times(args.server_pid)
                    rss = _rss_mb(args.server_pid)
                    histograms_after = await _server_histograms(url)
                elif event["event"] == "results":
                    results = event
            await process.wait()
    except TimeoutError:
        process.kill()
        results.setdefault("errors", []).append(f"the JS driver ran past {timeout:.0f} s")
    sent = int(results.get("sent", 0))
    typed = float(results.get("typed") or args.duration)
    errors = list(results.get("errors", []))
    cpu = None if cpu_before is None or cpu_after is None else cpu_after - cpu_before
    fanout = [ms / 1000 for ms in results.get("fanout", [])]
    acks = [ms / 1000 for ms in results.get("acks", [])]
    return {
        "protocol": "tether",
        "driver": "js",
        "transport": "ws",
        "url": url,
        "editors": args.editors,
        "documents": args.docs,
        "rate_per_editor": args.rate,
        "duration_s": round(typed, 2),
        "connect_s": round(connect_seconds, 2),
        "updates_sent": sent,
        "updates_per_s": round(sent / typed, 1) if typed else 0.0,
        "fanout_received": len(fanout),
        "fanout_expected": _expected_fanout(args) * sent // max(args.editors, 1),
        "fanout_duplicates": int(results.get("duplicates", 0)),
        "fanout_ms": percentiles(fanout),
        "ack_ms": percentiles(acks),
        "acks_received": len(acks),
        "rejected": int(results.get("rejected", 0)),
        "server_cpu_s": None if cpu is None else round(cpu, 2),
        "server_cpu_s_per_1000_edits": None if cpu is None else round(cpu * 1000 / max(sent, 1), 3),
        "server_threads": thread_shares(threads_before, threads_after),
        "server_switches_per_edit": switches_per_edit(threads_before, threads_after, sent),
        "server_rss_mb": rss,
        **server_figures(histograms_before, histograms_after),
        "with_ai": False,
        "ai_suggestions_completed": 0,
        "errors": errors[:20],
        "error_count": int(results.get("errorCount", len(errors))) + (0 if results else 1),
    }


async def _server_histograms(url: str) -> dict[str, Buckets | None]:
    """The server's own ack and loop-lag histograms; empty from a server without /metrics."""
    try:
        async with httpx.AsyncClient(base_url=http_base_of(url)) as http:
            return await read_buckets(http, ACK, LOOP_LAG)
    except httpx.HTTPError:
        return {}


def server_figures(
    before: dict[str, Buckets | None], after: dict[str, Buckets | None]
) -> dict[str, float | None]:
    """What the server itself saw over the window, as the bucket bounds (ms) its p99 and its
    worst fell under: its acks (received to durable) and its loop's lateness. Unlike the
    driver's figures, these do not move when the load generator is starved of CPU."""
    return {
        "server_ack_p99_ms": bound_ms(after.get(ACK), before.get(ACK), 0.99),
        "server_loop_lag_p99_ms": bound_ms(after.get(LOOP_LAG), before.get(LOOP_LAG), 0.99),
        "server_loop_lag_max_ms": bound_ms(after.get(LOOP_LAG), before.get(LOOP_LAG), 1.0),
    }


async def _ask_forever(url: str, token: str, stop: asyncio.Event) -> int:
    """One more editor typing and asking for suggestions back to back, a new context each time
    (so the model, not the cache, answers); returns how many completed."""
    from tether.client import TetherClient
    from tether.protocol.wire.ai_messages import Suggest

    completed = 0
    async with TetherClient(url, token=token) as client:
        doc = await client.open("bench-ai-load")
        doc.append("The harbour was quiet in the evening, and the boats")
        await doc.wait_acked()
        while not stop.is_set():
            request_id = f"load-{completed}"
            doc.append(f" and {completed}")  # a new context each time, or the cache answers
            size = len(str(doc.text).encode("utf-16-le")) // 2
            doc.send_stateless(Suggest(request_id, "complete", pos=size, max_tokens=24).encode())
            while True:
                message = json.loads(await asyncio.wait_for(doc.stateless.get(), 60))
                if message.get("type") in ("suggestion.end", "suggestion.error"):
                    break
            completed += 1
    return completed


def _expected_fanout(args: argparse.Namespace) -> int:
    per_doc = args.editors / args.docs
    return int(args.editors * (per_doc - 1))


def percentiles(samples: list[float]) -> dict[str, float | None]:
    if not samples:
        return {"p50": None, "p99": None, "n": 0}
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return {
        "p50": round(statistics.median(ordered) * 1000, 3),
        "p99": round(p99 * 1000, 3),
        "n": len(ordered),
    }


def _thread_times(pid: int | None) -> dict[int, ThreadTimes]:
    """Each server thread's name, user and system seconds and context switches; the main
    thread, which runs the event loop, is named so. Empty when the process cannot be read."""
    if pid is None:
        return {}
    try:
        threads = psutil.Process(pid).threads()
    except psutil.Error:
        return {}
    times = {}
    for thread in threads:
        name = "event loop" if thread.id == pid else _thread_name(pid, thread.id)
        times[thread.id] = ThreadTimes(
            name, thread.user_time, thread.system_time, _thread_switches(pid, thread.id)
        )
    return times


def _thread_switches(pid: int, tid: int) -> int:
    """Voluntary and involuntary context switches of one thread (Linux; 0 elsewhere). Each is
    a hand-off through the scheduler: a thread waking another (the loop and the SQLite writer,
    the GIL between them) pays for it in CPU that no Python profile shows."""
    try:
        status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
    except OSError:
        return 0
    return sum(
        int(line.split()[1])
        for line in status.splitlines()
        if line.startswith(("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:"))
    )


def _thread_name(pid: int, tid: int) -> str:
    try:
        return Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip() or str(tid)
    except OSError:
        return str(tid)


def _thread_deltas(
    before: dict[int, ThreadTimes], after: dict[int, ThreadTimes]
) -> list[ThreadTimes]:
    """Each thread's counters over the run (a thread started meanwhile counts from zero)."""
    deltas = []
    for tid, now in after.items():
        then = before.get(tid, ThreadTimes(now.name, 0.0, 0.0, 0))
        deltas.append(
            ThreadTimes(
                now.name,
                now.user - then.user,
                now.system - then.system,
                now.switches - then.switches,
            )
        )
    return deltas


def thread_shares(
    before: dict[int, ThreadTimes], after: dict[int, ThreadTimes]
) -> list[dict[str, Any]]:
    """The server's CPU over the run by thread, busiest first (the four busiest): where the
    per-edit cost goes, e.g. the event loop against the SQLite writer's commits."""
    rows = _thread_deltas(before, after)
    total = sum(row.user + row.system for row in rows) or 1.0
    rows.sort(key=lambda row: row.user + row.system, reverse=True)
    return [
        {
            "thread": row.name,
            "cpu_s": round(row.user + row.system, 2),
            "user_s": round(row.user, 2),
            "system_s": round(row.system, 2),
            "share": round((row.user + row.system) / total, 3),
            "switches": row.switches,
        }
        for row in rows[:4]
    ]


def switches_per_edit(
    before: dict[int, ThreadTimes], after: dict[int, ThreadTimes], edits: int
) -> float | None:
    """Context switches of all the server's threads over the run, per edit (None if unread)."""
    if not after or edits <= 0:
        return None
    return round(sum(row.switches for row in _thread_deltas(before, after)) / edits, 2)


def _cpu_seconds(pid: int | None) -> float | None:
    if pid is None:
        return None
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return None
    return float(times.user + times.system)


def _rss_mb(pid: int | None) -> float | None:
    if pid is None:
        return None
    try:
        return round(psutil.Process(pid).memory_info().rss / 2**20, 1)
    except psutil.Error:
        return None


def ai_settings(with_ai: bool, pin: bool) -> dict[str, object]:
    """The server's AI flags for a run: off, or the embedded model as shipped, except that each
    suggestion runs to the request's 24 tokens (``--ai-stop tokens``): under the default sure
    rule most stop after a word, and the load would be prompts more than decoding."""
    if not with_ai:
        return {"ai_provider": "none"}
    ai: dict[str, object] = {"ai_provider": "local", **PRODUCT_AI, "ai_stop": "tokens"}
    if pin:
        # The model on the driver's CPUs, not the server's: how a deployment with the cores
        # for it partitions them (--ai-cpus).
        ai["ai_cpus"] = ",".join(str(cpu) for cpu in sorted(split_cpus()[1]))
    return ai

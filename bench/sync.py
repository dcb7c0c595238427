"""``tether bench sync``: N simulated editors over M documents typing at R chars/s for T seconds.

Reports fan-out latency (an editor's send until another editor receives the edit), ack latency
(send until the durable SyncStatus; tether protocol only), updates/s, and the server's CPU and
RSS. Speaks the multiplexed protocol (tether, Hocuspocus) or the plain y-websocket protocol
(``--protocol yjs --url ws://host:port/prefix``), so one driver measures every server. All
traffic goes to the URL given, normally 127.0.0.1. A benchmark, not a test.

``--transport http`` runs the same load twice, over ``/ws`` and then over the HTTP fallback
(the same frames over POSTs and an event stream, ``protocol.clients.http_client``), each
against a fresh server, and reports them side by side.

``--compare hocuspocus,PATH --reps N`` runs the same load against this checkout, Hocuspocus and
other checkouts, a fresh server per rep, in turn, and reports medians and ratios
(``bench.sync_compare``). The editors and what they measure are in ``bench.sync_drive``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

from .launcher import ServerProcess
from .pinning import pinned
from .sync_compare import plot, run_compare
from .sync_drive import ai_settings, drive


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--editors", type=int, default=50)
    parser.add_argument("--docs", type=int, default=1)
    parser.add_argument("--rate", type=float, default=5.0, help="chars/s per editor")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of typing")
    parser.add_argument(
        "--warmup",
        type=float,
        default=0.0,
        help="seconds of typing before the measured window, not counted: a long-running server"
        " measured warm (Hocuspocus's JIT spends ~0.4 s of CPU early on, inside a 10 s window)",
    )
    parser.add_argument("--protocol", choices=["tether", "yjs"], default="tether")
    parser.add_argument(
        "--driver",
        choices=["python", "js"],
        default="python",
        help="js: editors built on the yjs npm library (as browsers run), each on its own"
        " socket speaking Hocuspocus frames (tests/js/bench_sync_driver.mjs; needs node and"
        " tests/node_modules); python: pycrdt editors",
    )
    parser.add_argument(
        "--transport",
        choices=["ws", "http"],
        default="ws",
        help="http: run over /ws and over the HTTP fallback, one after the other, side by side",
    )
    parser.add_argument(
        "--url",
        default=None,
        help="server to drive (ws://.../ws for tether, ws://.../yjs for yjs);"
        " default: start a tether server on a free loopback port",
    )
    parser.add_argument("--token", default="", help="token to send (default: minted)")
    parser.add_argument("--server-pid", type=int, default=None, help="measure this process")
    parser.add_argument("--json", dest="json_out", default=None, help="write results here")
    parser.add_argument(
        "--compare",
        default=None,
        metavar="TARGETS",
        help="comma-separated: 'hocuspocus', 'hocuspocus-sqlite' (persisting with its SQLite"
        " extension), 'with-ai' (this checkout with its model decoding nonstop: the ratios"
        " are with-ai/this) and/or paths of other tether checkouts (git worktrees); each rep"
        " starts a fresh server per target, this checkout's included, in turn, and reports medians"
        " and this checkout's ratios (bench.sync_compare)",
    )
    parser.add_argument("--reps", type=int, default=4, help="reps per target with --compare")
    parser.add_argument("--png", dest="png_out", default=None, help="--compare: plot here")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--pin",
        action="store_true",
        help="the server it starts on the last CPU, the driver on the others"
        " (bench.pinning): the load generator stops stealing the server's CPU",
    )
    parser.add_argument(
        "--with-ai",
        action="store_true",
        help="run the embedded model and keep one editor asking for suggestions meanwhile"
        " (isolation: the sync path must not wait on the AI)",
    )


def run(args: argparse.Namespace) -> int:
    if args.compare is not None:
        result = run_compare(args)
        if args.png_out:
            plot(result, args.png_out)
    elif args.transport == "http":
        if args.protocol != "tether":
            raise SystemExit("--transport http carries the tether protocol only")
        result = _side_by_side(args)
    elif args.url is not None:
        result = asyncio.run(drive(args, args.url, args.token))
    else:
        result = _run_against_own_server(args)
    _report(result, args.json_out)
    return 0 if not result["error_count"] else 1


def _side_by_side(args: argparse.Namespace) -> dict[str, Any]:
    """The same load over /ws and over the HTTP fallback (a fresh server each, unless --url)."""
    runs = {}
    for transport in ("ws", "http"):
        if args.url is not None:
            runs[transport] = asyncio.run(drive(args, args.url, args.token, transport))
        else:
            runs[transport] = _run_against_own_server(args, transport)
    keys = ("fanout_ms", "ack_ms", "server_cpu_s_per_1000_edits", "updates_per_s", "server_rss_mb")
    return {
        "side_by_side": {key: {t: runs[t][key] for t in runs} for key in keys},
        **runs,
        "error_count": sum(run["error_count"] for run in runs.values()),
    }


def _run_against_own_server(args: argparse.Namespace, transport: str = "ws") -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as data_dir:
        ai = ai_settings(args.with_ai, args.pin)
        # Every editor is a socket from 127.0.0.1: lift the per-address limit for this run.
        proc = ServerProcess(
            Path(data_dir),
            send_queue_frames=8192,
            max_connections_per_address=args.editors + 16,
            http_sessions_per_address=args.editors + 16,
            **ai,
        )
        with proc:
            assert proc.proc is not None
            if args.with_ai:
                proc.wait_embedder()
            args.server_pid = proc.proc.pid
            token = args.token or proc.token(["*"])
            url = proc.ws_url if args.protocol == "tether" else proc.yjs_url
            with pinned(proc.proc.pid, args.pin):
                return asyncio.run(drive(args, url, token, transport))


def _report(result: dict[str, Any], json_out: str | None) -> None:
    text = json.dumps(result, indent=2)
    if json_out:
        Path(json_out).write_text(text)
    print(text)

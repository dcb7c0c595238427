"""``tether bench sync --compare hocuspocus,PATH --reps N``: the same load against several
servers, side by side in one run, so that ratios survive a noisy machine.

Targets: this checkout's tether (always, first), ``hocuspocus`` (``tests/js/hocuspocus_server.mjs``
on Node), ``hocuspocus-sqlite`` (the same with Hocuspocus's SQLite extension: a peer that
persists, debounced), ``with-ai`` (this checkout again, its embedded model decoding nonstop
for one editor who asks for a suggestion after each answer, the python driver's: how much sync
pays for AI load, reported as ``with-ai/this``), and any other tether checkout given by path (a
git worktree of an older commit: the "before" build; its own code runs, from its directory).
Each rep starts a fresh server per target, drives it with ``bench.sync_drive.drive`` and stops
it; the targets take turns, in an order that rotates each rep, so drift in the machine's load
spreads over all of them. Reported: per target the median over reps of server CPU s per 1000
edits, fan-out and ack p50/p99, and this checkout's ratio to each other target; every rep's
figures too. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .hocuspocus import HocuspocusProcess
from .launcher import REPO, ServerProcess
from .pinning import pinned
from .sync_drive import ai_settings, drive

HOCUSPOCUS = "hocuspocus"
HOCUSPOCUS_SQLITE = "hocuspocus-sqlite"
WITH_AI = "with-ai"

# Figures compared, as (name in the summary, how to read it from one drive's result).
_FIGURES: dict[str, tuple[str, str | None]] = {
    "cpu_s_per_1000_edits": ("server_cpu_s_per_1000_edits", None),
    "fanout_p50_ms": ("fanout_ms", "p50"),
    "fanout_p99_ms": ("fanout_ms", "p99"),
    "ack_p50_ms": ("ack_ms", "p50"),
    "ack_p99_ms": ("ack_ms", "p99"),
    # What tether saw itself (bucket bounds, ms; none from Hocuspocus): the driver's figures
    # move when it is starved of CPU, these only when the server is late.
    "server_ack_p99_ms": ("server_ack_p99_ms", None),
    "server_loop_lag_p99_ms": ("server_loop_lag_p99_ms", None),
    "server_loop_lag_max_ms": ("server_loop_lag_max_ms", None),
    # Context switches of every server thread per edit (Hocuspocus's too): the hand-offs between
    # threads cost CPU that no profile of Python code shows.
    "switches_per_edit": ("server_switches_per_edit", None),
}


@dataclass(frozen=True)
class Target:
    label: str
    repo: Path | None  # None: Hocuspocus
    durable: bool = False  # Hocuspocus with its SQLite extension
    with_ai: bool = False  # this checkout with its model decoding nonstop beside the load


def parse_targets(compare: str) -> list[Target]:
    """This checkout first, then each comma-separated ``hocuspocus``, ``with-ai`` or checkout
    path."""
    targets = [Target("this", REPO)]
    for raw in (part.strip() for part in compare.split(",")):
        if not raw:
            continue
        if raw == WITH_AI:
            targets.append(Target(WITH_AI, REPO, with_ai=True))
            continue
        if raw in (HOCUSPOCUS, HOCUSPOCUS_SQLITE):
            targets.append(Target(raw, None, durable=raw == HOCUSPOCUS_SQLITE))
            continue
        repo = Path(raw).expanduser().resolve()
        if not (repo / "collab" / "cli.py").is_file():
            raise SystemExit(
                f"--compare: {raw} is neither 'hocuspocus', 'hocuspocus-sqlite', 'with-ai' nor"
                " a tether checkout"
            )
        targets.append(Target(repo.name, repo))
    labels = [t.label for t in targets]
    if len(set(labels)) != len(labels):
        raise SystemExit(f"--compare: two targets share a name: {labels}")
    return targets


def run_compare(args: argparse.Namespace) -> dict[str, Any]:
    if args.protocol != "tether" or args.transport != "ws" or args.url is not None:
        raise SystemExit("--compare drives servers it starts itself, over /ws (tether protocol)")
    targets = parse_targets(args.compare)
    if args.with_ai:
        raise SystemExit("--compare with-ai runs with and without AI; drop --with-ai")
    if any(t.with_ai for t in targets) and getattr(args, "driver", "python") != "python":
        raise SystemExit(
            "--compare with-ai: the editor asking for suggestions is the python driver's"
        )
    runs: dict[str, list[dict[str, Any]]] = {t.label: [] for t in targets}
    for rep in range(args.reps):
        shift = rep % len(targets)
        for target in targets[shift:] + targets[:shift]:
            result = _run_one(args, target)
            runs[target.label].append(result)
            print(
                f"rep {rep + 1}/{args.reps} {target.label}: "
                f"{result['server_cpu_s_per_1000_edits']} CPU s/1000 edits, fan-out p50/p99"
                f" {result['fanout_ms']['p50']}/{result['fanout_ms']['p99']} ms,"
                f" ack p50/p99 {result['ack_ms']['p50']}/{result['ack_ms']['p99']} ms,"
                f" {result.get('server_switches_per_edit')} context switches/edit",
                flush=True,
            )
    return summarise(args, targets, runs)


def _run_one(args: argparse.Namespace, target: Target) -> dict[str, Any]:
    own = copy.copy(args)
    if target.repo is None:
        with HocuspocusProcess(durable=target.durable) as hocuspocus:
            assert hocuspocus.proc is not None
            own.server_pid = hocuspocus.proc.pid
            with pinned(own.server_pid, args.pin):
                return asyncio.run(drive(own, hocuspocus.ws_url, "bench"))
    own.with_ai = target.with_ai
    with tempfile.TemporaryDirectory() as data_dir:
        proc = ServerProcess(
            Path(data_dir),
            repo=target.repo,
            send_queue_frames=8192,  # as a plain ``tether bench sync`` run
            max_connections_per_address=args.editors + 16,
            http_sessions_per_address=args.editors + 16,
            **ai_settings(target.with_ai, args.pin),
        )
        with proc:
            assert proc.proc is not None
            if target.with_ai:
                proc.wait_embedder()
            own.server_pid = proc.proc.pid
            with pinned(own.server_pid, args.pin):
                return asyncio.run(drive(own, proc.ws_url, args.token or proc.token(["*"])))


def _figure(result: dict[str, Any], key: str, sub: str | None) -> float | None:
    value = result.get(key)
    if sub is not None:
        value = value.get(sub) if isinstance(value, dict) else None
    return None if value is None else float(value)


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 3) if present else None


def _ratio(top: float | None, bottom: float | None) -> float | None:
    return None if top is None or not bottom else round(top / bottom, 3)


def summarise(
    args: argparse.Namespace, targets: list[Target], runs: dict[str, list[dict[str, Any]]]
) -> dict[str, Any]:
    medians: dict[str, dict[str, float | None]] = {}
    for target in targets:
        reps = runs[target.label]
        medians[target.label] = {
            name: _median([_figure(r, key, sub) for r in reps])
            for name, (key, sub) in _FIGURES.items()
        }
        medians[target.label]["updates_sent"] = _median([r["updates_sent"] for r in reps])
        if target.with_ai:
            medians[target.label]["ai_suggestions_completed"] = _median(
                [r["ai_suggestions_completed"] for r in reps]
            )
    ratios: dict[str, dict[str, float | None]] = {}
    this = medians["this"]
    for target in targets[1:]:
        other = medians[target.label]
        # With AI, what sync pays for it: the loaded run over the quiet one.
        top, bottom = (other, this) if target.with_ai else (this, other)
        label = f"{target.label}/this" if target.with_ai else f"this/{target.label}"
        ratios[label] = {name: _ratio(top[name], bottom[name]) for name in _FIGURES}
    return {
        "settings": {
            "editors": args.editors,
            "documents": args.docs,
            "rate_per_editor": args.rate,
            "duration_s": args.duration,
            "warmup_s": args.warmup,
            "reps": args.reps,
            "pinned": args.pin,
            "driver": getattr(args, "driver", "python"),
            "targets": {t.label: str(t.repo) if t.repo else t.label for t in targets},
        },
        "medians": medians,
        "ratios": ratios,
        "reps": {
            label: [
                {name: _figure(r, key, sub) for name, (key, sub) in _FIGURES.items()}
                | {"updates_sent": r["updates_sent"], "errors": r["error_count"]}
                for r in reps
            ]
            for label, reps in runs.items()
        },
        "error_count": sum(r["error_count"] for reps in runs.values() for r in reps),
        "errors": [e for reps in runs.values() for r in reps for e in r["errors"]][:20],
    }


def plot(summary: dict[str, Any], png_out: str) -> None:
    """Each target's CPU per 1000 edits and fan-out p99, every rep as a dot, the median as a bar."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no PNG (pip install 'tether[bench]')")
        return
    labels = list(summary["reps"])
    panels = [
        ("cpu_s_per_1000_edits", "server CPU s per 1000 edits"),
        ("fanout_p99_ms", "fan-out p99 (ms)"),
        ("ack_p99_ms", "ack p99 (ms)"),
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(13, 4))
    for ax, (name, title) in zip(axes, panels, strict=True):
        for x, label in enumerate(labels):
            values = [r[name] for r in summary["reps"][label] if r[name] is not None]
            median = summary["medians"][label][name]
            if median is not None:
                ax.bar(x, median, color="#9ecae1", width=0.6)
            ax.plot([x] * len(values), values, "o", color="#08519c", markersize=4)
        ax.set_xticks(range(len(labels)), labels)
        ax.set_title(title)
        ax.grid(True, axis="y", alpha=0.3)
    s = summary["settings"]
    fig.suptitle(
        f"{s['editors']} editors, {s['documents']} document(s),"
        f" {s['rate_per_editor']} edits/s each, {s['reps']} reps (bars: medians)"
    )
    fig.tight_layout()
    fig.savefig(png_out, dpi=110)
    plt.close(fig)

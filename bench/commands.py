"""``tether bench NAME`` and ``tether cluster``: the one table of benchmarks (name, module, help)
that builds their parsers and runs them. The ``tether`` command (``collab/cli.py``) hands these
two commands here; the server never imports this package.

Each benchmark's module defines ``add_arguments(parser)`` and ``run(args) -> int``; only the
module of the benchmark named on the command line is imported.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType

# What the bench extra adds to the server's dependencies (pyproject.toml's [bench]).
INSTALL_EXTRA = "pip install 'tether[bench]'"


@dataclass(frozen=True, slots=True)
class Benchmark:
    name: str  # tether bench NAME
    module: str  # bench/MODULE.py: add_arguments(parser), run(args) -> int
    help: str
    draws: bool = False  # always ends with a matplotlib figure (the bench extra)


# In the order tether bench --help lists them.
BENCHMARKS = (
    Benchmark("sync", "sync", "sync fan-out and ack latency"),
    Benchmark("ai", "ai", "suggestion latency: socket vs HTTP"),
    Benchmark("model", "model", "llama.cpp prompt and decode speed, build against build"),
    Benchmark(
        "startup",
        "startup",
        "time from tether serve to the first acknowledged edit, and to AI ready",
    ),
    Benchmark(
        "worker",
        "worker_hop",
        "what the process hop to the model worker adds to time-to-first-token",
    ),
    Benchmark(
        "cluster",
        "cluster_sync",
        "sync latency and CPU: 1 node SQLite, 1 node PostgreSQL, N nodes + Redis",
    ),
    Benchmark(
        "bigdoc",
        "bigdoc",
        "server CPU per MB appended as one document grows (cost must not grow)",
        draws=True,
    ),
    Benchmark(
        "storm",
        "storm",
        "rounds of clients that connect, sync, edit once and vanish: RSS must come back",
        draws=True,
    ),
    Benchmark(
        "idle",
        "idle",
        "memory per idle connection, and fan-out latency while thousands idle",
        draws=True,
    ),
    Benchmark(
        "reconnect",
        "reconnect",
        "an editor reconnects with a burst of offline edits: does everyone stall?",
    ),
    Benchmark(
        "shapes",
        "shapes",
        "what one adversarial update costs on the receive and load paths, as N grows",
    ),
    Benchmark(
        "attacks",
        "attacks",
        "what each hostile input costs everyone else (loop lag, bystanders, RSS), checkout"
        " against checkout: the update, flood and slow-client shapes, and the rich-text,"
        " Markdown, AI and model-server ones",
    ),
    Benchmark(
        "quality",
        "quality",
        "suggestion quality per prompt, stopping rule and model, against TTFT",
    ),
    Benchmark(
        "rich-ai",
        "rich_ai",
        "time to first token on a rich (Tiptap) document vs the same text as plain",
    ),
    Benchmark(
        "rewrites",
        "rewrites",
        "how many rewrites drop numbers, dates, names... and how many are flagged",
    ),
)
_BY_NAME = {benchmark.name: benchmark for benchmark in BENCHMARKS}
_CLUSTER = "cluster_launch"  # tether cluster: the local trial of several nodes


def add_commands(
    cluster: argparse.ArgumentParser, bench: argparse.ArgumentParser, words: Sequence[str]
) -> None:
    """Fill in ``tether cluster`` and ``tether bench``: every benchmark is listed with its help,
    and the one ``words`` (the command line) names gets its flags."""
    if "cluster" in words:
        _module(_CLUSTER).add_arguments(cluster)
    kinds = bench.add_subparsers(dest="bench", required=True)
    chosen = _chosen(words)
    for benchmark in BENCHMARKS:
        parser = kinds.add_parser(benchmark.name, help=benchmark.help)
        if benchmark is chosen:
            _module(benchmark.module).add_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Run the parsed ``tether cluster`` or ``tether bench NAME``."""
    if args.command == "cluster":
        return int(_module(_CLUSTER).run(args))
    benchmark = _BY_NAME[args.bench]
    if benchmark.draws and importlib.util.find_spec("matplotlib") is None:
        print(
            f"tether bench {benchmark.name} draws its figure with matplotlib, which is not"
            f" installed: {INSTALL_EXTRA}",
            file=sys.stderr,
        )
        return 2
    return int(_module(benchmark.module).run(args))


def _chosen(words: Sequence[str]) -> Benchmark | None:
    """The benchmark after ``bench`` on the command line (``bench`` takes no flag of its own
    that has a value, so it is the first table name there)."""
    after = list(words)[list(words).index("bench") + 1 :] if "bench" in words else []
    return next((_BY_NAME[word] for word in after if word in _BY_NAME), None)


def _module(name: str) -> ModuleType:
    return importlib.import_module(f"{__package__}.{name}")

"""``tether bench attacks [--compare PATH,...]``: how long one peer's attack stalls the server
(issue 26), measured from outside so that the same run times an old checkout ("before") and a
new one ("after") side by side.

For each attack (``bench.attack_kinds``: issue 26's findings 1, 2, 3, 5 and 7, and issue
37's rich-text, Markdown, AI and model-server shapes) and each checkout, a fresh ``tether serve``
from that checkout's directory gets the attack's setup (and, first, what the attack starts
around it: model servers of the bench's own, a webhook receiver; settings a checkout's
``serve --help`` does not list are left out for it, and named in its row); then two
bystanders start (``bench.stall_probes``): ``GET /health`` on a kept-alive connection and
an editor typing on a document of its own, each one request every ``--interval`` seconds,
awaiting its answer; the attack is sent and waited for (at most ``--timeout`` seconds), and the
bystanders run on for ``--tail`` seconds (6: past the unload grace, so that unloading the
attacked document counts too). Reported per attack and checkout: the attack's bytes,
its wall time and outcome, /health latency p50/p99/max, the bystander's ack p99/max (all in
ms, over the requests answered after the attack began; ``>`` marks one still unanswered when
the probes stopped), the loop lag the server saw itself (``tether_event_loop_lag_seconds``
and its watchdog's log line; "-" where the checkout has neither) and how many turns its
watchdog logged as held past 250 ms, the server's resident memory in MiB (before the strike,
then its peak and what stayed resident at the end of the tail, both as growth over before:
``bench.server_memory``), and what the strike measured itself (a victim's time to
first token, a reader's GET: its ``figures``), before the outcome.

Each server starts with a soft open-file limit of ``--server-open-files`` (1024, many systems'
default; a checkout may raise its own), as the slow-headers finding was found under. All
traffic stays on 127.0.0.1 (and 127.0.0.2 for a second client). A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .attack_kinds import Attack, build_attacks
from .launcher import REPO, ServerProcess
from .server_memory import MemoryWatch
from .stall_probes import BYSTANDER_DOC, Bystanders, Latencies, ServerLag

_WARM_UP_S = 0.5  # the bystanders' first requests, before the attack: connections made
_OUTCOME_CHARS = 100  # in the table; the JSON has all of it
_FLAG = re.compile(r"--([a-z0-9][a-z0-9-]*)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--compare",
        default="",
        metavar="PATH[,PATH...]",
        help="tether checkouts to attack side by side (default: this one)",
    )
    parser.add_argument("--attacks", default="", help="comma-separated names (default: all)")
    parser.add_argument("--scale", type=float, default=1.0, help="sizes times this (0.1: quick)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per attack")
    parser.add_argument("--interval", type=float, default=0.01, help="seconds between probes")
    parser.add_argument(
        "--tail",
        type=float,
        default=6.0,
        help="seconds of probing after the attack: past the 5 s unload grace, so the attacked"
        " document's unload (and fold) falls inside",
    )
    parser.add_argument("--server-open-files", type=int, default=1024, help="0: as ours")
    parser.add_argument("--json", dest="json_out", default=None, help="write the rows here")


@dataclass(frozen=True)
class Target:
    label: str  # the checkout's commit, "-dirty" with uncommitted changes
    repo: Path


def parse_targets(compare: str) -> list[Target]:
    paths = [Path(p.strip()).expanduser().resolve() for p in compare.split(",") if p.strip()]
    targets: list[Target] = []
    for repo in paths or [REPO]:
        if not (repo / "collab" / "cli.py").is_file():
            raise SystemExit(f"--compare: {repo} is not a tether checkout")
        label = _commit_of(repo)
        if any(t.label == label for t in targets):
            label = f"{label}({repo.name})"
        targets.append(Target(label, repo))
    return targets


def _commit_of(repo: Path) -> str:
    try:
        done = subprocess.run(
            ["git", "-C", str(repo), "describe", "--always", "--dirty", "--abbrev=7"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return repo.name
    return done.stdout.strip() or repo.name


def run(args: argparse.Namespace) -> int:
    targets = parse_targets(args.compare)
    attacks = build_attacks(args.scale)
    if args.attacks:
        wanted = set(args.attacks.split(","))
        unknown = wanted - {a.name for a in attacks}
        if unknown:
            raise SystemExit(f"--attacks: unknown {sorted(unknown)}; {[a.name for a in attacks]}")
        attacks = [a for a in attacks if a.name in wanted]
    print(
        f"scale {args.scale}, timeout {args.timeout:.0f} s, probes every"
        f" {args.interval * 1000:.0f} ms, servers' open-file limit"
        f" {args.server_open_files or 'inherited'}; "
        + ", ".join(f"{t.label} = {t.repo}" for t in targets),
        flush=True,
    )
    rows: list[dict[str, Any]] = []
    print(HEADER, flush=True)
    for attack in attacks:
        for target in targets:
            row = asyncio.run(_measure(attack, target, args))
            rows.append(row)
            print(line(row), flush=True)
    print("\n" + HEADER)
    print("\n".join(line(row) for row in rows))
    if args.json_out:
        settings = {k: v for k, v in vars(args).items() if k not in ("command", "bench")}
        targets_out = {t.label: str(t.repo) for t in targets}
        report = {"settings": settings, "targets": targets_out, "rows": rows}
        Path(args.json_out).write_text(json.dumps(report, indent=1))
    return 0


class _Server(ServerProcess):
    """A server started (and restarted) with a soft open-file limit of its own."""

    def __init__(self, data_dir: Path, *, open_files: int, **kwargs: Any) -> None:
        super().__init__(data_dir, **kwargs)
        self.open_files = open_files

    def start(self, timeout: float = 20.0, *, wait_ai: bool = True) -> ServerProcess:
        with _soft_file_limit(self.open_files):
            return super().start(timeout, wait_ai=wait_ai)


@contextlib.contextmanager
def _soft_file_limit(limit: int) -> Iterator[None]:
    """Ours while a child starts (it inherits it), then ours again: this process holds
    thousands of sockets in the slow-headers attack."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if not limit or (hard != resource.RLIM_INFINITY and limit > hard):
        yield
        return
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@functools.cache
def serve_settings(repo: Path) -> frozenset[str]:
    """The settings ``tether serve`` of the checkout at ``repo`` takes (its flags, as
    ``TETHER_*`` names' lower-case tails): an older checkout lacks the newer ones."""
    done = subprocess.run(
        [sys.executable, "-m", "tether.collab.cli", "serve", "--help"],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return frozenset(flag.replace("-", "_") for flag in _FLAG.findall(done.stdout))


async def _measure(attack: Attack, target: Target, args: argparse.Namespace) -> dict[str, Any]:
    row: dict[str, Any] = {
        "attack": attack.name,
        "issue": attack.issue,
        "finding": attack.finding,
        "target": target.label,
        "bytes": attack.payload_bytes,
    }
    with tempfile.TemporaryDirectory(prefix="tether-attacks-") as data_dir:
        async with contextlib.AsyncExitStack() as around:
            server = _Server(Path(data_dir), repo=target.repo, open_files=args.server_open_files)
            try:
                settings: dict[str, object] = {}
                if attack.surroundings is not None:
                    made = attack.surroundings(Path(data_dir))
                    settings = await around.enter_async_context(made)
                known = await asyncio.to_thread(serve_settings, target.repo)
                server.settings = {k: v for k, v in settings.items() if k in known}
                if len(server.settings) < len(settings):
                    row["settings_left_out"] = sorted(set(settings) - known)
                await asyncio.to_thread(server.start)
                row.update(await _attacked(attack, server, args))
            except Exception as exc:
                row["failed"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:100]
                row["server_log"] = server.log()[-2000:]
            finally:
                await asyncio.to_thread(server.stop)
    return row


async def _attacked(
    attack: Attack, server: ServerProcess, args: argparse.Namespace
) -> dict[str, Any]:
    token = server.token([BYSTANDER_DOC])
    assert server.proc is not None
    async with attack.prepared(server, args.timeout) as strike:
        bystanders = Bystanders(
            server.http_url, server.ws_url, token, interval=args.interval, timeout=args.timeout
        )
        async with bystanders:
            lag = ServerLag(server.log_path)
            await lag.open(bystanders.http)
            await asyncio.sleep(_WARM_UP_S)
            memory = MemoryWatch(server.proc.pid)
            memory.start()
            began = time.perf_counter()
            try:
                outcome = await asyncio.wait_for(strike(), args.timeout)
            except TimeoutError:
                outcome = f"> {args.timeout:.0f} s timeout"
            except Exception as exc:  # the strike's own client failed: the row still counts
                outcome = f"strike failed: {type(exc).__name__}: {exc}".splitlines()[0]
            wall = time.perf_counter() - began
            await asyncio.sleep(args.tail)
            rss = memory.stop()
            assert bystanders.health is not None and bystanders.acks is not None
            health = bystanders.health.since(began)
            acks = bystanders.acks.since(began)
            server_lag = await lag.worst_ms(bystanders.http)
    return {
        "wall_s": round(wall, 3),
        "outcome": outcome,
        "health_ms": _fields(health),
        "ack_ms": _fields(acks),
        "server_lag_ms": server_lag,
        "stalls_logged": lag.logged_count(),
        "rss_mb": rss.as_dict(),
        "figures": dict(getattr(strike, "figures", {})),
    }


def _fields(latencies: Latencies) -> dict[str, Any]:
    return {
        "count": latencies.count,
        "p50": _round(latencies.p50),
        "p99": _round(latencies.p99),
        "max": _round(latencies.max),
        "unfinished": latencies.unfinished,
        "errors": latencies.errors,
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


HEADER = (
    f"{'attack':<23}{'checkout':<15}{'bytes':>10}{'wall s':>8}"
    f"{'/health ms p50':>15}{'p99':>8}{'max':>9}{'ack ms p99':>12}{'max':>9}"
    f"{'srv lag':>9}{'>250':>5}{'RSS MB':>8}{'+peak':>7}{'+after':>7}  figures; outcome"
)


def line(row: dict[str, Any]) -> str:
    start = f"{row['attack']:<23}{row['target']:<15}{row['bytes']:>10}"
    if row.get("failed"):
        return f"{start}  failed: {row['failed']}"
    health, acks = row["health_ms"], row["ack_ms"]
    rss = row.get("rss_mb") or {}
    figures = _figures(row.get("figures") or {})
    return (
        f"{start}{row['wall_s']:>8.2f}{_ms(health['p50']):>15}{_ms(health['p99']):>8}"
        f"{_worst(health):>9}{_ms(acks['p99']):>12}{_worst(acks):>9}"
        f"{row['server_lag_ms']:>9}{row.get('stalls_logged', '-'):>5}"
        f"{_mb(rss.get('before')):>8}{_growth(rss, 'peak'):>7}{_growth(rss, 'after'):>7}"
        f"  {figures}{row['outcome'][:_OUTCOME_CHARS]}{_errors(health, acks)}"
        f"{_left_out(row)}"
    )


def _left_out(row: dict[str, Any]) -> str:
    left_out = row.get("settings_left_out")
    return f" (settings this checkout lacks, left out: {', '.join(left_out)})" if left_out else ""


def _mb(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _growth(rss: dict[str, float | None], key: str) -> str:
    before, value = rss.get("before"), rss.get(key)
    return "-" if before is None or value is None else f"{value - before:+.0f}"


def _figures(figures: dict[str, Any]) -> str:
    """``name=value`` each (a p50/max pair as ``p50/max``), then ``; `` before the outcome."""
    parts = []
    for name, value in figures.items():
        if isinstance(value, dict):
            value = f"{_ms(value.get('p50'))}/{_ms(value.get('max'))}"
        elif isinstance(value, float):
            value = _ms(value)
        parts.append(f"{name}={value}")
    return "; ".join(parts) + "; " if parts else ""


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"


def _worst(latencies: dict[str, Any]) -> str:
    return (">" if latencies["unfinished"] else "") + _ms(latencies["max"])


def _errors(health: dict[str, Any], acks: dict[str, Any]) -> str:
    counts = (("/health", health["errors"]), ("acks", acks["errors"]))
    failed = [f"{n} {what} failed" for what, n in counts if n]
    return f" ({', '.join(failed)})" if failed else ""


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tether.bench.attacks")
    add_arguments(parser)
    return run(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())

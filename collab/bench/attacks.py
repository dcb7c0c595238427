"""``tether bench attacks [--compare PATH,...]``: how long one peer's attack stalls the server
(issue 26), measured from outside so that the same run times an old checkout ("before") and a
new one ("after") side by side.

For each attack (``collab.bench.attack_kinds``: findings 1, 2, 3, 5 and 7) and each checkout, a
fresh ``tether serve`` from that checkout's directory gets the attack's setup; then two
bystanders start (``collab.bench.stall_probes``): ``GET /health`` on a kept-alive connection and
an editor typing on a document of its own, each one request every ``--interval`` seconds,
awaiting its answer; the attack is sent and waited for (at most ``--timeout`` seconds), and the
bystanders run on for ``--tail`` seconds (6: past the unload grace, so that unloading the
attacked document counts too). Reported per attack and checkout: the attack's bytes,
its wall time and outcome, /health latency p50/p99/max, the bystander's ack p99/max (all in
ms, over the requests answered after the attack began; ``>`` marks one still unanswered when
the probes stopped), and the loop lag the server saw itself (``tether_event_loop_lag_seconds``
and its watchdog's log line; "-" where the checkout has neither).

Each server starts with a soft open-file limit of ``--server-open-files`` (1024, many systems'
default; a checkout may raise its own), as the slow-headers finding was found under. All
traffic stays on 127.0.0.1 (and 127.0.0.2 for a second client). A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
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
from .stall_probes import BYSTANDER_DOC, Bystanders, Latencies, ServerLag

_WARM_UP_S = 0.5  # the bystanders' first requests, before the attack: connections made
_OUTCOME_CHARS = 100  # in the table; the JSON has all of it


def add_attacks_arguments(parser: argparse.ArgumentParser) -> None:
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


def run_attacks_bench(args: argparse.Namespace) -> int:
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


async def _measure(attack: Attack, target: Target, args: argparse.Namespace) -> dict[str, Any]:
    row: dict[str, Any] = {
        "attack": attack.name,
        "finding": attack.finding,
        "target": target.label,
        "bytes": attack.payload_bytes,
    }
    with tempfile.TemporaryDirectory(prefix="tether-attacks-") as data_dir:
        server = _Server(Path(data_dir), repo=target.repo, open_files=args.server_open_files)
        try:
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
    async with attack.prepared(server, args.timeout) as strike:
        bystanders = Bystanders(
            server.http_url, server.ws_url, token, interval=args.interval, timeout=args.timeout
        )
        async with bystanders:
            lag = ServerLag(server.log_path)
            await lag.open(bystanders.http)
            await asyncio.sleep(_WARM_UP_S)
            began = time.perf_counter()
            try:
                outcome = await asyncio.wait_for(strike(), args.timeout)
            except TimeoutError:
                outcome = f"> {args.timeout:.0f} s timeout"
            wall = time.perf_counter() - began
            await asyncio.sleep(args.tail)
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
    f"{'attack':<18}{'checkout':<15}{'bytes':>10}{'wall s':>8}"
    f"{'/health ms p50':>15}{'p99':>8}{'max':>9}{'ack ms p99':>12}{'max':>9}"
    f"{'srv lag':>9}  outcome"
)


def line(row: dict[str, Any]) -> str:
    start = f"{row['attack']:<18}{row['target']:<15}{row['bytes']:>10}"
    if row.get("failed"):
        return f"{start}  failed: {row['failed']}"
    health, acks = row["health_ms"], row["ack_ms"]
    return (
        f"{start}{row['wall_s']:>8.2f}{_ms(health['p50']):>15}{_ms(health['p99']):>8}"
        f"{_worst(health):>9}{_ms(acks['p99']):>12}{_worst(acks):>9}"
        f"{row['server_lag_ms']:>9}  {row['outcome'][:_OUTCOME_CHARS]}{_errors(health, acks)}"
    )


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
    parser = argparse.ArgumentParser(prog="python -m tether.collab.bench.attacks")
    add_attacks_arguments(parser)
    return run_attacks_bench(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())

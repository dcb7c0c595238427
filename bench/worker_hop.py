"""``tether bench worker``: what the process hop to the model worker adds to time-to-first-token.

The same warm request (an identical prompt on one session, so the model's work is the same
small amount each time) is timed through ``LocalProvider`` in this process and through the
supervised worker, taking turns, and the medians are compared. Also times the hop alone (a
ping over the channel). A benchmark, not a test; the server itself never loads the model.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from tether.ai.model.providers.base import Cancellation, GenerationRequest

PROMPT = "Meeting notes, product sync. We agreed that the onboarding flow needs fewer steps, and"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=int, default=30)


def run(args: argparse.Namespace) -> int:
    return asyncio.run(_run(args.rounds))


async def _run(rounds: int) -> int:
    from tether.ai.model.providers.local import LocalProvider
    from tether.ai.model.supervisor import Supervisor, SupervisorSettings

    with tempfile.TemporaryDirectory(prefix="tether-hop-") as scratch:
        config = {"data_dir": scratch, "semantic": False, "nice": 0, "quant": "q4_0"}
        async with (
            LocalProvider(requantize_into=Path(scratch) / "models") as local,
            Supervisor(SupervisorSettings(config)) as supervisor,
        ):
            if not await supervisor.wait_ready(120):
                print(f"the worker did not start: {supervisor.reason}")
                return 1
            request = GenerationRequest(PROMPT, "bench", max_tokens=2)
            inproc: list[float] = []
            hop: list[float] = []
            pings: list[float] = []
            link = supervisor._link
            assert link is not None
            for _ in range(rounds + 1):  # the first round warms both up
                inproc.append(await _ttft(local.stream, request))
                hop.append(await _ttft(supervisor.generate, request))
                began = time.perf_counter()
                await link.ping()
                pings.append(time.perf_counter() - began)
    inproc, hop, pings = inproc[1:], hop[1:], pings[1:]
    median_in, median_hop = statistics.median(inproc) * 1000, statistics.median(hop) * 1000
    print(f"warm TTFT, {rounds} rounds each, taking turns:")
    print(f"  in-process LocalProvider  {median_in:7.2f} ms median")
    print(f"  through the worker        {median_hop:7.2f} ms median")
    print(f"  the hop adds              {median_hop - median_in:7.2f} ms")
    print(f"  ping round trip           {statistics.median(pings) * 1000:7.3f} ms median")
    return 0


async def _ttft(
    stream: Callable[[GenerationRequest, Cancellation], AsyncIterator[str]],
    request: GenerationRequest,
) -> float:
    began = time.perf_counter()
    first = None
    async for _ in stream(request, Cancellation()):
        if first is None:
            first = time.perf_counter() - began
    return first if first is not None else time.perf_counter() - began

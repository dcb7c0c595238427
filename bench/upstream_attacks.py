"""The model-server attacks of issue 37 for ``tether bench attacks``: the server runs the
OpenAI-compatible provider over two model servers of the bench's own (``fake_upstream.py``),
one that misbehaves in the attack's way and one that is healthy, requests going to each in
turn (``--ai-routing round-robin``, so half of them meet the bad one whatever the documents'
hashes). Six editors, each its own user on its own document, ask at once.

Reported: each suggestion's time to its end (a failover ends it ``done`` from the healthy
one), the outcomes, the characters the longest one streamed, what ``/health`` says of the bad
upstream afterwards (up or down, failovers counted) and of AI, and what the bad one received
and sent. The server's memory comes with every attack's row.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import httpx

from .asking_editor import AskingEditor
from .attack_base import Attack, FiguredStrike, Strike
from .launcher import ServerProcess
from .rich_attacks import counted
from .surroundings import started, upstream_settings, upstream_stats

ISSUE = 37
EDITORS = 6
MAX_TOKENS = 24
ENDLESS_BYTES = 315 * 1024 * 1024
FLOOD_CHARS = 204_800
MODES = ("hang", "trickle", "endless-event", "html", "flood", "429")
_MIB = 1024 * 1024


def upstream_attacks(scale: float) -> list[Attack]:
    limits: dict[str, dict[str, int]] = {
        "endless-event": {"bytes": max(_MIB, round(ENDLESS_BYTES * scale))},
        "flood": {"chars": max(4096, round(FLOOD_CHARS * scale))},
    }
    return [
        Attack(
            f"upstream-{mode}",
            4,
            sum(limits.get(mode, {}).values()),
            partial(asking_at_once, EDITORS),
            surroundings=partial(bad_and_healthy, mode, limits.get(mode, {})),
            issue=ISSUE,
        )
        for mode in MODES
    ]


@asynccontextmanager
async def bad_and_healthy(
    mode: str, limits: dict[str, int], log_dir: Path
) -> AsyncIterator[dict[str, object]]:
    async with AsyncExitStack() as stack:
        bad = await started(stack, mode, log_dir, **limits)
        healthy = await started(stack, "healthy", log_dir)
        yield {
            **upstream_settings(bad.url, healthy.url, routing="round-robin"),
            "ai_max_tokens": MAX_TOKENS,
        }


@asynccontextmanager
async def asking_at_once(
    editors: int, server: ServerProcess, timeout: float
) -> AsyncIterator[Strike]:
    async with AsyncExitStack() as stack:
        askers = []
        for number in range(editors):
            name = f"asking-{number}"
            token = server.token([name], subject=f"user-{number}")
            asker = await stack.enter_async_context(
                await AskingEditor.open(server.ws_url, name, token, timeout)
            )
            if not await asker.send_and_wait(asker.typed("The harbour keeper watched"), timeout):
                raise RuntimeError(f"the server did not store {name}")
            askers.append(asker)

        async def strike(it: FiguredStrike) -> str:
            pos = len("The harbour keeper watched")
            sent = [await a.send_ask({"pos": pos, "max_tokens": MAX_TOKENS}) for a in askers]
            # Short of the attack's timeout, so that what /health says is read all the same.
            waits = zip(askers, sent, strict=True)
            await asyncio.gather(*(a.answered(answer, 0.9 * timeout) for a, answer in waits))
            # The slowest is the one a bad upstream held (the others are the healthy one's).
            ends = [a.end_ms for a in sent if a.end_ms is not None]
            it.figures["end_max_ms"] = max(ends) if ends else None
            it.figures["unanswered"] = len(sent) - len(ends)
            it.figures["chars_max"] = max(a.chars for a in sent)
            it.figures["empty_done"] = sum(a.outcome == "done" and not a.chars for a in sent)
            it.figures.update(await _after(server))
            return f"{counted([a.outcome for a in sent])}; {_health_text(it.figures)}"

        yield FiguredStrike(strike)


async def _after(server: ServerProcess) -> dict[str, Any]:
    """What /health says of AI and of the bad upstream (the first), and what it saw."""
    async with httpx.AsyncClient(timeout=10) as http:
        ai = (await http.get(server.http_url + "/health")).json().get("ai") or {}
    figures: dict[str, Any] = {"ai_state": ai.get("state")}
    upstreams = ai.get("upstreams") or []
    if upstreams:
        figures["bad_up"] = upstreams[0].get("up")
        figures["failovers"] = sum(int(u.get("failovers") or 0) for u in upstreams)
    bad = (await upstream_stats(server.settings))[0]
    figures["bad_requests"] = sum(
        n for path, n in bad["requests"].items() if path.endswith("completions")
    )
    figures["bad_sent_mb"] = round(bad["bytes_sent"] / _MIB, 1)
    return figures


def _health_text(figures: dict[str, Any]) -> str:
    up = {True: "up", False: "down", None: "?"}[figures.get("bad_up")]
    return (
        f"failovers {figures.get('failovers', '?')}, bad upstream {up},"
        f" ai {figures.get('ai_state')}"
    )

"""What an attack of ``tether bench attacks`` starts around the server, before it: model servers
that misbehave (``fake_upstream.py`` processes) and a webhook receiver, each on 127.0.0.1, and
the server settings that point at them. Every one is the bench's own process, started from this
checkout whichever checkout is attacked, and stopped when the attack's row is done.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx

from .launcher import free_port, log_tail, terminate_process, wait_http_ok

_SCRIPT = Path(__file__).with_name("fake_upstream.py")
MODEL = "bench"

# The server's AI settings for the attacks on it: one request reaches the model each time
# (no cache, no prefetch, no semantic layer) and what the model sends is what the editor gets
# (no stopping rule but max_tokens, no healing, no junk filter), so the outcome is the model
# server's doing. The embedder stays off: 11 s of start-up CPU for nothing measured here.
AI_PLAIN: dict[str, object] = {
    "ai_stop": "tokens",
    "ai_heal": "off",
    "ai_junk_filter": "off",
    "ai_cache_entries": 0,
    "ai_prefetch_ms": 0,
    "ai_semantic": "off",
}


class FakeUpstream:
    """``with FakeUpstream("hang", log_dir) as upstream:`` then ``upstream.url`` (``.../v1``)."""

    def __init__(self, mode: str, log_dir: Path, **limits: int) -> None:
        self.mode = mode
        self.limits = limits
        self.port = free_port()
        self.log_path = Path(log_dir) / f"fake-upstream-{mode}-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return self.root + "/v1"

    def __enter__(self) -> FakeUpstream:
        command = [sys.executable, str(_SCRIPT), "--mode", self.mode, "--port", str(self.port)]
        for name, value in self.limits.items():
            command += [f"--{name}", str(value)]
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_http_ok(self.proc, self.root + "/_bench/stats", 15.0, "fake upstream", self.log)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        terminate_process(self.proc, grace=5.0)

    def log(self) -> str:
        return log_tail(self.log_path, 2000)

    async def stats(self) -> dict[str, Any]:
        async with httpx.AsyncClient(timeout=10) as http:
            reply = await http.get(self.root + "/_bench/stats")
        reply.raise_for_status()
        return dict(reply.json())


async def started(stack: AsyncExitStack, mode: str, log_dir: Path, **limits: int) -> FakeUpstream:
    upstream = FakeUpstream(mode, log_dir, **limits)
    await asyncio.to_thread(upstream.__enter__)
    stack.push_async_callback(asyncio.to_thread, upstream.__exit__)
    return upstream


def upstream_settings(*urls: str, routing: str = "affinity") -> dict[str, object]:
    """An OpenAI-compatible provider over ``urls`` (completions API, so the prompt goes as
    written), with the plain AI settings."""
    return {
        **AI_PLAIN,
        "ai_provider": "openai",
        "openai_base_url": ",".join(urls),
        "openai_model": MODEL,
        "openai_api": "completions",
        "ai_routing": routing,
    }


@asynccontextmanager
async def healthy_model(log_dir: Path) -> AsyncIterator[dict[str, object]]:
    """A well-behaved model server: what the AI attacks on rich documents talk to, so that
    what they time is the server's own work around the model."""
    async with AsyncExitStack() as stack:
        upstream = await started(stack, "healthy", log_dir)
        yield upstream_settings(upstream.url)


@asynccontextmanager
async def webhook_receiver(log_dir: Path) -> AsyncIterator[dict[str, object]]:
    """A receiver for change notices, delivered 0.2 s after an edit (the debounce)."""
    async with AsyncExitStack() as stack:
        receiver = await started(stack, "webhook", log_dir)
        yield {
            "webhook_url": receiver.root + "/hook",
            "webhook_events": "change",
            "webhook_debounce": 0.2,
        }


async def receiver_stats(settings: dict[str, object]) -> dict[str, Any]:
    """The webhook receiver's stats, found by the URL the server was given."""
    root = str(settings["webhook_url"]).rsplit("/", 1)[0]
    async with httpx.AsyncClient(timeout=10) as http:
        reply = await http.get(root + "/_bench/stats")
    reply.raise_for_status()
    return dict(reply.json())


async def upstream_stats(settings: dict[str, object]) -> list[dict[str, Any]]:
    """Each model server's stats, in the order the server was given them."""
    roots = [url.removesuffix("/v1") for url in str(settings["openai_base_url"]).split(",")]
    out = []
    async with httpx.AsyncClient(timeout=10) as http:
        for root in roots:
            reply = await http.get(root + "/_bench/stats")
            reply.raise_for_status()
            out.append(dict(reply.json()))
    return out

"""Keeps a model worker process running: start it, watch it, restart it with backoff, and give
up (AI ``degraded``, with the reason) when it cannot run here.

    starting ──ready frame──▶ ready ──dies / hangs──▶ starting (after a backoff) ──▶ …
        │                                   └── 5 deaths in 60 s ──▶ degraded ──cooldown──▶ starting
        └── load or self-test fails, or it dies before ready ──▶ degraded (stays)

A worker that fails at start will fail the same way again (a build that cannot run on this
CPU, a missing model), so that gives up at once; a worker that dies while serving is restarted,
and one that keeps dying is left off for a cooldown (60 s, doubling while it keeps failing, up
to 15 min) and then tried again: a bad hour must not cost AI until someone restarts the
server. Sync never waits on any of this.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tether.protocol.wire.worker_frames import (
    DONE,
    EMBEDDER,
    ERROR,
    FAILED,
    HELLO,
    LOADED,
    READY,
    TOKEN,
    Frame,
)

from ..errors import ModelUnavailable, ProviderError
from .fair import SHARE
from .providers.base import Cancellation, GenerationRequest
from .worker_link import WorkerLink, worker_environment

log = logging.getLogger("ai.worker")

STARTING, READY_STATE, DEGRADED, OFF = "starting", "ready", "degraded", "off"


@dataclass(frozen=True, slots=True)
class SupervisorSettings:
    worker_config: dict[str, Any]
    threads: int = 1
    log_level: str = "info"
    # A generation with neither a token nor prompt progress for this long is hung: the worker
    # is killed and restarted.
    stall_seconds: float = 10.0
    # An idle worker must answer a ping within stall_seconds, asked this often.
    ping_seconds: float = 5.0
    crash_limit: int = 5
    crash_window: float = 60.0
    backoff_first: float = 0.5
    backoff_max: float = 10.0
    # After crash_limit deaths in crash_window: off this long, then tried again.
    crash_cooldown: float = 60.0
    crash_cooldown_max: float = 900.0
    # Loading can take a while the first time (requantising the model); past this, give up.
    start_seconds: float = 120.0


class Supervisor:
    """``async with Supervisor(settings) as s:``: returns at once; the worker starts behind."""

    def __init__(self, settings: SupervisorSettings) -> None:
        self.settings = settings
        self.state = STARTING
        self.reason = "loading the model"
        self.model: dict[str, Any] = {}
        self.embedder_state = "loading" if settings.worker_config.get("semantic") else "off"
        self.restarts = 0
        self.crashes: collections.deque[float] = collections.deque()
        self._link: WorkerLink | None = None
        self._ready_now: asyncio.Event = asyncio.Event()
        self._exited: asyncio.Event = asyncio.Event()
        self._listeners: list[Callable[[], None]] = []
        self._task: asyncio.Task[None] | None = None
        self._watchdog: asyncio.Task[None] | None = None
        self._closing = False
        self._pings: set[asyncio.Future[None]] = set()
        self._last_exit = ""
        self._loaded = False  # the current worker has the model in memory (self-test next)

    # ---- lifecycle ------------------------------------------------------------------------

    async def __aenter__(self) -> Supervisor:
        self._task = asyncio.ensure_future(self._keep_running())
        self._watchdog = asyncio.ensure_future(self._watch())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._closing = True
        for task in (self._watchdog, self._task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        if self._link is not None:
            await self._link.stop()

    def add_listener(self, listener: Callable[[], None]) -> None:
        """``listener()`` runs after every change of ``state`` or ``embedder_state``."""
        self._listeners.append(listener)

    @property
    def pid(self) -> int | None:
        return self._link.pid if self._link is not None and self._link.alive else None

    @property
    def warm_hits(self) -> int:
        return self._link.warm_hits if self._link is not None else 0

    async def wait_ready(self, timeout: float) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ready_now.wait(), timeout)
        return self.state == READY_STATE

    def health(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "reason": self.reason,
            "model": self.model.get("model"),
            "quant": self.model.get("quant"),
            "path": self.model.get("path"),
            "load_ms": self.model.get("load_ms"),
            "selftest_ms": self.model.get("selftest_ms"),
            "worker_pid": self.pid,
            "restarts": self.restarts,
            "semantic": self.embedder_state,
        }

    async def _keep_running(self) -> None:
        backoff = self.settings.backoff_first
        cooldown = self.settings.crash_cooldown
        while not self._closing:
            outcome = await self._run_one()
            if self._closing or outcome != "died":
                return
            now = time.monotonic()
            self.crashes.append(now)
            while self.crashes and now - self.crashes[0] > self.settings.crash_window:
                self.crashes.popleft()
            if len(self.crashes) >= self.settings.crash_limit:
                self._set(
                    DEGRADED,
                    f"the model worker died {len(self.crashes)} times in "
                    f"{self.settings.crash_window:.0f} s (last: it {self._last_exit}); "
                    f"AI is off, and tried again in {cooldown:.0f} s",
                )
                log.error("AI is off: %s", self.reason)
                await asyncio.sleep(cooldown)
                cooldown = min(cooldown * 2, self.settings.crash_cooldown_max)
                self.crashes.clear()
                backoff = self.settings.backoff_first
                self._set(STARTING, "trying the model worker again after its cooldown")
                self.restarts += 1
                continue
            log.warning("restarting the model worker in %.1f s", backoff)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, self.settings.backoff_max)
            self.restarts += 1

    async def _run_one(self) -> str:
        """One worker's life: 'died' (restart it), or 'gave up' (degraded)."""
        self._exited.clear()
        self._ready_now.clear()
        self._loaded = False
        began = time.monotonic()
        link = WorkerLink(
            self.settings.worker_config,
            log_level=self.settings.log_level,
            on_frame=self._heard,
            on_exit=lambda reason: self._exited.set(),
            env=worker_environment(self.settings.threads),
        )
        self._link = link
        try:
            await link.start()
        except OSError as exc:
            self._give_up(f"the model worker could not start: {exc}")
            return "gave up"
        ready = asyncio.ensure_future(self._ready_now.wait())
        exited = asyncio.ensure_future(self._exited.wait())
        await asyncio.wait(
            {ready, exited}, timeout=self.settings.start_seconds, return_when="FIRST_COMPLETED"
        )
        ready.cancel()
        if self.state == DEGRADED:  # it said what failed (load, self-test)
            await link.stop()
            return "gave up"
        if not self._ready_now.is_set():
            if not self._exited.is_set():
                link.kill(f"did not become ready in {self.settings.start_seconds:.0f} s")
                await self._exited.wait()
            self._give_up(_before_ready(link, self._loaded))
            log.error("the model worker's last output:%s", _quote(link.last_words) or " none")
            return "gave up"
        await exited
        if self._closing:
            return "stopped"
        self._last_exit = link.exit_reason or "ended"
        self._set(STARTING, f"the model worker {link.exit_reason}; restarting it")
        log.error(
            "the model worker %s after %.0f s; suggestions in flight got 'unavailable'%s",
            link.exit_reason,
            time.monotonic() - began,
            _quote(link.last_words),
        )
        if self.embedder_state == "ready":
            self.embedder_state = "loading"
        return "died"

    def _give_up(self, reason: str) -> None:
        self._set(DEGRADED, reason)
        log.error("AI is degraded: %s", reason)

    def _heard(self, frame: Frame) -> None:
        op, header = frame.op, frame.header
        if op == HELLO:
            log.debug("model worker pid %s is up", header.get("pid"))
        elif op == LOADED:
            self._loaded = True
        elif op == READY:
            self.model = dict(header)
            self.model.pop("op", None)
            log.info(
                "AI ready: %s (%s) from %s, %s thread(s); loaded in %.0f ms, self-test %.0f ms",
                header.get("model"),
                header.get("quant"),
                header.get("path"),
                header.get("threads"),
                header.get("load_ms") or 0,
                header.get("selftest_ms") or 0,
            )
            self._set(READY_STATE, "")
            self._ready_now.set()
        elif op == FAILED:
            stage = "its self-test" if header.get("stage") == "selftest" else "loading the model"
            self._give_up(f"the model worker failed {stage}: {header.get('reason')}")
        elif op == EMBEDDER:
            self.embedder_state = "ready" if header.get("state") == "ready" else "failed"
            if self.embedder_state == "ready":
                log.info("semantic cache ready (embedding model loaded in the worker)")
            else:
                log.error("the semantic cache is off: %s", header.get("reason"))
            self._notify()

    def _set(self, state: str, reason: str) -> None:
        changed = (state, reason) != (self.state, self.reason)
        self.state, self.reason = state, reason
        if changed:
            self._notify()

    def _notify(self) -> None:
        for listener in self._listeners:
            try:
                listener()
            except Exception:
                log.exception("an AI state listener failed")

    async def _watch(self) -> None:
        """Kill a worker that hangs: generations in flight and none with a token, progress or
        an end for ``stall_seconds`` (those waiting their turn behind a long prompt are not
        hung: the running one's progress speaks for the worker), or an idle worker that does
        not answer a ping in that time."""
        limit = self.settings.stall_seconds
        next_ping = time.monotonic() + self.settings.ping_seconds
        while True:
            await asyncio.sleep(min(0.2, limit / 4))
            link = self._link
            if link is None or not link.alive or self.state != READY_STATE:
                continue
            now = time.monotonic()
            if link.stalled(now, limit):
                log.error("the model worker hung: no token for %.1f s; killing it", limit)
                link.kill(f"hung (no token for {limit:.0f} s)")
                continue
            if now >= next_ping:
                next_ping = now + self.settings.ping_seconds
                ping = asyncio.ensure_future(self._ping(link, limit))
                self._pings.add(ping)
                ping.add_done_callback(self._pings.discard)

    async def _ping(self, link: WorkerLink, limit: float) -> None:
        try:
            await asyncio.wait_for(link.ping(), limit)
        except TimeoutError:
            log.error("the model worker did not answer a ping in %.1f s; killing it", limit)
            link.kill(f"stopped answering (no reply to a ping in {limit:.0f} s)")
        except ProviderError:
            pass  # it died meanwhile: the exit path reports it

    # ---- serving --------------------------------------------------------------------------

    def _serving_link(self) -> WorkerLink:
        link = self._link
        if self.state != READY_STATE or link is None or not link.alive:
            raise ModelUnavailable(f"AI is unavailable: {self.reason or self.state}")
        return link

    async def generate(
        self, request: GenerationRequest, cancel: Cancellation
    ) -> AsyncIterator[str]:
        link = self._serving_link()
        stream = link.open_generation(request, SHARE.get())
        cancel.add_callback(lambda: link.cancel(stream))  # reaches the worker at once
        try:
            while True:
                kind, value = await stream.events.get()
                if kind == TOKEN:
                    if cancel.cancelled:
                        return
                    yield value
                elif kind == DONE:
                    return
                elif kind == ERROR:
                    raise ProviderError(f"the local model failed: {value}")
                else:  # the worker died: value is the ModelUnavailable to raise
                    raise value
        finally:
            if not stream.finished:
                link.cancel(stream)
                # Until the worker has let it go (within one prompt chunk or token): whoever
                # holds the model's turn (the scheduler) keeps it until the model is free, so a
                # cancelled prompt cannot leave the next request queued behind it unseen.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stream.ended.wait(), self.settings.stall_seconds)

    @property
    def embedder_ready(self) -> bool:
        return self.embedder_state == "ready" and self.state == READY_STATE

    async def embed(self, texts: list[str]) -> np.ndarray:
        return await self._serving_link().embed(texts)


def _before_ready(link: WorkerLink, loaded: bool) -> str:
    reason = link.exit_reason or "ended"
    stage = "its start-up self-test (one tiny decode)" if loaded else "loading the model"
    hint = ""
    if any(name in reason for name in ("SIGSEGV", "SIGILL", "SIGBUS")):
        hint = (
            ": the llama.cpp build does not run on this CPU; rebuild it portably"
            " (bash .ci/setup builds with -DGGML_NATIVE=OFF)"
        )
    return f"the model worker {reason} during {stage}{hint}"


def _quote(lines: list[str]) -> str:
    """The worker's last native output, where a fault handler's traceback would be."""
    useful = [line for line in lines if line.strip()][-4:]
    return "" if not useful else " (last output: " + " | ".join(useful) + ")"

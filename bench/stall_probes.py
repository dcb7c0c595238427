"""Event-loop stalls seen from outside the server: bystanders that time a small request every
few milliseconds (``GET /health`` on a kept-alive connection, an edit on a document of their
own awaiting its SyncStatus), and the server's own ``tether_event_loop_lag_seconds`` where the
checkout has it. Only the wire and HTTP: works against any tether checkout, old or new.

A bystander's request that the server cannot answer while its loop is held takes as long as the
stall; one still unanswered when the probe stops counts with its time so far, marked unfinished.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from .server_histograms import LOOP_LAG, Buckets, read_buckets, window_bound
from .wire_editor import WireEditor

BYSTANDER_DOC = "bystander"
_LAG_LOGGED = re.compile(r"the event loop was held ([0-9.]+) s")


@dataclass(frozen=True, slots=True)
class Latencies:
    """Milliseconds; ``unfinished``: the worst was still waiting when the probe stopped."""

    count: int
    p50: float | None
    p99: float | None
    max: float | None
    unfinished: bool
    errors: int

    @classmethod
    def of(cls, seconds: list[float], unfinished: bool, errors: int) -> Latencies:
        ordered = sorted(s * 1000 for s in seconds)
        if not ordered:
            return cls(0, None, None, None, unfinished, errors)
        return cls(
            len(ordered), _rank(ordered, 0.5), _rank(ordered, 0.99), ordered[-1], unfinished, errors
        )


def _rank(ordered: list[float], quantile: float) -> float:
    return ordered[min(len(ordered) - 1, int(quantile * len(ordered)))]


@dataclass
class Probe:
    """Runs ``one`` every ``interval`` seconds, one at a time (late ones go at once): the
    latency of each, by the time it began."""

    one: Callable[[], Awaitable[object]]
    interval: float
    done: list[tuple[float, float]] = field(default_factory=list)  # (began, seconds)
    failed: list[float] = field(default_factory=list)  # when each failed one began
    _in_flight: float | None = field(default=None, init=False)
    _task: asyncio.Task[None] | None = field(default=None, init=False)

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def since(self, moment: float) -> Latencies:
        """Every request answered after ``moment``, and the one still waiting."""
        seconds = [s for began, s in self.done if began + s >= moment]
        unfinished = self._in_flight is not None
        if self._in_flight is not None:
            seconds.append(time.perf_counter() - self._in_flight)
            unfinished = seconds[-1] >= max(seconds)
        errors = sum(1 for began in self.failed if began >= moment)
        return Latencies.of(seconds, unfinished, errors)

    async def _run(self) -> None:
        while True:
            began = self._in_flight = time.perf_counter()
            try:
                await self.one()
            except Exception:  # refused, reset, timed out: counted, and its wait kept (a
                self.failed.append(began)  # request dropped after a stall waited through it)
            self.done.append((began, time.perf_counter() - began))
            self._in_flight = None
            await asyncio.sleep(max(0.0, began + self.interval - time.perf_counter()))


class Bystanders:
    """``async with Bystanders(http_url, ws_url, token, ...) as b:`` — a /health poller and a
    typist on ``BYSTANDER_DOC``, both running until the block ends."""

    def __init__(
        self, http_url: str, ws_url: str, token: str, *, interval: float, timeout: float
    ) -> None:
        self.http = httpx.AsyncClient(
            base_url=http_url, timeout=timeout, limits=httpx.Limits(max_connections=1)
        )
        self._ws_url, self._token, self._timeout = ws_url, token, timeout
        self._interval = interval
        self.editor: WireEditor | None = None
        self.health: Probe | None = None
        self.acks: Probe | None = None

    async def __aenter__(self) -> Bystanders:
        self.editor = await WireEditor.open(self._ws_url, BYSTANDER_DOC, self._token)
        self.health = Probe(self._get_health, self._interval)
        self.acks = Probe(self._type_one, self._interval)
        self.health.start()
        self.acks.start()
        return self

    async def _get_health(self) -> None:
        (await self.http.get("/health")).raise_for_status()

    async def _type_one(self) -> None:
        assert self.editor is not None
        await self.editor.send_and_wait(self.editor.typed("k"), self._timeout)

    async def __aexit__(self, *exc: object) -> None:
        for probe in (self.health, self.acks):
            if probe is not None:
                await probe.stop()
        if self.editor is not None:
            await self.editor.aclose()
        await self.http.aclose()


@dataclass
class ServerLag:
    """The server's own view of its loop across a window: the worst turn its watchdog logged
    (past 250 ms, with the input that held it), else the histogram bound every turn fell under."""

    log_path: Path
    buckets: dict[str, float] | None = None
    log_offset: int = 0

    async def open(self, http: httpx.AsyncClient) -> None:
        self.buckets = await _lag_buckets(http)
        self.log_offset = _size(self.log_path)

    def logged_count(self) -> int:
        """How many turns the watchdog logged as held (past 250 ms) since ``open``."""
        return len(_logged_stalls(self.log_path, self.log_offset))

    async def worst_ms(self, http: httpx.AsyncClient) -> str:
        """'-' on a checkout without the metric, '?' when the server did not answer."""
        if self.buckets is None:
            return "-"
        try:
            after = await _lag_buckets(http)
        except httpx.HTTPError:
            return "?"
        logged = _logged_stalls(self.log_path, self.log_offset)
        if logged:
            return f"{max(logged) * 1000:.0f}"
        if after is None:
            return "?"
        bound = window_bound(after, self.buckets)
        return ">10000" if bound == "+Inf" else f"<={float(bound) * 1000:.0f}"


async def _lag_buckets(http: httpx.AsyncClient) -> Buckets | None:
    return (await read_buckets(http, LOOP_LAG))[LOOP_LAG]


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _logged_stalls(path: Path, offset: int) -> list[float]:
    try:
        with path.open("rb") as log:
            log.seek(offset)
            text = log.read().decode(errors="replace")
    except OSError:
        return []
    return [float(seconds) for seconds in _LAG_LOGGED.findall(text)]

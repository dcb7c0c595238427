"""Runs the real ``tether serve`` as a subprocess on a free loopback port (tests, benchmarks)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from tether.collab.auth.tokens import make_token

DEFAULT_SECRET = "local-test-secret-0123456789abcdef"
REPO = Path(__file__).resolve().parents[1]
# The launcher turns the semantic layer and prefetch off (for tests); benchmarks measure the
# server as users run it, with these.
PRODUCT_AI: dict[str, object] = {"ai_semantic": "on", "ai_prefetch_ms": 200}


def server_ai_settings(args: Any) -> dict[str, object]:
    """The served product's AI settings, with the suggestion length asked for."""
    return {
        **PRODUCT_AI,
        "ai_stop": getattr(args, "ai_stop", "word"),
        "ai_heal": getattr(args, "ai_heal", "on"),
        "ai_junk_filter": getattr(args, "ai_junk_filter", "on"),
    }


def terminate_process(proc: subprocess.Popen[bytes] | None, grace: float = 10.0) -> None:
    """Stop a helper process we started: SIGTERM, then SIGKILL if it outlives ``grace``."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(grace)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerProcess:
    """``with ServerProcess(data_dir, **settings) as server:`` — killed or stopped on exit."""

    def __init__(
        self,
        data_dir: Path,
        *,
        auth: str = "jwt",
        secret: str = DEFAULT_SECRET,
        repo: Path = REPO,
        **settings: object,
    ) -> None:
        self.data_dir = Path(data_dir)
        # The checkout whose code runs (``python -m`` imports from its working directory):
        # another git worktree gives a side-by-side "before" build.
        self.repo = Path(repo)
        self.auth = auth
        self.secret = secret
        self.settings = settings
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.data_dir / f"server-{self.port}.log"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"

    @property
    def yjs_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/yjs"

    def token(
        self,
        docs: list[str] | None = None,
        *,
        scope: str = "read-write",
        ttl: float = 3600.0,
        subject: str = "user",
    ) -> str:
        return make_token(self.secret, docs or ["*"], scope=scope, ttl=ttl, subject=subject)

    def wait_embedder(self, timeout: float = 180.0) -> None:
        """Wait until the semantic layer's model has loaded (in the background after start)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            metrics = httpx.get(f"{self.http_url}/metrics", timeout=5).text
            if "tether_ai_embedder_ready 1.0" in metrics:
                return
            time.sleep(0.2)
        raise RuntimeError("the embedding model did not load in time")

    def start(self, timeout: float = 20.0, *, wait_ai: bool = True) -> ServerProcess:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env.update(
            TETHER_HOST="127.0.0.1",
            TETHER_PORT=str(self.port),
            TETHER_DATA_DIR=str(self.data_dir),
            TETHER_AUTH=self.auth,
            TETHER_JWT_SECRET=self.secret,
            TETHER_LOG_LEVEL="warning",
            # Most tests and the sync bench need no model; AI tests ask for one explicitly.
            TETHER_AI_PROVIDER="none",
            # Prefetch and the semantic layer change which source serves a request, and the
            # embedder costs ~11 s of start-up CPU: only the tests about them turn them on.
            TETHER_AI_SEMANTIC="off",
            TETHER_AI_PREFETCH_MS="0",
            # Tests and benchmarks send REST requests from one address as fast as they can;
            # the tests of the rate limit ask for it.
            TETHER_REST_RATE_LIMIT="0",
        )
        for key, value in self.settings.items():
            env["TETHER_" + key.upper()] = str(value)
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tether.collab.cli", "serve"],
            cwd=self.repo,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        self._wait_healthy(timeout)
        if wait_ai and str(self.settings.get("ai_provider", "none")) != "none":
            self.wait_ai(timeout=max(timeout, 60.0))
        return self

    def health(self) -> dict[str, Any]:
        reply = httpx.get(self.http_url + "/health", timeout=5)
        reply.raise_for_status()
        return dict(reply.json())

    def wait_ai(
        self,
        *,
        timeout: float = 60.0,
        settled: tuple[str, ...] = ("ready", "degraded"),
        restarts: int = 0,
    ) -> dict[str, Any]:
        """Wait until /health says the AI has left ``starting`` (the model worker loads after
        the server is up) with at least ``restarts`` restarts behind it; its ``ai`` section."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ai = self.health().get("ai") or {}
            if ai.get("state") in settled and int(ai.get("restarts") or 0) >= restarts:
                return dict(ai)
            time.sleep(0.05)  # polling a process's public state; there is no event to wait on
        raise RuntimeError(f"AI did not settle in {timeout}s: {self.health()}\n{self.log()}")

    def _wait_healthy(self, timeout: float) -> None:
        assert self.proc is not None
        wait_http_ok(self.proc, self.http_url + "/health", timeout, "server", self.log)

    def log(self) -> str:
        return log_tail(self.log_path, 5000)

    def kill(self) -> None:
        """SIGKILL: no shutdown hooks, no flush — what a crash looks like."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()

    def restart(self) -> ServerProcess:
        """Same port, same data directory."""
        self.stop()
        return self.start()

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_http_ok(
    proc: subprocess.Popen[bytes], url: str, timeout: float, what: str, log: Any
) -> None:
    """Until ``url`` answers 200, or fail naming ``what`` with ``log()`` when ``proc`` exits
    first or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited early:\n{log()}")
        try:
            if httpx.get(url, timeout=0.5).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.05)  # polling a process we just spawned; not test synchronisation
    raise RuntimeError(f"{what} not ready after {timeout}s:\n{log()}")


def log_tail(path: Path, chars: int) -> str:
    """The last ``chars`` characters of a spawned process's log ("" if there is none)."""
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""

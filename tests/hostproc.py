"""A host app that embeds tether, run as a real process under uvicorn (tests of embedding)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.serverproc import free_port

REPO = Path(__file__).resolve().parents[1]


def _checkout_env() -> dict[str, str]:
    """A script's own directory heads sys.path, not the checkout: put the checkout there."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return env


class HostProcess:
    """``with HostProcess(script, data_dir, *args) as host:`` runs ``python script --port P
    --data-dir D *args`` and waits until ``ready_path`` answers (any status below 500)."""

    def __init__(
        self,
        script: Path,
        data_dir: Path,
        *args: str,
        ready_path: str = "/",
        python: str = sys.executable,
        cwd: Path = REPO,
        env: dict[str, str] | None = None,
    ) -> None:
        self.script, self.data_dir, self.args = script, Path(data_dir), args
        self.ready_path, self.python, self.cwd = ready_path, python, cwd
        self.env = env
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.data_dir / f"host-{self.port}.log"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def ws(self, path: str) -> str:
        return f"ws://127.0.0.1:{self.port}{path}"

    def start(self, timeout: float = 30.0) -> HostProcess:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        command = [self.python, str(self.script), "--port", str(self.port)]
        command += ["--data-dir", str(self.data_dir), *self.args]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                command, cwd=self.cwd, env=self.env or _checkout_env(), stdout=log, stderr=log
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"host exited early:\n{self.log()}")
            try:
                if httpx.get(self.http_url + self.ready_path, timeout=0.5).status_code < 500:
                    return self
            except httpx.HTTPError:
                time.sleep(0.05)  # polling a process we just spawned; not test synchronisation
        raise RuntimeError(f"host not ready after {timeout}s:\n{self.log()}")

    def stop(self) -> int | None:
        """SIGTERM and wait; the exit code (None if it had to be killed)."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            return None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def __enter__(self) -> HostProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

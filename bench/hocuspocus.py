"""Runs the reference Hocuspocus server (``tests/js/hocuspocus_server.mjs``: stock Hocuspocus 4,
no storage; or ``durable``, with its SQLite extension) as a subprocess on a free loopback port,
for side-by-side benches.

Needs ``node`` on PATH and the npm packages in ``tests/node_modules`` (``.ci/setup --dev``); the
durable one also the optional ``@hocuspocus/extension-sqlite`` (it compiles better-sqlite3: where
that failed, npm left it out, and this says so).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from .launcher import REPO, free_port, log_tail, terminate_process

SCRIPT = Path("tests") / "js" / "hocuspocus_server.mjs"


class HocuspocusProcess:
    """``with HocuspocusProcess() as server:`` — listening on 127.0.0.1; stopped on exit."""

    def __init__(self, repo: Path = REPO, *, durable: bool = False) -> None:
        self.repo = repo
        self.durable = durable
        self._data = tempfile.TemporaryDirectory(prefix="hocuspocus-") if durable else None
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        # Its output goes to a file, not a pipe: nothing reads a pipe once it listens, and a
        # full pipe would stall the server under measurement.
        self._log = tempfile.NamedTemporaryFile(prefix="hocuspocus-", suffix=".log")

    @property
    def database(self) -> Path | None:
        """The durable one's SQLite file."""
        return Path(self._data.name) / "hocuspocus.sqlite" if self._data is not None else None

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> HocuspocusProcess:
        node = shutil.which("node")
        if node is None:
            raise RuntimeError("Hocuspocus needs Node.js: `node` is not on PATH")
        if not (self.repo / "tests" / "node_modules" / "@hocuspocus" / "server").is_dir():
            raise RuntimeError(
                f"{self.repo / 'tests' / 'node_modules'} lacks @hocuspocus/server"
                " (run .ci/setup --dev, or npm ci in tests/)"
            )
        command = [node, str(SCRIPT), "--port", str(self.port)]
        if self._data is not None:
            extension = self.repo / "tests" / "node_modules" / "@hocuspocus" / "extension-sqlite"
            if not extension.is_dir():
                raise RuntimeError(
                    "the durable Hocuspocus needs the optional @hocuspocus/extension-sqlite in"
                    " tests/node_modules (npm leaves it out where better-sqlite3 cannot compile)"
                )
            command += ["--sqlite", str(self.database)]
        self.proc = subprocess.Popen(
            command,
            cwd=self.repo,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self._wait_listening(timeout)
        return self

    def _wait_listening(self, timeout: float) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        # The script prints one JSON line once it listens.
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"Hocuspocus exited early:\n{self.log()}")
            for line in self.log().splitlines():
                try:
                    said = json.loads(line)
                except ValueError:
                    continue
                if isinstance(said, dict) and said.get("event") == "listening":
                    return
            time.sleep(0.05)  # polling a process we just spawned; not test synchronisation
        raise RuntimeError(f"Hocuspocus did not listen within {timeout}s:\n{self.log()}")

    def log(self) -> str:
        return log_tail(Path(self._log.name), 5000)

    def stop(self) -> None:
        terminate_process(self.proc)
        self._log.close()
        if self._data is not None:
            self._data.cleanup()

    def __enter__(self) -> HocuspocusProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

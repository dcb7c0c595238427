"""The JS client package (clients/js, npm ``tether-client``) from Python tests: where it is,
running its npm scripts, and failing loudly when it is not built.

``.ci/setup --dev`` installs and builds it (``npm ci && npm run build``). Tests that need it
call :func:`require_client_js`, which raises rather than skips: a missing toolchain must never
look like a passing test.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

__all__ = ["CLIENT_JS", "CLIENT_JS_MISSING", "require_client_js", "run_npm"]

CLIENT_JS = Path(__file__).resolve().parent.parent / "clients" / "js"

CLIENT_JS_MISSING = (
    f"The JS client tests need Node.js and npm on PATH and {CLIENT_JS} installed and built: "
    "run `cd clients/js && npm ci && npm run build` (.ci/setup --dev does)."
)


def require_client_js() -> None:
    """Raise ``RuntimeError(CLIENT_JS_MISSING)`` unless node, npm, the package's
    node_modules and its built dist/ are there."""
    ready = (
        shutil.which("node") is not None
        and shutil.which("npm") is not None
        and (CLIENT_JS / "node_modules" / "typescript" / "package.json").is_file()
        and (CLIENT_JS / "dist" / "index.js").is_file()
    )
    if not ready:
        raise RuntimeError(CLIENT_JS_MISSING)


def run_npm(*args: str, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
    """``npm <args>`` in clients/js; its completed process (output captured as text)."""
    require_client_js()
    npm = shutil.which("npm")
    assert npm is not None
    return subprocess.run(
        [npm, *args], cwd=CLIENT_JS, capture_output=True, text=True, timeout=timeout, check=False
    )

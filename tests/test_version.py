"""The version, where operators look for it: ``tether --version``, ``python -m tether``,
/health and the ``tether_build_info`` metric (issue 12)."""

from __future__ import annotations

import platform
import subprocess
import sys
import tomllib

import httpx

from tests.hostproc import REPO
from tests.serverproc import ServerProcess

VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def run_tether(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_python_dash_m_tether_answers_version_and_help():
    done = run_tether("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"tether {VERSION}"
    served = run_tether("serve", "--help")
    assert served.returncode == 0 and "--data-dir" in served.stdout


def test_health_and_metrics_carry_the_version(server: ServerProcess):
    assert server.health()["version"] == VERSION
    metrics = httpx.get(server.http_url + "/metrics", timeout=5).text
    line = next(m for m in metrics.splitlines() if m.startswith("tether_build_info{"))
    assert f'version="{VERSION}"' in line
    assert f'python="{platform.python_version()}"' in line
    assert line.endswith(" 1.0")

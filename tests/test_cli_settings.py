"""``tether serve`` as an operator meets it: --help shows defaults and choices, a bad value is
one clear line (no traceback) and exit 2, and --env-file reads TETHER_* settings under the
environment's (issue 12, operator conveniences)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tether.collab.bench.launcher import REPO, free_port


def tether(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    return subprocess.run(
        [sys.executable, "-m", "tether", *args],
        cwd=REPO,
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_help_shows_defaults_and_choices() -> None:
    shown = tether("serve", "--help").stdout
    assert "(default: 8765)" in shown
    assert "{jwt,none}" in shown and "{debug,info,warning,error,critical}" in shown
    assert "--env-file" in shown


def test_a_bad_value_is_one_line_and_exit_2() -> None:
    for env, args, words in [
        ({"TETHER_PORT": "abc"}, (), "TETHER_PORT='abc' is not a valid int"),
        ({}, ("--log-level", "loud", "--auth", "none"), "log_level must be one of"),
        ({}, ("--env-file", "/nonexistent/tether.env"), "--env-file /nonexistent/tether.env"),
    ]:
        result = tether("serve", *args, env=env)
        assert result.returncode == 2, result
        assert "Traceback" not in result.stderr
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and words in lines[0], result.stderr


def test_env_file_settings_apply_and_the_environment_wins(tmp_path: Path) -> None:
    from_file, from_env = free_port(), free_port()
    env_file = tmp_path / "tether.env"
    env_file.write_text(
        "# a comment\n"
        f"export TETHER_PORT={from_file}\n"
        "TETHER_AUTH='none'\n"
        f'TETHER_DATA_DIR="{tmp_path / "data"}"\n'
        "TETHER_AI_PROVIDER=none\n"
        "OTHER_SETTING=ignored\n"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether", "serve", "--env-file", str(env_file)],
        cwd=REPO,
        env={**clean, "TETHER_PORT": str(from_env), "TETHER_HOST": "127.0.0.1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        health = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                health = httpx.get(f"http://127.0.0.1:{from_env}/health", timeout=2).json()
                break
            except httpx.HTTPError:
                time.sleep(0.1)  # polling a starting process's port; there is no event
        assert health is not None, "the server did not answer on the environment's port"
        assert (tmp_path / "data").is_dir()  # the file's data dir
    finally:
        proc.terminate()
        proc.wait(timeout=30)

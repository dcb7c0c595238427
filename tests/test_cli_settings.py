"""``tether serve`` as an operator meets it: --help shows defaults and choices, a bad value is
one clear line (no traceback) and exit 2, and --env-file reads TETHER_* settings under the
environment's (issue 12, operator conveniences). --help lists the flags in titled groups with
sizes in binary units, which flags, variables and env files take (issue 25, item 6)."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tether.bench.launcher import REPO, free_port
from tether.collab.config import SIZES, Settings
from tether.collab.serve_flags import GROUPS
from tether.collab.sizes import UNITS, parse_size


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
        ({}, ("--log-level", "loud", "--auth", "none"), "--log-level 'loud': must be one of"),
        ({}, ("--env-file", "/nonexistent/tether.env"), "--env-file /nonexistent/tether.env"),
        (
            {"TETHER_MAX_FRAME_BYTES": "12XB"},
            (),
            "TETHER_MAX_FRAME_BYTES='12XB' is not a size (use e.g. 16MiB, 64KiB or bytes)",
        ),
        # Issue 26: a port out of range started and logged another port than it bound; a data
        # dir that cannot hold files was a 25-line traceback.
        ({}, ("--auth", "none", "--port", "99999"), "--port 99999: must be between 0 and 65535"),
        ({}, ("--auth", "none", "--data-dir", __file__), "is not a writable directory"),
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
    environment = {"TETHER_PORT": str(from_env), "TETHER_HOST": "127.0.0.1"}
    with serving(from_env, "--env-file", str(env_file), env=environment) as health:
        assert health is not None, "the server did not answer on the environment's port"
        assert (tmp_path / "data").is_dir()  # the file's data dir


def test_help_lists_the_flags_in_titled_groups_with_sizes_in_binary_units() -> None:
    shown = tether("serve", "--help").stdout
    lines = shown.splitlines()
    for group in GROUPS:
        title = lines.index(group.title + ":")
        assert lines[title + 1].strip() == group.description  # one line each
    flat = " ".join(shown.split())
    assert "--max-frame-bytes SIZE largest message" in flat and "(default: 16MiB)" in flat
    assert "(default: 256KiB)" in flat and "(default: 128B)" in flat
    for name, unit in SIZES.items():  # each size's default, in a unit, meaning the default
        after_flag = flat.split(f"--{name.replace('_', '-')} SIZE ", 1)[1]
        default = after_flag.split("(default: ", 1)[1].split(")", 1)[0]
        assert re.fullmatch(r"\d+(KiB|MiB|GiB|B)", default), (name, default)
        assert parse_size(default) == getattr(Settings(), name) * UNITS[unit], name
    assert "16777216" not in flat and "1048576" not in flat
    assert "(default: 45s)" in flat and "45.0" not in flat


def test_test_only_values_are_not_listed() -> None:
    shown = tether("serve", "--help").stdout
    assert "scripted" not in shown and "--ai-script" not in shown
    assert "--ai-provider {local,openai,none}" in shown


@pytest.mark.parametrize(
    ("flag", "value", "words"),
    [
        ("--max-frame-bytes", "12XB", "'12XB' is not a size (use e.g. 16MiB, 64KiB or bytes)"),
        ("--bus-queue-bytes", "16MB", "'16MB' is ambiguous (binary or SI?): write 16MiB for"),
        ("--ai-cache-mb", "lots", "'lots' is not a size (use e.g. 16MiB, 64KiB or a number of"),
    ],
)
def test_a_bad_size_flag_is_an_argparse_error_naming_the_flag(
    flag: str, value: str, words: str
) -> None:
    result = tether("serve", flag, value)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    last = result.stderr.splitlines()[-1]
    assert last.startswith(f"tether serve: error: argument {flag}: {words}"), result.stderr


def test_sizes_in_binary_units_reach_the_running_server(tmp_path: Path) -> None:
    """The flag's 4KiB wins over the env file's 64 KiB: a 5000-byte import is refused (413)
    before it is read, a 3000-byte one is read and found malformed (400). The scripted
    provider, never listed, still starts."""
    port = free_port()
    env_file = tmp_path / "tether.env"
    env_file.write_text("TETHER_MAX_FRAME_BYTES='64 KiB'\nTETHER_SEND_QUEUE_BYTES=8MiB\n")
    args = ("--env-file", str(env_file), "--port", str(port), "--max-frame-bytes", "4KiB")
    more = ("--auth", "none", "--data-dir", str(tmp_path), "--ai-provider", "scripted")
    env = {"TETHER_AWARENESS_PEER_BYTES": "64 KiB", "TETHER_AI_SEMANTIC": "off"}
    with serving(port, *args, *more, env=env) as health:
        assert health is not None and health["ai"]["provider"] == "scripted"
        url = f"http://127.0.0.1:{port}/api/documents/sized"
        binary = {"Content-Type": "application/octet-stream"}
        over = httpx.put(url, content=bytes(5000), headers=binary, timeout=10)
        under = httpx.put(url, content=b"\xff" * 3000, headers=binary, timeout=10)
    assert over.status_code == 413 and under.status_code == 400


@contextlib.contextmanager
def serving(port: int, *args: str, env: dict[str, str]) -> Iterator[dict[str, Any] | None]:
    """``tether serve`` with these flags and TETHER_* variables; its /health answer, or None
    if it did not answer on ``port`` within 30 s."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether", "serve", *args],
        cwd=REPO,
        env={**clean, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        health = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).json()
                break
            except httpx.HTTPError:
                time.sleep(0.1)  # polling a starting process's port; there is no event
        yield health
    finally:
        proc.terminate()
        proc.wait(timeout=30)

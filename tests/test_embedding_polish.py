"""Embedding and operating polish (issue 39, item 4): a mounted app's wrong path is told apart
from a refusal of tether's (each of which says why); tether's log lines reach a host app's
logging once, and tether serve's once; /ready answers 503 while degraded; ``tether --help``
lists every command; a refused setting names its flag and value; a port in use and an
unreachable PostgreSQL are one line each, not a traceback.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import anyio
import httpx
import pytest
import websockets

from tests.hostproc import REPO, HostProcess
from tests.serverproc import ServerProcess, free_port
from tether.protocol.clients.connect_errors import ConnectionFailedError, describe
from tether.protocol.clients.tether_client import TetherClient

pytestmark = pytest.mark.anyio

FASTAPI_EXAMPLE = REPO / "examples" / "fastapi_mount.py"
AI_OFF_LINE = "AI suggestions are off (--ai-provider none)"


def tether(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    return subprocess.run(
        [sys.executable, "-m", "tether", *args],
        cwd=REPO,
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


async def refused_upgrade(url: str, **kwargs: object) -> tuple[int, bytes]:
    with pytest.raises(websockets.InvalidStatus) as refused:
        async with websockets.connect(url, **kwargs):  # type: ignore[arg-type]
            pass
    return refused.value.response.status_code, bytes(refused.value.response.body or b"")


async def test_a_mounted_apps_wrong_paths_are_told_apart_from_tethers_refusals(
    tmp_path: Path,
) -> None:
    with HostProcess(FASTAPI_EXAMPLE, tmp_path, ready_path="/hello") as host:
        # Below the mount, tether answers: 404 with where its sockets are.
        status, body = await refused_upgrade(host.ws("/collab/wrong"))
        assert status == 404 and "/ws and /yjs/<document>" in json.loads(body)["error"]
        # A refusal of tether's says why (here a foreign page's Origin) ...
        status, body = await refused_upgrade(
            host.ws("/collab/ws"), origin="https://elsewhere.example"
        )
        assert status == 403 and json.loads(body)["error"]
        # ... so the host's own router refusing a path it does not route (a bare 403) is not
        # mistaken for one: the client says what to check, not "an Origin or Host".
        assert (await refused_upgrade(host.ws("/ws")))[1] == b""
        with anyio.fail_after(30), pytest.raises(ConnectionFailedError) as failed:
            async with TetherClient(host.ws("/ws"), transport="ws", open_timeout=2):
                pass
        message = str(failed.value)
        assert "not a tether endpoint" in message and "prefix + /ws" in message
        assert "Origin or Host" not in message
        with pytest.raises(websockets.InvalidStatus) as refused:
            async with websockets.connect(
                host.ws("/collab/ws"), origin="https://elsewhere.example"
            ):
                pass
        said, _ = describe(refused.value)
        assert said.startswith("the server refused the WebSocket upgrade (HTTP 403): ")
        assert json.loads(body)["error"] in said


async def test_tethers_info_lines_reach_a_hosts_uvicorn_log_once(tmp_path: Path) -> None:
    with HostProcess(FASTAPI_EXAMPLE, tmp_path, ready_path="/hello") as host:
        assert httpx.get(host.http_url + "/collab/health").status_code == 200
    lines = [line for line in host.log().splitlines() if AI_OFF_LINE in line]
    assert len(lines) == 1, host.log()
    assert lines[0].startswith("INFO:"), lines  # in the host server's own format
    warned = [line for line in host.log().splitlines() if "AUTH IS OFF" in line]
    assert len(warned) == 1 and warned[0].startswith("WARNING:"), host.log()


def test_tether_serve_logs_each_line_once(tmp_path: Path) -> None:
    with ServerProcess(tmp_path, log_level="info") as server:
        pass
    lines = [line for line in server.log().splitlines() if AI_OFF_LINE in line]
    assert len(lines) == 1 and " INFO tether: " in lines[0], server.log()


def test_ready_is_503_while_degraded_and_health_stays_200(tmp_path: Path) -> None:
    with ServerProcess(tmp_path / "ok") as server:
        ready = httpx.get(server.http_url + "/ready", timeout=5)
        assert ready.status_code == 200 and ready.json()["status"] == "ok"
    nobody = free_port()  # an upstream model server that is not there: AI degraded
    with ServerProcess(
        tmp_path / "degraded",
        ai_provider="openai",
        openai_base_url=f"http://127.0.0.1:{nobody}/v1",
        openai_model="none",
        openai_health_seconds=0.5,
    ) as server:
        server.wait_ai(settled=("degraded",))
        ready = httpx.get(server.http_url + "/ready", timeout=5)
        assert ready.status_code == 503 and ready.json()["status"] == "degraded"
        assert httpx.get(server.http_url + "/health", timeout=5).status_code == 200


def test_the_docker_healthcheck_asks_ready() -> None:
    healthcheck = (REPO / "Dockerfile").read_text().split("HEALTHCHECK", 1)[1]
    assert "/ready" in healthcheck.split("ENTRYPOINT", 1)[0]


def test_help_lists_every_command_in_plain_words() -> None:
    shown = tether("--help").stdout
    for command in ("serve", "token", "cluster", "bench"):
        assert f"    {command} " in shown, shown
    assert "``" not in shown


def test_a_refused_value_names_the_flag_or_variable_and_the_value(tmp_path: Path) -> None:
    env_file = tmp_path / "tether.env"
    env_file.write_text("TETHER_PING_INTERVAL=-1\n")
    for args, env, line in [
        (("--idle-timeout", "-5"), {}, "tether: --idle-timeout -5: must be > 0"),
        ((), {"TETHER_IDLE_TIMEOUT": "-5"}, "tether: TETHER_IDLE_TIMEOUT=-5: must be > 0"),
        (
            ("--idle-timeout", "10"),
            {},
            "tether: --idle-timeout 10: must exceed --ping-interval (15)",
        ),
        (
            ("--env-file", str(env_file)),
            {},
            f"tether: TETHER_PING_INTERVAL=-1 (in {env_file}): must be > 0",
        ),
        (("--jwt-jwks-url", "ftp://idp"), {}, "--jwt-jwks-url 'ftp://idp': must be an http(s)"),
    ]:
        result = tether("serve", "--auth", "none", *args, env=env)
        assert result.returncode == 2, result
        assert line in one_line(result)


def test_a_port_in_use_is_one_line_before_anything_starts(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = tether("serve", "--auth", "none", "--port", str(port), "--data-dir", str(tmp_path))
    assert result.returncode == 2, result
    assert f"--port {port}: 127.0.0.1:{port} is already in use" in one_line(result)


def test_an_unreachable_postgresql_is_one_line(tmp_path: Path) -> None:
    nobody = free_port()
    result = tether(
        "serve",
        "--auth",
        "none",
        "--ai-provider",
        "none",
        "--port",
        str(free_port()),
        "--data-dir",
        str(tmp_path),
        "--store",
        f"postgresql://tether@127.0.0.1:{nobody}/tether",
    )
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if " ERROR " in line]
    said = [line for line in errors if "could not start" in line]
    assert len(said) == 1, result.stderr
    assert f"cannot open postgresql://tether@127.0.0.1:{nobody}/tether" in said[0]

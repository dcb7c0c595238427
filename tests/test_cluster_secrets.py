"""Passwords in --store and --bus URLs: accepted from the environment, never shown.

A real PostgreSQL that demands a SCRAM password of the node's user and a redis-server with
``requirepass``; the node runs with both URLs (passwords in them) in its environment. The
passwords must not appear in its log, /health, /metrics, its error messages (a wrong password,
the engines going away), nor in what ``tether cluster`` prints; given as flags, they are
warned about.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import httpx
import pytest

from tests.rawpeer import MuxPeer
from tests.serverproc import ServerProcess
from tests.test_cluster_ops import health_until
from tether.bench.engines import PostgresServer, RedisServer
from tether.bench.launcher import REPO, free_port
from tether.collab.runtime.log_redaction import redact, redact_url

pytestmark = pytest.mark.anyio

PG_PASSWORD = "pg-Secret-7f3a9c"
REDIS_PASSWORD = "redis-Secret-41bd2e"


def _leaks(text: str) -> list[str]:
    return [p for p in (PG_PASSWORD, REDIS_PASSWORD, "wrong-Secret-0c1d") if p in text]


async def test_passwords_in_the_store_and_bus_urls_never_show(
    tmp_path: Path, own_postgres: PostgresServer
):
    dsn = own_postgres.require_password("secretive", PG_PASSWORD)
    redis = RedisServer(password=REDIS_PASSWORD).start()
    node = ServerProcess(
        tmp_path / "node", store=dsn, bus=redis.url, node_id="n0", log_level="info"
    )
    try:
        with anyio.fail_after(60):
            node.start()
            async with await MuxPeer.connect(node.ws_url) as peer:
                doc = await peer.open("secret-doc", node.token(["secret-doc"]))
                await doc.append("hello")
                await doc.wait_acked()
                assert all(doc.statuses)
            health = await asyncio.to_thread(node.health)
            assert health["database"]["state"] == "ok" and health["bus"]["state"] == "up"
            own_postgres.stop()
            redis.kill()
            await health_until(
                node,
                lambda h: h["database"]["state"] == "unavailable" and h["bus"]["state"] == "down",
                30,
                "both engines gone",
            )
            async with httpx.AsyncClient(base_url=node.http_url) as http:
                shown = (await http.get("/health")).text + (await http.get("/metrics")).text
            assert _leaks(shown) == []
    finally:
        node.stop()
        redis.close()
    log = node.log_path.read_text()
    assert "Redis unreachable" in log and "PostgreSQL unreachable" in log
    assert _leaks(log) == []


async def test_a_wrong_database_password_fails_clearly_without_showing_it(
    tmp_path: Path, own_postgres: PostgresServer
):
    dsn = own_postgres.require_password("secretive", PG_PASSWORD)
    wrong = dsn.replace(PG_PASSWORD, "wrong-Secret-0c1d")
    node = ServerProcess(tmp_path / "node", store=wrong)
    with pytest.raises(RuntimeError) as failed:
        node.start()
    node.stop()
    assert "password authentication failed" in str(failed.value)
    assert "[REDACTED]" in str(failed.value)
    assert _leaks(str(failed.value)) == []


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TETHER_STORE", "TETHER_BUS")}
    return {**env, "TETHER_AI_PROVIDER": "none", "TETHER_AUTH": "none", **extra}


def test_a_password_given_as_a_flag_is_warned_about_and_not_echoed(tmp_path: Path):
    dsn = f"postgresql://u:{PG_PASSWORD}@127.0.0.1:{free_port()}/x"  # nothing listens there
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tether.collab.cli",
            "serve",
            "--store",
            dsn,
            "--port",
            str(free_port()),
            "--data-dir",
            str(tmp_path),
        ],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert "--store carries a password on the command line" in output
    assert "cannot open postgresql://u:[REDACTED]@" in output
    assert _leaks(output) == []


def test_tether_cluster_takes_the_urls_from_the_environment_and_prints_no_password(
    tmp_path: Path, own_postgres: PostgresServer
):
    dsn = own_postgres.require_password("secretive", PG_PASSWORD)
    redis = RedisServer(password=REDIS_PASSWORD).start()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tether.collab.cli",
            "cluster",
            "--nodes",
            "1",
            "--port",
            str(free_port()),
        ],
        cwd=REPO,
        env=_env(TETHER_STORE=dsn, TETHER_BUS=redis.url),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # until the banner is complete (or the process ends)
            lines.append(line)
            if "Ctrl-C" in line:
                break
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            rest, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            rest, _ = proc.communicate()
        redis.close()
    output = "".join(lines) + rest
    assert any("store: postgresql://secretive:[REDACTED]@" in line for line in lines), output
    assert any("bus: redis://:[REDACTED]@" in line for line in lines), output
    assert _leaks(output) == []


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u:p%40ss@h:5432/db", "postgresql://u:[REDACTED]@h:5432/db"),
        ("redis://:pw@h:6379/0", "redis://:[REDACTED]@h:6379/0"),
        ("rediss://default:a@b@h/0", "rediss://default:[REDACTED]@h/0"),  # an unencoded @
        ("postgresql://h/db?user=u&password=pw", "postgresql://h/db?user=u&password=[REDACTED]"),
        ("postgresql://u@h/db", "postgresql://u@h/db"),  # no password: unchanged
        ("failed: redis://:x@h:1 and postgres://a:y@h/d", None),
    ],
)
def test_redact_url_hides_every_password_form(url: str, shown: str | None):
    assert redact(url) == redact_url(url)
    if shown is None:
        assert ":x@" not in redact_url(url) and ":y@" not in redact_url(url)
    else:
        assert redact_url(url) == shown

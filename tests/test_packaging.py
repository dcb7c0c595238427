"""tether as users install it: one top-level package (``tether``), so a host app with its own
``protocol``/``collab``/``ai`` modules can use it, and a wheel (not editable) that carries the
web bundle, so the installed server's editor works (issue 12, "Packaging")."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import time
import zipfile
from pathlib import Path

import httpx
import pytest

from tests.hostproc import REPO
from tests.serverproc import free_port

OWN_MODULES_HOST = REPO / "tests" / "hosts" / "own_modules_host.py"


def host_with_own_modules(where: Path) -> Path:
    """A host app directory: its own protocol.py, collab.py and ai.py, and the host script."""
    where.mkdir(parents=True, exist_ok=True)
    for name in ("protocol", "collab", "ai"):
        (where / f"{name}.py").write_text(f'OWNER = "the host\'s {name}"\n')
    shutil.copy(OWN_MODULES_HOST, where / "host.py")
    return where / "host.py"


def run_host(python: str, script: Path, data: Path, env: dict[str, str]) -> list[str]:
    done = subprocess.run(
        [python, str(script), "--data-dir", str(data)],
        cwd=script.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.splitlines()


def test_a_host_with_its_own_protocol_collab_and_ai_modules_uses_tether(tmp_path: Path):
    script = host_with_own_modules(tmp_path / "host")
    # The host's directory first, then a source checkout of tether.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join((str(script.parent), str(REPO))))
    lines = run_host(sys.executable, script, tmp_path / "data", env)
    assert lines[0] == "text: synced"
    assert lines[1] == "host modules: the host's protocol the host's collab the host's ai"
    assert lines[3] == f"tether protocol from: {REPO / 'protocol' / '__init__.py'}"


def copy_source(to: Path) -> Path:
    """The checkout's files as a fresh clone has them (no venv, no node_modules, no data)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for raw in filter(None, listed):
        source = REPO / raw.decode()
        if source.is_file() and not source.is_symlink():
            target = to / raw.decode()
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return to


@pytest.mark.slow
def test_the_wheel_installs_into_a_fresh_venv_and_serves_its_editor(tmp_path: Path):
    source = copy_source(tmp_path / "src")
    wheels = tmp_path / "wheels"
    pip = [sys.executable, "-m", "pip"]
    subprocess.run(
        [*pip, "wheel", "-q", "--no-deps", "--no-build-isolation", str(source), "-w", wheels],
        check=True,
        timeout=300,
    )
    (wheel,) = wheels.glob("tether-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "tether/web/dist/editor.js" in names and "tether/protocol/PROTOCOL.md" in names
    assert not [n for n in names if n.split("/")[0] in ("collab", "ai", "protocol", "bench", "web")]

    # A fresh venv; its dependencies come from the shared venv's site-packages (a .pth line:
    # not a site directory, so that venv's editable tether finder is not installed here).
    venv = tmp_path / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(site, "shared-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [*pip, "--python", python, "install", "-q", "--no-deps", str(wheel)],
        check=True,
        timeout=300,
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    outside = tmp_path / "elsewhere"  # not the checkout: only the installed tether is found
    outside.mkdir()

    version = subprocess.run(
        [str(venv / "bin" / "tether"), "--version"], capture_output=True, text=True, env=env
    )
    assert version.returncode == 0 and version.stdout.startswith("tether "), version.stderr

    port = free_port()
    serve = ["serve", "--auth", "none", "--ai-provider", "none", "--port", str(port)]
    served = subprocess.Popen(
        [python, "-m", "tether", *serve, "--data-dir", str(tmp_path / "data")],
        cwd=outside,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        health = _wait_health(url, served)
        assert health["version"] == version.stdout.split()[1]
        page = httpx.get(url + "/d/notes")
        assert 'src="/static/editor.js"' in page.text
        bundle = httpx.get(url + "/static/editor.js")
        assert bundle.status_code == 200
        assert bundle.content == (REPO / "web" / "dist" / "editor.js").read_bytes()
    finally:
        served.terminate()
        served.wait(15)

    script = host_with_own_modules(tmp_path / "host")
    lines = run_host(python, script, tmp_path / "data2", env)
    assert lines[0] == "text: synced"
    assert lines[1] == "host modules: the host's protocol the host's collab the host's ai"
    assert lines[2].startswith(f"tether from: {site}")


def _wait_health(url: str, proc: subprocess.Popen[bytes]) -> dict[str, object]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(proc.stdout.read().decode() if proc.stdout else "exited")
        try:
            return dict(httpx.get(url + "/health", timeout=0.5).json())
        except httpx.HTTPError:
            time.sleep(0.05)  # polling a process we just spawned; not test synchronisation
    raise AssertionError("the installed server did not answer /health")

"""tether-client (clients/js), the npm package teams install for AI in their own editors: its
own unit tests and type check pass (``npm test``, run here so pytest decides CI), the tarball
``npm pack`` makes holds what its exports name, and its client over a real HocuspocusProvider
in Node talks to a real server (the scripted model): completions, accept, a rewrite that drops
content accepted only when confirmed, and every failure as a value."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.clientjs import CLIENT_JS, require_client_js, run_npm
from tests.serverproc import ServerProcess

SCRIPT = '{"pieces": [" and", " the", " gulls", " cried."], "delay": 0.02}'
WHOLE_STREAMS: dict[str, object] = {"ai_stop": "tokens", "ai_heal": "off", "ai_junk_filter": "off"}


def test_the_packages_unit_tests_and_type_checks_pass() -> None:
    result = run_npm("test")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert "# fail 0" in output, output[-4000:]
    assert "# pass 0" not in output, output[-4000:]


def test_the_packed_tarball_holds_every_module_and_type_its_exports_name() -> None:
    result = run_npm("pack", "--dry-run", "--json", "--ignore-scripts")
    assert result.returncode == 0, result.stderr[-2000:]
    files = {entry["path"] for entry in json.loads(result.stdout)[0]["files"]}
    manifest = json.loads((CLIENT_JS / "package.json").read_text())
    named: set[str] = set()
    for target in manifest["exports"].values():
        if isinstance(target, dict):
            named |= {path.removeprefix("./") for path in target.values()}
    assert named <= files, named - files
    assert {"README.md", "LICENSE", "package.json"} <= files
    assert not [path for path in files if path.startswith(("src/", "test/", "node_modules/"))]
    # Peers, not bundled copies: the host app's yjs, Tiptap and CodeMirror are the ones used.
    assert "dependencies" not in manifest
    assert {"yjs", "@tiptap/core", "@codemirror/state"} <= set(manifest["peerDependencies"])


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(
        tmp_path_factory.mktemp("client-js"),
        ai_provider="scripted",
        ai_script=SCRIPT,
        **WHOLE_STREAMS,
    ) as proc:
        yield proc


def live_checks(server: ServerProcess) -> dict[str, Any]:
    require_client_js()
    node = shutil.which("node")
    assert node is not None
    env = {
        **os.environ,
        "TETHER_WS": server.ws_url,
        "TETHER_TOKEN": server.token(["live-*"]),
        "TETHER_READONLY_TOKEN": server.token(["live-*"], scope="readonly", subject="reader"),
    }
    result = subprocess.run(
        [node, str(Path("test") / "live_server.mjs")],
        cwd=CLIENT_JS,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    return {line["check"]: line["value"] for line in map(json.loads, result.stdout.splitlines())}


def test_the_client_over_a_real_provider_streams_accepts_and_reports_errors_as_values(
    live_server: ServerProcess,
) -> None:
    checks = live_checks(live_server)
    assert checks["status"] == "ready"
    assert checks["completion"] == {
        "ok": True,
        "text": " and the gulls cried.",
        "reason": "done",
        "deltas": checks["completion"]["deltas"],
    }
    assert checks["completion"]["deltas"] >= 1
    assert checks["accepted"] == {
        "ok": True,
        "text": "The boats came home and the gulls cried.",
        "state": "accepted",
    }
    assert checks["accept_again"] == "bad_request"
    rewrite = checks["rewrite"]
    assert rewrite["state"] == "ready" and "weekday" in rewrite["dropped"], rewrite
    assert checks["rewrite_unconfirmed_here"] == "confirm_required"
    assert checks["rewrite_unconfirmed_server"] == "confirm_required"
    confirmed = checks["rewrite_confirmed"]
    assert confirmed["ok"] is True and confirmed["state"] == "applied", confirmed
    assert "Friday" not in confirmed["text"] and "gulls cried." in confirmed["text"], confirmed
    assert checks["bad_anchor"] == "bad_request"
    assert checks["reader_writable"] is False
    assert checks["reader_suggest"] == "forbidden"

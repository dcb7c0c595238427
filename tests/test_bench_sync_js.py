"""``tether bench sync --driver js`` (issue 29): editors built on the JS ``yjs`` library, each on
its own socket speaking Hocuspocus frames, against this checkout's server and against stock
Hocuspocus: every edit reaches every other editor of its document once, every edit is acked
(tether's SyncStatus, and Hocuspocus's), and the server's CPU is read."""

from __future__ import annotations

import json
from pathlib import Path

from tests.jsclient import require_node
from tether.collab.cli import main


def run(tmp_path: Path, *extra: str) -> dict[str, object]:
    require_node()
    out = tmp_path / "sync.json"
    common = ["--editors", "6", "--docs", "2", "--rate", "5", "--duration", "2", "--json"]
    assert main(["bench", "sync", "--driver", "js", *common, str(out), *extra]) == 0
    return dict(json.loads(out.read_text()))


def check(result: dict[str, object]) -> None:
    assert result["error_count"] == 0, result["errors"]
    sent = result["updates_sent"]
    assert isinstance(sent, int) and sent >= 6 * 5 * 2 * 0.8
    assert result["fanout_received"] == result["fanout_expected"] == sent * 2  # 3 per doc
    assert result["fanout_duplicates"] == 0
    assert result["acks_received"] == sent and result["rejected"] == 0
    assert isinstance(result["server_cpu_s_per_1000_edits"], float)


def test_js_editors_drive_this_server(tmp_path: Path) -> None:
    result = run(tmp_path)
    assert result["driver"] == "js"
    check(result)


def test_js_editors_drive_hocuspocus_side_by_side(tmp_path: Path) -> None:
    result = run(tmp_path, "--compare", "hocuspocus", "--reps", "1")
    assert result["error_count"] == 0, result["errors"]
    settings, reps = result["settings"], result["reps"]
    assert isinstance(settings, dict) and settings["driver"] == "js"
    assert isinstance(reps, dict) and len(reps) == 2 and "hocuspocus" in reps
    for label, runs in reps.items():
        assert len(runs) == 1 and runs[0]["errors"] == 0, label
        assert runs[0]["updates_sent"] >= 6 * 5 * 2 * 0.8, label
    assert isinstance(result["ratios"], dict) and result["ratios"]

"""``tether bench sync --compare with-ai`` (issue 28, item 5): the same sync load against this
checkout twice per rep, quiet and with its embedded model decoding for an editor who asks
nonstop, reported side by side as ``with-ai/this`` ratios. The figures are the bench's to
give; this checks that both runs carry the load and that the model really was busy."""

from __future__ import annotations

import json
from pathlib import Path

from tether.collab.cli import main


def test_sync_is_measured_quiet_and_beside_a_busy_model(tmp_path: Path) -> None:
    out = tmp_path / "sync.json"
    load = ["--editors", "6", "--docs", "2", "--rate", "5", "--duration", "3"]
    argv = ["bench", "sync", *load, "--compare", "with-ai", "--reps", "1", "--json", str(out)]
    assert main(argv) == 0
    result = json.loads(out.read_text())
    assert result["error_count"] == 0, result["errors"]
    reps, medians = result["reps"], result["medians"]
    assert set(reps) == {"this", "with-ai"}
    for label, runs in reps.items():
        assert len(runs) == 1 and runs[0]["errors"] == 0, label
        assert runs[0]["updates_sent"] >= 6 * 5 * 3 * 0.8, label
        assert runs[0]["fanout_p99_ms"] is not None and runs[0]["ack_p99_ms"] is not None
        assert runs[0]["server_ack_p99_ms"] is not None  # and as the server saw them
        assert runs[0]["server_loop_lag_max_ms"] is not None
    assert medians["with-ai"]["ai_suggestions_completed"] >= 1  # the model answered meanwhile
    assert "ai_suggestions_completed" not in medians["this"]
    ratios = result["ratios"]["with-ai/this"]
    assert ratios["fanout_p99_ms"] == round(
        medians["with-ai"]["fanout_p99_ms"] / medians["this"]["fanout_p99_ms"], 3
    )

"""``tether bench attacks`` at a small scale against this checkout: one row per attack of issue 26,
each with its bytes, wall time, the bystanders' latencies and the server's own loop lag (this
checkout has the metric), and nothing failed. Issue 37's attacks: test_bench_rich_attacks.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tether.bench.attack_kinds import stall_attacks
from tether.collab.cli import main


def test_a_small_attack_run_reports_a_row_of_numbers_per_attack(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "attacks.json"
    names = [attack.name for attack in stall_attacks(0.02)]
    argv = ["bench", "attacks", "--scale", "0.02", "--tail", "0.2", "--json", str(out)]
    assert main([*argv, "--attacks", ",".join(names)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [row["attack"] for row in rows] == names
    for row in rows:
        assert "failed" not in row, row
        assert row["bytes"] > 0 and row["wall_s"] > 0 and row["outcome"]
        for probe in ("health_ms", "ack_ms"):
            latencies = row[probe]
            assert latencies["count"] > 0 and latencies["errors"] == 0, (row["attack"], probe)
            assert 0 < latencies["p50"] <= latencies["p99"] <= latencies["max"]
        assert row["server_lag_ms"] not in ("-", "?")
    printed = capsys.readouterr().out.splitlines()
    for name in names:
        # once as it ran, once in the table at the end
        assert sum(line.startswith(name + " ") for line in printed) == 2

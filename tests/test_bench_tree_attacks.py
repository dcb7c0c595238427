"""``tether bench attacks`` with issue 39's hostile trees (a JSON document nested 100,000 deep,
one of 300,000 empty paragraphs, HTML of 100,000 nested tags) at a tiny scale against this
checkout's real server: a row each with the bystanders' latencies, the loop lag, memory and the
PUT's answer and time. That the server refuses or takes them in bounded time is for the content
tests (tests/collab/test_prosemirror_json.py, test_html_in.py); here, that the instrument reads."""

from __future__ import annotations

from pathlib import Path

from tests.test_bench_rich_attacks import assert_a_full_row, run
from tether.bench.attack_kinds import build_attacks
from tether.bench.rich_attacks import deep_json, empty_paragraphs_json, nested_html

SCALE = 0.005


def test_the_tree_attacks_report_a_row_each_with_the_puts_answer(tmp_path: Path) -> None:
    names = [attack.name for attack in build_attacks(SCALE) if attack.issue == 39]
    assert names == ["json-deep", "json-empty-nodes", "html-nested"]
    rows = run(names, tmp_path)
    for row in rows:
        assert_a_full_row({**row, "issue": 37})  # the same columns as issue 37's rows
        assert row["issue"] == 39
        assert {"put_ms", "status"} <= set(row["figures"]), row
    by_name = {row["attack"]: row for row in rows}
    # 500 levels of quotes are deeper than the tree allows; the others are taken.
    assert by_name["json-deep"]["figures"]["status"] == 422
    assert by_name["json-deep"]["outcome"].startswith("HTTP 422: the document nests")
    assert by_name["json-empty-nodes"]["figures"]["status"] == 200
    assert by_name["html-nested"]["figures"]["status"] == 200


def test_the_hostile_bodies_have_the_issues_shapes_at_scale_one() -> None:
    assert deep_json(100_000).count(b'"blockquote"') == 100_000
    assert empty_paragraphs_json(300_000).count(b'{"type":"paragraph"}') == 300_000
    assert nested_html(100_000).count(b"<") == 200_000  # 100,000 tags opened and closed
